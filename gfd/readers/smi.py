"""nvidia-smi: the compute timeslice policy, the one thing NVML's public API does not give.

This is the only module in gfd that starts a process. It always passes an argument
list (never a shell) and a timeout; an absent, unsupported, failing or hung nvidia-smi
means "unknown" (None), never an error, and each cause is logged once per reader. nvidia-smi
runs in a session of its own, so a hung one is killed with every process it started.

``nvidia-smi compute-policy --list`` prints a table::

    +-------------------------------------+
    | GPU compute policies:               |
    | GPU   Name                 Value    |
    |=====================================|
    | 0     Timeslice            Default  |
    +-------------------------------------+

and on GPUs without compute policies (GeForce) ``Failed to get compute policies for
GPU 0 : Not Supported``.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess

from gfd.logs import Once

log = logging.getLogger(__name__)

TIMESLICE_VALUES = ("default", "short", "medium", "long")
ARGS = ("compute-policy", "--list")
_KILL_WAIT = 1.0
"""Seconds to wait for a killed nvidia-smi to go away (one stuck in the driver may not)."""

_BOX = "|│┃"
_ROW = re.compile(r"^\s*([0-9]{1,6})\s+timeslice\s+([a-z]+)\s*$", re.IGNORECASE)
_NOT_SUPPORTED = re.compile(r"not\s+supported", re.IGNORECASE)


def parse_timeslices(output: str) -> dict[int, str]:
    """GPU index -> timeslice policy (lowercase) from ``compute-policy --list`` output.

    Tolerant of box characters and column padding; rows of other policies, headers,
    error lines and unknown values are skipped.
    """
    result: dict[int, str] = {}
    for line in output.splitlines():
        match = _ROW.match(line.strip().strip(_BOX))
        if match is None:
            continue
        value = match.group(2).lower()
        if value in TIMESLICE_VALUES:
            result.setdefault(int(match.group(1)), value)
    return result


class SmiReader:
    """Runs ``nvidia-smi compute-policy --list`` and parses the timeslice policies."""

    def __init__(self, executable: str, *, timeout: float = 5.0) -> None:
        self.executable = executable
        self.timeout = timeout
        self._reported = Once(log)

    def _once(self, cause: str, level: int, message: str, *args: object) -> None:
        """Log ``message`` the first time ``cause`` happens to this reader."""
        self._reported.log(level, message, *args, key=cause)

    def timeslices(self) -> dict[int, str] | None:
        """GPU index -> ``default``/``short``/``medium``/``long``; None when nvidia-smi
        is absent, unsupported, fails, hangs, or prints nothing parseable."""
        command = [self.executable, *ARGS]
        try:
            process = subprocess.Popen(  # argument list, no shell
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace",
                start_new_session=True)
        except FileNotFoundError:
            self._once("not-found", logging.DEBUG,
                       "%s not found; the timeslice policy is unknown", self.executable)
            return None
        except OSError as exc:
            self._once(f"cannot-run:{type(exc).__name__}", logging.DEBUG,
                       "cannot run %s: %s; the timeslice policy is unknown",
                       self.executable, exc.strerror or exc)
            return None
        try:
            stdout, stderr = process.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            try:
                process.communicate(timeout=_KILL_WAIT)
            except subprocess.TimeoutExpired:
                self._once("unkillable", logging.WARNING,
                           "%s did not exit after being killed (stuck in the driver?)",
                           self.executable)
            self._once("timeout", logging.WARNING,
                       "%s %s did not answer within %gs; the timeslice policy is unknown",
                       self.executable, " ".join(ARGS), self.timeout)
            return None
        output = f"{stdout}\n{stderr}"
        if process.returncode != 0:
            if _NOT_SUPPORTED.search(output):
                self._once("not-supported", logging.DEBUG,
                           "compute policies are not supported on this GPU (%s exit %d)",
                           self.executable, process.returncode)
            else:
                self._once(f"exit:{process.returncode}", logging.DEBUG,
                           "%s %s exited with %d: %s", self.executable, " ".join(ARGS),
                           process.returncode, _last_line(output))
            return None
        policies = parse_timeslices(stdout)
        if policies:
            return policies
        if _NOT_SUPPORTED.search(output):
            self._once("not-supported", logging.DEBUG,
                       "compute policies are not supported on this GPU (%s)", self.executable)
        else:
            self._once("unparseable", logging.DEBUG,
                       "no timeslice policy in the output of %s %s: %s", self.executable,
                       " ".join(ARGS), _last_line(output))
        return None


def _kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL nvidia-smi and everything in its session (a child it left running would hold
    its pipes open and outlive it). The group id is nvidia-smi's pid, which cannot be reused
    while nvidia-smi is not yet reaped."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()


def _last_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(no output)"
