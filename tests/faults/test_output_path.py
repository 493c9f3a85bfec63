"""What someone else puts at the feature file's path, under `gfd run`, `gfd diff` and
`gfd prune`.

Promises: a symbolic link planted at the output path is never followed -- its target is
not read (not logged, not printed by diff, not reported as pruned), replaced or deleted,
and neither is the link; a FIFO there does not hang gfd and is not replaced; -o /dev/stdout
is refused with the hint to use -o -; a second gfd writing the same file fails with one
line naming the first and never touches the file the first one writes, then takes over
when the first stops; a file edited by someone else is healed at the next cycle, not after
half the expiry.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from fakes import profiles
from helpers.process import ENV_PREFIXES, Agent, wait_for

from gfd.sinks.featurefile import parse

SECRET = "secret.example.com/password=hunter2\n"
PROMPTLY = 20


def gfd(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    return subprocess.run([sys.executable, "-m", "gfd", *args], capture_output=True,
                          text=True, timeout=PROMPTLY, check=False, env=env)


def plant(tmp_path: Path) -> tuple[Path, Path]:
    """A victim file elsewhere and a link to it at the output path."""
    victim = tmp_path / "victim"
    victim.write_text(SECRET)
    out = tmp_path / "features.d" / "gfd"
    out.parent.mkdir(exist_ok=True)
    out.symlink_to(victim)
    return out, victim


def test_diff_and_prune_never_read_or_delete_through_a_planted_link(tmp_path: Path) -> None:
    out, victim = plant(tmp_path)
    for command in ("diff", "prune"):
        result = gfd(command, "--simulate", "hgx-h100", "-o", str(out))
        assert result.returncode == 1, (command, result.stderr)
        assert "secret" not in result.stdout + result.stderr, command
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("gfd: error: ")]
        assert len(errors) == 1 and f"is a symbolic link to {victim}" in errors[0], errors
        assert "Traceback" not in result.stderr
    assert out.is_symlink() and victim.read_text() == SECRET


def test_run_never_writes_through_a_planted_link_and_writes_once_it_is_removed(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    out, victim = plant(tmp_path)
    agent = Agent(tmp_path, fake_nvml_lib, profiles.t4x4(), "--sleep-interval", "100ms")
    agents.append(agent)
    wait_for(lambda: "is a symbolic link" in agent.logs(), timeout=10)
    assert out.is_symlink() and victim.read_text() == SECRET
    assert "secret" not in agent.logs()
    out.unlink()
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "4", timeout=10)
    logs = agent.logs()
    assert agent.stop() == 0
    assert victim.read_text() == SECRET
    assert len([ln for ln in logs.splitlines() if "symbolic link" in ln]) == 1, "logged once"


def test_run_does_not_hang_on_a_fifo_at_the_output_path(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    out = tmp_path / "features.d" / "gfd"
    out.parent.mkdir()
    os.mkfifo(out)
    agent = Agent(tmp_path, fake_nvml_lib, profiles.t4x4(), "--sleep-interval", "100ms")
    agents.append(agent)
    wait_for(lambda: "is a FIFO (named pipe), not a regular file" in agent.logs(), timeout=10)
    assert agent.stop() == 0, "SIGTERM is handled: nothing blocks"
    assert stat.S_ISFIFO(os.lstat(out).st_mode), "not replaced"


def test_dev_stdout_as_output_is_refused_with_the_hint_to_use_dash() -> None:
    result = gfd("run", "--oneshot", "--simulate", "hgx-h100", "-o", "/dev/stdout")
    assert result.returncode == 2
    assert "use - (or '') to print the labels on standard output" in result.stderr
    assert result.stdout == ""


def test_a_second_agent_on_the_same_file_fails_clearly_then_takes_over(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    first_dir, second_dir = tmp_path / "a", tmp_path / "b"
    first_dir.mkdir()
    second_dir.mkdir()
    out = tmp_path / "features.d" / "gfd"
    out.parent.mkdir()
    common = ("--sleep-interval", "100ms", "--no-timestamp", "--output-file", str(out))
    first = Agent(first_dir, fake_nvml_lib, profiles.t4x4(), *common, output_flag=False)
    agents.append(first)
    wait_for(lambda: parse(out.read_text())[0].get("nvidia.com/gpu.count") == "4"
             if out.exists() else False)
    second = Agent(second_dir, fake_nvml_lib, profiles.hgx_h100(), *common, output_flag=False)
    agents.append(second)
    wait_for(lambda: "another gfd is writing in" in second.logs(), timeout=10)
    line = next(ln for ln in second.logs().splitlines() if "another gfd" in ln)
    assert f"(pid {first.proc.pid} holds its lock)" in line, line
    assert parse(out.read_text())[0]["nvidia.com/gpu.count"] == "4", "the first one's labels"
    assert first.stop() == 0
    wait_for(lambda: parse(out.read_text())[0].get("nvidia.com/gpu.count") == "8", timeout=10)
    assert second.stop() == 0


def test_a_file_edited_by_someone_else_is_healed_at_the_next_cycle(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    agent = Agent(tmp_path, fake_nvml_lib, profiles.t4x4(), "--sleep-interval", "100ms",
                  "--no-timestamp")
    agents.append(agent)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.count") == "4")
    good = agent.labels()
    agent.out.write_text("nvidia.com/gpu.count=999\n")
    wait_for(lambda: agent.labels() == good, timeout=5)
    assert "no longer the one gfd wrote" in agent.logs()
    assert agent.stop() == 0


def test_a_directory_that_exists_but_takes_no_file_is_not_said_to_be_missing() -> None:
    """/proc exists and answers ENOENT to creating a file there: not 'does not exist'."""
    result = gfd("run", "--oneshot", "-o", "/proc/gfd", "--simulate", "hgx-h100")
    assert result.returncode == 1
    [line] = [line for line in result.stderr.splitlines() if "cannot write" in line]
    assert line.endswith("cannot write feature file /proc/gfd: directory /proc exists but gfd "
                         "cannot create files in it (No such file or directory: not a writable "
                         "file system); point --output-file at NFD's features.d"), line
    assert "/proc does not exist" not in result.stderr
