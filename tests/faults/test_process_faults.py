"""The agent process under hostile timing and configuration.

Promises: a SIGHUP at any moment once the entry point runs is a reload, never an exit (GFD's
config-manager may send one while gfd is still importing); no setting turns the loop into a
busy loop; a hung nvidia-smi leaves no process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fakes import profiles
from fakes.fakenvml import subprocess_env
from fakes.sysfs import gpu_tree
from helpers.process import Agent, config_manager_lookup, labels_in, wait_for

from gfd.readers.smi import SmiReader

NAME = "gpu-feature-discovery"


def _catches_sighup(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (signal.SIGHUP - 1)))


def test_sighups_from_the_first_moment_gfd_runs_are_reloads(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("flags: {migStrategy: none}")
    agent = Agent(tmp_path, fake_nvml_lib, profiles.dgx_a100_layout(), "--sleep-interval",
                  "1h", "--config-file", str(cfg))
    agents.append(agent)
    # the interpreter itself starts with SIGHUP's default action; gfd's entry point takes it
    # over first thing, and from then on every SIGHUP (a burst right through start-up) counts
    wait_for(lambda: _catches_sighup(agent.proc.pid), timeout=10)
    sent = 0
    while not agent.out.exists() and agent.proc.poll() is None and sent < 2000:
        agent.proc.send_signal(signal.SIGHUP)
        sent += 1
        time.sleep(0.002)
    assert agent.proc.poll() is None, agent.logs()
    assert sent > 5, "the burst began while gfd was still starting"
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    cfg.write_text("flags: {migStrategy: mixed}")  # and a later SIGHUP still reloads
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: agent.labels().get("nvidia.com/mig.strategy") == "mixed", timeout=5)
    assert agent.stop() == 0


def test_the_config_manager_never_kills_gpu_feature_discovery_while_it_starts(
        tmp_path: Path, fake_nvml_lib: Path) -> None:
    # the config-manager finds the process by argv[0] and signals it at once: from the moment
    # the name appears (the re-exec) to the labels being written, each SIGHUP must be harmless
    profiles.dgx_a100_layout().write(tmp_path / "profile.txt")
    out = tmp_path / "features.d" / "gfd"
    out.parent.mkdir()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GFD_", "NODE_NAME"))}
    env = subprocess_env(fake_nvml_lib, tmp_path / "profile.txt", base) | {
        "GFD_SLEEP_INTERVAL": "1h", "GFD_OUTPUT_FILE": str(out)}
    log = (tmp_path / "log").open("w")
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / NAME), "-sysfs-root",
         str(gpu_tree(tmp_path / "sys", [])), "-machine-type-file", str(tmp_path / "dmi")],
        env=env, stdout=subprocess.DEVNULL, stderr=log)
    signalled = 0
    try:
        deadline = time.monotonic() + 30
        while not out.exists() and proc.poll() is None and time.monotonic() < deadline:
            for pid in config_manager_lookup(NAME):
                if pid == proc.pid:
                    os.kill(pid, signal.SIGHUP)
                    signalled += 1
            time.sleep(0.001)
        assert proc.poll() is None, (tmp_path / "log").read_text()
        assert signalled > 0, "the name appeared before the labels"
        wait_for(lambda: "nvidia.com/gpu.count" in labels_in(out))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=15)
        log.close()
    assert code == 0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_a_zero_sleep_interval_is_not_a_busy_loop(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent = Agent(tmp_path, fake_nvml_lib, profiles.t4x4(), "--sleep-interval", "0s")
    agents.append(agent)
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    wait_for(lambda: "shorter than gfd's minimum" in agent.logs())
    before, started = _cpu_seconds(agent.proc.pid), time.monotonic()
    time.sleep(2.0)
    used = (_cpu_seconds(agent.proc.pid) - before) / (time.monotonic() - started)
    assert used < 0.5, f"{used:.0%} of a core with --sleep-interval 0s"  # a busy loop: ~100%
    assert agent.logs().count("shorter than gfd's minimum") == 1
    assert agent.stop() == 0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def test_a_hung_nvidia_smi_is_killed_with_every_process_it_started(tmp_path: Path) -> None:
    # A shell script, not the Python stub: it must have started its child (which holds
    # stdout open) before the reader gives up, and a Python interpreter can take longer than
    # the timeout to start on a loaded machine; sh starts in a few milliseconds.
    stub = tmp_path / "nvidia-smi"
    children = tmp_path / "children"
    stub.write_text(f"#!/bin/sh\nsleep 3600 &\necho $! >> {children}\nwait\n")
    stub.chmod(0o755)
    reader = SmiReader(str(stub), timeout=2)
    for _ in range(3):
        assert reader.timeslices() is None
    pids = [int(line) for line in children.read_text().split()]
    try:
        assert len(pids) == 3
        wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=5)
    finally:
        for pid in filter(_alive, pids):
            os.kill(pid, signal.SIGKILL)


def test_ten_thousand_sighups_at_random_moments_keep_the_agent_cycling_and_truthful(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    """Each SIGHUP lands wherever the loop happens to be (its wait, a cycle, the clear): the
    loop keeps cycling, /healthz answers 200 throughout, and the last reload is applied."""
    import random
    import threading

    from helpers.process import free_port, http, metric

    port = free_port()
    cfg = tmp_path / "config.yaml"
    cfg.write_text("flags: {migStrategy: none}")
    agent = Agent(tmp_path, fake_nvml_lib, profiles.dgx_a100_layout(), "--sleep-interval",
                  "200ms", "--config-file", str(cfg), "--metrics-port", str(port))
    agents.append(agent)
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    probes: list[int] = []
    done = threading.Event()

    def probe() -> None:
        while not done.is_set():
            probes.append(http(port, "/healthz")[0])
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    rand = random.Random(20)
    try:
        for n in range(10_000):
            if n == 9_999:  # the last SIGHUP carries a change that must be applied
                cfg.write_text("flags: {migStrategy: mixed}")
            agent.proc.send_signal(signal.SIGHUP)
            if rand.random() < 0.1:
                time.sleep(rand.random() * 0.002)
        assert agent.proc.poll() is None, agent.logs()
        wait_for(lambda: agent.labels().get("nvidia.com/mig.strategy") == "mixed", timeout=10)
        cycles = metric(http(port, "/metrics")[1], 'gfd_cycles_total{result="unchanged"}')
        wait_for(lambda: metric(http(port, "/metrics")[1],
                                'gfd_cycles_total{result="unchanged"}') > cycles + 2, timeout=5)
    finally:
        done.set()
        prober.join()
    assert probes and set(probes) == {200}, f"/healthz answered {sorted(set(probes))}"
    assert agent.stop() == 0
