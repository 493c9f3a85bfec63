"""An invalid device-plugin config file appearing under a running `gfd run`.

Promises: config changes are picked up without a restart when the file's content changes;
an invalid one is refused, counted, and logged once per distinct error; the labels stay those
of the last good config; the message is one line naming the problem and the fix.
"""

from __future__ import annotations

import time
from pathlib import Path

from fakes import profiles
from fakes.apiserver import FakeApiServer
from helpers.process import Agent, free_port, http, metric, wait_for

GOOD_4 = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n"
GOOD_2 = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n"
# Valid YAML, invalid config: a known field with a value the device plugin refuses.
BAD = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: -2}]}}\n"
KEPT = "keeping the last good config"
UNCHANGED = 'gfd_cycles_total{result="unchanged"}'
CYCLES_WHILE_BAD = 8
NODE = "gpu-node-1"


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


TS = ("version: v1\nflags: {{gfd: {{sleepInterval: 100ms}}}}\nsharing:\n  timeSlicing:\n"
      "    resources:\n    - name: nvidia.com/gpu\n      replicas: {}\n")
REPLICAS = "nvidia.com/gpu.replicas"


def slow_rewrite(path: Path, text: str) -> None:
    """``slow-cmd > config.yaml``: the file truncated, left empty a while, then written in
    pieces with pauses -- each state in between a valid config without sharing."""
    with path.open("w") as handle:
        time.sleep(0.06)
        for start in range(0, len(text), len(text) // 3 + 1):
            handle.write(text[start:start + len(text) // 3 + 1])
            handle.flush()
            time.sleep(0.02)


def _start_on_node(tmp_path: Path, lib: Path, agents: list[Agent], server: FakeApiServer,
                   cfg: Path) -> Agent:
    """``gfd run --sink node`` on the T4 machine with config file ``cfg`` (4 replicas),
    once the Node shows them."""
    agent = Agent(tmp_path, lib, profiles.t4x4(), "--sink", "node",
                  "--config-file", str(cfg), "--no-timestamp", output_flag=False,
                  env={"NODE_NAME": NODE,
                       "KUBECONFIG": str(server.write_kubeconfig(tmp_path / "kubeconfig"))})
    agents.append(agent)
    wait_for(lambda: server.labels(NODE).get(REPLICAS) == "4")
    return agent


def applied_labels(server: FakeApiServer) -> list[dict[str, str]]:
    """The labels of every PATCH the API server answered 200, in order."""
    return [(r.json() or {}).get("metadata", {}).get("labels", {})
            for r in server.requests if r.method == "PATCH" and r.status == 200]


def test_a_hundred_in_place_rewrites_never_publish_a_config_the_writer_had_not_finished(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    """Regression (issue 20): gfd took the truncated, empty file for a valid empty config
    after two equal reads 50 ms apart, and published ``gpu.replicas=1`` (and the product
    without -SHARED) for as long as the writer took. Every label write gfd sends to the API
    server is in its request log: none may lack the 4 replicas the file says."""
    with FakeApiServer() as server:
        server.add_node(NODE, labels={"team": "ml"})
        cfg = tmp_path / "config.yaml"
        cfg.write_text(TS.format(4))
        agent = _start_on_node(tmp_path, fake_nvml_lib, agents, server, cfg)
        for _ in range(100):
            slow_rewrite(cfg, TS.format(4))
        slow_rewrite(cfg, TS.format(8))  # a real change is still taken, once settled
        # The server logs a request once it has answered it, just after the Node changed:
        # wait for the log to hold the write of 8, not only for the Node to show it.
        wait_for(lambda: [labels.get(REPLICAS) for labels in applied_labels(server)][-1:]
                 == ["8"], timeout=10)
        applied = applied_labels(server)
        wait_for(lambda: "config reloaded" in agent.logs())  # may be logged after the write
        logs = agent.logs()
        assert agent.stop() == 0
    assert [labels.get(REPLICAS) for labels in applied] == ["4", "8"], logs[-2000:]
    assert logs.count("config reloaded") == 1 and KEPT not in logs




def test_a_busy_log_beside_the_config_during_an_api_outage_costs_only_the_backoffs_requests(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    """Regression (issue 20): with gfd's log beside its config, every line woke a cycle and
    each cycle skipped the API backoff (135-179 PATCHes in 30 s). In 8 s of outage with a
    1 s interval the backoff allows cycles at about 0, 1, 3 and 7 s: two PATCHes each."""
    with FakeApiServer() as server:
        server.add_node(NODE, labels={"team": "ml"})
        cfg = tmp_path / "config" / "config.yaml"
        cfg.parent.mkdir()
        cfg.write_text(TS.format(4).replace("100ms", "1s"))
        agent = _start_on_node(tmp_path, fake_nvml_lib, agents, server, cfg)
        server.set_down(True)
        server.clear_log()
        agent.set_machine(profiles.one_gpu_lost())  # a change to publish: every cycle tries
        busy = cfg.parent / "gfd.log"
        end = time.monotonic() + 8
        with busy.open("a") as log_file:
            while time.monotonic() < end:
                log_file.write("a line of gfd's log\n")
                log_file.flush()
                time.sleep(0.01)
        patches = [r for r in server.requests if r.method == "PATCH"]
        server.set_down(False)
        assert agent.stop() == 0
    assert 2 <= len(patches) <= 10, len(patches)
