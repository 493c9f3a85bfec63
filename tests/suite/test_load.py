"""tests/load.sh, the suite under load: it keeps one spinning process per core (or
LOAD_PROCS) busy while the command runs, passes the command's exit status through, and
leaves nothing running after it -- when the command ends, and when the script is stopped."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from helpers.paths import ROOT
from helpers.process import wait_for

LOAD = ROOT / "tests" / "load.sh"


def gone(pid: int) -> bool:
    """No such process (or only its zombie, which its parent has not reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True


def spinner_pids(stderr: str) -> list[int]:
    line = next(x for x in stderr.splitlines() if "spinning process" in x)
    return [int(p) for p in line.split("(pids ")[1].split(")")[0].split()]


def test_the_command_runs_beside_busy_spinners_and_its_status_passes_through() -> None:
    states = ("for p in $LOAD_PIDS; do cut -d' ' -f3 /proc/$p/stat; done; "
              "nproc; exit 3")
    out = subprocess.run([str(LOAD), "sh", "-c", states], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "LOAD_PROCS": "2"})
    assert out.returncode == 3, out.stderr
    *running, _ = out.stdout.split()
    assert running == ["R", "R"], "two spinners, each running or ready to"
    pids = spinner_pids(out.stderr)
    assert len(pids) == 2 and all(gone(p) for p in pids), "stopped with the command"
    assert "exit status 3 after" in out.stderr


def test_one_spinner_per_core_by_default() -> None:
    env = {k: v for k, v in os.environ.items() if k != "LOAD_PROCS"}
    out = subprocess.run([str(LOAD), "true"], capture_output=True, text=True, timeout=60,
                         env=env)
    assert out.returncode == 0
    assert len(spinner_pids(out.stderr)) == int(subprocess.check_output(["nproc"]))


def test_a_stopped_run_stops_its_command_and_spinners() -> None:
    proc = subprocess.Popen([str(LOAD), "sleep", "300"], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "LOAD_PROCS": "1"})
    assert proc.stderr is not None
    first = proc.stderr.readline()
    pids = spinner_pids(first)
    command: list[int] = []

    def started() -> bool:
        command[:] = [int(p) for p in subprocess.run(
            ["pgrep", "-P", str(proc.pid), "-x", "sleep"], capture_output=True, text=True
        ).stdout.split()]
        return bool(command)

    wait_for(started, timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143
    proc.stderr.close()
    wait_for(lambda: all(gone(p) for p in pids + command), timeout=30)


def test_a_bad_process_count_is_one_line_naming_the_fix() -> None:
    out = subprocess.run([str(LOAD), "true"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "LOAD_PROCS": "two"})
    assert out.returncode == 2
    assert out.stderr == ("tests/load.sh: LOAD_PROCS must be a whole number of processes, got "
                          "'two' (e.g. LOAD_PROCS=2)\n")
