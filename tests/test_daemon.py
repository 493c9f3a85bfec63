"""The agent loop: publish-all-or-nothing, errors once per cause, backoff, reload, signals."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

import pytest
from helpers.agent_parts import make_agent

from gfd.daemon import Duty, Parts, Schedule, Signals
from gfd.errors import ConfigError, DiscoveryError, NvmlInitError
from gfd.labelers.options import LabelOptions
from gfd.readers.simulate import simulate
from gfd.sharing import SharedResource, Sharing
from gfd.sinks.featurefile import FeatureFileSink, parse
from gfd.snapshot import Snapshot

H100 = simulate("hgx-h100").snapshot
MIG = simulate("dgx-a100-mig-mixed").snapshot


class Source:
    """Returns queued snapshots or raises queued errors; the last item repeats."""

    fail_on_init_error = True

    def __init__(self, *items: Snapshot | Exception) -> None:
        self.items = list(items)
        self.reads = 0
        self.refreshes = 0
        self.closed = False

    def read(self) -> Snapshot:
        self.reads += 1
        item = self.items.pop(0) if len(self.items) > 1 else self.items[0]
        if isinstance(item, Exception):
            raise item
        return item

    def refresh(self) -> None:
        self.refreshes += 1

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
    agent = make_agent(Source(H100), sink(tmp_path), LabelOptions(), reloader=reloader)
    signals.request_reload()
    signals.stop = True  # exit after the first cycle
    assert agent.run(signals) == 0
    assert reloader.forced == [True]


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


# ----------------------------------------------------------------------------- the scheduler


def test_schedule_runs_each_duty_at_its_interval() -> None:
    calls: list[str] = []
    schedule = Schedule()
    schedule.set((Duty("resync", 10.0, lambda: calls.append("resync")),
                  Duty("host refresh", 4.0, lambda: calls.append("host"))), now=0.0)
    assert schedule.next_due() == 4.0
    assert schedule.pop_due(3.9) == []
    assert [d.name for d in schedule.pop_due(4.0)] == ["host refresh"]
    assert schedule.next_due() == 8.0
    assert [d.name for d in schedule.pop_due(10.0)] == ["host refresh", "resync"]
    assert schedule.next_due() == 14.0


def test_schedule_keeps_a_duty_due_time_across_a_reload_unless_its_interval_changed() -> None:
    schedule = Schedule()
    schedule.set((Duty("resync", 10.0, lambda: None),), now=0.0)
    schedule.set((Duty("resync", 10.0, lambda: None), Duty("host refresh", 5.0, lambda: None)),
                 now=3.0)
    assert schedule.next_due() == 8.0  # the new duty: 3 + 5; resync still due at 10
    schedule.set((Duty("resync", 2.0, lambda: None),), now=4.0)
    assert schedule.next_due() == 6.0


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
