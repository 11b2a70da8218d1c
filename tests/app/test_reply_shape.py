"""One shape for a reply (issue 36): the numbers are Stats' fields, per-source counts one mapping
keyed by DraftSource, a drafted stretch one DraftSpan; a streamed update shifts only new spans."""

from __future__ import annotations

import json
import random
from dataclasses import fields

from app.host.reply import Reply, ReplyText
from app.settings import Preset, SpeedUp, load_presets, save_presets
from engine.events import (
    DraftSource,
    DraftSpan,
    Finished,
    SourceCount,
    Speculation,
    Stats,
    StatsRecord,
    TextPiece,
)


def _whole_text_shown(reply: Reply, is_final: bool) -> ReplyText:
    """shown() as it was before it kept its work: strip and shift everything, every time."""
    text = reply.text.rstrip() if is_final else reply.text
    cut, n = len(text) - len(text.lstrip()), len(text)
    spans = [
        DraftSpan(max(s.start, cut) - cut, min(s.end, n) - cut, s.source)
        for s in reply.spans
        if s.end > cut and s.start < n
    ]
    return ReplyText(text[cut:], tuple(s for s in spans if s.end > s.start))


def test_a_streamed_update_gives_what_the_whole_text_gives() -> None:
    rng = random.Random(36)
    sources = [s for s in DraftSource if s]
    for _ in range(1500):
        reply = Reply(1)
        for _ in range(rng.randint(0, 14)):
            text = rng.choice(["", " ", "\n", "a", "b c", " x ", "  ", "word "])
            reply.add(TextPiece(text, 1, rng.random() < 0.5, rng.choice(sources)))
            if rng.random() < 0.5:
                assert reply.shown() == _whole_text_shown(reply, False)
        if rng.random() < 0.3:  # a stop string cut from the end
            reply.finish(Finished("stop", reply.text[: rng.randint(0, len(reply.text))], (), Stats()))
        assert reply.shown(is_final=True) == _whole_text_shown(reply, True)
        assert reply.shown() == _whole_text_shown(reply, False)


def test_per_source_counts_are_one_mapping_and_read_back_from_the_stored_keys() -> None:
    by_source = {
        DraftSource.MODEL: SourceCount(20, 15),
        DraftSource.TEXT: SourceCount(6, 5),
        DraftSource.MEMORY: SourceCount(5, 4),
        DraftSource.DOCUMENT: SourceCount(3, 3),
    }
    stats = Stats(Speculation.DRAFT, 10, 10, 60, 34, 27, 30, 12, 0.1, 0.5, 0.4, 8, by_source=by_source)
    stored = json.loads(json.dumps(stats.as_dict()))
    # The keys the store, the export and older code know, in their old meaning ("text": beside a
    # draft model, every draft the model did not write).
    assert (stored["n_accepted_text"], stored["n_accepted_memory"], stored["n_accepted_document"]) == (
        12,
        4,
        3,
    )
    assert stored["n_steps_with_draft"] == 12  # the hand-written list dropped it
    record = StatsRecord.from_dict(stored)
    assert record.by_source == by_source
    assert {f.name for f in fields(Stats)} <= {f.name for f in fields(StatsRecord)}  # one field list
    ngram = StatsRecord.from_dict(
        {"speculation": "ngram", "n_drafted": 10, "n_accepted": 8, "n_accepted_memory": 3}
    )
    assert ngram.by_source == {DraftSource.TEXT: SourceCount(10, 5), DraftSource.MEMORY: SourceCount(0, 3)}
    assert StatsRecord.from_dict({"speculation": "none", "n_generated": 5}).by_source == {}


def test_a_preset_keeps_its_speed_up_as_the_enum_and_an_unknown_one_reads_as_the_text(tandem_home) -> None:  # type: ignore[no-untyped-def]
    save_presets([Preset("Mine", speed_up=SpeedUp.AUTO)])
    (kept,) = load_presets()
    assert kept.speed_up is SpeedUp.AUTO
    from app.settings import presets_path

    presets_path().write_text(json.dumps({"format": 1, "presets": [{"name": "Odd", "speed_up": "medusa"}]}))
    (odd,) = load_presets()
    assert odd.speed_up is SpeedUp.NGRAM
    assert [str(s) for s in SpeedUp] == ["auto", *(str(s) for s in Speculation)]
