"""``Fired``: a ``Fire`` callback that records every trigger a watcher fires, from any thread,
and runs their actions as the agent's loop would."""

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
