"""A suggested task that runs with another preset or speed-up than the user chose: never silent.

The demo tasks and the quick actions that keep a document's text run as the "Edit or copy text"
preset runs them (ui.presenters.words.task_preset). Choosing one says what it changed in the
header, with Undo; after the task's reply the user's own preset and speed-up come back, with
"Keep" to keep the task's. Choosing a preset or speed-up in the header meanwhile makes it theirs:
nothing is put back then.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject

from app.settings import Preset
from ui.chat.chat_view import ChatView
from ui.presenters import words
from ui.presenters.presenter import ChatPresenter


class TaskSwitch(QObject):
    def __init__(
        self,
        presenter: ChatPresenter,
        chat: ChatView,
        apply: Callable[[Preset], None],
        parent: QObject | None = None,
    ) -> None:
        """apply: choose a preset as the header does (its sampling, speed-up and instructions)."""
        super().__init__(parent)
        self.presenter = presenter
        self.chat = chat
        self.apply = apply
        self.before: Preset | None = None  # the user's own choices, to be put back after the reply
        self.task: Preset | None = None  # ...and what the task ran with

    def current(self) -> Preset:
        """The header's choices now, as a preset (its name the one chosen last, "" for None)."""
        return self.presenter.current_preset(
            self.presenter.settings.preset_name, self.chat.system_prompt.text()
        )

    def on_task_suggested(self, task: str) -> None:
        preset = words.task_preset(task)
        if preset is None:
            return
        before = self.before or self.current()  # a second task before any reply: still theirs to go back to
        said = words.task_switch_words(before, preset)
        self.apply(preset)
        if not said:
            return
        self.before, self.task = before, preset
        self.chat.set_notice(said)
        self.chat.set_notice_action("Undo", self.undo)

    def undo(self) -> None:
        before, self.before, self.task = self.before, None, None
        if before is not None:
            self.apply(before)

    def on_user_chose(self) -> None:
        """A preset or speed-up chosen in the header: the user's now; nothing is put back."""
        self.before = self.task = None

    def on_reply_ended(self, _ended: object = None) -> None:
        before, task = self.before, self.task
        if before is None or task is None:
            return
        self.before = self.task = None
        self.apply(before)
        self.chat.set_notice(words.task_kept_words(before))
        self.chat.set_notice_action(f"Keep “{task.name}”", lambda: self.apply(task))
