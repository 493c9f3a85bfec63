"""A full or read-only output filesystem while publishing the feature file.

Promises: on a read-only or full output directory the previous labels survive; the error is
one line naming the problem and the fix; a cycle publishes everything or nothing, is retried,
and never crashes the process; the file is written as a dot-file and renamed into place, so
a failed write leaves no litter.

The disk is broken by monkeypatching ``os`` -- the one place the suite fakes the OS, because
no unprivileged test can fill or remount a filesystem.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.agent_parts import FixedSource, make_agent

from gfd.errors import PublishError
from gfd.labelers.options import LabelOptions
from gfd.readers.simulate import simulate
from gfd.sinks.featurefile import FeatureFileSink, parse, write_atomically

OLD = "# +expiry-time=2026-01-01T00:00:00Z\nnvidia.com/gpu.count=8\nnvidia.com/gpu.present=true\n"
NEW = "nvidia.com/gpu.count=7\n"
NOW = 1_790_000_000.0


def _failing(exc_errno: int) -> Callable[..., object]:
    def fail(*_args: object, **_kwargs: object) -> object:
        raise OSError(exc_errno, os.strerror(exc_errno))

    return fail


# (os function to break, errno, a phrase of the fix the message must name)
CASES = [
    pytest.param("write", errno.ENOSPC, "free space", id="write-ENOSPC"),
    pytest.param("write", errno.EDQUOT, "free space", id="write-EDQUOT"),
    pytest.param("fsync", errno.ENOSPC, "free space", id="fsync-ENOSPC"),
    pytest.param("rename", errno.EROFS, "writable", id="rename-EROFS"),
    pytest.param("fchmod", errno.EROFS, "writable", id="fchmod-EROFS"),
    pytest.param("open", errno.EROFS, "writable", id="mkstemp-EROFS"),
    pytest.param("open", errno.EACCES, "writable", id="mkstemp-EACCES"),
]


def _entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


@pytest.mark.parametrize(("func", "code", "fix"), CASES)
def test_full_or_read_only_disk_is_one_clear_error_and_the_old_file_survives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, func: str, code: int, fix: str) -> None:
    """ENOSPC, EDQUOT, EROFS, EACCES on any step of the atomic write
    raise PublishError with one line naming the file and the fix; the previous feature file is
    byte-identical and no temp file is left behind."""
    path = tmp_path / "gfd"
    path.write_text(OLD)
    before = path.stat()
    with monkeypatch.context() as m:
        m.setattr(os, func, _failing(code))
        with pytest.raises(PublishError) as err:
            write_atomically(str(path), NEW)
    message = str(err.value)
    assert len(message.splitlines()) == 1, message
    assert str(path) in message and fix in message, message
    assert path.read_text() == OLD
    assert path.stat().st_ino == before.st_ino
    assert _entries(tmp_path) == ["gfd"], "no temp file left"


@pytest.mark.parametrize(("func", "code", "fix"), CASES[:1] + CASES[3:4])
def test_sink_on_a_broken_disk_keeps_the_old_labels_then_publishes_when_it_is_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, func: str, code: int, fix: str) -> None:
    """The sink's publish fails whole (old labels stay readable by
    nfd-worker), and the same sink object publishes the change once the disk is back."""
    path = tmp_path / "gfd"
    sink = FeatureFileSink(str(path), clock=lambda: NOW, expiry=3600)
    sink.publish({"nvidia.com/gpu.count": "8"})
    before = path.read_bytes()
    with monkeypatch.context() as m:
        m.setattr(os, func, _failing(code))
        with pytest.raises(PublishError, match=fix):
            sink.publish({"nvidia.com/gpu.count": "7"})
    assert path.read_bytes() == before
    assert _entries(tmp_path) == ["gfd"], "no lock file, no temp file"
    result = sink.publish({"nvidia.com/gpu.count": "7"})
    assert result.written and result.change.changed == ("nvidia.com/gpu.count",)
    assert parse(path.read_text())[0] == {"nvidia.com/gpu.count": "7"}


def test_agent_cycle_fails_on_a_full_disk_and_the_next_succeeds_once_it_is_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cycle publishes everything or nothing, transient errors are retried without a crash,
    and the last published labels stay: through the Agent, a cycle on a full
    disk returns False without raising and leaves the file as it was; every later cycle on
    the full disk does the same; the first cycle after space is freed publishes the change."""
    path = tmp_path / "features.d" / "gfd"
    path.parent.mkdir()
    source = FixedSource(simulate("hgx-h100").snapshot)
    sink = FeatureFileSink(str(path), clock=lambda: NOW, expiry=3600)
    agent = make_agent(source, sink, LabelOptions())
    assert agent.cycle()
    before = path.read_bytes()
    assert parse(before.decode())[0]["nvidia.com/gpu.count"] == "8"

    source.snapshot = simulate("mixed-a100-a10").snapshot  # a change to publish
    with monkeypatch.context() as m:
        m.setattr(os, "write", _failing(errno.ENOSPC))
        assert [agent.cycle() for _ in range(3)] == [False, False, False]
    assert agent.failures == 3
    assert path.read_bytes() == before
    assert _entries(path.parent) == ["gfd"], "no lock file, no temp file"

    assert agent.cycle(), "the disk is back: the next cycle publishes"
    assert agent.failures == 0
    labels = parse(path.read_text())[0]
    assert labels["nvidia.com/gpu.heterogeneous"] == "true"
    assert labels["nvidia.com/gpu.count"] != "8"
