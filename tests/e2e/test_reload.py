"""A changed config file reaches every setting it names, or is refused with one line.

`gfd run` over the fake NVML, the config file rewritten while it runs, one test per class
of setting in the settings table (labels, discovery, sink, schedule, restart). What
`app.Factory.rebuild` builds anew for each class is tested in process in tests/test_app.py.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from fakes import profiles
from fakes.fakenvml import Machine
from helpers.process import Agent, free_port, http, metric, wait_for

from gfd.sinks.featurefile import parse


def write(path: Path, text: str) -> None:
    """Replace the file's content at once (as the config-manager's symlink swap does)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.replace(path)


def start(tmp_path: Path, lib: Path, agents: list[Agent], machine: Machine, config: str,
          *args: str, **kwargs: Any) -> tuple[Agent, Path]:
    """``gfd run --config-file tmp_path/config.yaml`` (holding ``config``) on ``machine``,
    with ``args`` and ``Agent``'s keywords: the agent and its config file."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(config)
    agent = Agent(tmp_path, lib, machine, "--config-file", str(cfg), *args, **kwargs)
    agents.append(agent)
    return agent, cfg


# ----------------------------------------------------------------------------- processes


def test_labels_class_mig_strategy_applies_at_the_next_cycle(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent, cfg = start(tmp_path, fake_nvml_lib, agents, profiles.dgx_a100_layout(),
                       "flags: {migStrategy: none, gfd: {sleepInterval: 200ms}}")
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    assert "nvidia.com/mig.strategy" not in agent.labels()
    write(cfg, "flags: {migStrategy: mixed, gfd: {sleepInterval: 200ms}}")
    wait_for(lambda: agent.labels().get("nvidia.com/mig.strategy") == "mixed", timeout=5)
    assert "nvidia.com/mig-1g.5gb.count" in agent.labels()
    wait_for(lambda: "config reloaded: flags.migStrategy: none -> mixed" in agent.logs())
    assert agent.stop() == 0


def test_labels_class_sharing_section_applies_at_the_next_cycle(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent, cfg = start(tmp_path, fake_nvml_lib, agents, profiles.t4x4(),
                       "flags: {gfd: {sleepInterval: 200ms}}")
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "1")
    write(cfg, "flags: {gfd: {sleepInterval: 200ms}}\n"
               "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}")
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "4", timeout=5)
    assert agent.labels()["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert agent.stop() == 0


def test_discovery_class_machine_type_file_applies_at_the_next_cycle(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    (tmp_path / "dmi-a").write_text("DGX A100\n")
    (tmp_path / "dmi-b").write_text("PowerEdge XE9680\n")
    agent, cfg = start(
        tmp_path, fake_nvml_lib, agents, profiles.hgx_h100(),
        f"flags: {{gfd: {{sleepInterval: 200ms, machineTypeFile: {tmp_path}/dmi-a}}}}",
        machine_type_flag=False)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.machine") == "DGX-A100")
    write(cfg, f"flags: {{gfd: {{sleepInterval: 200ms, machineTypeFile: {tmp_path}/dmi-b}}}}")
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.machine") == "PowerEdge-XE9680",
             timeout=5)
    assert agent.stop() == 0


def test_schedule_class_sleep_interval_applies_at_once(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent, cfg = start(tmp_path, fake_nvml_lib, agents, profiles.hgx_h100(),
                       "flags: {gfd: {sleepInterval: 1h}}")
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "8")
    write(cfg, "flags: {gfd: {sleepInterval: 200ms}}")
    agent.proc.send_signal(signal.SIGHUP)  # with a 1 h interval, no cycle would notice soon
    wait_for(lambda: "flags.gfd.sleepInterval: 1h -> 200ms" in agent.logs(), timeout=5)
    agent.set_machine(profiles.one_gpu_lost())  # now seen within one 200 ms cycle
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "7", timeout=3)
    assert agent.stop() == 0


def test_sink_class_output_file_moves_the_labels(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    first, second = tmp_path / "features.d" / "gfd", tmp_path / "features.d" / "gfd-moved"
    agent, cfg = start(tmp_path, fake_nvml_lib, agents, profiles.hgx_h100(),
                       f"flags: {{gfd: {{sleepInterval: 200ms, outputFile: {first}}}}}",
                       output_flag=False)
    wait_for(lambda: first.exists())
    labels = parse(first.read_text())[0]
    write(cfg, f"flags: {{gfd: {{sleepInterval: 200ms, outputFile: {second}}}}}")
    wait_for(lambda: second.exists() and not first.exists(), timeout=5)
    assert parse(second.read_text())[0] == labels
    wait_for(lambda: "labels moved from file to file" in agent.logs())  # logged just after
    assert agent.stop() == 0


def test_restart_class_oneshot_is_refused_and_the_old_config_kept(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent, cfg = start(tmp_path, fake_nvml_lib, agents, profiles.dgx_a100_layout(),
                       "flags: {migStrategy: none, gfd: {sleepInterval: 200ms}}")
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    write(cfg, "flags: {migStrategy: mixed, gfd: {sleepInterval: 200ms, oneshot: true}}")
    wait_for(lambda: "keeping the last good config" in agent.logs(), timeout=5)
    refusals = [line for line in agent.logs().splitlines() if "cannot change" in line]
    assert len(refusals) == 1 and "flags.gfd.oneshot" in refusals[0]
    assert "restart gfd to apply it" in refusals[0]
    assert "nvidia.com/mig.strategy" not in agent.labels(), "nothing of the refused file applied"
    assert agent.proc.poll() is None
    assert "config reloaded" not in agent.logs()
    assert agent.stop() == 0


def test_a_change_overridden_by_a_flag_is_not_reported_as_reloaded(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent, cfg = start(tmp_path, fake_nvml_lib, agents, profiles.dgx_a100_layout(),
                       "flags: {migStrategy: none}", "--mig-strategy", "none",
                       "--sleep-interval", "200ms")
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    write(cfg, "flags: {migStrategy: mixed}")
    wait_for(lambda: "no setting changed" in agent.logs(), timeout=5)
    assert "config reloaded" not in agent.logs()
    assert "nvidia.com/mig.strategy" not in agent.labels()
    assert agent.stop() == 0


def test_a_config_change_is_seen_at_once_without_a_cycle_or_a_signal(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    # an hour between cycles: only the watch on the file's directory can notice the change
    port = free_port()
    agent, cfg = start(tmp_path, fake_nvml_lib, agents, profiles.dgx_a100_layout(),
                       "flags: {migStrategy: none, gfd: {sleepInterval: 1h}}",
                       "--metrics-port", str(port))
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    write(cfg, "flags: {migStrategy: mixed, gfd: {sleepInterval: 1h}}")
    # "at once": long before the hour; the bound is generous for a loaded machine
    wait_for(lambda: agent.labels().get("nvidia.com/mig.strategy") == "mixed", timeout=60)
    # the latency is observed after the cycle that wrote the labels returns: wait for it
    wait_for(lambda: metric(http(port, "/metrics")[1],
                            'gfd_event_to_publish_seconds_count{source="config"}') >= 1)
    text = http(port, "/metrics")[1]
    assert metric(text, 'gfd_events_total{kind="changed",source="config"}') >= 1
    assert metric(text, "gfd_stuck_after_seconds") == 120.0  # a reload keeps the limit
    assert agent.stop() == 0
