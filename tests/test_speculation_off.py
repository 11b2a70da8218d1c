"""Why the speed-up is off, said in the header and a reply's Details from a typed reason (issue
51): chosen, a draft that does not pair, a recurrent or hybrid model, a server that does not draft."""

from __future__ import annotations

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
        reply = store.messages(window.conversation_id)[-1]
    finally:
        store.close()
    widget = window.chat.widget_for(reply.id)
    qtbot.mouseClick(widget.details_button, Qt.MouseButton.LeftButton)
    return dict(widget.detail_rows)


def test_a_reply_written_with_the_speed_up_off_says_why_in_its_details(
    qtbot, open_window, wait_reply, tiny_target, tiny_incompatible
) -> None:  # type: ignore[no-untyped-def]
    window = open_window(tiny_target, draft="none", max_tokens=8)
    window.send("hello")
    wait_reply(window)
    assert _details(qtbot, window)["Speed-up off because"] == "the model writes every word itself"
    window.shutdown()

    # A draft that does not pair: the model writes alone, the header and Details say why.
    window = open_window(tiny_target, draft=str(tiny_incompatible), max_tokens=8)
    assert window.controller.info.speculation_off is SpeculationOff.DRAFT_REFUSED
    assert window.pair_label.text().startswith("Speed-up off. Draft model not used: ")
    window.send("hello")
    wait_reply(window)
    assert _details(qtbot, window)["Speed-up off because"] == "the draft model cannot be used with this model"
