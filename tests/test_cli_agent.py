"""Starting the agent, as a real process over the fake NVML: under --log-format json every
line of a whole run parses, and the start-up settings, a publish's counts and a reload's
changes are JSON fields; the text start line stays short."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fakes import profiles
from helpers.process import Agent, wait_for

from gfd import __version__
from gfd.config import TABLE


def write(path: Path, text: str) -> None:
    """Replace the file's content at once (as the config-manager's symlink swap does)."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    tmp.replace(path)


def json_lines(agent: Agent) -> list[dict[str, Any]]:
    """Every line the agent logged, each parsed (a line that is not JSON fails here)."""
    return [json.loads(line) for line in (agent.tmp / "agent.log").read_text().splitlines()]


def one(lines: list[dict[str, Any]], start: str) -> dict[str, Any]:
    found = [line for line in lines if line["msg"].startswith(start)]
    assert len(found) == 1, [line["msg"] for line in lines]
    return found[0]


def test_a_whole_json_run_parses_and_carries_its_values_as_fields(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("flags: {migStrategy: none, gfd: {sleepInterval: 200ms}}")
    agent = Agent(tmp_path, fake_nvml_lib, profiles.dgx_a100_layout(), "--config-file", str(cfg),
                  "--log-format", "json")
    agents.append(agent)
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    write(cfg, "flags: {migStrategy: mixed, gfd: {sleepInterval: 200ms}}")
    wait_for(lambda: "config reloaded" in agent.logs(), timeout=10)
    assert agent.stop() == 0
    lines = json_lines(agent)
    assert {"ts", "level", "logger", "msg"} <= set(lines[0])
    start = one(lines, f"gfd {__version__} starting")
    assert set(start["settings"]) == {e.name for e in TABLE} | {"sharing"}
    assert start["settings"]["mig_strategy"] == "none"  # (the file's, at start)
    assert start["settings"]["sleep_interval"] == 0.2 and start["version"]
    first = next(line for line in lines if line["msg"].startswith("labels changed"))
    assert first["counts"]["added"] == len(first["added"]) == first["counts"]["labels"]
    assert "nvidia.com/gpu.count" in first["added"] and first["target"] == "file"
    reload = one(lines, "config reloaded")
    assert reload["changes"] == {"mig_strategy": {"from": "none", "to": "mixed"}}
    assert reload["sharing_changed"] is False
    assert lines[-1]["msg"] == "gfd stopped; published labels left in place"


def test_the_text_start_line_is_short_and_names_only_what_differs_from_the_defaults(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent = Agent(tmp_path, fake_nvml_lib, profiles.t4x4(), "--oneshot", "--mig-strategy",
                  "single")
    agents.append(agent)
    assert agent.proc.wait(timeout=60) == 0
    start = [line.replace(str(tmp_path), "T") for line in agent.logs().splitlines()
             if " starting: " in line]
    assert len(start) == 1 and len(start[0]) < 300, start
    assert "sink file; " in start[0] and "--mig-strategy=single" in start[0]
    assert "--output-file=T/features.d/gfd" in start[0]
    assert "--label-set" not in start[0] and "{" not in start[0]
