"""A view of the fleet as its readers share it: the fleet's values, their count, the findings
and the view's health, at one generation (bumped whenever the numbers change), and where it
comes from: a ``ViewSource`` (a one-shot read or a dump: ``StaticSource``; the served view
kept current by watches implements the same protocol). Readers hold ``read()`` while they
use a view: a source that changes keeps it consistent until they let go."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Protocol

from gfd.fleet.checks import Finding
from gfd.fleet.count import Counted
from gfd.fleet.health import ViewHealth
from gfd.fleet.model import Fleet


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    fleet: Fleet
    counted: Counted
    findings: tuple[Finding, ...]
    health: ViewHealth
    generation: int
    """Bumped whenever the numbers change (0: the first)."""


class ViewSource(Protocol):
    def read(self) -> AbstractContextManager[View]:
        """The current view, consistent while the context is held."""

    def wait(self, after: int, timeout: float) -> int:
        """The generation once it is past ``after``, or the current one after ``timeout``
        seconds."""


class StaticSource:
    """A view that never changes (a dump, or one read of the API server)."""

    def __init__(self, view: View) -> None:
        self._view = view
        self._stopped = threading.Event()

    @contextmanager
    def read(self) -> Iterator[View]:
        yield self._view

    def wait(self, after: int, timeout: float) -> int:
        if self._view.generation <= after:
            self._stopped.wait(timeout)
        return self._view.generation

    def stop(self) -> None:
        """Wake every waiter (the server is shutting down)."""
        self._stopped.set()
