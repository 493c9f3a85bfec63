"""NVML events under `gfd run`, through the real binding and the fake libnvidia-ml.so.1:
with an hour between polls, only an event can make the labels change within seconds.

Promises: a MIG reconfiguration is labelled at once; a critical Xid or GPU-unavailable
event takes the GPU out of the resource labels and into ``gpu.unhealthy``; an application
Xid costs no cycle; GPUs without events leave the work to polling, said once; events that
are registered but never delivered leave the interval as it is: a MIG layout, a MIG mode or
a compute mode changed without an event is labelled by the next cycle that starts after it.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes import profiles
from fakes.fakenvml import EventPipe, Machine, mig
from helpers.process import Agent, free_port, http, metric, wait_for

REGISTERED = "NVML events: 8 of 8 GPUs registered"


@pytest.fixture
def pipe(tmp_path: Path) -> Iterator[EventPipe]:
    with EventPipe(tmp_path / "events") as events:
        yield events


def start(tmp_path: Path, lib: Path, agents: list[Agent], pipe: EventPipe, machine: Machine,
          *args: str) -> tuple[Agent, int]:
    port = free_port()
    agent = Agent(tmp_path, lib, machine, "--sleep-interval", "1h", "--mig-strategy", "mixed",
                  "--metrics-port", str(port), *args,
                  env={"FAKE_NVML_EVENTS": str(pipe.path)})
    agents.append(agent)
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    return agent, port


def cycles(port: int) -> float:
    text = http(port, "/metrics")[1]
    return sum(metric(text, f'gfd_cycles_total{{result="{r}"}}')
               for r in ("published", "unchanged", "error"))


def test_a_mig_reconfiguration_is_labelled_at_once(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], pipe: EventPipe) -> None:
    agent, port = start(tmp_path, fake_nvml_lib, agents, pipe, profiles.dgx_a100_layout())
    wait_for(lambda: REGISTERED in agent.logs())
    assert "nvidia.com/mig-1g.5gb.count" in agent.labels()
    assert agent.labels()["nvidia.com/mig-1g.5gb.count"] != "56"
    agent.set_machine(profiles.dgx_a100_all_1g5gb())  # the MIG manager's work ...
    for gpu in range(8):  # ... and the event NVML sends for each GPU it reconfigured
        pipe.send(gpu, "mig-config-change")
    wait_for(lambda: agent.labels().get("nvidia.com/mig-1g.5gb.count") == "56", timeout=5)
    # Each event counted once: the 8 sent, and up to 8 more that the fake library queues
    # itself, as the driver does, for each GPU whose instances changed when it next loads
    # the profile (at the cycle the first 8 start), whenever the loop has taken them.
    # (The labels can follow before the last of the 8 is taken: the first cycle reads the new
    # profile whatever woke it.)
    seen = 'gfd_events_total{kind="mig-config-change",source="nvml"}'
    handled = 'gfd_event_to_publish_seconds_count{source="nvml"}'
    wait_for(lambda: metric(http(port, "/metrics")[1], handled) >= 8)
    text = http(port, "/metrics")[1]
    assert 8 <= metric(text, seen) <= 16 and 8 <= metric(text, handled) <= 16
    assert agent.stop() == 0


@pytest.mark.parametrize(("kind", "data", "reason"), [
    ("xid", 79, "Xid 79 (GPU has fallen off the bus)"),
    ("xid", 48, "Xid 48 (double-bit ECC error)"),
    ("gpu-unavailable", 0, "GPU unavailable (NVML event)"),
])
def test_a_gpu_that_fails_leaves_the_resource_labels_at_once(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], pipe: EventPipe,
        kind: str, data: int, reason: str) -> None:
    agent, _ = start(tmp_path, fake_nvml_lib, agents, pipe, profiles.hgx_h100())
    wait_for(lambda: REGISTERED in agent.logs())
    assert agent.labels()["nvidia.com/gpu.count"] == "8"
    pipe.send(3, kind, data)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "7", timeout=5)
    assert agent.labels()["nvidia.com/gpu.unhealthy"] == "1"
    wait_for(lambda: f"{reason}: counted unhealthy until gfd restarts" in agent.logs())
    assert agent.stop() == 0


def test_an_application_xid_costs_no_cycle(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], pipe: EventPipe) -> None:
    agent, port = start(tmp_path, fake_nvml_lib, agents, pipe, profiles.hgx_h100())
    wait_for(lambda: REGISTERED in agent.logs())
    before = cycles(port)
    pipe.send(2, "xid", 13)  # a CUDA program's illegal address: the GPU is fine
    pipe.send(2, "mig-config-change")  # a marker: it is read after the Xid, and cycles
    wait_for(lambda: cycles(port) == before + 1, timeout=5)
    text = http(port, "/metrics")[1]
    assert metric(text, 'gfd_events_total{kind="mig-config-change",source="nvml"}') == 1
    assert 'gfd_events_total{kind="xid"' not in text, "read, and dropped"
    assert agent.labels()["nvidia.com/gpu.count"] == "8"
    assert agent.stop() == 0


def test_gpus_without_events_leave_changes_to_polling(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], pipe: EventPipe) -> None:
    machine = profiles.dgx_a100_layout()
    for gpu in machine.gpus:
        gpu.events = 0
    agent, _ = start(tmp_path, fake_nvml_lib, agents, pipe, machine, "--sleep-interval", "1s")
    wait_for(lambda: "no GPU offers NVML events" in agent.logs())
    new = profiles.dgx_a100_all_1g5gb()
    for gpu in new.gpus:
        gpu.events = 0
    agent.set_machine(new)
    wait_for(lambda: agent.labels().get("nvidia.com/mig-1g.5gb.count") == "56", timeout=5)
    assert agent.stop() == 0


def test_a_gpu_an_xid_made_unusable_stays_so_across_a_reload_of_its_back_end(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], pipe: EventPipe) -> None:
    """A discovery-class change builds a new Discovery (a new NVML session): the GPU stays
    counted unhealthy, as the log says, until gfd restarts."""
    (tmp_path / "dmi-a").write_text("DGX H100\n")
    (tmp_path / "dmi-b").write_text("PowerEdge XE9680\n")
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"flags: {{gfd: {{machineTypeFile: {tmp_path}/dmi-a}}}}")
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "1h",
                  "--config-file", str(cfg), "--metrics-port", str(port),
                  env={"FAKE_NVML_EVENTS": str(pipe.path)}, machine_type_flag=False)
    agents.append(agent)
    wait_for(lambda: REGISTERED in agent.logs())
    pipe.send(3, "xid", 79)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "7", timeout=5)
    new = cfg.with_name("config.yaml.new")  # swapped whole, as a ConfigMap update is
    new.write_text(f"flags: {{gfd: {{machineTypeFile: {tmp_path}/dmi-b}}}}")
    new.replace(cfg)
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.machine") == "PowerEdge-XE9680",
             timeout=5)
    # the candidate publishes before it is applied and logged: wait for the line
    wait_for(lambda: "config reloaded: flags.gfd.machineTypeFile" in agent.logs(), timeout=5)
    labels = agent.labels()
    assert (labels["nvidia.com/gpu.count"], labels["nvidia.com/gpu.unhealthy"]) == ("7", "1")
    assert agent.stop() == 0


# -- registered, never delivered: the interval still sees every change --------------------

LISTENED = f"{REGISTERED} (gpu-unavailable, mig-config-change, xid)"


def unannounced(machine: Machine) -> Machine:
    """The machine on a driver that accepts the MIG-config registration but sends no event
    when GPU or compute instances are created or destroyed (a tool whose changes the driver
    does not report, a driver whose delivery is unreliable)."""
    for gpu in machine.gpus:
        gpu.mig_events = False
    return machine


def cycles_so_far(port: int) -> float:
    """The cycles counted so far, from an answered scrape (an unanswered one is no count)."""
    scraped: list[str] = []

    def answered() -> bool:
        status, text = http(port, "/metrics")
        scraped.append(text)
        return status == 200

    wait_for(answered)
    return sum(metric(scraped[-1], f'gfd_cycles_total{{result="{r}"}}')
               for r in ("published", "unchanged", "error"))


def polled(tmp_path: Path, lib: Path, agents: list[Agent], pipe: EventPipe,
           machine: Machine) -> tuple[Agent, int]:
    """`gfd run` at a 1 s interval, every GPU registered for MIG-config events."""
    agent, port = start(tmp_path, lib, agents, pipe, unannounced(machine),
                        "--sleep-interval", "1s")
    wait_for(lambda: LISTENED in agent.logs())
    # past the reads right after the registration (gfd used to enumerate every GPU's MIG
    # devices once after it), only the cycle itself is left to see a change
    settled = cycles_so_far(port)
    wait_for(lambda: cycles(port) >= settled + 2)
    return agent, port


def labelled_by_the_next_cycle(agent: Agent, port: int, machine: Machine,
                               done: Callable[[dict[str, str]], bool]) -> None:
    """Change the machine without an event; by the end of the second cycle counted after the
    change (the one running then may have read the old machine; the next starts after it),
    the published labels show it. Waits on the cycles, not on a time."""
    agent.set_machine(unannounced(machine))
    before = cycles_so_far(port)
    wait_for(lambda: cycles(port) >= before + 2)
    assert done(agent.labels()), agent.labels()
    text = http(port, "/metrics")[1]
    assert metric(text, 'gfd_events_total{kind="mig-config-change",source="nvml"}') == 0


def test_a_mig_layout_changed_without_an_event_is_labelled_by_the_interval(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], pipe: EventPipe) -> None:
    agent, port = polled(tmp_path, fake_nvml_lib, agents, pipe, profiles.dgx_a100_layout())
    labels = agent.labels()
    assert (labels["nvidia.com/mig-1g.5gb.count"], labels["nvidia.com/mig-3g.20gb.count"]) \
        == ("8", "3")
    assert "nvidia.com/mig-4g.20gb.count" not in labels
    new = profiles.dgx_a100_layout()  # the same GPUs (the same UUIDs) ...
    new.gpus[0].mig_layout = mig("3g.20gb", "3g.20gb")  # ... 7 x 1g.5gb destroyed
    new.gpus[4].mig_layout = mig("4g.20gb")  # created where there was none
    labelled_by_the_next_cycle(agent, port, new, lambda labels: (
        labels.get("nvidia.com/mig-1g.5gb.count"), labels.get("nvidia.com/mig-3g.20gb.count"),
        labels.get("nvidia.com/mig-4g.20gb.count"), labels.get("nvidia.com/gpu.devices.mig-1g.5gb"),
        labels.get("nvidia.com/gpu.devices.mig-4g.20gb")) == ("1", "5", "1", "1", "1"))
    assert agent.stop() == 0


def test_a_mig_mode_changed_without_an_event_is_labelled_by_the_interval(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], pipe: EventPipe) -> None:
    agent, port = polled(tmp_path, fake_nvml_lib, agents, pipe, profiles.dgx_a100_layout())
    labels = agent.labels()
    assert (labels["nvidia.com/mig.enabled.count"], labels["nvidia.com/gpu.devices.full"]) \
        == ("5", "3")
    assert "nvidia.com/mig.pending" not in labels
    new = profiles.dgx_a100_layout()
    new.gpus[3].mig_layout = []  # its 7g.40gb destroyed, then MIG disabled (nvidia-smi -mig 0)
    new.gpus[3].mig_enabled = False
    new.gpus[5].mig_pending = True  # nvidia-smi -mig 1 on a GPU in use: pending until a reset
    labelled_by_the_next_cycle(agent, port, new, lambda labels: (
        labels.get("nvidia.com/mig.enabled.count"), labels.get("nvidia.com/gpu.devices.full"),
        labels.get("nvidia.com/mig-7g.40gb.count"), labels.get("nvidia.com/mig.pending"))
        == ("4", "4", None, "true"))
    assert agent.stop() == 0


def test_a_compute_mode_changed_without_an_event_is_labelled_by_the_interval(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], pipe: EventPipe) -> None:
    agent, port = polled(tmp_path, fake_nvml_lib, agents, pipe, profiles.hgx_h100())
    assert agent.labels()["nvidia.com/gpu.compute-mode"] == "default"
    new = profiles.hgx_h100()
    for gpu in new.gpus:  # nvidia-smi -c EXCLUSIVE_PROCESS
        gpu.compute_mode = "exclusive-process"
    labelled_by_the_next_cycle(agent, port, new, lambda labels:
                               labels.get("nvidia.com/gpu.compute-mode") == "exclusive-process")
    assert agent.stop() == 0
