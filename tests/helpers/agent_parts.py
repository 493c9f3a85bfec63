"""Build an in-process Agent from a snapshot source, a sink and label options (unit tests)."""

from __future__ import annotations

from typing import Any

from gfd.config import Settings
from gfd.daemon import Agent, Duty, Parts
from gfd.labelers.options import LabelOptions


def make_agent(source: Any, sink: Any, options: LabelOptions, *, reloader: Any = None,
               interval: float | None = 10.0, oneshot: bool = False,
               duties: tuple[Duty, ...] = (), **kwargs: Any) -> Agent:
    settings = Settings(sleep_interval=interval, oneshot=oneshot)
    parts = Parts(settings=settings, discovery=source, sink=sink, options=options, duties=duties)
    return Agent(parts, reloader=reloader, **kwargs)
