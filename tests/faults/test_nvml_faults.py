"""NVML going wrong under a running `gfd run` (a real process over the fake libnvidia-ml.so.1).

Promises: ``gpu.unhealthy`` counts the GPUs that answered "GPU is lost", or another error for
longer than a transient one lasts (LOST_AFTER_READS reads and LOST_AFTER_SECONDS); NVML
answering TIMEOUT to a share of the calls changes no label; a failed read never removes
labels (nothing is published that cycle, the last published labels stay); NVML is
re-initialised after an error and the process does not crash-loop on a transient one;
``/healthz`` fails while the loop is wedged in a hung NVML call; GPUs whose names are empty
are still counted.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from fakes import profiles
from helpers.process import Agent, free_port, http, metric, wait_for

from gfd.readers.freshness import LOST_AFTER_SECONDS

ERROR_CYCLES = 'gfd_cycles_total{result="error"}'
UNCHANGED_CYCLES = 'gfd_cycles_total{result="unchanged"}'


def test_gpu_lost_then_unknown_mid_run_marks_unhealthy_and_removes_nothing(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    """gpu.unhealthy, and no label removed: GPU 3 answers GPU_IS_LOST, then GPUs 3 and 5 answer
    UNKNOWN. Each time the labels update (gpu.unhealthy counts them, the healthy count drops)
    and no key is removed; the process keeps running and exits 0 on SIGTERM."""
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "100ms",
                  "--no-timestamp")
    agents.append(agent)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "8")
    healthy = agent.labels()
    assert "nvidia.com/gpu.unhealthy" not in healthy

    lost = profiles.hgx_h100()
    lost.gpus[3].fault = "lost"
    agent.set_machine(lost)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.unhealthy") == "1", timeout=5)
    after_lost = agent.labels()
    assert set(healthy) <= set(after_lost), f"removed: {set(healthy) - set(after_lost)}"
    assert set(after_lost) - set(healthy) == {"nvidia.com/gpu.unhealthy"}
    assert after_lost["nvidia.com/gpu.count"] == "7"
    assert after_lost["nvidia.com/gpu.product"] == healthy["nvidia.com/gpu.product"]
    assert agent.proc.poll() is None

    unknown = profiles.hgx_h100()
    unknown.gpus[3].fault = "unknown"
    unknown.gpus[5].fault = "unknown"
    agent.set_machine(unknown)
    # GPU 5 answered before: it keeps its facts while the failure may pass, then is lost
    wait_for(lambda: "GPU 5: identity: NVML nvmlDeviceGetHandleByIndex: Unknown Error; its "
             "last value is kept" in agent.logs(), timeout=5)
    assert agent.labels() == after_lost, "no flap while GPU 5 may come back"
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.unhealthy") == "2",
             timeout=LOST_AFTER_SECONDS + 30)
    assert "GPU 5 is unhealthy: NVML nvmlDeviceGetHandleByIndex: Unknown Error (no answer in" \
        in agent.logs()
    after_unknown = agent.labels()
    assert set(after_unknown) == set(after_lost), "only values changed"
    assert after_unknown["nvidia.com/gpu.count"] == "6"
    assert agent.proc.poll() is None, "fatal per-GPU errors never stop the agent"

    agent.set_machine(profiles.hgx_h100())
    wait_for(lambda: "nvidia.com/gpu.unhealthy" not in agent.labels(), timeout=5)
    assert agent.labels() == healthy, "back to the healthy label set"
    assert agent.stop() == 0


@pytest.mark.parametrize("percent", [2.0, 10.0])
def test_nvml_timing_out_now_and_then_changes_no_label(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], percent: float) -> None:
    """NVML answers TIMEOUT to 2 % (then 10 %) of the calls, at random, for 100 cycles: a
    GPU that misses a handle or a UUID, a count, a MIG or compute mode keeps its last facts,
    so the labels never change and no cycle fails; they were never lost (issue 28's
    flapping gpu.count=4 / gpu.unhealthy=1)."""
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.dgx_a100_layout(), "--sleep-interval",
                  "100ms", "--mig-strategy", "mixed", "--metrics-port", str(port),
                  "--no-timestamp")
    agents.append(agent)
    wait_for(lambda: http(port, "/readyz")[0] == 200, timeout=30)
    before = agent.out.read_bytes()
    inode = agent.out.stat().st_ino
    changes = agent.logs().count("labels changed")
    flaky = profiles.dgx_a100_layout()
    flaky.flaky = ("TIMEOUT", percent)
    agent.set_machine(flaky)
    start = metric(http(port, "/metrics")[1], UNCHANGED_CYCLES)
    wait_for(lambda: metric(http(port, "/metrics")[1], UNCHANGED_CYCLES) >= start + 100,
             timeout=120)
    logs = agent.logs()
    assert "Timeout" in logs, "the fake did answer TIMEOUT"
    assert agent.out.read_bytes() == before and agent.out.stat().st_ino == inode
    assert logs.count("labels changed") == changes, "no label changed"
    assert "is unhealthy" not in logs
    assert metric(http(port, "/metrics")[1], ERROR_CYCLES) == 0
    assert agent.proc.poll() is None


def test_hung_nvml_call_turns_healthz_503_and_back_to_200_when_it_returns(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    """/healthz and a hung NVML call. What gfd does about one -- decided and documented here:

    gfd does NOT try to recover from a hung NVML call by itself. The call is in the driver (C):
    Python can neither interrupt nor time it out safely, and a second NVML session from
    another thread would hang the same way. Instead the loop records when each cycle starts;
    once a cycle has run longer than ``--stuck-after``, ``/healthz`` answers 503 ("cycle
    running for Ns"), so the kubelet's liveness probe restarts the container -- a fresh
    process, a fresh NVML session. Published labels are untouched meanwhile (a restart never
    deletes them). Should the call return before the kubelet acts, the cycle
    completes and /healthz is 200 again.

    Here: --stuck-after 1s and a 3 s hang in nvmlDeviceGetCount_v2; /healthz goes 503 while it
    hangs (the process stays up, the feature file is unchanged) and back to 200 after.
    """
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "100ms",
                  "--metrics-port", str(port), "--stuck-after", "1s", "--no-timestamp")
    agents.append(agent)
    wait_for(lambda: http(port, "/readyz")[0] == 200)
    assert http(port, "/healthz")[0] == 200
    before = agent.out.read_bytes()

    hung = profiles.hgx_h100()
    hung.delay = ("nvmlDeviceGetCount_v2", 3000)
    agent.set_machine(hung)
    wait_for(lambda: http(port, "/healthz")[0] == 503, timeout=5)
    status, body = http(port, "/healthz")
    assert status == 503 and "cycle running" in body, body
    # The hung call still returns after its delay; from then on calls are quick again.
    agent.set_machine(profiles.hgx_h100())
    assert http(port, "/readyz")[0] == 200, "readiness is not affected by a slow cycle"
    assert agent.proc.poll() is None
    assert agent.out.read_bytes() == before

    wait_for(lambda: http(port, "/healthz")[0] == 200)  # the hang over, live again
    assert agent.out.read_bytes() == before
    assert agent.stop() == 0


def test_nvml_non_init_error_mid_run_publishes_nothing_then_recovers(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    """A failed read publishes nothing, then recovers: nvmlDeviceGetCount starts answering
    NO_PERMISSION (an answer that does not pass) under a running agent. Cycles fail (counted
    as errors, logged once), the feature file stays byte-identical (same inode: never
    rewritten), the process keeps running; when NVML answers again the agent re-initialises
    and publishes the new state."""
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "100ms",
                  "--metrics-port", str(port), "--no-timestamp")
    agents.append(agent)
    wait_for(lambda: http(port, "/readyz")[0] == 200)
    before = agent.out.read_bytes()
    inode = agent.out.stat().st_ino

    broken = profiles.hgx_h100()
    broken.fail = {"nvmlDeviceGetCount_v2": "NO_PERMISSION"}
    agent.set_machine(broken)
    wait_for(lambda: metric(http(port, "/metrics")[1], ERROR_CYCLES) >= 4, timeout=8)
    assert agent.proc.poll() is None
    assert agent.out.read_bytes() == before
    assert agent.out.stat().st_ino == inode
    logs = agent.logs()
    assert logs.count("nvmlDeviceGetCount") == 1, "logged once, not every cycle"

    fixed = profiles.hgx_h100()
    fixed.driver = "580.159.05"  # a visible change to prove the next publish happens
    agent.set_machine(fixed)
    wait_for(lambda: agent.labels().get("nvidia.com/cuda.driver.rev") == "05", timeout=5)
    labels = agent.labels()
    assert labels["nvidia.com/gpu.count"] == "8"
    # the cycle logs "recovered" just after it publishes: wait for the line, do not race it
    wait_for(lambda: "recovered" in agent.logs(), timeout=5)
    assert agent.stop(signal.SIGTERM) == 0


def test_gpus_with_empty_names_are_still_counted_and_said_once(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    machine = profiles.t4x4()
    for gpu in machine.gpus:
        gpu.name = ""
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, machine, "--sleep-interval", "100ms",
                  "--label-set", "extended", "--metrics-port", str(port))
    agents.append(agent)
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    labels = agent.labels()
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.product"] == ""
    assert labels["nvidia.com/gpu.memory"] == "15360"
    assert labels["nvidia.com/gpu.family"] == "turing"
    assert not any(k.startswith("nvidia.com/gpu.product.") for k in labels), "no model, no key"
    assert "nvidia.com/accelerator" not in labels
    # the cycle that wrote the labels says it after its write; a few cycles more, and a line
    # per cycle would show (a fixed pause counted on cycles a loaded machine may not run)
    wait_for(lambda: metric(http(port, "/metrics")[1],
                            'gfd_cycles_total{result="unchanged"}') >= 3)
    said = [line for line in agent.logs().splitlines() if "nothing labelable" in line]
    assert len(said) == 1 and "GPU 0, 1, 2, 3" in said[0]
    assert agent.stop() == 0
