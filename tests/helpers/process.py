"""`gfd run` as a real process over the fake NVML, and the small waits and probes its
tests share: ``Agent`` (start, relabel the machine, read labels and logs, stop), ``wait_for``,
``free_port``, ``http`` and ``metric``; ``gfd_command``, the argv and environment of any gfd
command run as a process over the fake NVML. The ``agents`` fixture (tests/conftest.py) reaps every
Agent a test starts."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from fakes.fakenvml import Machine, subprocess_env
from fakes.sysfs import gpu_tree

from gfd.sinks.featurefile import parse

ENV_PREFIXES = ("GFD_", "MIG_STRATEGY", "FAIL_ON_INIT_ERROR", "CONFIG_FILE", "NODE_NAME",
                "NAMESPACE", "KUBECONFIG", "USE_NODE_FEATURE_API")


def gfd_command(tmp: Path, lib: Path, *args: str, env: Mapping[str, str] | None = None
                ) -> tuple[list[str], dict[str, str]]:
    """``python -m gfd ARGS`` over the fake NVML in ``lib`` reading the machine written to
    ``tmp/profile.txt``, with no sysfs GPU, no nvidia-smi and no DMI file of this host: the
    argv, and this process's environment without gfd's variables plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    argv = [sys.executable, "-m", "gfd", *args, "--sysfs-root", str(gpu_tree(tmp / "sys", [])),
            "--nvidia-smi", str(tmp / "none"), "--machine-type-file", str(tmp / "dmi")]
    return argv, subprocess_env(lib, tmp / "profile.txt", base) | dict(env or {})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WAIT_AT_LEAST = 30.0
"""Seconds any ``wait_for`` allows before it gives up, whatever its ``timeout``. A wait ends
as soon as its event happens, so a passing test never waits this long; a loaded 2-core
machine (CI's, or ``tests/load.sh``) runs an agent's cycle many times slower than a quiet
one, and a tight bound there fails a test whose event was merely late."""


def wait_for(check: Callable[[], bool], timeout: float = WAIT_AT_LEAST) -> None:
    """Return once ``check()`` is true; fail after ``timeout`` seconds, never fewer than
    ``WAIT_AT_LEAST`` (a ``timeout`` says how long the event may take, not a schedule)."""
    deadline = time.monotonic() + max(timeout, WAIT_AT_LEAST)
    while True:
        if check():
            return
        if time.monotonic() >= deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def labels_in(path: Path) -> dict[str, str]:
    try:
        return parse(path.read_text())[0]
    except FileNotFoundError:
        return {}


def http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def metric(text: str, series: str) -> float:
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


class Agent:
    """A running `gfd run` process and the files around it."""

    def __init__(self, tmp: Path, lib: Path | None, machine: Machine | None, *args: str,
                 env: dict[str, str] | None = None, machine_type_flag: bool = True,
                 output_flag: bool = True) -> None:
        self.tmp = tmp
        self.profile = tmp / "profile.txt"
        self.out = tmp / "features.d" / "gfd"
        self.out.parent.mkdir(exist_ok=True)
        if machine is not None:
            self.set_machine(machine)
        base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
        self.log = (tmp / "agent.log").open("w")
        dmi = ["--machine-type-file", str(tmp / "dmi")] if machine_type_flag else []
        out = ["--output-file", str(self.out)] if output_flag else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gfd", "run", *out,
             "--sysfs-root", str(gpu_tree(tmp / "sys", [])), "--nvidia-smi",
             str(tmp / "no-nvidia-smi"), *dmi, *args],
            env=subprocess_env(lib, self.profile, base) | (env or {}),
            stdout=self.log, stderr=subprocess.STDOUT, text=True)

    def set_machine(self, machine: Machine) -> None:
        machine.write(self.profile)

    def labels(self) -> dict[str, str]:
        return labels_in(self.out)

    def logs(self) -> str:
        self.log.flush()
        return (self.tmp / "agent.log").read_text()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=15)
        self.log.close()
        return code


def config_manager_lookup(name: str) -> list[int]:
    """What GFD's config-manager does: every process whose cmdline[0] equals ``name``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except OSError:
            continue
        if argv and argv[0] == name.encode():
            found.append(int(entry.name))
    return found
