"""Stand-ins of a known shape (the lab's, tools/lab/shapes.py): planned from a config.json's
shape, with a byte-level vocabulary, they load in llama.cpp and compute; the replay's
`cost-curve --standin` times one at every batch size."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.library import standin
from app.library.standin import StandinError
from engine.gguf_info import read_gguf_info
from tests.app.test_standin import TINY_LLAMA, TINY_QWEN2, TINY_QWEN3, files_under, logits_of
from tools.lab import shapes
from tools.lab.shapes import KnownShape, plan_from_shape


@pytest.mark.parametrize(
    ("shape", "quant", "types"),
    [
        (TINY_QWEN2, "Q4_K_M", {"Q4_K", "Q6_K"}),
        (TINY_LLAMA, "Q4_0", {"Q4_0"}),
        (TINY_QWEN3, "Q8_0", {"Q8_0"}),
        (
            KnownShape("qwen2", 96, 2, 4, 2, 256, 300),
            "Q4_K_M",
            {"Q5_0", "Q8_0", "Q4_K", "Q6_K"},
        ),  # rows of 96
    ],
)
def test_a_stand_in_of_a_known_shape_loads_and_computes_finite_logits(
    tmp_path: Path, shape: KnownShape, quant: str, types: set[str]
) -> None:
    plan = plan_from_shape("tiny", shape, quant)
    path = standin.write_standin(plan, tmp_path / f"tiny{standin.SUFFIX}")
    assert path.stat().st_size == plan.size_bytes
    info = read_gguf_info(path)
    assert info.n_vocab == shape.n_vocab
    assert info.metadata[f"{info.architecture}.block_count"] == shape.n_layers
    from gguf.constants import GGMLQuantizationType

    found = {GGMLQuantizationType(t.type_id).name for t in info.tensors if len(t.shape) > 1}
    assert found == types
    rows = logits_of(path)
    assert rows.shape == (8, shape.n_vocab)
    assert np.isfinite(rows).all() and rows.std() > 0  # llama.cpp computes normally


def test_an_impossible_shape_is_refused() -> None:
    with pytest.raises(StandinError, match="impossible shape"):
        plan_from_shape("bad", KnownShape("qwen2", 256, 2, 4, 3, 512, 600))


def test_a_cost_curve_of_a_known_shape_for_the_replay(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tools.lab.replay import main  # the lab's (a curve file for the replay)

    monkeypatch.setitem(shapes.KNOWN_SHAPES, "tiny-qwen2", TINY_QWEN2)
    out = tmp_path / "curve.json"
    assert main(["cost-curve", "--standin", "tiny-qwen2:Q4_0", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert sorted(int(n) for n in data["t_ms"]) == list(range(1, 65))  # every batch size 1-64
    assert "--standin tiny-qwen2:Q4_0" in data["source"] and data["row_ms"] >= 0
    assert not files_under(standin.standins_dir())
    capsys.readouterr()
    assert main(["cost-curve", "--standin", "qwen9-1b"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("error: no known shape 'qwen9-1b'; known: ")
