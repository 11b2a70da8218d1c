"""Why the speed-up is off, said in the header and a reply's Details from a typed reason (issue
51): chosen, a draft that does not pair, a recurrent or hybrid model, a server that does not draft."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt

from app.host.messages import EngineInfo, SpeculationOff
from app.store import Store
from engine.config import PLAIN_DECODING, DraftChoice
from engine.errors import ErrorKind, Failure
from engine.events import Speculation
from ui.presenters.engine_presenter import pair_words
from ui.presenters.off_words import off_words


def _info(**changes) -> EngineInfo:  # type: ignore[no-untyped-def]
    base = {
        "target_path": "/m/target.gguf", "target_name": "target", "draft": PLAIN_DECODING, "draft_name": "",
        "speculation": Speculation.NONE, "n_ctx": 2048, "has_chat_template": True,
        "gpu_offload_supported": False, "pair_note": "",
    }  # fmt: skip
    return EngineInfo(**{**base, **changes})


def test_the_reason_is_typed_and_worded() -> None:
    assert (
        _info(speculation=Speculation.NGRAM, draft=DraftChoice.parse("ngram")).speculation_off
        is SpeculationOff.NONE
    )
    assert _info().speculation_off is SpeculationOff.CHOSEN
    recurrent = _info(can_roll_back=False)
    assert recurrent.speculation_off is SpeculationOff.CANNOT_ROLL_BACK
    assert pair_words(recurrent) == (
        "Speed-up off: this model (recurrent or hybrid) cannot take back a wrong guess, which the speed-up needs"
    )
    refused = _info(draft_refusal=Failure(ErrorKind.INCOMPATIBLE_PAIR, "no"))
    assert refused.speculation_off is SpeculationOff.DRAFT_REFUSED
    assert pair_words(refused).startswith("Speed-up off. Draft model not used: ")
    server = _info(server="http://127.0.0.1:1/v1")
    assert server.speculation_off is SpeculationOff.SERVER and off_words(server.speculation_off)
    assert off_words("not a reason") == "" and off_words(None) == ""


def _details(qtbot, window) -> dict[str, str]:  # type: ignore[no-untyped-def]
    store = Store()
    try:
        reply = store.messages(window.presenter.conversation_id)[-1]
    finally:
        store.close()
    widget = window.chat.widget_for(reply.id)
    qtbot.mouseClick(widget.details_button, Qt.MouseButton.LeftButton)
    return dict(widget.detail_rows)


def test_a_reply_written_with_the_speed_up_off_says_why_in_its_details(
    qtbot, open_window, wait_reply, tiny_target, tiny_incompatible
) -> None:  # type: ignore[no-untyped-def]
    window = open_window(tiny_target, draft="none", max_tokens=8)
    window.presenter.send("hello")
    wait_reply(window)
    assert _details(qtbot, window)["Speed-up off because"] == "the model writes every word itself"
    window.shutdown()

    # A draft that does not pair: the model writes alone, the header and Details say why.
    window = open_window(tiny_target, draft=str(tiny_incompatible), max_tokens=8)
    assert window.controller.info.speculation_off is SpeculationOff.DRAFT_REFUSED
    assert window.header.state_label.text().startswith("Speed-up off. Draft model not used: ")
    window.presenter.send("hello")
    wait_reply(window)
    assert _details(qtbot, window)["Speed-up off because"] == "the draft model cannot be used with this model"


def write_tiny_mamba(path: Path, seed: int = 1, n_layers: int = 2, n_embd: int = 64) -> Path:
    """A tiny recurrent model (llama.cpp's "mamba"), random weights, the tiny models' vocabulary
    and chat template: its state cannot drop the tail of what it read."""
    import gguf

    from tests.tiny import CHAT_TEMPLATE, MERGES, SPECIALS, tiny_vocab

    rng = np.random.default_rng(seed)
    tokens = tiny_vocab()
    n_vocab = len(tokens)
    d_inner, d_state, d_conv, dt_rank = 2 * n_embd, 16, 4, 8  # llama.cpp takes an expansion of 2 only
    w = gguf.GGUFWriter(str(path), "mamba")
    w.add_name("tiny-mamba")
    w.add_context_length(2048)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(0)
    w.add_head_count(0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_ssm_conv_kernel(d_conv)
    w.add_ssm_inner_size(d_inner)
    w.add_ssm_state_size(d_state)
    w.add_ssm_time_step_rank(dt_rank)
    w.add_file_type(0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIALS) + [1] * (n_vocab - len(SPECIALS)))
    w.add_token_merges(list(MERGES))
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_pad_token_id(2)
    w.add_add_bos_token(True)
    w.add_chat_template(CHAT_TEMPLATE)

    def f(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w.add_tensor("token_embd.weight", f(n_vocab, n_embd))
    for i in range(n_layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(n_embd, np.float32))
        w.add_tensor(b + "ssm_in.weight", f(2 * d_inner, n_embd, scale=n_embd**-0.5))
        w.add_tensor(b + "ssm_conv1d.weight", f(d_inner, d_conv, scale=0.5))
        w.add_tensor(b + "ssm_conv1d.bias", np.zeros(d_inner, np.float32))
        w.add_tensor(b + "ssm_x.weight", f(dt_rank + 2 * d_state, d_inner, scale=d_inner**-0.5))
        w.add_tensor(b + "ssm_dt.weight", f(d_inner, dt_rank, scale=dt_rank**-0.5))
        w.add_tensor(b + "ssm_dt.bias", np.zeros(d_inner, np.float32))
        w.add_tensor(b + "ssm_a", -np.exp(f(d_inner, d_state, scale=0.1)))
        w.add_tensor(b + "ssm_d", np.ones(d_inner, np.float32))
        w.add_tensor(b + "ssm_out.weight", f(n_embd, d_inner, scale=d_inner**-0.5))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("output.weight", f(n_vocab, n_embd, scale=5 * n_embd**-0.5))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_recurrent(models_dir: Path) -> Path:
    return write_tiny_mamba(models_dir / "recurrent.gguf")


def test_a_recurrent_model_loads_plain_and_says_why_and_why_it_reads_again(
    qtbot, open_window, wait_reply, tiny_recurrent
) -> None:  # type: ignore[no-untyped-def]
    # Asked to draft from the text (the window's default), it loads all the same, plain.
    window = open_window(tiny_recurrent, draft="ngram", max_tokens=8)
    info = window.controller.info
    assert info.speculation == "none" and info.speculation_off is SpeculationOff.CANNOT_ROLL_BACK
    assert window.header.state_label.text() == (
        "Speed-up off: this model (recurrent or hybrid) cannot take back a wrong guess, which the speed-up needs"
    )
    window.presenter.send("hello there")
    wait_reply(window)
    rows = _details(qtbot, window)
    assert rows["Speed-up off because"].startswith("this model (recurrent or hybrid) cannot take back")
    # A follow-up that continues exactly what it read reuses it all, as any model does.
    window.presenter.send("and then?")
    wait_reply(window)
    rows = _details(qtbot, window)
    assert "from the cache" in rows["Prompt"] and "Read again because" not in rows
    # Regenerate: what it read includes the old reply, which such a model cannot cut away.
    window.presenter.regenerate()
    wait_reply(window)
    rows = _details(qtbot, window)
    assert (
        rows["Read again because"]
        == "this kind of model (recurrent or hybrid) cannot keep part of what it read"
    )
    assert rows["Prompt"].startswith("read all ")
