"""Which part of a reply is the edited copy of a document (ui/chat/edit_finder.py): by alignment,
not by "the one fenced block" (issue 47 item 5)."""

from __future__ import annotations

from ui.chat.edit_finder import edited_copy, reply_body

NOTE = "The comittee will meet on tusday.\n\nPlease bring the budjet and the newsleter."
FIXED = "The committee will meet on Tuesday.\n\nPlease bring the budget and the newsletter."


def test_the_edit_in_a_fence_beside_prose() -> None:
    assert edited_copy(f"Here it is:\n\n```\n{FIXED}\n```\n\nI fixed four words.", NOTE) == FIXED


def test_the_edit_as_prose_beside_a_fenced_remark() -> None:
    reply = f"Here is the corrected note:\n\n{FIXED}\n\n```\nThis is the complete text with the changes.\n```"
    assert edited_copy(reply, NOTE) == FIXED


def test_no_copy_in_a_translation_or_an_answer() -> None:
    assert edited_copy("Le comité se réunira mardi. Apportez le budget.", NOTE) is None
    assert edited_copy("```\nFour words were misspelled.\n```", NOTE) is None
    assert edited_copy("Le comité se réunira mardi.", NOTE) is None


def test_without_a_document_the_one_fence_or_the_whole_reply() -> None:
    assert reply_body("Here:\n\n```\nA\n```") == "A"
    assert reply_body("  just text  ") == "just text"
