"""Files gfd reads that are not files: a FIFO, a device, binary data, under `gfd run` and the
one-shot commands.

Promises: no path can hang gfd (a FIFO with no writer blocked it forever, SIGTERM ignored,
/readyz never ready), fill its memory (/dev/zero) or crash it (a binary snapshot); each is
one line naming the path, what it is and the fix; the config file may be a link to
/dev/null (GFD's config-manager with FALLBACK_STRATEGIES=empty), an empty, valid config;
the published labels survive a config file that turns into a FIFO.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import profiles
from helpers.process import ENV_PREFIXES, Agent, free_port, http, wait_for

PROMPTLY = 20  # seconds: a hang fails the test instead of the suite

GOOD = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n"


def gfd(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    return subprocess.run([sys.executable, "-m", "gfd", *args], capture_output=True,
                          text=True, timeout=PROMPTLY, check=False, env=env)


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("gfd: error: ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


# ----------------------------------------------------------------------------- the config file


def test_a_fifo_as_config_file_is_refused_at_start_with_exit_2(fifo: Path, tmp_path: Path) -> None:
    result = gfd("run", "--simulate", "hgx-h100", "-o", str(tmp_path / "gfd"),
                 "--config-file", str(fifo))
    assert result.returncode == 2
    line = error_line(result)
    assert f"config file {fifo}: is a FIFO (named pipe), not a regular file" in line
    assert "--config-file" in line


def test_a_config_file_linked_to_dev_null_is_an_empty_valid_config(tmp_path: Path) -> None:
    """GFD's config-manager, FALLBACK_STRATEGIES=empty: the config file links to /dev/null."""
    link = tmp_path / "config.yaml"
    link.symlink_to(os.devnull)
    result = gfd("run", "--oneshot", "--simulate", "hgx-h100", "-o", "-", "--no-timestamp",
                 "--config-file", str(link))
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.count=8" in result.stdout.splitlines()


def test_dev_zero_as_config_file_is_refused_not_read(tmp_path: Path) -> None:
    result = gfd("labels", "--simulate", "hgx-h100", "--config-file", "/dev/zero")
    assert result.returncode == 2
    assert "config file /dev/zero: is a character device" in error_line(result)


def test_a_config_file_that_turns_into_a_fifo_keeps_the_labels_and_sigterm_works(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text(GOOD)
    agent = Agent(tmp_path, fake_nvml_lib, profiles.t4x4(), "--sleep-interval", "100ms",
                  "--config-file", str(cfg), "--no-timestamp")
    agents.append(agent)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "4")
    good = agent.labels()
    swap = tmp_path / "fifo"
    os.mkfifo(swap)
    swap.replace(cfg)
    wait_for(lambda: "is a FIFO (named pipe)" in agent.logs(), timeout=5)
    line = next(ln for ln in agent.logs().splitlines() if "FIFO" in ln)
    assert str(cfg) in line and "keeping the last good config" in line
    assert agent.labels() == good
    assert agent.stop() == 0, "SIGTERM is handled: nothing blocks"


# ----------------------------------------------------------------------------- the machine type


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_a_machine_type_file_that_is_a_fifo_or_dev_zero_labels_unknown_and_stays_ready(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent], kind: str) -> None:
    path = tmp_path / "dmi-fifo"
    if kind == "fifo":
        os.mkfifo(path)
    special = str(path) if kind == "fifo" else "/dev/zero"
    port = free_port()
    agent = Agent(tmp_path, fake_nvml_lib, profiles.hgx_h100(), "--sleep-interval", "100ms",
                  "--machine-type-file", special, "--metrics-port", str(port),
                  machine_type_flag=False)
    agents.append(agent)
    wait_for(lambda: http(port, "/readyz")[0] == 200)
    assert agent.labels()["nvidia.com/gpu.machine"] == "unknown"
    assert agent.labels()["nvidia.com/gpu.count"] == "8"
    what = "a FIFO (named pipe)" if kind == "fifo" else "a character device"
    warning = [ln for ln in agent.logs().splitlines() if "machine type" in ln]
    assert len(warning) == 1 and f"{special}: is {what}" in warning[0], warning
    assert "--machine-type-file" in warning[0]
    assert agent.stop() == 0


# ----------------------------------------------------------------------------- --snapshot


@pytest.mark.parametrize("kind, message", [
    ("fifo", "is a FIFO (named pipe), not a regular file (point --snapshot at a file"),
    ("dev-zero", "is a character device, not a regular file"),
    ("binary", "not UTF-8 text (byte 0), so not a snapshot"),
], ids=["fifo", "dev-zero", "binary"])
@pytest.mark.parametrize("command", ["labels", "run"])
def test_a_snapshot_that_is_a_fifo_dev_zero_or_binary_is_one_line_and_exit_2(
        tmp_path: Path, fifo: Path, kind: str, message: str, command: str) -> None:
    path = {"fifo": str(fifo), "dev-zero": "/dev/zero", "binary": str(tmp_path / "x.json")}[kind]
    (tmp_path / "x.json").write_bytes(b"\x8a\x00\xff" * 100)
    extra = ["-o", str(tmp_path / "gfd")] if command == "run" else []
    result = gfd(command, "--snapshot", path, *extra)
    assert result.returncode == 2  # usage or configuration, as a bad --config-file
    line = error_line(result)
    assert line.startswith(f"gfd: error: snapshot file {path}: ") and message in line, line
