"""Build an in-process Agent from a snapshot source, a sink and label options (unit tests);
``FixedSource``, a source that reads the same snapshot every cycle."""

from __future__ import annotations

from typing import Any

from gfd.config import Settings
from gfd.daemon import Agent, Duty, Parts
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot


def make_agent(source: Any, sink: Any, options: LabelOptions, *, reloader: Any = None,
               interval: float | None = 10.0, oneshot: bool = False,
               duties: tuple[Duty, ...] = (), **kwargs: Any) -> Agent:
    settings = Settings(sleep_interval=interval, oneshot=oneshot)
    parts = Parts(settings=settings, discovery=source, sink=sink, options=options, duties=duties)
    return Agent(parts, reloader=reloader, **kwargs)


class FixedSource:
    """A snapshot source (``daemon.SnapshotSource``) that reads the same snapshot every cycle
    and counts its reads; it watches nothing and refreshes nothing."""

    fail_on_init_error = True

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.reads = 0

    def read(self) -> Snapshot:
        self.reads += 1
        return self.snapshot

    def refresh(self, *, gpus: bool = False) -> None:
        pass

    def watch(self, fire: object) -> None:
        pass

    def close(self) -> None:
        pass
