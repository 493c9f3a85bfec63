"""``Fired`` and ``FiredList``: ``Fire`` callbacks that record every trigger a watcher fires,
from any thread (``Fired`` also runs their actions as the agent's loop would)."""

from __future__ import annotations

import threading

from gfd.triggers import Trigger


class Fired:
    """Records each trigger (``fired.triggers``) under a lock: watchers fire from their own
    threads."""

    def __init__(self) -> None:
        self.triggers: list[Trigger] = []
        self.lock = threading.Lock()

    def __call__(self, trigger: Trigger) -> None:
        with self.lock:
            self.triggers.append(trigger)

    def run_actions(self) -> list[str]:
        """What the loop does with them: run each action; the kinds seen."""
        with self.lock:
            taken, self.triggers = self.triggers, []
        for trigger in taken:
            if trigger.action:
                trigger.action()
        return [t.kind for t in taken]


class FiredList(list[Trigger]):
    """The triggers fired so far, as a list (``fired == []``, ``fired[0].kind``), appended
    under a lock: watchers fire from their own threads."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def __call__(self, trigger: Trigger) -> None:
        with self.lock:
            self.append(trigger)
