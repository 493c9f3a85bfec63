"""The agent loop: publish-all-or-nothing, errors once per cause, backoff, reload, signals."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fakes.memory_api import MemoryApi
from helpers.agent_parts import make_agent
from helpers.timing import BusyTime, LoopTime, Sleeps
from helpers.timing import Clock as LoopClock

from gfd.budget import API_SHARE, Budget
from gfd.config import Settings
from gfd.daemon import BACKOFF_CAP, Agent
from gfd.errors import (
    ApiError,
    ApiSinkError,
    ConfigError,
    DiscoveryError,
    NvmlInitError,
    PublishError,
)
from gfd.features import node_features
from gfd.labelers.options import LabelOptions
from gfd.parts import Parts
from gfd.projection import project
from gfd.readers.simulate import simulate
from gfd.schedule import Duty
from gfd.sharing import SharedResource, Sharing
from gfd.signals import Signals
from gfd.sinks.base import PublishResult
from gfd.sinks.featurefile import FeatureFileSink, parse
from gfd.sinks.nodefeature import NodeFeatureSink, object_name
from gfd.sinks.retry import Retry
from gfd.snapshot import Snapshot
from gfd.triggers import Trigger

H100 = simulate("hgx-h100").snapshot
MIG = simulate("dgx-a100-mig-mixed").snapshot


class Source:
    """Returns queued snapshots or raises queued errors; the last item repeats."""

    fail_on_init_error = True

    def __init__(self, *items: Snapshot | Exception) -> None:
        self.items = list(items)
        self.reads = 0
        self.refreshes = 0
        self.gpu_refreshes = 0
        self.closed = False
        self.watching: Any = None

    def read(self) -> Snapshot:
        self.reads += 1
        item = self.items.pop(0) if len(self.items) > 1 else self.items[0]
        if isinstance(item, Exception):
            raise item
        return item

    def refresh(self, *, gpus: bool = False) -> None:
        self.refreshes += 1
        self.gpu_refreshes += gpus

    def watch(self, fire: Any) -> None:
        self.watching = fire

    def close(self) -> None:
        self.closed = True


class Reloader:
    def __init__(self) -> None:
        self.next: LabelOptions | ConfigError | None = None
        self.forced: list[bool] = []

    def poll(self, current: Parts, *, force: bool) -> Parts | None:
        self.forced.append(force)
        item, self.next = self.next, None
        if isinstance(item, ConfigError):
            raise item
        return None if item is None else replace(current, options=item)


class Clock:
    """The feature file's wall clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_790_000_000.0

    def __call__(self) -> float:
        return self.now


def sink(tmp_path) -> FeatureFileSink:
    return FeatureFileSink(str(tmp_path / "gfd"), expiry=3600, clock=lambda: 1_790_000_000.0)


def published(tmp_path) -> dict[str, str]:
    return parse((tmp_path / "gfd").read_text())[0]


def test_oneshot_publishes_once_and_exits_zero(tmp_path) -> None:
    source = Source(H100)
    agent = make_agent(source, sink(tmp_path), LabelOptions(), interval=10, oneshot=True)
    assert agent.run(Signals()) == 0
    assert published(tmp_path)["nvidia.com/gpu.count"] == "8"
    assert source.reads == 1 and source.closed


def test_a_failed_read_publishes_nothing_and_keeps_the_last_labels(tmp_path) -> None:
    agent = make_agent(Source(H100, DiscoveryError("NVML: Unknown Error")), sink(tmp_path),
                  LabelOptions())
    assert agent.cycle()
    before = (tmp_path / "gfd").read_text()
    assert not agent.cycle()
    assert (tmp_path / "gfd").read_text() == before


def test_an_error_is_logged_once_per_distinct_cause(tmp_path, caplog) -> None:
    error = DiscoveryError("NVML: Unknown Error")
    agent = make_agent(Source(H100, error, error, error, DiscoveryError("other"), H100),
                  sink(tmp_path), LabelOptions())
    caplog.set_level(logging.DEBUG, logger="gfd")
    results = [agent.cycle() for _ in range(6)]
    assert results == [True, False, False, False, False, True]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == ["NVML: Unknown Error", "other"]
    assert any("recovered" in r.getMessage() for r in caplog.records)


def test_nvml_missing_at_start_with_fail_on_init_error_exits_through_the_error(tmp_path) -> None:
    agent = make_agent(Source(NvmlInitError("NVML could not start: Driver Not Loaded")),
                  sink(tmp_path), LabelOptions())
    with pytest.raises(NvmlInitError):
        agent.run(Signals())
    assert not (tmp_path / "gfd").exists()


def test_nvml_lost_later_is_retried_not_fatal(tmp_path) -> None:
    agent = make_agent(Source(H100, NvmlInitError("NVML could not start: x"), H100), sink(tmp_path),
                  LabelOptions())
    assert [agent.cycle() for _ in range(3)] == [True, False, True]


def test_a_new_valid_config_is_applied_at_the_next_cycle(tmp_path) -> None:
    reloader = Reloader()
    agent = make_agent(Source(H100), sink(tmp_path), LabelOptions(), reloader=reloader)
    agent.cycle()
    shared = Sharing(strategy="time-slicing",
                     resources=(SharedResource(name="nvidia.com/gpu", replicas=2),))
    reloader.next = LabelOptions(sharing=shared)
    agent.cycle()
    assert published(tmp_path)["nvidia.com/gpu.replicas"] == "2"


def test_an_invalid_new_config_keeps_the_last_good_one(tmp_path, caplog) -> None:
    reloader = Reloader()
    agent = make_agent(Source(H100), sink(tmp_path), LabelOptions(), reloader=reloader)
    agent.cycle()
    reloader.next = ConfigError("config file f: flags.migStrategy: must be one of none")
    assert agent.cycle()
    assert published(tmp_path)["nvidia.com/gpu.replicas"] == "1"
    assert "keeping the last good config" in caplog.text


def test_mps_config_on_a_mig_node_is_refused_at_reload_and_labels_stay(tmp_path, caplog) -> None:
    reloader = Reloader()
    good = LabelOptions(mig_strategy="mixed")
    agent = make_agent(Source(MIG), sink(tmp_path), good, reloader=reloader)
    agent.cycle()
    before = (tmp_path / "gfd").read_text()
    mps = Sharing(strategy="mps", resources=(SharedResource(name="nvidia.com/gpu", replicas=2),))
    reloader.next = replace(good, sharing=mps)
    assert agent.cycle()
    assert agent.parts.options == good
    assert (tmp_path / "gfd").read_text() == before
    assert "new config refused" in caplog.text


def test_mps_config_on_a_mig_node_is_refused_at_startup(tmp_path) -> None:
    mps = Sharing(strategy="mps", resources=(SharedResource(name="nvidia.com/gpu", replicas=2),))
    agent = make_agent(Source(MIG), sink(tmp_path), LabelOptions(mig_strategy="mixed", sharing=mps))
    with pytest.raises(ConfigError, match="MPS"):
        agent.run(Signals())


def test_sighup_forces_a_config_reread(tmp_path) -> None:
    reloader = Reloader()
    signals = Signals()
    source = Source(H100)
    agent = make_agent(source, sink(tmp_path), LabelOptions(), reloader=reloader)
    signals.request_reload()
    signals.stop = True  # exit after the first cycle
    assert agent.run(signals) == 0
    assert reloader.forced == [True]
    assert source.gpu_refreshes == 1, "SIGHUP re-reads every GPU's fixed properties too"


def test_stop_signal_ends_the_loop_while_it_sleeps(tmp_path) -> None:
    signals = Signals()
    source = Source(H100)
    agent = make_agent(source, sink(tmp_path), LabelOptions(), interval=3600)
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(agent.run(signals)))
    thread.start()
    while source.reads == 0:
        signals.wake.wait(0.01)
    signals.request_stop()
    thread.join(timeout=5)
    assert codes == [0] and source.closed
    assert (tmp_path / "gfd").exists(), "labels are left in place on exit"


def test_infinite_interval_labels_once_then_waits_for_a_signal(tmp_path) -> None:
    signals = Signals()
    source = Source(H100)
    agent = make_agent(source, sink(tmp_path), LabelOptions(), interval=None)
    thread = threading.Thread(target=agent.run, args=(signals,))
    thread.start()
    while source.reads == 0:
        signals.wake.wait(0.01)
    signals.wake.wait(0.1)
    assert source.reads == 1
    signals.request_stop()
    thread.join(timeout=5)
    assert not thread.is_alive()


@pytest.mark.parametrize("interval", [0.0, 1e-9, 0.05])
def test_an_interval_under_the_minimum_is_raised_to_it_and_said_once(
        tmp_path, caplog, interval: float) -> None:
    agent = make_agent(Source(H100), sink(tmp_path), LabelOptions(), interval=interval,
                       clock=lambda: 100.0)
    with caplog.at_level(logging.WARNING, logger="gfd"):
        delays = [agent._delay_after(True, 100.0) for _ in range(3)]
    assert delays == [0.1, 0.1, 0.1]
    said = [r.getMessage() for r in caplog.records if "minimum" in r.getMessage()]
    assert len(said) == 1 and "cycles start every 100ms" in said[0]


def test_an_interval_at_the_minimum_or_above_is_kept_silently(tmp_path, caplog) -> None:
    agent = make_agent(Source(H100), sink(tmp_path), LabelOptions(), interval=0.1,
                       clock=lambda: 100.0)
    with caplog.at_level(logging.WARNING, logger="gfd"):
        assert agent._delay_after(True, 100.0) == 0.1
    assert not caplog.records


# ----------------------------------------------------------------------------- the scheduler


def test_a_due_duty_runs_a_cycle_even_with_an_infinite_interval(tmp_path) -> None:
    """The expiry refresh keeps a feature file alive while the agent is merely idle."""
    signals = Signals()
    source = Source(H100)
    refreshed: list[int] = []
    duty = Duty("expiry refresh", 0.05, lambda: refreshed.append(source.reads))
    agent = make_agent(source, sink(tmp_path), LabelOptions(), interval=None, duties=(duty,))
    thread = threading.Thread(target=agent.run, args=(signals,))
    thread.start()
    while len(refreshed) < 3:
        signals.wake.wait(0.01)
    signals.request_stop()
    thread.join(timeout=5)
    assert source.reads >= 3, "each due duty is followed by a cycle"
    assert refreshed[:2] == [1, 2]


def test_the_expiry_refresh_keeps_a_failing_agents_labels_alive(tmp_path) -> None:
    """A failed read never removes labels: the file's expiry is refreshed by its duty even
    while every read fails (only a writer gone for good lets them age out)."""
    clock = Clock()
    file_sink = FeatureFileSink(str(tmp_path / "gfd"), expiry=3600, clock=clock)
    source = Source(H100, DiscoveryError("NVML: Unknown Error"))
    signals = Signals()
    refreshes: list[float] = []

    def refresh() -> None:
        clock.now += 1800
        file_sink.refresh()
        refreshes.append(clock.now)

    agent = make_agent(source, file_sink, LabelOptions(), interval=None,
                       duties=(Duty("expiry refresh", 0.05, refresh),))
    thread = threading.Thread(target=agent.run, args=(signals,))
    thread.start()
    while len(refreshes) < 3:
        signals.wake.wait(0.01)
    signals.request_stop()
    thread.join(timeout=5)
    assert source.reads >= 3 and agent.failures >= 2, "every read after the first failed"
    labels, expires = parse((tmp_path / "gfd").read_text())
    assert labels["nvidia.com/gpu.count"] == "8"
    assert expires is not None and expires >= refreshes[2] + 3600


# ------------------------------------------------------------------------ backoff


class AlwaysFailing:
    """A sink whose every publish fails with ``error``."""

    name = "failing"

    def __init__(self, error: Exception) -> None:
        self.error = error

    def publish(self, labels: dict[str, str], **kw: Any) -> PublishResult:
        raise self.error

    def watch(self, fire: Any) -> None:
        pass

    def close(self) -> None:
        pass


def retry_waits(source: Source, sink: Any, *, interval: float | None,
                minutes: float = 60) -> list[float]:
    """The pauses the loop takes between failed cycles over ``minutes`` simulated minutes."""
    clock = LoopClock(0.0)
    signals = Signals()
    loop = LoopTime(clock, signals, until=minutes * 60)
    agent = make_agent(source, sink, LabelOptions(), interval=interval, clock=clock,
                       rand=lambda: 1.0)
    agent.run(signals)
    return [w for w in loop.waits if w is not None][:-1]


API_ERRORS = [ApiError("patch node n: cannot reach the API server: refused"),
              ApiSinkError("NodeFeature gfd/x: still conflicting after 5 attempts")]


@pytest.mark.parametrize("error", API_ERRORS, ids=["api-error", "api-sink-error"])
def test_api_failures_back_off_from_one_interval_doubling_to_the_cap(error: Exception) -> None:
    waits = retry_waits(Source(H100), AlwaysFailing(error), interval=10.0)
    assert waits[:7] == [10.0, 20.0, 40.0, 80.0, 160.0, BACKOFF_CAP, BACKOFF_CAP]
    assert set(waits[5:]) == {BACKOFF_CAP}, "it never grows past the cap"


def test_api_failures_back_off_with_jitter_between_half_and_all_of_each_step() -> None:
    clock = LoopClock(0.0)
    signals = Signals()
    loop = LoopTime(clock, signals, until=3600)
    agent = make_agent(Source(H100), AlwaysFailing(API_ERRORS[0]), LabelOptions(), interval=10.0,
                       clock=clock, rand=lambda: 0.0)
    agent.run(signals)
    assert loop.waits[:4] == [5.0, 10.0, 20.0, 40.0]


def test_an_interval_longer_than_the_cap_is_kept_between_api_retries() -> None:
    waits = retry_waits(Source(H100), AlwaysFailing(API_ERRORS[0]), interval=900.0, minutes=120)
    assert waits and set(waits) == {900.0}


def test_with_an_infinite_interval_api_retries_start_at_one_second() -> None:
    waits = retry_waits(Source(H100), AlwaysFailing(API_ERRORS[0]), interval=None)
    assert waits[:3] == [1.0, 2.0, 4.0] and max(waits) == BACKOFF_CAP


class BusyConfigTime(BusyTime):
    """Busy time whose neighbour is a watcher firing at every step (a file written beside the
    config, say)."""

    def neighbour(self, now: float) -> None:
        self.signals.fire(Trigger(source="config", kind="changed", at=now, reload_config=True))


class CountingFailing(AlwaysFailing):
    def __init__(self, error: Exception, clock: LoopClock) -> None:
        super().__init__(error)
        self.clock = clock
        self.attempts: list[float] = []

    def publish(self, labels: dict[str, str], **kw: Any) -> PublishResult:
        self.attempts.append(self.clock.now)
        return super().publish(labels)


def test_while_the_api_fails_nothing_that_wakes_the_loop_retries_before_the_backoff() -> None:
    """Regression (issue 20): each trigger started a cycle, and each cycle API requests,
    whatever the backoff said (135-179 PATCHes in 30 s with a busy file beside the config)."""
    clock = LoopClock(0.0)
    signals = Signals()
    BusyConfigTime(clock, signals, until=60.0)
    failing = CountingFailing(API_ERRORS[0], clock)
    reloader = Reloader()
    agent = make_agent(Source(H100), failing, LabelOptions(), interval=10.0, clock=clock,
                       rand=lambda: 1.0, reloader=reloader)
    agent.run(signals)
    # the documented backoff: one interval, doubling (jitter at its top here): 0, 10, 30, 70
    starts = [round(at, 1) for at in failing.attempts]
    assert len(starts) == 3 and starts[0] == 0.0, starts
    assert starts[1] - starts[0] >= 10.0 and starts[2] - starts[1] >= 20.0, starts
    assert True in reloader.forced, "the SIGHUP held meanwhile is taken at a retry"


def test_once_the_api_answers_again_triggers_start_cycles_at_once() -> None:
    clock = LoopClock(0.0)
    signals = Signals()
    BusyConfigTime(clock, signals, until=30.0)
    failing = CountingFailing(API_ERRORS[0], clock)
    recovering = Recovering(failing, after=1)
    agent = make_agent(Source(H100), recovering, LabelOptions(), interval=10.0, clock=clock,
                       rand=lambda: 1.0)
    agent.run(signals)
    assert len(failing.attempts) == 1, "one failure, then the retry 10 s later succeeds"
    assert recovering.published[0] >= 10.0
    assert len(recovering.published) > 100, "then each trigger is a cycle again"


class Recovering:
    """Fails through ``failing`` for the first ``after`` publishes, then succeeds."""

    name = "recovering"

    def __init__(self, failing: CountingFailing, after: int) -> None:
        self.failing = failing
        self.after = after
        self.published: list[float] = []

    def publish(self, labels: dict[str, str], **kw: Any) -> PublishResult:
        if len(self.failing.attempts) < self.after:
            return self.failing.publish(labels)
        self.published.append(self.failing.clock.now)
        return PublishResult(written=False)

    def watch(self, fire: Any) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("source, sink_error", [
    (Source(DiscoveryError("NVML: Unknown Error")), None),
    (Source(H100), PublishError("cannot write /etc/kubernetes/features.d/gfd: disk full")),
], ids=["discovery", "feature-file"])
def test_local_failures_are_retried_within_one_interval(source: Source,
                                                        sink_error: Exception | None,
                                                        tmp_path: Any) -> None:
    target = sink(tmp_path) if sink_error is None else AlwaysFailing(sink_error)
    waits = retry_waits(source, target, interval=10.0)
    assert waits[:4] == [1.0, 2.0, 4.0, 8.0] and max(waits) == 10.0


# ------------------------------------------------------------------------ what the loop reports


class Observer:
    """Records every call the loop makes to metrics.Metrics."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args if not kwargs else (*args, kwargs)))
        return record

    def named(self, name: str) -> list[Any]:
        return [args for called, args in self.calls if called == name]


class Health:
    def __init__(self) -> None:
        self.events: list[str] = []

    def idle_until(self, at: float) -> None:
        self.events.append("idle")

    def cycle_started(self) -> None:
        self.events.append("started")

    def cycle_finished(self) -> None:
        self.events.append("finished")

    def mark_published(self) -> None:
        self.events.append("published")


class FailingSink:
    """Publishes through ``inner`` once, then raises ``error`` (if any) on every publish."""

    def __init__(self, inner: Any, error: Exception | None) -> None:
        self.inner, self.error, self.publishes = inner, error, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def publish(self, labels: dict[str, str], **kw: Any) -> PublishResult:
        self.publishes += 1
        if self.error is not None and self.publishes > 1:
            raise self.error
        return self.inner.publish(labels)


def test_a_published_cycle_is_reported_to_the_observer_and_health(tmp_path) -> None:
    observer, health = Observer(), Health()
    times = iter([0.0, 0.25, 1.5])  # cycle start, snapshot read, cycle end
    agent = make_agent(Source(H100), sink(tmp_path), LabelOptions(), observer=observer,
                       health=health, clock=lambda: next(times), wall=lambda: 1_790_000_000.0)
    assert agent.cycle()
    assert health.events == ["started", "finished", "published"]
    assert observer.named("discovery") == [(0.25,)]
    assert observer.named("cycle") == [("published", 1.5)]
    [(count, changes)] = observer.named("published")
    assert count == len(published(tmp_path))
    assert changes == {"added": count, "changed": 0, "removed": 0, "when": 1_790_000_000.0}
    assert observer.named("gpus") == [({"NVIDIA H100 80GB HBM3": 8},)]
    assert observer.named("nvml_up") == [(True,)]
    assert observer.named("resource_manager") == [("device-plugin",)]
    assert observer.named("error") == []


def test_an_unchanged_cycle_is_reported_as_unchanged(tmp_path) -> None:
    observer = Observer()
    agent = make_agent(Source(H100), sink(tmp_path), LabelOptions(), observer=observer)
    agent.cycle()
    agent.cycle()
    assert [args[0] for args in observer.named("cycle")] == ["published", "unchanged"]


@pytest.mark.parametrize("error, kind", [
    (DiscoveryError("NVML: Unknown Error"), "discovery"),
    (NvmlInitError("NVML could not start"), "discovery"),
    (PublishError("cannot write feature file"), "publish"),
    (ConfigError("MPS with MIG"), "config"),
], ids=["discovery", "backend-init", "publish", "config"])
def test_a_failed_cycle_after_the_first_is_counted_by_kind(tmp_path, error: Exception,
                                                           kind: str) -> None:
    observer, health = Observer(), Health()
    publishing = isinstance(error, PublishError)
    failing = Source(H100) if publishing else Source(H100, error)
    target = FailingSink(sink(tmp_path), error if publishing else None)
    agent = make_agent(failing, target, LabelOptions(), observer=observer, health=health)
    assert agent.cycle()
    assert not agent.cycle()
    assert observer.named("error") == [(kind,)]
    assert observer.named("cycle")[-1][0] == "error"
    assert health.events[-2:] == ["started", "finished"], "a failed cycle is not 'published'"
    assert agent.failures == 1


def test_rejected_labels_are_counted_by_reason(tmp_path) -> None:
    observer = Observer()
    bad = replace(H100, driver_version="550.54.-15")
    agent = make_agent(Source(bad), sink(tmp_path), LabelOptions(), observer=observer)
    assert agent.cycle()
    assert observer.named("rejected") == [("invalid-value", 2)]
    assert "nvidia.com/cuda.driver.rev" not in published(tmp_path)


class RejectingSink:
    """Publishes, reporting that the target refused two keys (their old values kept)."""

    name = "node"

    def publish(self, labels: dict[str, str], **kw: Any) -> PublishResult:
        return PublishResult(written=True, rejected=("nvidia.com/a", "nvidia.com/b"))

    def close(self) -> None:
        pass


def test_labels_the_api_server_refused_are_counted_as_api_server() -> None:
    observer = Observer()
    agent = make_agent(Source(H100), RejectingSink(), LabelOptions(), observer=observer)
    assert agent.cycle()
    assert observer.named("rejected") == [("api-server", 2)]


def test_label_warnings_are_logged_once_while_they_last(tmp_path, caplog) -> None:
    mixed = simulate("mixed-a100-a10").snapshot
    agent = make_agent(Source(mixed, mixed, H100, mixed), sink(tmp_path), LabelOptions())
    for _ in range(4):
        agent.cycle()
    warned = [r for r in caplog.records if "several GPU models" in r.getMessage()]
    assert len(warned) == 2, "once, then again when it comes back"


def test_a_change_is_logged_with_its_keys(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO, logger="gfd")
    major, minor, _ = str(H100.driver_version).split(".")
    newer = replace(H100, driver_version=f"{major}.{minor}.99")
    agent = make_agent(Source(H100, newer), sink(tmp_path), LabelOptions())
    agent.cycle()
    agent.cycle()
    changes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("labels")]
    assert changes[-1] == ("labels changed: +0 ~3 -0: ~nvidia.com/cuda.driver-version.full "
                           "~nvidia.com/cuda.driver-version.revision ~nvidia.com/cuda.driver.rev")


def test_oneshot_that_fails_exits_one(tmp_path) -> None:
    agent = make_agent(Source(DiscoveryError("NVML: Unknown Error")), sink(tmp_path),
                       LabelOptions(), oneshot=True)
    assert agent.run(Signals()) == 1
    assert not (tmp_path / "gfd").exists()


# ----------------------------------------------------------------------------- reload transactions


class Closable:
    """A sink or discovery that records prune() and close()."""

    name = "old"
    fail_on_init_error = True

    def __init__(self, inner: Any = None) -> None:
        self.inner = inner
        self.closed = False
        self.pruned = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def prune(self) -> PublishResult:
        self.pruned = True
        return self.inner.prune()

    def close(self) -> None:
        self.closed = True


class Candidates:
    """A PartsSource that offers one prepared candidate."""

    def __init__(self) -> None:
        self.candidate: Any = None

    def poll(self, current: Parts, *, force: bool) -> Parts | None:
        candidate, self.candidate = self.candidate, None
        return None if candidate is None else candidate(current)


def test_a_new_sink_takes_the_labels_and_the_old_one_is_pruned_and_closed(tmp_path) -> None:
    # two directories: a sink in the old one's directory shares its lock only when the
    # factory builds it (test_app.py)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old = Closable(FeatureFileSink(str(tmp_path / "a" / "old"), expiry=0))
    new = FeatureFileSink(str(tmp_path / "b" / "new"), expiry=0)
    reloader = Candidates()
    agent = make_agent(Source(H100), old, LabelOptions(), reloader=reloader)
    agent.cycle()
    assert (tmp_path / "a" / "old").exists()
    reloader.candidate = lambda current: replace(current, sink=new, changes=("--sink: a -> b",))
    assert agent.cycle()
    assert agent.parts.sink is new
    assert old.pruned and old.closed
    assert not (tmp_path / "a" / "old").exists() and (tmp_path / "b" / "new").exists()


def test_a_candidate_whose_new_back_end_fails_is_refused_and_closed(tmp_path, caplog) -> None:
    reloader = Candidates()
    running = Source(H100)
    broken = Closable(Source(DiscoveryError("NVML: Unknown Error")))
    agent = make_agent(running, sink(tmp_path), LabelOptions(), reloader=reloader)
    agent.cycle()
    reloader.candidate = lambda current: replace(current, discovery=broken)
    assert agent.cycle(), "the running parts label this cycle"
    assert agent.parts.discovery is running and broken.closed
    assert "new config refused: its GPU back end failed" in caplog.text


def test_a_candidate_publishes_its_own_labels_and_features_in_one_write() -> None:
    # The features are part of the checked projection: a reload to another back end (here
    # a MIG node) writes that node's labels and features together, never old features
    # beside new labels.
    api = MemoryApi()
    api.add_pod("gfd", "gfd-pod", "gfd")
    nodefeature = NodeFeatureSink(api, "node-a", namespace="gfd", pod_name="gfd-pod",
                                  retry=Retry(sleep=Sleeps()))
    reloader = Candidates()
    agent = make_agent(Source(H100), nodefeature, LabelOptions(), reloader=reloader)
    assert agent.cycle()
    stored = api.nodefeature("gfd", object_name("node-a"))
    assert stored is not None and stored["spec"]["features"] == node_features(H100).to_api()
    mig_node = Source(MIG)
    reloader.candidate = lambda current: replace(current, discovery=mig_node)
    api.clear_log()
    assert agent.cycle() and agent.parts.discovery is mig_node
    assert [c.method for c in api.calls] == ["replace_nodefeature"]
    stored = api.nodefeature("gfd", object_name("node-a"))
    assert stored is not None
    assert stored["spec"]["features"] == node_features(MIG).to_api()
    assert stored["spec"]["features"]["instances"]["nvidia.mig"]["elements"]
    assert stored["spec"]["labels"] == project(MIG, LabelOptions()).labels


def test_a_features_change_is_logged_like_a_labels_change(caplog) -> None:
    api = MemoryApi()
    api.add_pod("gfd", "gfd-pod", "gfd")
    nodefeature = NodeFeatureSink(api, "node-a", namespace="gfd", pod_name="gfd-pod",
                                  retry=Retry(sleep=Sleeps()))
    upgraded = replace(H100, driver_version="550.54.16")  # a driver upgrade: one element
    agent = make_agent(Source(H100, upgraded), nodefeature, LabelOptions(timestamp=1))
    caplog.set_level(logging.INFO, logger="gfd")
    assert agent.cycle()
    first = [r.getMessage() for r in caplog.records if "features changed" in r.getMessage()]
    assert len(first) == 1 and first[0].startswith(
        f"features changed: +{len(node_features(H100).flat())} ~0 -0: +nvidia.driver.cuda ")
    caplog.clear()
    assert agent.cycle()
    logged = [r.getMessage() for r in caplog.records if "changed" in r.getMessage()]
    assert "features changed: +0 ~1 -0: ~nvidia.driver.version" in logged
    [record] = [r for r in caplog.records if r.getMessage().startswith("features changed")]
    assert record.fields == {  # --log-format json: each a field
        "target": "nodefeature", "added": [], "changed": ["nvidia.driver.version"],
        "removed": [], "counts": {"added": 0, "changed": 1, "removed": 0}}


def test_a_pending_candidate_is_closed_when_the_agent_stops(tmp_path) -> None:
    reloader = Candidates()
    new_sink = Closable(FeatureFileSink(str(tmp_path / "new"), expiry=0))
    source = Source(DiscoveryError("NVML: Unknown Error"))
    agent = make_agent(source, sink(tmp_path), LabelOptions(), reloader=reloader)
    reloader.candidate = lambda current: replace(current, sink=new_sink)
    signals = Signals()
    signals.stop = True
    agent.run(signals)  # the cycle fails with the running back end: the candidate waits
    assert new_sink.closed and source.closed


# ----------------------------------------------------------------------------- triggers


class Loop:
    """An agent running in a thread with an hour-long interval: only triggers wake it."""

    def __init__(self, tmp_path: Path, **kwargs: Any) -> None:
        self.source = Source(H100)
        self.signals = Signals()
        self.observer = Observer()
        self.agent = make_agent(self.source, sink(tmp_path), LabelOptions(), interval=3600,
                                observer=self.observer, **kwargs)
        self.thread = threading.Thread(target=self.agent.run, args=(self.signals,))
        self.thread.start()
        self.wait(lambda: self.source.reads == 1)

    def wait(self, check: Any) -> None:
        deadline = time.monotonic() + 5
        while not check():
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.005)

    def stop(self) -> None:
        self.signals.request_stop()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive()


def test_the_loop_starts_the_watchers_with_its_fire(tmp_path) -> None:
    loop = Loop(tmp_path)
    try:
        assert loop.source.watching == loop.signals.fire
    finally:
        loop.stop()


def test_a_oneshot_agent_starts_no_watcher(tmp_path) -> None:
    source = Source(H100)
    assert make_agent(source, sink(tmp_path), LabelOptions(), oneshot=True).run(Signals()) == 0
    assert source.watching is None


def test_a_burst_of_triggers_is_one_cycle_after_their_actions_ran(tmp_path) -> None:
    loop = Loop(tmp_path)
    actions: list[tuple[str, int]] = []
    try:
        for n in range(5):
            loop.signals.fire(Trigger(
                source="nvml", kind="xid", at=time.monotonic(),
                action=lambda n=n: actions.append((threading.current_thread().name, n))))
        loop.wait(lambda: loop.source.reads == 2)
        time.sleep(0.3)  # more than the window: a second cycle would have run by now
        assert loop.source.reads == 2
        assert [n for _, n in actions] == [0, 1, 2, 3, 4]
        assert {name for name, _ in actions} == {loop.thread.name}, "on the loop's thread"
        assert loop.observer.named("event") == [("nvml", "xid")] * 5
        handled = loop.observer.named("event_handled")
        assert len(handled) == 5
        assert all(args[0] == "nvml" and 0.09 < args[1] < 5 for args in handled)
        assert loop.observer.named("drift_repaired") == []
    finally:
        loop.stop()


def test_a_cycle_that_rewrote_its_target_for_a_trigger_counts_one_repair(tmp_path) -> None:
    loop = Loop(tmp_path)
    try:
        loop.source.items = [MIG]  # what the sink now writes differs from what it holds
        for _ in range(3):  # several reports of one change: one cycle, one repair
            loop.signals.fire(Trigger(source="output", kind="changed", at=time.monotonic()))
        loop.wait(lambda: len(loop.observer.named("event_handled")) == 3)
        assert loop.observer.named("drift_repaired") == [("output",)]
    finally:
        loop.stop()


def test_with_a_watched_config_only_a_config_trigger_or_sighup_reads_it(tmp_path) -> None:
    reloader = Reloader()
    loop = Loop(tmp_path, reloader=reloader, config_watched=True)
    try:
        assert reloader.forced == [], "no per-cycle check"
        loop.signals.fire(Trigger(source="nvml", kind="xid", at=time.monotonic()))
        loop.wait(lambda: loop.source.reads == 2)
        assert reloader.forced == []
        loop.signals.fire(Trigger(source="config", kind="changed", at=time.monotonic(),
                                  reload_config=True))
        loop.wait(lambda: loop.source.reads == 3)
        assert reloader.forced == [False]
        loop.signals.request_reload()
        loop.wait(lambda: loop.source.reads == 4)
        assert reloader.forced == [False, True]
    finally:
        loop.stop()


def test_an_unwatched_config_is_checked_every_cycle(tmp_path) -> None:
    reloader = Reloader()
    loop = Loop(tmp_path, reloader=reloader)
    try:
        loop.signals.fire(Trigger(source="nvml", kind="xid", at=time.monotonic()))
        loop.wait(lambda: loop.source.reads == 2)
        assert reloader.forced == [False, False]
    finally:
        loop.stop()


# ------------------------------------------------------------------ liveness and dead watchers


class _Hanging:
    """A duty action that blocks until released (a loop that stopped turning)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.entered.set()
        self.release.wait(10)


def test_liveness_fails_when_the_loop_stops_turning_outside_a_cycle(tmp_path) -> None:
    from gfd.metrics import Health

    hang = _Hanging()
    health = Health(stuck_after=0.3)
    agent = make_agent(Source(H100), sink(tmp_path), LabelOptions(), interval=3600,
                       health=health, duties=(Duty("hang", 0.05, hang),))
    signals = Signals()
    thread = threading.Thread(target=agent.run, args=(signals,))
    thread.start()
    try:
        assert hang.entered.wait(5)
        assert health.live() == (True, "ok"), "not yet past its wake-up by --stuck-after"
        deadline = time.monotonic() + 5
        while health.live()[0] and time.monotonic() < deadline:
            time.sleep(0.02)
        live, why = health.live()
        assert not live and "agent loop has not turned" in why
        hang.release.set()  # turning again: live again
        hang.entered.clear()
        assert hang.entered.wait(5) and health.live() == (True, "ok")
    finally:
        signals.request_stop()
        hang.release.set()
        thread.join(timeout=5)
    assert not thread.is_alive()


def test_a_dead_config_watcher_is_counted_and_the_file_is_polled_every_cycle_after(
        tmp_path) -> None:
    from gfd.triggers import died

    reloader = Reloader()
    loop = Loop(tmp_path, reloader=reloader, config_watched=True)
    try:
        assert reloader.forced == [], "watched: no per-cycle check"
        loop.signals.fire(died("config", RuntimeError("boom"), time.monotonic()))
        loop.wait(lambda: loop.source.reads == 2)
        assert loop.observer.named("watcher_died") == [("config",)]
        assert reloader.forced == [False], "read at once"
        loop.signals.fire(Trigger(source="nvml", kind="xid", at=time.monotonic()))
        loop.wait(lambda: loop.source.reads == 3)
        assert reloader.forced == [False, False], "and in every cycle from then on"
    finally:
        loop.stop()


# ------------------------------------------------------------------------ Events on the Node


class Recorded:
    """Records what the loop hands daemon.EventRecorder."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.closed = False

    def published(self, snapshot: Snapshot, labels: dict[str, str], change: Any) -> None:
        self.calls.append(("published", (len(snapshot.gpus), change.summary())))

    def failed(self, kind: str, message: str) -> None:
        self.calls.append(("failed", (kind, message)))

    def close(self) -> None:
        self.closed = True


def test_the_loop_hands_each_cycle_and_each_failure_to_the_event_recorder(tmp_path) -> None:
    events = Recorded()
    target = FailingSink(sink(tmp_path), PublishError("cannot write feature file"))
    agent = make_agent(Source(H100), target, LabelOptions())
    agent.parts = replace(agent.parts, events=events)
    assert agent.cycle()
    assert not agent.cycle()
    [first, second] = events.calls
    assert first[0] == "published" and first[1][0] == 8 and first[1][1].startswith("+")
    assert second == ("failed", ("publish", "cannot write feature file"))


def test_unhealthy_gpus_are_reported_to_the_observer(tmp_path) -> None:
    observer = Observer()
    lost = replace(H100, gpus=(replace(H100.gpus[0], error="GPU is lost"), *H100.gpus[1:]))
    agent = make_agent(Source(lost), sink(tmp_path), LabelOptions(), observer=observer)
    assert agent.cycle()
    assert observer.named("unhealthy") == [(1,)]


class SlowSource(Source):
    """A read that takes 10 s on ``clock`` and notes what the cycle's budget left it."""

    def __init__(self, clock: LoopClock, budget: Budget) -> None:
        super().__init__(H100)
        self.clock, self.budget = clock, budget
        self.left: list[float | None] = []

    def read(self) -> Snapshot:
        self.left.append(self.budget.left())
        self.clock.now += 10
        return super().read()


class BudgetNotingSink(FeatureFileSink):
    """The feature file sink, noting what the cycle's budget left its publish."""

    def __init__(self, tmp_path: Path, budget: Budget) -> None:
        super().__init__(str(tmp_path / "gfd"), expiry=3600, clock=lambda: 1_790_000_000.0)
        self.budget = budget
        self.left: list[float | None] = []

    def publish(self, labels: dict[str, str], **kwargs: Any) -> PublishResult:
        self.left.append(self.budget.left())
        return super().publish(labels, **kwargs)


@pytest.mark.parametrize("fails", [False, True], ids=["published", "failed"])
def test_a_cycles_api_work_shares_half_of_stuck_after_from_its_start(
        tmp_path: Path, fails: bool) -> None:
    """The budget opens at the cycle's start for API_SHARE of --stuck-after (the read's
    ResourceSlice LIST takes from it first, the publish what is left) and closes with the
    cycle, whatever its result."""
    clock = LoopClock()
    budget = Budget(clock=clock)
    source = SlowSource(clock, budget)
    if fails:
        source.items = [ApiSinkError("patch node n1: HTTP 503")]
    target = BudgetNotingSink(tmp_path, budget)
    settings = Settings(sleep_interval=10.0, stuck_after=120.0)
    agent = Agent(Parts(settings=settings, discovery=source, sink=target,
                        options=LabelOptions(), budget=budget), clock=clock)
    assert agent.cycle() is not fails
    assert source.left == [120 * API_SHARE]
    assert target.left == ([] if fails else [120 * API_SHARE - 10])
    assert budget.left() is None, "closed with the cycle"
