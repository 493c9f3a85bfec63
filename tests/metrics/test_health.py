"""Liveness and readiness: a cycle running past --stuck-after, or a loop late to wake by as
much, fails liveness; readiness holds from the first publish."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.timing import Clock

from gfd.metrics.health import Health


def test_live_before_the_first_cycle() -> None:
    assert Health(stuck_after=120).live() == (True, "ok")


def test_live_turns_false_when_a_cycle_runs_past_stuck_after() -> None:
    clock = Clock()
    health = Health(stuck_after=120, clock=clock)
    health.cycle_started()
    clock.now += 120
    assert health.live() == (True, "ok")
    clock.now += 192
    assert health.live() == (False, "cycle running for 312s (limit 120s)")
    health.cycle_finished()
    assert health.live() == (True, "ok")


def test_a_new_cycle_restarts_the_stuck_timer() -> None:
    clock = Clock()
    health = Health(stuck_after=10, clock=clock)
    health.cycle_started()
    clock.now += 9
    health.cycle_finished()
    clock.now += 100  # idle between cycles is not stuck
    assert health.live()[0]
    health.cycle_started()
    clock.now += 9
    assert health.live()[0]


def test_ready_flips_after_mark_published() -> None:
    health = Health(stuck_after=120)
    assert health.ready() == (False, "no labels published yet")
    health.mark_published()
    assert health.ready() == (True, "ok")


def test_stuck_after_must_be_positive() -> None:
    with pytest.raises(ValueError, match="stuck_after"):
        Health(stuck_after=0)


def test_live_turns_false_when_the_loop_misses_its_wake_up_by_stuck_after() -> None:
    clock = Clock()
    health = Health(stuck_after=120, clock=clock)
    health.idle_until(clock.now + 60)  # the loop sleeps, due to turn in 60 s
    clock.now += 180
    assert health.live() == (True, "ok"), "up to --stuck-after late is still live"
    clock.now += 30
    assert health.live() == (False, "agent loop has not turned for 150s past its wake-up "
                                     "(limit 120s)")
    health.cycle_started()  # it turned
    assert health.live() == (True, "ok")


def test_importing_health_or_the_package_loads_no_prometheus_code() -> None:
    """A one-shot run has no metrics server: what it may import of gfd.metrics costs nothing
    of prometheus_client; a name of the package's is loaded from its module when asked."""
    code = ("import sys, gfd.metrics, gfd.metrics.health\n"
            "assert 'prometheus_client' not in sys.modules, 'loaded at import'\n"
            "assert 'gfd.metrics.server' not in sys.modules, 'loaded at import'\n"
            "names = [getattr(gfd.metrics, name) for name in gfd.metrics.__all__]\n"
            "assert 'prometheus_client' in sys.modules and len(names) == 15\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr


def test_an_unknown_name_of_the_package_is_an_attribute_error() -> None:
    import gfd.metrics

    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = gfd.metrics.Nothing
