"""A node whose NVML side queries fail (nvmlDeviceGetMigMode, nvmlDeviceGetGpuFabricInfoV
answering UNKNOWN): no label is published that the hardware did not say, the labels it did
say are published unchanged, and a log line and a metric name the degraded fact
(docs/nvml-errors.md). Flapping answers cause no write."""

from __future__ import annotations

from pathlib import Path

from fakes import profiles
from fakes.fakenvml import Machine
from helpers.machines import node
from helpers.paths import DATA
from helpers.process import Agent, free_port, http, metric, wait_for

from gfd.sinks.featurefile import parse

GOLDEN = DATA / "golden" / "nvml" / "hgx_h100__none__compat.labels"
SIDE_QUERIES = ("nvmlDeviceGetMigMode", "nvmlDeviceGetGpuFabricInfoV")


def failing_side_queries() -> Machine:
    machine = profiles.hgx_h100()
    for gpu in machine.gpus:
        for call in SIDE_QUERIES:
            gpu.fail[call] = "UNKNOWN"
    return machine


def start(tmp_path: Path, lib: Path, agents: list[Agent], machine: Machine) -> tuple[Agent, int]:
    _, _, sysfs, dmi = node(tmp_path, "hgx_h100")
    port = free_port()
    agent = Agent(tmp_path, lib, machine, "--sleep-interval", "100ms", "--no-timestamp",
                  "--label-set", "compat", "--metrics-port", str(port), "--sysfs-root",
                  str(sysfs), "--machine-type-file", str(dmi), machine_type_flag=False)
    agents.append(agent)
    return agent, port


def test_side_queries_failing_from_the_start_leave_out_only_what_they_decide(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent, port = start(tmp_path, fake_nvml_lib, agents, failing_side_queries())
    wait_for(lambda: agent.labels() != {})
    # The cycle that wrote the labels logs and counts what it left out after the write: two
    # cycles more, and a line per cycle would show too.
    wait_for(lambda: metric(http(port, "/metrics")[1],
                            'gfd_cycles_total{result="unchanged"}') >= 2, timeout=60)
    said = parse(GOLDEN.read_text())[0]
    labels = agent.labels()
    assert "nvidia.com/mig.capable" not in labels, "never 'false' from a failed answer"
    # replicas is 0 for a model whose GPUs all have MIG on, else the configured count: with
    # every MIG mode unknown it cannot be told, and neither can the sharing strategy
    undecided = {"nvidia.com/mig.capable", "nvidia.com/gpu.replicas",
                 "nvidia.com/gpu.sharing-strategy"}
    assert labels == {k: v for k, v in said.items() if k not in undecided}
    assert labels["nvidia.com/gpu.count"] == "8" and "nvidia.com/gpu.unhealthy" not in labels
    warnings = [line for line in agent.logs().splitlines() if "nvmlDeviceGetMigMode" in line]
    assert len(warnings) == 1, "one line for the degraded fact, not one per GPU or cycle"
    assert "GPU 0, 1, 2, 3, 4, 5, 6, 7: mig_mode" in warnings[0]
    assert "left out" in warnings[0]
    text = http(port, "/metrics")[1]
    assert metric(text, 'gfd_degraded_facts{fact="mig_mode",state="unknown"}') == 8
    assert metric(text, 'gfd_degraded_facts{fact="fabric",state="unknown"}') == 8
    assert agent.proc.poll() is None
    assert agent.stop() == 0


def test_side_queries_failing_mid_run_keep_every_label_and_write_nothing(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent, port = start(tmp_path, fake_nvml_lib, agents, profiles.hgx_h100())
    wait_for(lambda: agent.labels() != {})
    before = agent.out.read_bytes()
    inode = agent.out.stat().st_ino
    for _ in range(3):  # the answers flap: failing, then good, then failing again
        agent.set_machine(failing_side_queries())
        wait_for(lambda: metric(http(port, "/metrics")[1],
                                'gfd_degraded_facts{fact="mig_mode",state="held"}') == 8)
        agent.set_machine(profiles.hgx_h100())
        wait_for(lambda: 'gfd_degraded_facts{fact="mig_mode"' not in http(port, "/metrics")[1])
    assert agent.out.read_bytes() == before, "the labels the hardware said stay as they were"
    assert agent.out.stat().st_ino == inode, "and the file was never rewritten"
    assert "nvidia.com/mig.capable" in parse(before.decode())[0]
    assert agent.stop() == 0
