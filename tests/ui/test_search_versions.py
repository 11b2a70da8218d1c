"""The window's search finds text in an earlier version of a reply and says so (issue 51: a person
looks for what they read; Regenerate and Edit keep the earlier versions)."""

from __future__ import annotations

from app.store import EARLIER_VERSION, MessageStatus


def test_the_search_finds_an_earlier_version_and_its_snippet_says_so(qtbot, open_window, tiny_target) -> None:  # type: ignore[no-untyped-def]
    from ui.chat.conversation_list import SNIPPET_ROLE, snippet_html

    window = open_window(tiny_target, wait_loaded=False)
    store = window.presenter.store
    soup = store.create_conversation("Soup")
    store.add_message(soup.id, "user", "What soup?")
    leek = store.add_message(soup.id, "assistant", "A leek and potato soup.")
    store.set_status([leek.id], MessageStatus.SUPERSEDED)  # regenerated: an earlier version
    store.add_message(soup.id, "assistant", "A tomato soup.")
    window.conversations.search.setText("potato")
    qtbot.waitUntil(lambda: window.conversations.list.count() == 1, timeout=5_000)
    assert window.conversations.titles() == ["Soup"]
    found = window.conversations.list.item(0).data(SNIPPET_ROLE)
    assert found[1] == EARLIER_VERSION + "A leek and potato soup."
    assert "<b>potato</b>" in snippet_html(*found)
    assert "earlier version" in window.conversations.list.item(0).toolTip()


def test_opening_a_conversation_found_in_an_earlier_version_shows_that_version(
    qtbot, open_window, tiny_target
) -> None:  # type: ignore[no-untyped-def]
    """Clicking the search's result: the version holding the match is chosen (its < >: 1/2), as
    the reply's own arrows would, and the match is there to see; the choice is kept."""
    from PySide6.QtCore import Qt

    window = open_window(tiny_target, wait_loaded=False)
    store = window.presenter.store
    soup = store.create_conversation("Soup")
    store.add_message(soup.id, "user", "What soup?")
    leek = store.add_message(soup.id, "assistant", "A leek and potato soup.")
    store.set_status([leek.id], MessageStatus.SUPERSEDED)
    tomato = store.add_message(soup.id, "assistant", "A tomato soup.")
    window.conversations.search.setText("potato")
    qtbot.waitUntil(lambda: window.conversations.list.count() == 1, timeout=5_000)
    item = window.conversations.list.item(0)
    rect = window.conversations.list.visualItemRect(item)
    qtbot.mouseClick(window.conversations.list.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.waitUntil(lambda: window.chat.widget_for(leek.id) is not None, timeout=5_000)
    assert window.chat.widget_for(tomato.id) is None
    assert [m.content for m in store.messages(soup.id)] == ["What soup?", "A leek and potato soup."]
    # A search the version shown holds changes nothing.
    window.presenter.show_conversation(None)
    window.conversations.search.setText("soup")
    qtbot.waitUntil(lambda: window.conversations.list.count() == 1, timeout=5_000)
    window.conversations.list.setCurrentRow(0)
    qtbot.waitUntil(lambda: window.chat.widget_for(leek.id) is not None, timeout=5_000)
    assert [m.content for m in store.messages(soup.id)] == ["What soup?", "A leek and potato soup."]
