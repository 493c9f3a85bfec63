"""An invalid device-plugin config file appearing under a running `gfd run`.

Promises: config changes are picked up without a restart when the file's content changes;
an invalid one is refused, counted, and logged once per distinct error; the labels stay those
of the last good config; the message is one line naming the problem and the fix.
"""

from __future__ import annotations

from pathlib import Path

from fakes import profiles
from helpers.process import Agent, free_port, http, metric, wait_for

from gfd.configfile import ConfigSource

GOOD_4 = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n"
GOOD_2 = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n"
# Valid YAML, invalid config: a known field with a value the device plugin refuses.
BAD = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: -2}]}}\n"
KEPT = "keeping the last good config"
UNCHANGED = 'gfd_cycles_total{result="unchanged"}'
CYCLES_WHILE_BAD = 8


def _start(tmp_path: Path, lib: Path, agents: list[Agent], port: int) -> tuple[Agent, Path]:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(GOOD_4)
    agent = Agent(tmp_path, lib, profiles.t4x4(), "--sleep-interval", "100ms",
                  "--config-file", str(cfg), "--metrics-port", str(port), "--no-timestamp")
    agents.append(agent)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "4")
    return agent, cfg


def _cycles(port: int) -> float:
    return metric(http(port, "/metrics")[1], UNCHANGED)


def test_invalid_config_at_reload_keeps_the_last_good_one_then_applies_a_valid_one(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    """Reload keeps the labels: an invalid config written over a good one is refused with a
    one-line error naming the field; for many cycles the labels stay exactly those of the last
    good config and the agent keeps cycling; a valid config written next is applied."""
    port = free_port()
    agent, cfg = _start(tmp_path, fake_nvml_lib, agents, port)
    good = agent.labels()
    cfg.write_text(BAD)
    wait_for(lambda: KEPT in agent.logs(), timeout=5)
    start = _cycles(port)
    wait_for(lambda: _cycles(port) >= start + CYCLES_WHILE_BAD, timeout=10)
    assert agent.labels() == good, "the last good config keeps labelling"
    assert agent.proc.poll() is None
    line = next(ln for ln in agent.logs().splitlines() if KEPT in ln)
    assert "replicas: must be >= 2, got -2" in line and str(cfg) in line, line

    cfg.write_text(GOOD_2)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "2", timeout=5)
    wait_for(lambda: "config reloaded" in agent.logs())  # logged just after the publish
    assert agent.stop() == 0


def test_invalid_config_error_is_logged_once_not_every_cycle(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    """Errors are logged once per distinct error: while the same invalid
    config stays in place for 8+ cycles, its error appears once in the log, and no
    'recovered' line claims the problem went away."""
    port = free_port()
    agent, cfg = _start(tmp_path, fake_nvml_lib, agents, port)
    cfg.write_text(BAD)
    wait_for(lambda: KEPT in agent.logs(), timeout=5)
    start = _cycles(port)
    wait_for(lambda: _cycles(port) >= start + CYCLES_WHILE_BAD, timeout=10)
    logs = agent.logs()
    agent.stop()
    assert logs.count(KEPT) == 1, f"logged {logs.count(KEPT)} times"
    assert "recovered" not in logs


def test_a_config_rewritten_in_place_is_never_taken_empty_or_half_written(tmp_path: Path) -> None:
    """A writer that truncates the file, then writes it (as `cat > file` or an editor does):
    gfd may look between the two steps. It waits until two reads agree."""
    path = tmp_path / "config.yaml"
    good = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n"
    path.write_text("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}")
    steps = iter(["", good[:30], good])  # what the file holds after each pause

    def writer_moves_on(seconds: float) -> None:
        path.write_text(next(steps, good))

    source = ConfigSource(str(path), sleep=writer_moves_on)
    source.poll()
    path.write_text("")  # the truncation, seen by the next poll
    config = source.poll()
    assert config is not None
    assert config.sharing.replicas("nvidia.com/gpu") == 4, "neither the empty nor the half file"
