"""The API sinks' retry policy: 429, 5xx and lost connections are retried with jittered,
capped backoff (Retry-After wins); every other error, and the last attempt's, goes up; no
wait reaches past the cycle's budget."""

from __future__ import annotations

import pytest
from helpers.timing import Clock, Sleeps

from gfd.budget import Budget
from gfd.errors import ApiError
from gfd.sinks.retry import Retry


class Flaky:
    """An operation that raises the queued errors, then returns "ok"."""

    def __init__(self, *errors: ApiError) -> None:
        self.errors = list(errors)
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "ok"


def error(status: int | None, retry_after: float | None = None) -> ApiError:
    return ApiError(f"HTTP {status}", status=status, retry_after=retry_after)


def test_a_success_is_returned_at_once_without_sleeping() -> None:
    sleeps = Sleeps()
    assert Retry(sleep=sleeps).run(Flaky()) == "ok"
    assert sleeps == []


@pytest.mark.parametrize("status", [None, 429, 500, 503, 504], ids=lambda s: f"status-{s}")
def test_a_retriable_error_is_retried_after_a_sleep(status: int | None) -> None:
    sleeps = Sleeps()
    operation = Flaky(error(status))
    assert Retry(sleep=sleeps, rand=lambda: 1.0).run(operation) == "ok"
    assert operation.calls == 2 and sleeps == [0.5]


@pytest.mark.parametrize("status", [400, 403, 404, 409, 422], ids=lambda s: f"status-{s}")
def test_any_other_error_goes_up_at_once(status: int) -> None:
    sleeps = Sleeps()
    operation = Flaky(error(status))
    with pytest.raises(ApiError) as caught:
        Retry(sleep=sleeps).run(operation)
    assert caught.value.status == status
    assert operation.calls == 1 and sleeps == []


def test_the_last_attempts_error_goes_up() -> None:
    sleeps = Sleeps()
    operation = Flaky(*(error(503) for _ in range(10)))
    with pytest.raises(ApiError):
        Retry(attempts=3, sleep=sleeps).run(operation)
    assert operation.calls == 3 and len(sleeps) == 2


def test_the_sleeps_double_from_half_a_second_with_full_jitter_and_a_cap() -> None:
    sleeps = Sleeps()
    Retry(attempts=8, cap=4.0, sleep=sleeps, rand=lambda: 1.0).run(
        Flaky(*(error(500) for _ in range(7))))
    assert sleeps == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0]
    low = Sleeps()
    Retry(attempts=3, sleep=low, rand=lambda: 0.0).run(Flaky(error(500), error(500)))
    assert low == [0.25, 0.5], "jitter keeps at least half the step"


@pytest.mark.parametrize("retry_after, slept", [(7.0, 7.0), (0.0, 0.0), (600.0, 30.0)],
                         ids=["honoured", "zero", "capped"])
def test_retry_after_replaces_the_backoff_up_to_the_cap(retry_after: float,
                                                        slept: float) -> None:
    sleeps = Sleeps()
    Retry(sleep=sleeps, rand=lambda: 1.0).run(Flaky(error(429, retry_after)))
    assert sleeps == [slept]


def test_no_retry_waits_past_the_cycles_budget() -> None:
    """The cycle's API requests share one deadline: a wait that would reach it is not made,
    the error goes up at once (the next cycle tries again)."""
    clock, sleeps = Clock(), Sleeps()
    budget = Budget(clock=clock)
    budget.open(0.6)
    retry = Retry(sleep=sleeps, rand=lambda: 1.0, budget=budget)  # a wait of 0.5 s
    assert retry.run(Flaky(error(503))) == "ok", "0.5 s of 0.6 left: waited"
    assert sleeps == [0.5]
    clock.now += 0.2
    operation = Flaky(error(503))
    with pytest.raises(ApiError, match="HTTP 503"):
        retry.run(operation)
    assert operation.calls == 1 and sleeps == [0.5], "0.5 s of 0.4 left: not waited"
    budget.close()
    assert retry.run(Flaky(error(503))) == "ok", "no cycle: the wait is the backoff's"
