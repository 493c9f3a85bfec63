"""Opening a host file safely: a regular file is read up to a cap; the null device reads
empty where the caller accepts it; a FIFO, a socket, a directory or any other device is
refused with one line naming the path and what it is -- without blocking, without reading
without end, and without opening it at all."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from gfd.hostfile import FileProblem, read_bytes, read_with_status, refusal, size_text, what_is


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.fixture
def unix_socket(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        yield path


def problem(path: Path | str, **kwargs: object) -> FileProblem:
    with pytest.raises(FileProblem) as caught:
        read_bytes(str(path), limit=1024, **kwargs)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    return caught.value


def test_a_regular_file_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"DGX H100\n")
    assert read_bytes(str(path), limit=1024) == b"DGX H100\n"


def test_a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1024)
    assert read_bytes(str(path), limit=1024) == b"x" * 1024
    path.write_bytes(b"x" * 1025)
    refused = problem(path)
    assert refused.reason == "too-large" and refused.problem == "is larger than 1 KiB"


def test_the_status_of_the_file_read_is_its_identity(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    data, st = read_with_status(str(path), limit=10)
    assert data == b"abc"
    assert (st.st_ino, st.st_size) == (path.stat().st_ino, 3)


def test_a_fifo_is_refused_without_blocking(fifo: Path) -> None:
    refused = problem(fifo)
    assert refused.reason == "special"
    assert refused.problem == "is a FIFO (named pipe), not a regular file"


def test_a_fifo_is_refused_even_where_the_null_device_is_accepted(fifo: Path) -> None:
    assert problem(fifo, null_ok=True).reason == "special"


def test_a_socket_is_refused(unix_socket: Path) -> None:
    assert problem(unix_socket).problem == "is a socket, not a regular file"


def test_a_directory_is_refused(tmp_path: Path) -> None:
    refused = problem(tmp_path)
    assert (refused.reason, refused.problem) == ("directory", "is a directory, not a file")


def test_dev_zero_is_refused_as_a_device_not_read_without_end() -> None:
    refused = problem("/dev/zero", null_ok=True)
    assert refused.problem == "is a character device, not a regular file"


def test_the_null_device_reads_empty_only_where_accepted() -> None:
    assert read_bytes(os.devnull, limit=10, null_ok=True) == b""
    assert problem(os.devnull).problem == "is a character device, not a regular file"


def test_a_link_to_the_null_device_is_an_empty_file_where_accepted(tmp_path: Path) -> None:
    """GFD's config-manager with FALLBACK_STRATEGIES=empty links the config file there."""
    link = tmp_path / "config.yaml"
    link.symlink_to(os.devnull)
    assert read_bytes(str(link), limit=10, null_ok=True) == b""


def test_a_link_to_a_fifo_is_refused_as_a_fifo(tmp_path: Path, fifo: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(fifo)
    assert problem(link).reason == "special"


def test_a_link_is_followed_unless_told_not_to(tmp_path: Path) -> None:
    target = tmp_path / "victim"
    target.write_text("secret=1\n")
    link = tmp_path / "gfd"
    link.symlink_to(target)
    assert read_bytes(str(link), limit=100) == b"secret=1\n"
    refused = problem(link, follow_symlinks=False)
    assert refused.reason == "link"
    assert refused.problem == f"is a symbolic link to {target}, which gfd does not follow here"


def test_a_missing_file_says_so_in_the_systems_words(tmp_path: Path) -> None:
    refused = problem(tmp_path / "missing")
    assert (refused.reason, refused.problem) == ("missing", "No such file or directory")


def test_a_path_through_a_file_is_missing(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert problem(tmp_path / "file" / "below").reason == "missing"


def test_a_path_with_a_nul_byte_is_one_line_not_a_crash(tmp_path: Path) -> None:
    with pytest.raises(FileProblem) as caught:
        read_bytes(f"{tmp_path}/a\0b", limit=10)
    assert caught.value.reason == "missing" and "\n" not in str(caught.value)
    assert str(caught.value).startswith("'")  # the path is shown with repr


def test_an_empty_path_is_refused() -> None:
    with pytest.raises(FileProblem, match="no path given"):
        read_bytes("", limit=10)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file modes")
def test_an_unreadable_file_is_permission_denied(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("x")
    path.chmod(0)
    assert problem(path).reason == "denied"


def test_a_fifo_swapped_in_after_the_look_is_caught_by_the_check_after_the_open(
        fifo: Path) -> None:
    """What the second check sees: the status of a FIFO opened without blocking."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        refused = refusal(str(fifo), os.fstat(fd), null_ok=True)
    finally:
        os.close(fd)
    assert refused is not None and refused.reason == "special"


@pytest.mark.parametrize("mode, text", [
    (stat.S_IFREG, "a regular file"), (stat.S_IFDIR, "a directory"),
    (stat.S_IFLNK, "a symbolic link"), (stat.S_IFIFO, "a FIFO (named pipe)"),
    (stat.S_IFSOCK, "a socket"), (stat.S_IFCHR, "a character device"),
    (stat.S_IFBLK, "a block device"),
], ids=["regular", "directory", "link", "fifo", "socket", "char", "block"])
def test_what_a_mode_is(mode: int, text: str) -> None:
    assert what_is(mode | 0o644) == text


@pytest.mark.parametrize("limit, text", [(4 * 2**20, "4 MiB"), (65536, "64 KiB"),
                                         (300, "300 bytes"), (1500, "1500 bytes")])
def test_size_text(limit: int, text: str) -> None:
    assert size_text(limit) == text
