"""Stand-ins (app.library.standin) and measuring a pair on them (app.library.measure), before any
weight is downloaded: real llama.cpp on tiny shapes (written by the lab's tools/lab/shapes.py),
real files, a real spawned timing process."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from hub_server import TINY_DRAFT_REPO, TINY_REPO, FakeHub, tiny_pair_catalog

from app import paths
from app.cli import cli_doctor
from app.cli.cli import main as tandem_main
from app.library import measure, measure_run, standin
from app.library.catalog import load_catalog, scan_local_models
from app.library.remote_gguf import read_local_header
from app.library.standin import StandinError, plan_from_header
from engine.backend import LlamaRunner
from engine.config import default_threads
from engine.gguf_info import read_gguf_info
from tools.lab.shapes import KNOWN_SHAPES, KnownShape, plan_from_shape

# Tiny qwen2/llama/qwen3 shapes whose rows fill K-quant blocks (256 weights).
TINY_QWEN2 = KnownShape("qwen2", 256, 2, 4, 2, 512, 600, tied_embeddings=True)
TINY_LLAMA = KnownShape("llama", 256, 2, 4, 4, 512, 600)
TINY_QWEN3 = KnownShape("qwen3", 256, 2, 4, 2, 512, 600, head_dim=128)
# Large enough that its batches take a while (a few hundred ms), small enough to write at once.
MEDIUM = KnownShape("qwen2", 1024, 12, 16, 2, 4096, 32000)


def logits_of(path: Path, n_rows: int = 8) -> np.ndarray:
    runner = LlamaRunner(str(path), n_ctx=256, n_threads=default_threads(), n_batch=64)
    try:
        return runner.decode(list(range(3, 3 + n_rows)), n_logits=n_rows).copy()
    finally:
        runner.close()


def files_under(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()] if folder.exists() else []


def test_a_stand_in_from_a_header_copies_it_byte_for_byte(tmp_path: Path, tiny_target: Path) -> None:
    # A quantised file as a hub would hold it, then its stand-in from the header alone.
    real = standin.write_standin(
        plan_from_shape("real", TINY_QWEN2, "Q4_K_M"), tmp_path / "real.gguf", seed=5
    )
    for source in (real, tiny_target):  # K-quants with Q6_K, and an F32 model with a real vocabulary
        header = read_local_header(source)
        plan = plan_from_header(source.name, header.header_bytes, header.info)
        copy = standin.write_standin(plan, tmp_path / f"copy-{source.stem}{standin.SUFFIX}")
        assert copy.stat().st_size == source.stat().st_size
        assert copy.read_bytes()[: header.info.header_end] == source.read_bytes()[: header.info.header_end]
        copied = read_gguf_info(copy)
        assert copied.tokens == header.info.tokens  # the real tokenizer
        assert [(t.name, t.shape, t.type_id) for t in copied.tensors] == [
            (t.name, t.shape, t.type_id) for t in header.info.tensors
        ]
        assert np.isfinite(logits_of(copy)).all()


def _bad_info(tmp_path: Path, **metadata: object) -> tuple[bytes, object]:
    """A header that reads (our reader is lenient) with a shape llama.cpp could not run."""
    import dataclasses

    real = standin.write_standin(plan_from_shape("real", TINY_LLAMA, "Q4_0"), tmp_path / "ok.gguf")
    header = read_local_header(real)
    info = dataclasses.replace(header.info, metadata={**header.info.metadata, **metadata})
    return header.header_bytes, info


@pytest.mark.parametrize(
    ("metadata", "fragment"),
    [
        ({"llama.attention.head_count_kv": 3}, "4 attention heads cannot share 3 key/value heads"),
        ({"llama.block_count": 0}, "block count 0"),
        ({"llama.attention.head_count": 0}, "0 attention heads"),
        ({"split.count": 3}, "split in parts"),
    ],
)
def test_an_impossible_header_is_refused_in_one_sentence_before_anything_is_written(
    tmp_path: Path, metadata: dict[str, object], fragment: str
) -> None:
    header, info = _bad_info(tmp_path, **metadata)
    with pytest.raises(StandinError) as e:
        plan_from_header("bad.gguf", header, info)
    assert fragment in str(e.value) and "\n" not in str(e.value)
    assert not files_under(standin.standins_dir())


def test_impossible_tensors_are_refused(tmp_path: Path) -> None:
    import dataclasses

    real = standin.write_standin(plan_from_shape("real", TINY_LLAMA, "Q4_0"), tmp_path / "ok.gguf")
    header = read_local_header(real)
    i = next(i for i, t in enumerate(header.info.tensors) if i and t.type_id == 2)  # a Q4_0 matrix
    t0 = header.info.tensors[i]
    for bad, fragment in [
        (dataclasses.replace(t0, shape=(0, 256)), "is 0 x 256"),
        (dataclasses.replace(t0, shape=(250, 256), n_bytes=250 * 256 // 32 * 18), "do not fill blocks of 32"),
        (dataclasses.replace(t0, n_bytes=t0.n_bytes + 18), "size does not match"),
        (dataclasses.replace(t0, offset=header.info.tensors[i - 1].offset), "overlaps"),
    ]:
        tensors = (*header.info.tensors[:i], bad, *header.info.tensors[i + 1 :])
        with pytest.raises(StandinError, match=fragment):
            plan_from_header(
                "bad.gguf", header.header_bytes, dataclasses.replace(header.info, tensors=tensors)
            )


def test_a_stand_in_that_would_not_fit_is_refused_before_writing(tmp_path: Path) -> None:
    plan = plan_from_shape("Qwen2.5 7B", KNOWN_SHAPES["qwen2.5-7b"], "Q4_K_M")
    assert 4.3e9 < plan.size_bytes < 4.8e9  # the real file is 4.68 GB
    with pytest.raises(StandinError) as e:
        standin.check_room(plan, tmp_path / "standins", 512, free_ram=2 * 2**30)
    assert str(e.value).startswith("timing a stand-in of Qwen2.5 7B needs 4.") and "memory" in str(e.value)
    huge = standin.StandinPlan(
        "huge", plan.header, plan.data_offset,
        (standin.TensorSlot("w", (2**20, 2**20), 2, 0, 2**40 // 32 * 18 // 2**10 * 2**10),),
        "qwen2", 1000,
    )  # fmt: skip
    with pytest.raises(StandinError, match="of disk and only .* is free; nothing was written"):
        standin.check_room(huge, tmp_path / "standins", 512)
    assert not files_under(tmp_path / "standins")


def test_measuring_times_the_sizes_that_matter_keeps_the_figures_and_leaves_nothing(tmp_path: Path) -> None:
    target = ("owner/tiny-GGUF/tiny-Q4_K_M.gguf", plan_from_shape("tiny", TINY_QWEN2, "Q4_K_M"))
    draft = ("owner/tiny-GGUF/tiny-draft-Q8_0.gguf", plan_from_shape("tiny draft", TINY_QWEN2, "Q8_0"))
    seen: list[measure.MeasureProgress] = []
    listed_while_timing: list[list[Path]] = []

    def progress(p: measure.MeasureProgress) -> None:
        seen.append(p)
        if p.stage == "time" and not listed_while_timing:
            listed_while_timing.append([m.path for m in scan_local_models()])
            assert len(files_under(standin.standins_dir())) == 2  # one stand-in and the run's pid

    fig = measure_run.measure_pair(target, draft, sizes=(1, 2, 4, 8, 16, 32, 64), on_progress=progress)
    assert set(fig.target.t_ms) == {1, 2, 4, 8, 16, 32, 64}
    assert fig.draft is not None and set(fig.draft.t_ms) == {1, 2}
    assert fig.target.plain_tokens_per_s > 0 and fig.target.ceiling >= 1.0
    assert fig.copy_speedup is not None and fig.copy_speedup > 0
    assert fig.verdict is not None and 1 <= fig.verdict.draft_len <= measure.MAX_DRAFT_LEN
    fractions = [p.fraction for p in seen]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)
    assert {p.role for p in seen} == {"target", "draft"} and {p.stage for p in seen} == {
        "write",
        "load",
        "time",
    }
    assert listed_while_timing == [[]]  # never offered as a model to chat with
    assert not files_under(standin.standins_dir())  # nothing left
    # Kept per machine in the user's data folder, read back by model.
    kept = json.loads(measure.measured_path().read_text())
    assert len(kept["machines"]) == 1
    again = measure.figures_here(target[0], draft[0])
    assert again is not None and again.target.t_ms == pytest.approx(fig.target.t_ms, abs=1e-3)
    assert again.verdict is not None and again.verdict.speedup == pytest.approx(fig.verdict.speedup, rel=1e-3)
    assert measure.figures_here("someone/else/model.gguf") is None


def test_cancel_stops_a_measurement_at_once_and_leaves_nothing(tmp_path: Path) -> None:
    plan = plan_from_shape("medium", MEDIUM, "Q4_0")
    cancel = threading.Event()
    timing = threading.Event()
    outcome: list[BaseException | None] = []

    def progress(p: measure.MeasureProgress) -> None:
        if p.stage == "time":
            timing.set()

    def work() -> None:
        try:
            measure_run.measure_pair(("medium", plan), cancel=cancel, on_progress=progress)
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    thread = threading.Thread(target=work)
    thread.start()
    assert timing.wait(120)
    cancelled_at = time.monotonic()
    cancel.set()
    thread.join(5)
    stopped_s = time.monotonic() - cancelled_at
    assert not thread.is_alive()
    assert isinstance(outcome[0], measure.MeasureCancelled), outcome
    assert stopped_s < 2.0, stopped_s  # the target is 1 s; the margin is for a shared machine
    assert not files_under(standin.standins_dir())
    assert measure.figures_here("medium") is None  # nothing kept from a cancelled run


def test_cancel_while_writing_removes_the_partial_file(tmp_path: Path) -> None:
    cancel = threading.Event()
    path = tmp_path / f"partial{standin.SUFFIX}"

    def progress(fraction: float) -> None:
        cancel.set()

    with pytest.raises(standin.StandinCancelled):
        standin.write_standin(
            plan_from_shape("medium", MEDIUM, "Q4_0"), path, cancel=cancel, on_progress=progress
        )
    assert not path.exists()


def test_a_killed_runs_leftovers_are_removed_by_the_next(tmp_path: Path) -> None:
    folder = standin.standins_dir()
    dead = folder / "run-1-1"
    dead.mkdir(parents=True)
    (dead / "pid").write_text("999999999")
    (dead / f"target{standin.SUFFIX}").write_bytes(b"GGUF" + bytes(100))
    standin.clean_leftovers()
    assert not dead.exists()


def test_check_measure_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = paths.models_dir()
    target = standin.write_standin(plan_from_shape("t", TINY_QWEN2, "Q4_K_M"), models / "tiny-Q4_K_M.gguf")
    draft = standin.write_standin(
        plan_from_shape("d", TINY_QWEN2, "Q8_0"), models / "tiny-draft-Q8_0.gguf", seed=2
    )
    code = tandem_main(["models", "check", str(target), str(draft), "--measure"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "measuring on this computer with stand-ins" in err and "timing the stand-in of the target" in err
    assert "plain replies at about " in out and " tokens/s" in out
    assert "Copy and edit work with n-gram lookup: about " in out and "at most " in out  # the ceiling
    assert "The draft model: about " in out and ("it pays here" in out or "it does not pay here" in out)
    assert "llama.cpp issue #5877" in out  # where the acceptance comes from
    assert not files_under(standin.standins_dir())
    # A later check shows what was measured, without measuring again.
    code = tandem_main(["models", "check", str(target), "--draft", str(draft), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["here"]["plain_tokens_per_s"] > 0 and data["here"]["draft"]["speedup"] > 0


def test_check_measure_refuses_an_impossible_header_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = KnownShape("llama", 256, 2, 4, 4, 512, 600)
    plan = plan_from_shape("x", bad, "Q4_0")
    # The same header, its KV heads changed to 3 (4 heads cannot share them).
    key = b"llama.attention.head_count_kv"
    at = plan.header.index(key) + len(key) + 4
    header = plan.header[:at] + (3).to_bytes(4, "little") + plan.header[at + 4 :]
    path = standin.write_standin(
        standin.StandinPlan("x", header, plan.data_offset, plan.tensors, "llama", 600), tmp_path / "bad.gguf"
    )
    code = tandem_main(["models", "check", str(path), "--measure"])
    _, err = capsys.readouterr()
    lines = err.splitlines()
    assert code == 2 and lines[-1].startswith("error: ") and "impossible shape" in lines[-1]
    assert "4 attention heads cannot share 3 key/value heads" in lines[-1]
    assert not any("Traceback" in line for line in lines)
    assert not files_under(standin.standins_dir())


def test_check_a_catalog_pair_from_its_headers(
    hub: FakeHub, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `--pair P --measure` reads the pair's headers from the hub, as `check REF --measure` does.
    catalog = tmp_path / "catalog.json"
    files = (
        hub.repos[TINY_REPO].files["tiny-target.gguf"],
        hub.repos[TINY_DRAFT_REPO].files["tiny-draft.gguf"],
    )
    catalog.write_text(json.dumps(tiny_pair_catalog(*files)))
    monkeypatch.setattr(cli_doctor, "load_catalog", lambda: load_catalog(catalog))
    code = tandem_main(["models", "check", "--pair", "tiny-pair"])
    out, _ = capsys.readouterr()
    assert code == 0 and "not measured on this computer yet; add --measure" in out
    code = tandem_main(["models", "check", "--pair", "tiny-pair", "--measure"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "measuring on this computer with stand-ins" in err and "timing the stand-in of the draft" in err
    assert out.startswith("pair: Tiny target + tiny draft") and "plain replies at about " in out
    assert "The draft model: about " in out
    assert all(hub.bytes_sent(f) > 0 for f in files) and not files_under(paths.models_dir())  # headers only
    assert not files_under(standin.standins_dir())
    # Kept figures (as --measure keeps them) are shown without measuring, or reading the hub.
    sent = [hub.bytes_sent(f) for f in files]
    code = tandem_main(["models", "check", "--pair", "tiny-pair", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["pair"] == "tiny-pair" and data["here"]["draft"]["speedup"] > 0
    assert [hub.bytes_sent(f) for f in files] == sent


def test_check_a_catalog_pair_offline(capsys: pytest.CaptureFixture[str]) -> None:
    code = tandem_main(["models", "check", "--pair", "qwen2.5-7b-0.5b"])
    out, _ = capsys.readouterr()
    assert code == 0 and "not measured on this computer yet; add --measure" in out
    # Without the hub (conftest sets HF_HUB_OFFLINE=1): the hub path's one error line.
    code = tandem_main(["models", "check", "--pair", "qwen2.5-7b-0.5b", "--measure"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and err[-1].startswith("error: ") and "HF_HUB_OFFLINE" in err[-1]
    code = tandem_main(
        ["models", "check", "bartowski/Qwen2.5-7B-Instruct-GGUF/Qwen2.5-7B-Instruct-Q4_K_M.gguf"]
    )
    assert capsys.readouterr().err.splitlines()[-1] == err[-1]
    assert not files_under(standin.standins_dir())
    code = tandem_main(["models", "check", "--pair", "qwen2.5-7b-0.5b", "some/repo/file.gguf"])
    assert code == 2 and "not both" in capsys.readouterr().err
    # Kept figures (as --measure keeps them) are shown without measuring.
    machine = measure.machine_identity(default_threads())
    for model, t_ms in (
        (
            "bartowski/Qwen2.5-7B-Instruct-GGUF/Qwen2.5-7B-Instruct-Q4_K_M.gguf",
            {1: 129.0, 2: 230.0, 4: 299.0},
        ),
        ("bartowski/Qwen2.5-0.5B-Instruct-GGUF/Qwen2.5-0.5B-Instruct-Q8_0.gguf", {1: 11.7}),
    ):
        measure.save_costs(measure.MeasuredCosts(model, t_ms, 1, machine, "now", default_threads()))
    code = tandem_main(["models", "check", "--pair", "qwen2.5-7b-0.5b"])
    out = capsys.readouterr().out
    assert code == 0 and "plain replies at about 7.8 tokens/s" in out and "it does not pay here" in out


def test_a_pair_too_large_for_this_machine_is_refused_before_anything_is_written() -> None:
    import shutil

    from app.library.catalog import total_ram_bytes

    # Qwen2.5 14B at F16: about 30 GB, more than this machine's memory (checked first).
    plan = plan_from_shape("Qwen2.5 14B", KNOWN_SHAPES["qwen2.5-14b"], "F16")  # a size no catalog model has
    assert plan.size_bytes > total_ram_bytes(), "this test needs a machine with less than 28 GiB of memory"
    small = ("tiny", plan_from_shape("tiny", TINY_QWEN2, "Q4_0"))
    with pytest.raises(StandinError) as e:
        measure_run.measure_pair(small, ("Qwen2.5 14B", plan))  # the draft too is checked before writing
    standin.standins_dir().mkdir(parents=True, exist_ok=True)
    fits_disk = shutil.disk_usage(standin.standins_dir()).free > plan.size_bytes + standin.DISK_MARGIN_BYTES
    assert ("of memory and only" if fits_disk else "of disk and only") in str(e.value)
    assert str(e.value).endswith("nothing was written") and "\n" not in str(e.value)
    assert not files_under(standin.standins_dir())


def test_a_stand_in_llama_cpp_cannot_load_is_one_sentence_and_leaves_nothing() -> None:
    unknown = KnownShape("qwen9", 256, 2, 4, 2, 512, 600)  # an architecture this build does not know
    with pytest.raises(StandinError) as e:
        measure_run.measure_pair(
            ("someone/qwen9-GGUF/qwen9.gguf", plan_from_shape("qwen9.gguf", unknown, "Q4_0"))
        )
    assert str(e.value) == (
        "the stand-in of qwen9.gguf (qwen9) could not be timed: llama.cpp could not load it "
        "(this build may not know its architecture)"
    )
    assert (
        not files_under(standin.standins_dir())
        and measure.figures_here("someone/qwen9-GGUF/qwen9.gguf") is None
    )


@pytest.mark.parametrize("which", ["gemma", "smollm2"])
def test_stand_ins_of_the_real_built_in_models_keep_their_tokenizer_and_shape(
    request: pytest.FixtureRequest, tmp_path: Path, which: str
) -> None:
    # Gemma 3 270M (gemma3, Q4_K_M with Q8_0/Q6_K tensors, 262,144 tokens) and SmolLM2 135M
    # (llama, Q4_1, a BPE vocabulary with merges): real headers, as the pair doctor reads them.
    from app.library.default_model import smollm2_model

    real = request.getfixturevalue("gemma_q4") if which == "gemma" else smollm2_model()
    header = read_local_header(real)
    plan = plan_from_header(real.name, header.header_bytes, header.info)
    copy = standin.write_standin(plan, tmp_path / f"{which}{standin.SUFFIX}")
    assert copy.stat().st_size == real.stat().st_size
    runners = [LlamaRunner(str(p), n_ctx=256, n_threads=default_threads(), n_batch=64) for p in (real, copy)]
    try:
        text = "The harbour committee met on Tuesday evening."
        assert runners[1].tokenize(text) == runners[0].tokenize(text)  # the real tokenizer
        rows = runners[1].decode(runners[1].tokenize(text), n_logits=4)
        assert rows.shape == (4, runners[0].n_vocab) and np.isfinite(rows).all()
    finally:
        for r in runners:
            r.close()


def test_a_hand_edited_measurement_reads_its_odd_values_as_unknown_not_as_text() -> None:
    # measured-here.json is the app's file, but a person may edit it: a speed-up that is not a
    # number is no figure (the window formats it as one), and a size or thread count written as
    # text is read as its number.
    record = {
        "model": "m.gguf", "t_ms": {"1": 20.0, "2": 25.0}, "size_bytes": "1000", "machine": "x",
        "measured_at": "then", "n_threads": "2", "copy_speedup": "fast",
    }  # fmt: skip
    machine = measure.machine_identity(default_threads())
    measure.measured_path().write_text(
        json.dumps({"format": measure.FORMAT, "machines": {machine: {"m.gguf": record}}})
    )
    costs = measure.load_costs("m.gguf")
    assert costs is not None and costs.copy_speedup is None
    assert (costs.size_bytes, costs.n_threads) == (1000, 2)
