"""An agent's parts: closing them all when it stops, and closing only what a reload candidate
built anew when the candidate goes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gfd.config import Settings
from gfd.labelers.options import LabelOptions
from gfd.parts import Parts


class Closable:
    """Stands in for a discovery, a sink or an Events recorder: records its close()."""

    fail_on_init_error = True
    name = "closable"

    def __init__(self, closed: list[str], label: str) -> None:
        self.closed, self.label = closed, label

    def close(self) -> None:
        self.closed.append(self.label)

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"{self.label}.{name} was not expected")


def running(closed: list[str], *, events: bool = True) -> Parts:
    return Parts(settings=Settings(), discovery=Closable(closed, "discovery"),
                 sink=Closable(closed, "sink"), options=LabelOptions(),
                 events=Closable(closed, "events") if events else None)


def test_closing_the_parts_closes_each_of_them_once() -> None:
    closed: list[str] = []
    running(closed).close()
    assert closed == ["discovery", "sink", "events"]


def test_parts_without_events_close_their_discovery_and_sink() -> None:
    closed: list[str] = []
    running(closed, events=False).close()
    assert closed == ["discovery", "sink"]


def test_a_candidate_closes_only_what_it_built_anew() -> None:
    closed: list[str] = []
    current = running(closed)
    candidate = replace(current, sink=Closable(closed, "new sink"))
    candidate.close_new(current)
    assert closed == ["new sink"], "the running discovery and Events stay open"


def test_a_candidate_that_shares_everything_closes_nothing() -> None:
    closed: list[str] = []
    current = running(closed)
    replace(current, options=LabelOptions(mig_strategy="mixed")).close_new(current)
    assert closed == []


def test_a_candidate_with_new_events_beside_none_closes_them() -> None:
    closed: list[str] = []
    current = running(closed, events=False)
    candidate = replace(current, discovery=Closable(closed, "new discovery"),
                        events=Closable(closed, "new events"))
    candidate.close_new(current)
    assert closed == ["new discovery", "new events"]
