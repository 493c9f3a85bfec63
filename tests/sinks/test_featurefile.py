"""The feature-file sink: format, atomic writes, no-op when unchanged, expiry refresh, errors."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest
from helpers.process import wait_for

from gfd.errors import PublishError, Refused
from gfd.sinks.featurefile import (
    MARK,
    FeatureFileSink,
    foreign,
    legacy_lock_path,
    lock_path,
    parse,
    refusal,
    render,
)
from gfd.triggers import Trigger

LABELS = {"nvidia.com/gpu.count": "8", "nvidia.com/cuda.driver.rev": "",
          "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
T0 = 1_790_000_000.0  # 2026-09-21T14:13:20Z


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_render_puts_expiry_first_then_sorted_lines_with_empty_values_kept() -> None:
    text = render(LABELS, expires=T0 + 3600)
    assert text.splitlines() == [
        "# +expiry-time=2026-09-21T15:13:20Z",
        "nvidia.com/cuda.driver.rev=",
        "nvidia.com/gpu.count=8",
        "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",
    ]


def test_render_without_expiry_has_no_header() -> None:
    assert render({"a/b": "1"}, expires=None) == "a/b=1\n"


def test_parse_reads_back_what_render_wrote() -> None:
    labels, expires = parse(render(LABELS, expires=T0))
    assert labels == LABELS and expires == T0


def test_parse_reads_a_bare_key_as_true_like_nfd() -> None:
    assert parse("# comment\nfoo.io/x\n")[0] == {"foo.io/x": "true"}


def test_first_publish_writes_the_file_with_mode_0644_and_no_dot_file_left(tmp_path) -> None:
    path = tmp_path / "gfd"
    result = FeatureFileSink(str(path), expiry=3600, clock=Clock()).publish(LABELS)
    assert result.written and result.change.added == tuple(sorted(LABELS))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert parse(path.read_text())[0] == LABELS
    assert sorted(os.listdir(tmp_path)) == ["gfd"], "no lock file, no temporary file"


def test_unchanged_labels_do_not_rewrite_the_file(tmp_path) -> None:
    path = tmp_path / "gfd"
    clock = Clock()
    sink = FeatureFileSink(str(path), expiry=3600, clock=clock)
    sink.publish(LABELS)
    inode = path.stat().st_ino
    clock.now += 60
    result = sink.publish(dict(LABELS))
    assert not result.written and result.change.empty
    assert path.stat().st_ino == inode


def test_expiry_is_refreshed_once_half_of_it_has_passed(tmp_path) -> None:
    path = tmp_path / "gfd"
    clock = Clock()
    sink = FeatureFileSink(str(path), expiry=3600, clock=clock)
    sink.publish(LABELS)
    clock.now += 1799
    assert not sink.publish(LABELS).written
    clock.now += 2
    result = sink.publish(LABELS)
    assert result.written and result.change.empty
    assert parse(path.read_text())[1] == clock.now + 3600


def test_expiry_zero_writes_no_header_and_never_refreshes(tmp_path) -> None:
    path = tmp_path / "gfd"
    clock = Clock()
    sink = FeatureFileSink(str(path), expiry=0, clock=clock)
    sink.publish(LABELS)
    assert "+expiry-time" not in path.read_text()
    clock.now += 10 * 86400
    assert not sink.publish(LABELS).written


def test_a_restarted_agent_adopts_the_existing_file_without_rewriting_it(tmp_path) -> None:
    path = tmp_path / "gfd"
    first = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    first.publish(LABELS)
    first.close()  # the agent stops (its lock goes with it)
    mtime = path.stat().st_mtime_ns
    again = FeatureFileSink(str(path), expiry=3600, clock=Clock(T0 + 10))
    assert not again.publish(LABELS).written
    assert path.stat().st_mtime_ns == mtime


def test_a_change_reports_added_changed_and_removed_keys(tmp_path) -> None:
    sink = FeatureFileSink(str(tmp_path / "gfd"), expiry=3600, clock=Clock())
    sink.publish({"a/x": "1", "a/y": "1"})
    change = sink.publish({"a/x": "2", "a/z": "1"}).change
    assert (change.added, change.changed, change.removed) == (("a/z",), ("a/x",), ("a/y",))


def test_missing_directory_is_one_clear_line_naming_the_fix(tmp_path) -> None:
    sink = FeatureFileSink(str(tmp_path / "nope" / "gfd"), expiry=3600, clock=Clock())
    with pytest.raises(PublishError) as err:
        sink.publish(LABELS)
    message = str(err.value)
    assert "does not exist" in message and "DirectoryOrCreate" in message
    assert "\n" not in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_keeps_the_previous_file_intact(tmp_path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    sink.publish(LABELS)
    before = path.read_text()
    tmp_path.chmod(0o555)
    try:
        with pytest.raises(PublishError):
            sink.publish({"a/b": "c"})
    finally:
        tmp_path.chmod(0o755)
    assert path.read_text() == before


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    sink.publish(LABELS)
    before = path.read_text()

    def full_disk(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full_disk)
    with pytest.raises(PublishError, match="No space left"):
        sink.publish({"a/b": "c"})
    monkeypatch.undo()
    assert path.read_text() == before
    assert sorted(os.listdir(tmp_path)) == ["gfd"], "no lock file, no temporary file"


def test_a_file_over_nfds_64_kib_limit_is_refused_before_writing(tmp_path) -> None:
    path = tmp_path / "gfd"
    labels = {f"nvidia.com/k{i}": "x" * 60 for i in range(2000)}
    with pytest.raises(PublishError, match="65536"):
        FeatureFileSink(str(path), expiry=3600, clock=Clock()).publish(labels)
    assert not path.exists()


def test_prune_removes_the_file_and_reports_the_removed_keys(tmp_path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    sink.publish(LABELS)
    result = sink.prune()
    assert result.written and set(result.change.removed) == set(LABELS)
    assert not path.exists()
    assert not sink.prune().written


def test_refresh_rewrites_the_held_labels_with_a_new_expiry_at_once(tmp_path) -> None:
    path = tmp_path / "gfd"
    clock = Clock()
    sink = FeatureFileSink(str(path), expiry=3600, clock=clock)
    sink.publish(LABELS)
    clock.now += 1800
    sink.refresh()
    labels, expires = parse(path.read_text())
    assert labels == LABELS and expires == clock.now + 3600


def test_refresh_adopts_the_file_a_previous_agent_wrote(tmp_path) -> None:
    path = tmp_path / "gfd"
    first = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    first.publish(LABELS)
    first.close()  # the previous agent stopped
    later = Clock(T0 + 1800)
    FeatureFileSink(str(path), expiry=3600, clock=later).refresh()
    assert parse(path.read_text()) == (LABELS, T0 + 1800 + 3600)


def test_refresh_writes_nothing_without_expiry_or_without_a_file(tmp_path) -> None:
    path = tmp_path / "gfd"
    first = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    first.refresh()
    first.close()
    assert not path.exists()
    sink = FeatureFileSink(str(path), expiry=0, clock=Clock())
    sink.publish(LABELS)
    mtime = path.stat().st_mtime_ns
    sink.refresh()
    assert path.stat().st_mtime_ns == mtime


# ----------------------------------------------------------------------------- watch


class Fired:
    def __init__(self) -> None:
        self.triggers: list[Trigger] = []
        self.lock = threading.Lock()

    def __call__(self, trigger: Trigger) -> None:
        with self.lock:
            self.triggers.append(trigger)

    def run_actions(self) -> list[str]:
        """What the loop does with them: run each action; the kinds seen."""
        with self.lock:
            taken, self.triggers = self.triggers, []
        for trigger in taken:
            if trigger.action:
                trigger.action()
        return [t.kind for t in taken]


@pytest.fixture
def watched(tmp_path) -> Iterator[tuple[FeatureFileSink, Fired]]:
    sink = FeatureFileSink(str(tmp_path / "gfd"), expiry=3600, clock=lambda: 1_790_000_000.0)
    fired = Fired()
    sink.publish({"nvidia.com/gpu.count": "8"})
    sink.watch(fired)
    yield sink, fired
    sink.close()


@pytest.mark.parametrize("tamper", ["delete", "edit", "replace"])
def test_a_file_changed_by_someone_else_is_rewritten_at_the_next_publish(
        tmp_path, watched: tuple[FeatureFileSink, Fired], tamper: str) -> None:
    sink, fired = watched
    path = tmp_path / "gfd"
    if tamper == "delete":
        path.unlink()
    elif tamper == "edit":
        with path.open("a") as handle:
            handle.write("nvidia.com/gpu.count=99\n")
    else:
        (tmp_path / "other").write_text("nvidia.com/gpu.count=1\n")
        (tmp_path / "other").replace(path)
    wait_for(lambda: bool(fired.triggers), timeout=5)
    kinds = fired.run_actions()
    assert kinds[0] == ("deleted" if tamper == "delete" else "changed")
    result = sink.publish({"nvidia.com/gpu.count": "8"})
    assert result.written and result.change.empty
    assert parse(path.read_text())[0] == {"nvidia.com/gpu.count": "8"}


def test_gfds_own_writes_fire_nothing_that_rewrites(
        tmp_path, watched: tuple[FeatureFileSink, Fired]) -> None:
    sink, fired = watched
    for count in ("7", "6", "5"):
        sink.publish({"nvidia.com/gpu.count": count})
    (tmp_path / "unrelated").write_text("x")  # another file in features.d
    time.sleep(0.3)  # give a wrong report time to arrive
    fired.run_actions()  # even a report raced with a write: its action finds gfd's file
    assert not sink.publish({"nvidia.com/gpu.count": "5"}).written


def test_an_edit_that_lands_while_gfd_finishes_its_write_is_not_taken_for_gfds_own(
        tmp_path, watched: tuple[FeatureFileSink, Fired],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Someone edits the file gfd has just renamed into place before gfd's write returns:
    the event arrives while gfd is writing, and is checked once the write is done."""
    from gfd.sinks import featurefile

    sink, fired = watched
    path = tmp_path / "gfd"
    real = featurefile.write_atomically

    def then_edited(target: str, content: str) -> os.stat_result:
        written = real(target, content)
        with path.open("a") as handle:  # in place: the inode gfd wrote, new content
            handle.write("nvidia.com/gpu.count=99\n")
        wait_for(lambda: sink._missed)  # the watch saw it while gfd was still writing
        return written

    monkeypatch.setattr(featurefile, "write_atomically", then_edited)
    sink.publish({"nvidia.com/gpu.count": "7"})
    monkeypatch.setattr(featurefile, "write_atomically", real)
    assert [t.kind for t in fired.triggers] == ["changed"]
    fired.run_actions()
    assert sink.publish({"nvidia.com/gpu.count": "7"}).written
    assert parse(path.read_text())[0] == {"nvidia.com/gpu.count": "7"}


def test_close_stops_the_watch(tmp_path, watched: tuple[FeatureFileSink, Fired]) -> None:
    sink, fired = watched
    sink.close()
    (tmp_path / "gfd").unlink()
    time.sleep(0.3)
    assert fired.triggers == []


def test_a_watch_that_dies_fires_its_death_and_the_next_cycle_still_heals(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gfd.sinks import featurefile

    def broken(st: os.stat_result) -> object:
        raise OverflowError("inode out of range")

    sink = FeatureFileSink(str(tmp_path / "gfd"), expiry=3600, clock=lambda: 1_790_000_000.0)
    fired = Fired()
    try:
        sink.publish({"nvidia.com/gpu.count": "8"})
        sink.watch(fired)
        monkeypatch.setattr(featurefile, "identity", broken)
        with (tmp_path / "gfd").open("a") as handle:
            handle.write("nvidia.com/gpu.count=99\n")
        wait_for(lambda: bool(fired.triggers), timeout=5)
        assert [(t.source, t.kind) for t in fired.triggers] == [("output", "watcher-died")]
        monkeypatch.undo()
        assert sink.publish({"nvidia.com/gpu.count": "8"}).written, "healed by the cycle"
    finally:
        sink.close()


# ----------------------------------------------------------------------------- the output path

VICTIM = "secret.example.com/key=victim\n"


def _planted_link(tmp_path) -> tuple[object, object]:
    victim = tmp_path / "victim"
    victim.write_text(VICTIM)
    path = tmp_path / "gfd"
    path.symlink_to(victim)
    return path, victim


def _one_line(err: pytest.ExceptionInfo[PublishError]) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


def test_a_link_at_the_output_path_is_never_written_through_or_replaced(tmp_path) -> None:
    path, victim = _planted_link(tmp_path)
    with pytest.raises(PublishError) as err:
        FeatureFileSink(str(path), expiry=3600, clock=Clock()).publish(LABELS)
    message = _one_line(err)
    assert f"is a symbolic link to {victim}" in message and "--output-file" in message
    assert path.is_symlink() and victim.read_text() == VICTIM


def test_a_link_at_the_output_path_is_never_read(tmp_path) -> None:
    """`gfd diff` would print the victim's lines as labels, and the log would hold them."""
    path, victim = _planted_link(tmp_path)
    with pytest.raises(PublishError) as err:
        FeatureFileSink(str(path), expiry=3600, clock=Clock()).published()
    assert victim.read_text() == VICTIM
    assert "secret.example.com" not in _one_line(err)


def test_a_link_at_the_output_path_is_never_pruned(tmp_path) -> None:
    """`gfd prune` would report the victim's lines as pruned labels and delete the link."""
    path, victim = _planted_link(tmp_path)
    sink = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    with pytest.raises(PublishError, match="symbolic link"):
        sink.prune()
    sink.close()
    assert path.is_symlink() and victim.read_text() == VICTIM


def test_a_link_planted_after_a_publish_is_refused_too(tmp_path) -> None:
    path = tmp_path / "gfd"
    clock = Clock()
    sink = FeatureFileSink(str(path), expiry=3600, clock=clock)
    sink.publish(LABELS)
    victim = tmp_path / "victim"
    victim.write_text(VICTIM)
    path.unlink()
    path.symlink_to(victim)
    with pytest.raises(PublishError, match="symbolic link"):
        sink.publish(LABELS)
    clock.now += 1800
    with pytest.raises(PublishError, match="symbolic link"):
        sink.refresh()
    assert path.is_symlink() and victim.read_text() == VICTIM


def test_a_fifo_at_the_output_path_is_refused_without_blocking(tmp_path) -> None:
    path = tmp_path / "gfd"
    os.mkfifo(path)
    sink = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    for action in (lambda: sink.publish(LABELS), sink.published, sink.prune, sink.refresh):
        with pytest.raises(PublishError) as err:
            action()
        assert "is a FIFO (named pipe), not a regular file" in _one_line(err)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)


def test_a_directory_at_the_output_path_is_refused(tmp_path) -> None:
    path = tmp_path / "gfd"
    path.mkdir()
    with pytest.raises(PublishError, match="is a directory, not a regular file"):
        FeatureFileSink(str(path), expiry=3600, clock=Clock()).publish(LABELS)
    assert path.is_dir()


def test_a_device_at_the_output_path_is_refused_naming_it() -> None:
    message = refusal("/dev/null", os.lstat("/dev/null"))
    assert message is not None
    assert message.startswith("feature file /dev/null is a character device, not a regular "
                              "file; gfd does not read, replace or delete it")


def test_a_link_to_a_standard_stream_says_to_use_dash(tmp_path) -> None:
    path = tmp_path / "gfd"
    path.symlink_to("/proc/self/fd/1")
    message = refusal(str(path), os.lstat(path))
    assert message is not None and "use -o -" in message


# ----------------------------------------------------------------------------- one writer


def test_a_second_sink_on_the_same_file_fails_naming_the_holder(tmp_path) -> None:
    path = tmp_path / "gfd"
    first = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    first.publish(LABELS)
    second = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    with pytest.raises(PublishError) as err:
        second.publish({"a/b": "c"})
    message = _one_line(err)
    assert f"another gfd is writing in {tmp_path} (pid {os.getpid()} holds its lock)" in message
    assert lock_path(str(path)) == str(tmp_path) and "one gfd per features directory" in message
    assert parse(path.read_text())[0] == LABELS
    first.close()
    assert second.publish({"a/b": "c"}).written, "the lock is free once the first is closed"


def test_only_the_lock_holder_removes_temporary_files(tmp_path) -> None:
    path = tmp_path / "gfd"
    first = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    first.publish(LABELS)
    in_flight = tmp_path / ".gfd-abc123"  # the first one's temporary file, mid-write
    in_flight.write_text("x")
    second = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    with pytest.raises(PublishError):
        second.publish(LABELS)
    assert in_flight.exists(), "the second gfd never deletes the first one's temporary file"
    first.close()
    second.publish(LABELS)
    assert not in_flight.exists(), "left by a gfd that is gone: removed by the lock holder"


def test_diff_reads_without_taking_the_lock(tmp_path) -> None:
    path = tmp_path / "gfd"
    writer = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    writer.publish(LABELS)
    assert FeatureFileSink(str(path), expiry=3600, clock=Clock()).published() == LABELS


def test_prune_is_refused_while_another_gfd_writes_the_file(tmp_path) -> None:
    path = tmp_path / "gfd"
    writer = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    writer.publish(LABELS)
    with pytest.raises(PublishError, match="another gfd is writing in"):
        FeatureFileSink(str(path), expiry=3600, clock=Clock()).prune()
    assert parse(path.read_text())[0] == LABELS


def test_prune_leaves_no_lock_file_behind(tmp_path) -> None:
    path = tmp_path / "gfd"
    sink = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    sink.publish(LABELS)
    sink.close()
    assert FeatureFileSink(str(path), expiry=3600, clock=Clock()).prune().written
    assert os.listdir(tmp_path) == []


def test_a_second_sink_on_another_file_of_the_same_directory_is_refused(tmp_path) -> None:
    first = FeatureFileSink(str(tmp_path / "gfd"), expiry=3600, clock=Clock())
    first.publish(LABELS)
    with pytest.raises(PublishError, match="run one gfd per features directory"):
        FeatureFileSink(str(tmp_path / "other"), expiry=3600, clock=Clock()).publish(LABELS)
    assert sorted(os.listdir(tmp_path)) == ["gfd"]


def test_the_lock_ends_with_the_process_and_leaves_nothing_behind(tmp_path) -> None:
    """SIGKILL: the kernel drops the flock with the process; the next gfd writes at once."""
    path = tmp_path / "gfd"
    script = ("import os, sys, time\n"
              "from gfd.sinks.featurefile import FeatureFileSink\n"
              f"FeatureFileSink({str(path)!r}, expiry=3600).publish({{'a/b': 'c'}})\n"
              "print('written', flush=True)\n"
              "time.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "written\n"
        with pytest.raises(PublishError, match=rf"pid {holder.pid} holds its lock"):
            FeatureFileSink(str(path), expiry=3600, clock=Clock()).publish(LABELS)
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    assert FeatureFileSink(str(path), expiry=3600, clock=Clock()).publish(LABELS).written
    assert os.listdir(tmp_path) == ["gfd"]


def test_an_older_gfds_lock_file_is_removed_once_free(tmp_path) -> None:
    path = tmp_path / "gfd"
    legacy = legacy_lock_path(str(path))
    held = os.open(legacy, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(held, fcntl.LOCK_EX)  # an older gfd still running
    sink = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    sink.publish(LABELS)
    assert os.path.exists(legacy), "held: left to the older gfd"
    sink.close()
    os.close(held)  # it exited
    FeatureFileSink(str(path), expiry=3600, clock=Clock()).publish(LABELS)
    assert os.listdir(tmp_path) == ["gfd"]


def test_a_link_where_the_older_lock_file_was_is_left_alone(tmp_path) -> None:
    victim = tmp_path / "victim"
    victim.write_text(VICTIM)
    os.symlink(victim, legacy_lock_path(str(tmp_path / "gfd")))
    FeatureFileSink(str(tmp_path / "gfd"), expiry=3600, clock=Clock()).publish(LABELS)
    assert victim.read_text() == VICTIM
    assert os.path.islink(legacy_lock_path(str(tmp_path / "gfd")))


def test_a_directory_replaced_while_held_is_not_shared(tmp_path) -> None:
    """features.d removed and created again: the new holder locks the new directory."""
    directory = tmp_path / "features.d"
    directory.mkdir()
    first = FeatureFileSink(str(directory / "gfd"), expiry=3600, clock=Clock())
    first.publish(LABELS)
    shutil.rmtree(directory)
    directory.mkdir()
    second = FeatureFileSink(str(directory / "gfd"), expiry=3600, clock=Clock())
    assert second.publish({"a/b": "c"}).written
    with pytest.raises(PublishError, match="another gfd"):
        FeatureFileSink(str(directory / "gfd"), expiry=3600, clock=Clock()).publish(LABELS)


def test_a_missing_directory_is_one_line_naming_the_fix(tmp_path) -> None:
    with pytest.raises(PublishError) as err:
        FeatureFileSink(str(tmp_path / "none" / "gfd"), expiry=3600, clock=Clock()).publish(LABELS)
    assert "does not exist (mount NFD's features.d there" in _one_line(err)


# ----------------------------------------------------------------------------- healing


def test_a_file_edited_by_someone_else_is_rewritten_at_the_next_publish(tmp_path, caplog) -> None:
    path = tmp_path / "gfd"
    clock = Clock()
    sink = FeatureFileSink(str(path), expiry=3600, clock=clock)
    sink.publish(LABELS)
    with path.open("a") as f:
        f.write("intruder.example.com/x=1\n")
    clock.now += 10
    result = sink.publish(LABELS)
    assert result.written and result.change.empty
    assert parse(path.read_text())[0] == LABELS
    assert "is no longer the one gfd wrote (changed); rewriting it" in caplog.text


@pytest.mark.parametrize("how", ["replaced", "removed", "truncated"])
def test_a_file_replaced_removed_or_truncated_is_healed_at_once(tmp_path, how) -> None:
    path = tmp_path / "gfd"
    clock = Clock()
    sink = FeatureFileSink(str(path), expiry=3600, clock=clock)
    sink.publish(LABELS)
    if how == "replaced":
        other = tmp_path / "other"
        other.write_text("a/b=c\n")
        other.rename(path)
    elif how == "removed":
        path.unlink()
    else:
        path.write_text("")
    clock.now += 10
    assert sink.publish(LABELS).written
    assert parse(path.read_text())[0] == LABELS
    clock.now += 10
    assert not sink.publish(LABELS).written, "healed: untouched again"


def test_an_adopted_file_edited_later_is_healed_too(tmp_path) -> None:
    path = tmp_path / "gfd"
    first = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    first.publish(LABELS)
    first.close()
    again = FeatureFileSink(str(path), expiry=3600, clock=Clock(T0 + 10))
    assert not again.publish(LABELS).written
    path.write_text("nvidia.com/gpu.count=1\n")
    assert again.publish(LABELS).written
    assert parse(path.read_text())[0] == LABELS


def test_a_file_that_is_not_utf8_is_replaced_not_a_crash(tmp_path) -> None:
    path = tmp_path / "gfd"
    path.write_bytes(b"\xff\xfe garbage\n")
    sink = FeatureFileSink(str(path), expiry=3600, clock=Clock())
    assert sink.publish(LABELS).written
    assert parse(path.read_text())[0] == LABELS


def test_a_sink_sharing_the_lock_of_one_in_the_same_directory_writes_beside_it(
        tmp_path) -> None:
    """A reload moving the output within features.d: the new sink shares the lock, the old
    one prunes its file and closes, and the directory stays locked against anyone else."""
    old = FeatureFileSink(str(tmp_path / "gfd"), expiry=3600, clock=Clock())
    old.publish(LABELS)
    new = FeatureFileSink(str(tmp_path / "gfd-moved"), expiry=3600, clock=Clock())
    new.share_lock(old)
    assert new.publish(LABELS).written
    assert old.prune().written
    old.close()
    with pytest.raises(PublishError, match="another gfd is writing in"):
        FeatureFileSink(str(tmp_path / "x"), expiry=3600, clock=Clock()).publish(LABELS)
    new.close()
    assert sorted(os.listdir(tmp_path)) == ["gfd-moved"]
    assert FeatureFileSink(str(tmp_path / "x"), expiry=3600, clock=Clock()).publish(LABELS)


def test_no_lock_is_shared_across_directories(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old = FeatureFileSink(str(tmp_path / "a" / "gfd"), expiry=3600, clock=Clock())
    old.publish(LABELS)
    new = FeatureFileSink(str(tmp_path / "b" / "gfd"), expiry=3600, clock=Clock())
    new.share_lock(old)
    old.close()
    assert FeatureFileSink(str(tmp_path / "a" / "x"), expiry=3600, clock=Clock()).publish(
        LABELS).written, "a's lock went with the old sink"
    assert new.publish(LABELS).written  # b's lock, taken on its own
    with pytest.raises(PublishError, match="another gfd"):
        FeatureFileSink(str(tmp_path / "b" / "x"), expiry=3600, clock=Clock()).publish(LABELS)
    new.close()


# ----------------------------------------------------------------------------- whose file


def test_the_file_starts_with_gfds_mark_a_comment_nfd_worker_skips(tmp_path) -> None:
    path = tmp_path / "gfd"
    FeatureFileSink(str(path), expiry=3600, clock=Clock()).publish(LABELS)
    first = path.read_text().splitlines()[0]
    # nfd-worker (source/local): "#" lines are comments; only "# +" lines are directives
    assert first.startswith("#") and not first.startswith("# +")
    assert foreign(path.read_text(), str(path)) == ""


@pytest.mark.parametrize("name, text", [
    ("other", "foo=bar\n"),
    ("other", "nvidia.com/gpu.count=8\n"),  # labels only, but not gfd's name: no guess
    ("gfd", "foo=bar\n"),  # no nvidia.com label
    ("gfd", "# written by a script\nnvidia.com/gpu.count=8\n"),
    ("gfd", "nvidia.com/gpu.count=8\nsome line with spaces\n"),
], ids=["other-name", "other-name-nvidia", "gfd-no-nvidia", "gfd-other-comment",
        "gfd-not-labels"])
def test_prune_refuses_a_file_gfd_did_not_write_and_leaves_it(tmp_path, name: str,
                                                               text: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(Refused, match=f"^feature file {path} left in place: ") as refused:
        FeatureFileSink(str(path), expiry=3600, clock=Clock()).prune()
    assert "\n" not in str(refused.value)
    assert path.read_text() == text


def test_prune_refuses_a_file_too_large_to_be_gfds(tmp_path) -> None:
    path = tmp_path / "gfd"
    path.write_text("nvidia.com/x=1\n" * 10000)
    with pytest.raises(Refused, match="larger than"):
        FeatureFileSink(str(path), expiry=3600, clock=Clock()).prune()
    assert path.exists()


@pytest.mark.parametrize("text", [
    "nvidia.com/gpu.count=8\nnvidia.com/gpu.present=true\n",  # GFD, GFD-compatible gfd
    "# +expiry-time=2026-09-21T15:13:20Z\nnvidia.com/gpu.count=8\n",  # an older gfd
], ids=["gfd-compatible", "older-gfd"])
def test_prune_removes_the_unmarked_gfd_file_of_gfd_and_older_releases(tmp_path,
                                                                       text: str) -> None:
    path = tmp_path / "gfd"
    path.write_text(text)
    result = FeatureFileSink(str(path), expiry=3600, clock=Clock()).prune()
    assert result.written and "nvidia.com/gpu.count" in result.change.removed
    assert not path.exists()


def test_an_adopted_unmarked_file_gets_the_mark_at_the_next_publish(tmp_path) -> None:
    path = tmp_path / "gfd"
    path.write_text(render(LABELS, expires=None))  # what an older gfd wrote (expiry 0)
    result = FeatureFileSink(str(path), expiry=0, clock=Clock()).publish(LABELS)
    assert result.written and result.change.empty
    assert path.read_text().splitlines()[0] == MARK
