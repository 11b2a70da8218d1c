"""How long switching versions of a 2,000-token reply takes (issue 51, target under 50 ms): the
store's switch (Store.choose_version), then the chat's widgets as the window makes them on the
presenter's signals (ChatView.remove_messages, add_row) and one processEvents, ten times.

    QT_QPA_PLATFORM=offscreen python -m tools.lab.version_switch
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time


def main() -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["TANDEM_HOME"] = tempfile.mkdtemp(prefix="tandem-version-switch-")
    from PySide6.QtWidgets import QApplication

    app = QApplication([])
    from app.store import MessageStatus, Store
    from ui.chat.chat_view import ChatView
    from ui.presenters.reply_presenter import MessageRow

    store = Store()
    c = store.create_conversation("Long")
    paragraph = "The committee met on Tuesday to discuss the harbour, the **budget** and `code()`; " * 5
    text = "\n\n".join(f"## Part {i}\n\n{paragraph}" for i in range(20))  # ~8,500 characters
    store.add_message(c.id, "user", "Write it")
    first = store.add_message(c.id, "assistant", text).id
    store.set_status([first], MessageStatus.SUPERSEDED)
    second = store.add_message(c.id, "assistant", text.replace("Tuesday", "Monday")).id
    view = ChatView()
    view.resize(900, 800)
    view.show()
    for m in store.messages(c.id):
        view.add_row(MessageRow(m.id, m.role, m.content, m.spans, m.status))
    app.processEvents()
    times_ms, shown_id = [], second
    for _ in range(10):
        t0 = time.perf_counter()
        hidden, shown = store.choose_version(shown_id, -1 if shown_id == second else 1)
        view.remove_messages(hidden)
        versions = store.versions_shown(c.id, shown[0].id)
        for m in shown:
            view.add_row(
                MessageRow(m.id, m.role, m.content, m.spans, m.status, version=versions.get(m.id, (1, 1)))
            )
        app.processEvents()
        times_ms.append((time.perf_counter() - t0) * 1000)
        shown_id = shown[0].id
    print(
        f"{len(text):,} characters: switch median {statistics.median(times_ms):.1f} ms, "
        f"each {[round(t) for t in times_ms]}"
    )


if __name__ == "__main__":
    main()
