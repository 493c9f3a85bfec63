"""`gfd run` as a real process: the loop over the fake NVML, late NVML, a GPU lost mid-run,
config reload, signals, and the metrics/probe endpoints."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

from fakes import profiles
from fakes.fakenvml import subprocess_env
from helpers.process import Agent, free_port, http, metric, wait_for

from gfd.sinks.featurefile import parse


def test_oneshot_to_stdout_on_a_simulated_machine() -> None:
    result = subprocess.run([sys.executable, "-m", "gfd", "run", "--oneshot", "--output-file", "-",
                             "--simulate", "hgx-h100", "--no-timestamp"],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3" in result.stdout.splitlines()


def test_nvml_absent_at_start_fails_fast_by_default(tmp_path: Path, fake_nvml_lib: Path,
                                                    agents: list[Agent]) -> None:
    agent = Agent(tmp_path, fake_nvml_lib, profiles.driver_not_loaded(), "--sleep-interval",
                  "100ms")
    agents.append(agent)
    assert agent.proc.wait(timeout=15) == 1
    assert "NVML could not start" in agent.logs()
    assert not agent.out.exists()


def test_late_nvml_is_picked_up_without_a_restart(tmp_path: Path, fake_nvml_lib: Path,
                                                  agents: list[Agent]) -> None:
    agent = Agent(tmp_path, fake_nvml_lib, profiles.driver_not_loaded(),
                  "--fail-on-init-error=false", "--sleep-interval", "200ms")
    agents.append(agent)
    wait_for(lambda: "nvidia.com/vgpu.present" in agent.labels())
    assert "nvidia.com/gpu.count" not in agent.labels()
    assert "nvidia.com/gfd.timestamp" in agent.labels()
    agent.set_machine(profiles.hgx_h100())
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "8", timeout=5)
    assert agent.stop() == 0
    assert agent.labels()["nvidia.com/gpu.count"] == "8", "labels stay after exit"


def test_a_gpu_lost_mid_run_updates_count_and_unhealthy(tmp_path: Path, fake_nvml_lib: Path,
                                                        agents: list[Agent]) -> None:
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "200ms")
    agents.append(agent)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "8")
    agent.set_machine(profiles.one_gpu_lost())
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.unhealthy") == "1", timeout=5)
    assert agent.labels()["nvidia.com/gpu.count"] == "7"
    assert agent.stop() == 0


def test_config_change_is_applied_and_a_bad_one_is_refused(tmp_path: Path, fake_nvml_lib: Path,
                                                           agents: list[Agent]) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}")
    agent = Agent(tmp_path, fake_nvml_lib, profiles.t4x4(), "--sleep-interval", "200ms",
                  "--config-file", str(cfg))
    agents.append(agent)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "4")
    cfg.write_text("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}")
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "2", timeout=5)
    cfg.write_text("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}")
    wait_for(lambda: "keeping the last good config" in agent.logs(), timeout=5)
    assert agent.labels()["nvidia.com/gpu.replicas"] == "2"
    assert agent.proc.poll() is None, "a bad config never stops the agent"
    assert agent.stop() == 0


def test_sighup_rereads_the_config(tmp_path: Path, fake_nvml_lib: Path,
                                   agents: list[Agent]) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("flags: {migStrategy: none}")
    agent = Agent(tmp_path, fake_nvml_lib, profiles.dgx_a100_layout(), "--sleep-interval",
                  "infinite", "--config-file", str(cfg))
    agents.append(agent)
    wait_for(lambda: "nvidia.com/gpu.count" in agent.labels())
    cfg.write_text("flags: {migStrategy: mixed}")
    agent.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: agent.labels().get("nvidia.com/mig.strategy") == "mixed", timeout=5)
    assert agent.stop(signal.SIGINT) == 0


def test_probes_and_metrics(tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "200ms",
                  "--metrics-port", str(port))
    agents.append(agent)
    wait_for(lambda: http(port, "/readyz")[0] == 200)
    assert http(port, "/healthz")[0] == 200
    status, text = http(port, "/metrics")
    assert status == 200
    for series in ("gfd_cycles_total{result=\"published\"} 1.0", "gfd_labels_published",
                   "gfd_label_changes_total{kind=\"added\"}",
                   "gfd_gpus{model=\"NVIDIA H100 80GB HBM3\"} 8.0", "gfd_nvml_up 1.0",
                   "gfd_build_info"):
        assert series in text, series
    wait_for(lambda: metric(http(port, "/metrics")[1], 'gfd_cycles_total{result="unchanged"}') > 0)
    assert agent.stop() == 0


def test_healthz_fails_when_a_cycle_hangs(tmp_path: Path, fake_nvml_lib: Path,
                                          agents: list[Agent]) -> None:
    port = free_port()
    machine = profiles.hgx_h100()
    agent = Agent(tmp_path, fake_nvml_lib, machine, "--sleep-interval", "100ms",
                  "--metrics-port", str(port), "--stuck-after", "1s")
    agents.append(agent)
    wait_for(lambda: http(port, "/readyz")[0] == 200)
    machine.delay = ("nvmlDeviceGetCount_v2", 4000)
    agent.set_machine(machine)
    wait_for(lambda: http(port, "/healthz")[0] == 503, timeout=8)
    assert "cycle running" in http(port, "/healthz")[1]
    text = http(port, "/metrics")[1]  # what GfdAgentStuck compares, past the same limit
    assert metric(text, "gfd_stuck_after_seconds") == 1.0
    assert metric(text, "gfd_cycle_running_seconds") > 1.0
    agent.stop(signal.SIGKILL)


def test_a_busy_metrics_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "gfd", "run", "--simulate", "hgx-h100", "--output-file",
             str(tmp_path / "gfd"), "--metrics-port", str(port)],
            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("gfd: error")]
    assert errors == [f"gfd: error: --metrics-port {port}: cannot listen on 0.0.0.0:{port}: "
                      "Address already in use (another process may hold the port: choose a free "
                      "one, or 0 to serve no metrics)"]
    assert "Traceback" not in result.stderr


def test_oneshot_writes_a_file_without_an_expiry_that_could_lapse(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    result = subprocess.run([sys.executable, "-m", "gfd", "run", "--oneshot", "--output-file",
                             str(out), "--simulate", "hgx-h100"],
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    labels, expires = parse(out.read_text())
    assert expires is None and "+expiry-time" not in out.read_text()
    assert labels["nvidia.com/gpu.count"] == "8"


def test_prune_removes_gfds_one_shot_file_and_refuses_a_file_gfd_did_not_write(
        tmp_path: Path) -> None:
    """A one-shot file carries gfd's mark: prune removes it. A file at the path that gfd
    did not write (no mark, not GFD's ``gfd`` file of labels) is left as it is, exit 1."""
    def gfd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gfd", *args, "--simulate", "hgx-h100"],
                              capture_output=True, text=True, timeout=30, check=False)

    other = tmp_path / "other"
    other.write_text("foo=bar\n")
    refused = gfd("prune", "-o", str(other))
    assert refused.returncode == 1 and refused.stdout == "", refused.stderr
    assert refused.stderr.splitlines()[-1].startswith(
        f"gfd: error: feature file {other} left in place: it does not carry gfd's mark")
    assert other.read_text() == "foo=bar\n"
    mine = tmp_path / "labels"
    assert gfd("run", "--oneshot", "-o", str(mine)).returncode == 0
    pruned = gfd("prune", "-o", str(mine))
    assert pruned.returncode == 0, pruned.stderr
    assert "- nvidia.com/gpu.count" in pruned.stdout.splitlines() and not mine.exists()
    assert pruned.stderr.splitlines()[-1] == (
        f"pruned {len(pruned.stdout.splitlines())} labels at feature file {mine}")
    again = gfd("prune", "-o", str(mine))
    assert again.returncode == 0 and again.stderr.splitlines()[-1] == (
        f"nothing to prune at feature file {mine}")


def test_an_idle_agent_keeps_refreshing_the_expiry(tmp_path: Path, agents: list[Agent]) -> None:
    """--sleep-interval infinite labels once, then only the expiry refresh (every expiry / 2)
    rewrites the file, so labels never lapse while the agent is merely idle."""
    agent = Agent(tmp_path, None, None, "--simulate", "hgx-h100", "--sleep-interval",
                  "infinite", "--expiry", "4s")
    agents.append(agent)
    wait_for(lambda: agent.out.exists())
    first = parse(agent.out.read_text())[1]
    assert first is not None
    wait_for(lambda: (parse(agent.out.read_text())[1] or 0) > first, timeout=6)
    assert agent.stop() == 0


def test_a_feature_file_removed_or_edited_by_someone_else_is_rewritten_at_once(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "1h",
                  "--metrics-port", str(port))
    agents.append(agent)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "8")
    good = agent.labels()
    agent.out.unlink()
    wait_for(lambda: agent.labels() == good, timeout=5)
    agent.out.write_text("nvidia.com/gpu.count=99\n")
    wait_for(lambda: agent.labels() == good, timeout=5)
    wait_for(lambda: metric(http(port, "/metrics")[1],
                            'gfd_drift_repairs_total{target="output"}') == 2)
    assert agent.stop() == 0


def test_the_metrics_address_setting_binds_only_that_address(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "200ms",
                  "--metrics-port", str(port), env={"GFD_METRICS_ADDRESS": "127.0.0.1"})
    agents.append(agent)
    wait_for(lambda: http(port, "/readyz")[0] == 200)
    assert f"serving /metrics /healthz /readyz on 127.0.0.1:{port}" in agent.logs()
    assert agent.stop() == 0


def test_a_metrics_address_that_is_not_an_ip_address_is_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gfd", "run", "--simulate", "hgx-h100", "--output-file", "-",
         "--metrics-port", "9999", "--metrics-address", "localhost"],
        capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert "must be an IP address such as 0.0.0.0, :: or 127.0.0.1, got 'localhost'" in (
        result.stderr)
    assert "Traceback" not in result.stderr


def test_after_gpu_feature_discovery_oneshot_features_d_holds_only_the_feature_file(
        tmp_path: Path, fake_nvml_lib: Path) -> None:
    features_d = tmp_path / "features.d"
    features_d.mkdir()
    profile = profiles.t4x4().write(tmp_path / "profile.txt")
    binary = Path(sys.executable).parent / "gpu-feature-discovery"
    result = subprocess.run(
        [str(binary), "-oneshot", "-output-file", str(features_d / "gfd"),
         "--sysfs-root", str(tmp_path), "--nvidia-smi=/nonexistent"],
        env=subprocess_env(fake_nvml_lib, profile), capture_output=True, text=True, timeout=30,
        check=False)
    assert result.returncode == 0, result.stderr
    assert [p.name for p in features_d.iterdir()] == ["gfd"], "no lock file, no temporary"
    assert parse((features_d / "gfd").read_text())[0]["nvidia.com/gpu.count"] == "4"


def test_after_a_daemons_sigterm_features_d_holds_only_the_feature_file(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent = Agent(tmp_path, fake_nvml_lib, profiles.t4x4(), "--sleep-interval", "100ms")
    agents.append(agent)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "4")
    assert [p.name for p in agent.out.parent.iterdir()] == ["gfd"], "none while it runs"
    assert agent.stop(signal.SIGTERM) == 0
    assert [p.name for p in agent.out.parent.iterdir()] == ["gfd"]
    assert agent.labels()["nvidia.com/gpu.count"] == "4", "the labels stay"


def test_auto_follows_the_dra_plugin_registering_and_leaving_while_running(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    registry = tmp_path / "plugins_registry"
    registry.mkdir()
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "200ms",
                  "--plugins-registry", str(registry), "--metrics-port", str(port))
    agents.append(agent)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "1")
    assert "nvidia.com/gpu.present" not in agent.labels()
    dra = 'gfd_resource_manager{manager="dra"}'
    assert metric(http(port, "/metrics")[1], dra) == 0.0
    sock = registry / "gpu.nvidia.com-reg.sock"
    os.mknod(sock, stat.S_IFSOCK | 0o600)  # the DRA kubelet plugin registers
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.present") == "true", timeout=5)
    labels = agent.labels()
    assert "nvidia.com/gpu.replicas" not in labels and "nvidia.com/mig.strategy" not in labels
    assert labels["nvidia.com/gpu.count"] == "8"
    assert metric(http(port, "/metrics")[1], dra) == 1.0
    sock.unlink()  # and goes away: the device plugin's labels come back
    wait_for(lambda: "nvidia.com/gpu.present" not in agent.labels(), timeout=5)
    assert agent.labels()["nvidia.com/gpu.replicas"] == "1"
    logs = agent.logs()
    assert agent.stop() == 0
    assert logs.count("resource manager changed from device-plugin to dra") == 1
    assert logs.count("resource manager changed from dra to device-plugin") == 1


def test_the_plugin_registering_is_published_at_once_not_at_the_next_cycle(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    """The plugin registry is watched: with a 10-minute interval the switch still takes a
    moment, through a registry trigger."""
    registry = tmp_path / "plugins_registry"
    registry.mkdir()
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "10m",
                  "--plugins-registry", str(registry), "--metrics-port", str(port))
    agents.append(agent)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "1")
    os.mknod(registry / "gpu.nvidia.com-reg.sock", stat.S_IFSOCK | 0o600)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.present") == "true", timeout=5)
    text = http(port, "/metrics")[1]
    assert metric(text, 'gfd_events_total{kind="registration",source="registry"}') >= 1
    assert metric(text, 'gfd_resource_manager{manager="dra"}') == 1.0
    assert agent.stop() == 0
