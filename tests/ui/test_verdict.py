"""The verdict under a reply comes from the reply's own evidence (issue 47): nothing accepted is never
"faster"; a busy computer is never "saved"; no verdict claims more than the reply's own numbers
allow; the raw figures and how the reply ended are always in its Details."""

from __future__ import annotations

import dataclasses

from engine.events import Stats, StatsRecord
from ui.presenters import verdict, words
from ui.presenters.verdict import Verdict


def _stats(**changes: object) -> Stats:
    values: dict[str, object] = dict(
        speculation="ngram",
        n_prompt_tokens=30,
        n_prefilled=30,
        n_generated=86,
        n_drafted=0,
        n_accepted=0,
        n_steps=86,
        n_steps_with_draft=0,
        prefill_s=1.0,
        decode_s=11.0,  # 7.8 tokens/s
        llama_s=11.5,
        draft_max=8,
        plain_tokens_per_s_est=3.6,
    )
    values.update(changes)
    return Stats(**values)  # type: ignore[arg-type]


def test_a_reply_with_no_accepted_draft_is_never_faster() -> None:
    # The review's first reply: "About 2.2× faster, 13 s saved" with 0% of guesses confirmed.
    first = verdict.headline(_stats(), None)
    assert first.verdict is Verdict.NEUTRAL and first.text == "About as fast as usual"
    assert first.reason.startswith("Nothing to reuse") and "saved" not in first.text
    # True with a document attached too (it read "Nothing in the conversation to reuse" there).
    assert "conversation or a document" in first.reason
    # Guessed, none right: the same, with its own reason.
    wrong = verdict.headline(_stats(n_drafted=40, n_steps_with_draft=20), 3.0)
    assert wrong.verdict is Verdict.NEUTRAL and "faster" not in wrong.text
    assert wrong.reason.startswith("None of its guesses was right")
    # "1.2× faster, 0.8 s saved" with no guesses, against a measured speed: as fast as usual.
    colours = verdict.headline(_stats(n_generated=40, n_steps=40, decode_s=3.3, prefill_s=0.2), 10.0)
    assert colours.verdict is Verdict.NEUTRAL and "saved" not in colours.text


def test_never_more_times_faster_than_the_tokens_it_wrote_a_step() -> None:
    # "About 1.1× faster, 1.8 s saved" at 1.0 tokens a step: each step costs at least a plain one.
    one_a_step = _stats(n_drafted=4, n_accepted=1, n_steps_with_draft=4, n_steps=85, decode_s=11.0)
    assert verdict.headline(one_a_step, 5.0).verdict is not Verdict.FASTER
    # 2 tokens a step against a (stale) usual speed 4× slower: at most 2× faster.
    two_a_step = _stats(n_drafted=50, n_accepted=43, n_steps_with_draft=40, n_steps=43, prefill_s=0.0)
    h = verdict.headline(two_a_step, 2.0)
    assert h.verdict is Verdict.FASTER and h.speedup is not None and h.speedup <= 86 / 43
    assert h.text == "2.0× faster, 11 s saved"


def test_the_guesses_are_never_blamed_for_more_than_they_could_cost() -> None:
    # "About 2.3× slower: the guesses cost more than they saved" on a quiet CPU with 1 token
    # accepted of 5 drafted: checking 5 more tokens cannot make 80 tokens 2.3× slower.
    h = verdict.headline(
        _stats(n_generated=80, n_drafted=5, n_accepted=1, n_steps=79, n_steps_with_draft=5, decode_s=16.0,
               plain_tokens_per_s_est=12.0),
        12.0,
    )  # fmt: skip
    assert h.verdict is Verdict.SLOWER and h.reason == verdict.UNEXPLAINED_REASON
    assert "guesses cost" not in h.reason and h.is_busy


def test_a_busy_computer_is_said_and_never_saved() -> None:
    # The review's busy reply: 80 tokens in 162 s, its own plain steps at 0.2 tokens/s, while the
    # same model's one-token steps ran at 122.7 on a quiet moment before.
    busy = _stats(n_generated=80, n_drafted=70, n_accepted=60, n_steps=20, n_steps_with_draft=20,
                  prefill_s=2.0, decode_s=160.0, plain_tokens_per_s_est=0.2)  # fmt: skip
    assert verdict.headline(busy, None).text.endswith("saved")  # its own steps as the yardstick: a "win"
    h = verdict.headline(busy, None, usual_steps=122.7)
    assert h.verdict is Verdict.SLOWER and h.reason == verdict.BUSY_REASON and h.is_busy
    assert "saved" not in h.text and "faster" not in h.text
    # The same from its stored record, which keeps the usual speed it was compared with.
    record = StatsRecord.of(busy, "eos", **{verdict.STEPS_KEY: 122.7})
    assert verdict.headline(record, None) == h
    rows = dict(verdict.details(record, None))
    assert (
        rows["Usual speed"]
        == "122.7 tokens/s (from the model's own steps on this computer, at a quiet moment)"
    )
    # Busy, yet as fast as usual (the guesses made up for it): no ratio, no "saved".
    quick = verdict.headline(_stats(**{**busy.__dict__, "decode_s": 0.7}), None, usual_steps=122.7)
    assert quick.verdict is Verdict.NEUTRAL and quick.reason == verdict.BUSY_REASON
    # Once seen busy (while it streamed), said so to the end.
    calm = _stats(n_generated=80, n_drafted=70, n_accepted=60, n_steps=20, n_steps_with_draft=20,
                  decode_s=0.2, plain_tokens_per_s_est=100.0)  # fmt: skip
    assert verdict.headline(calm, 100.0).verdict is Verdict.FASTER
    assert verdict.headline(calm, 100.0, busy_seen=True).reason == verdict.BUSY_REASON


def test_the_details_list_the_raw_figures_and_how_it_ended() -> None:
    record = StatsRecord.of(_stats(n_drafted=40, n_accepted=30, n_steps=60, n_steps_with_draft=20), "length")
    rows = dict(verdict.details(record, 8.0))
    assert rows["Reply"] == "86 tokens in 12 s"
    assert rows["Time to first token"] == "1.2 s"  # the prompt's reading and a step
    assert rows["Writing speed"] == "7.8 tokens/s"
    assert rows["Accepted drafts"] == "30 of 40 drafted tokens" and rows["Guesses confirmed"] == "75%"
    assert rows["Ended"] == "stopped at the reply-length cap"
    plain = dict(verdict.details(StatsRecord.of(_stats(), "eos"), None))
    assert plain["Accepted drafts"] == "none drafted" and plain["Ended"] == "finished"
    for reason, said in (("repetition", "repeating itself"), ("cancelled", "stopped by you")):
        assert said in dict(verdict.details(StatsRecord.of(_stats(), reason), None))["Ended"]
    assert verdict.end_note("length", 512) == "stopped at the reply-length cap (512 tokens)"
    assert verdict.end_note("eos", 86) == ""


def test_compare_never_shows_a_bare_ratio_for_a_run_that_does_not_measure_the_speed_up() -> None:
    plain = _stats(speculation="none", decode_s=5.0, plain_tokens_per_s_est=None)
    sped = _stats(decode_s=23.0, plain_tokens_per_s_est=None)  # drafted nothing, stalled
    assert words.compare_headline(plain, sped).endswith("slower")
    problem = words.compare_problem(sped, words.compare_was_fair(plain, sped))
    assert problem == words.NOTHING_DRAFTED
    said = words.compare_headline(plain, sped, is_measure=False)
    assert said == "24 s instead of 6.0 s: not a measure of the speed-up"
    # A stall: a 15 s flat stretch among steps of a tenth of a second.
    points = [(0.1 * i, i) for i in range(1, 40)] + [(19.0, 40), (19.1, 41), (19.2, 42)]
    assert words.longest_stall(points) > 14
    assert words.longest_stall([(0.1 * i, i) for i in range(1, 40)]) == 0.0
    drafted = _stats(n_drafted=50, n_accepted=40, decode_s=23.0)
    stalled = words.compare_problem(drafted, True, {"speculative": 14.8})
    assert stalled.startswith("The run with the speed-up stalled for 15 s")
    assert words.compare_problem(drafted, False).startswith("The computer was too busy for a fair run")
    assert words.compare_problem(drafted, True) == ""


def test_the_api_says_a_reply_stopped_repeating_itself_as_the_window_does(tmp_path, models_dir) -> None:  # type: ignore[no-untyped-def]
    # The tiny model that loops on this prompt (tests/engine/test_loop_guard.py): the window says
    # "stopped: the reply was repeating itself"; the API said finish_reason "stop" (finished).
    import openai

    from tests.serve_process import ServeProcess
    from tests.tiny import write_tiny_model

    looper = write_tiny_model(models_dir / "looper.gguf", seed=0)
    server = ServeProcess(tmp_path, "--model", str(looper), "--draft", "none", "--threads", "1").started()
    try:
        client = openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)
        looped = client.completions.create(
            model="looper", prompt="abc abc abc abd abd abc", max_tokens=400, temperature=0
        )
        assert looped.choices[0].finish_reason == "repetition"
        assert looped.usage is not None and looped.usage.completion_tokens < 400
        capped = client.completions.create(model="looper", prompt="abc", max_tokens=3, temperature=0)
        assert capped.choices[0].finish_reason == "length"
    finally:
        server.stop()


def test_the_usual_steps_are_kept_per_model_and_setup_and_follow_a_lasting_change() -> None:
    from app.settings import Settings, load_settings, save_settings
    from engine.events import Finished
    from ui.presenters.speed_presenter import QUIET_REPLACED, SpeedPresenter

    held = {"settings": Settings()}

    def update(settings: Settings) -> None:
        held["settings"] = settings
        save_settings(settings)

    speed = SpeedPresenter(lambda: held["settings"], update, lambda: "/m/a.gguf")

    def reply(est: float) -> Finished:
        return Finished("eos", "", (), _stats(plain_tokens_per_s_est=est))

    speed.note_steps(reply(100.0))
    speed.note_steps(reply(40.0))  # a busy reply does not lower it
    assert speed.steps_tokens_per_s(_stats()) == 100.0
    speed.note_steps(reply(120.0))  # a quieter one raises it
    assert load_settings().quiet_steps_tokens_per_s == {
        "/m/a.gguf|threads=all|gpu=0|prompt<=512": 120.0
    }  # kept
    held["settings"] = dataclasses.replace(held["settings"], n_threads=2)
    assert speed.steps_tokens_per_s(_stats()) is None  # another setup: its own usual speed
    held["settings"] = dataclasses.replace(held["settings"], n_threads=None)
    assert speed.steps_tokens_per_s(_stats(n_prompt_tokens=3000)) is None  # a long chat: slower steps
    for _ in range(QUIET_REPLACED - 1):
        speed.note_steps(reply(50.0))
    assert speed.steps_tokens_per_s(_stats()) == 120.0
    speed.note_steps(reply(50.0))  # slower, reply after reply: the computer is slower now
    assert speed.steps_tokens_per_s(_stats()) == 50.0


def test_an_estimate_counts_the_work_around_each_step() -> None:
    # All plain (nothing drafted), 86 tokens at 60 ms a step: 50 ms in llama.cpp (its one-token
    # steps: 20 tokens/s) and 10 ms around it. Against 20 tokens/s it read as slower, and its
    # reason blamed the guesses (review 5: "About 1.9× slower: the guesses cost more than they
    # saved" with zero drafted tokens); it is the usual speed.
    plain_steps = _stats(
        decode_s=86 * 0.060, prefill_s=0.5, plain_tokens_per_s_est=20.0, step_overhead_ms_median=10.0
    )
    h = verdict.headline(plain_steps, None)
    assert h.verdict is Verdict.NEUTRAL and not h.is_busy
    assert h.reason.startswith("Nothing to reuse")
    assert dict(verdict.details(plain_steps, None))["Usual speed"].startswith("16.7 tokens/s")


def test_a_damaged_record_gets_no_verdict_rather_than_an_error() -> None:
    for changes in (
        {"prefill_s": -50.0},
        {"n_steps": -3, "n_drafted": -9},
        {"step_overhead_ms_median": -1.0},
    ):
        record = StatsRecord.from_dict({**_stats(n_accepted=5, n_drafted=9).as_dict(), **changes})
        verdict.headline(record, None)
        verdict.details(record, 10.0)
    odd = StatsRecord.from_dict({**_stats().as_dict(), verdict.STEPS_KEY: "fast", verdict.BUSY_KEY: "yes"})
    assert verdict.headline(odd, None).verdict is Verdict.NEUTRAL


def test_compare_says_why_a_sped_up_run_guessed_nothing_where_the_engine_says() -> None:
    from engine.events import DraftingState

    slow_draft = _stats(note_kind=DraftingState.DRAFT_TOO_SLOW)
    said = words.compare_problem(slow_draft, True)
    assert said.startswith("The draft model is not faster than the model itself on this computer.")
    assert said.endswith("the difference between the two times is the computer's, not the speed-up's.")
