"""Open a host file safely: never block, never read past a cap, never open a device.

Every file gfd reads from a path someone else chose (the config file, the machine-type file,
a recorded snapshot, sysfs files, pci.ids, its own feature file) goes through
:func:`read_bytes`. What is at the path is looked at before it is opened: a regular file is
read, at most ``limit`` bytes; the null device is read (empty) where the caller accepts it --
GFD's config-manager points the config file at ``/dev/null`` for an empty config; anything
else -- a FIFO, a socket, a directory, another device -- is refused with a
:class:`FileProblem` naming what it is, without opening it, so nothing can block (a FIFO
with no writer), stream forever (``/dev/zero``) or act on being opened (a watchdog). The
file is then opened with ``O_NONBLOCK`` and checked again, so one swapped in between the
look and the open is refused too, and still cannot block.

No state: every call looks at the path afresh.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Final, Literal

from gfd.errors import GfdError, one_line

Reason = Literal["missing", "denied", "directory", "special", "link", "too-large", "unreadable"]

CHUNK: Final = 65536
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class FileProblem(GfdError):
    """A host file that cannot be read as a file. ``problem`` says why without the path
    (``is a FIFO (named pipe), not a regular file``); ``str()`` is ``<path>: <problem>``.
    Callers add what to do, which depends on the setting that named the path."""

    def __init__(self, path: str, problem: str, *, reason: Reason) -> None:
        super().__init__(f"{shown(path)}: {problem}")
        self.path = path
        self.problem = problem
        self.reason: Reason = reason


def shown(path: str) -> str:
    """A path for a one-line message (``repr`` when it holds control characters)."""
    return path if path.isprintable() else repr(path)


def what_is(mode: int) -> str:
    """What a file of this mode is, with its article: ``a FIFO (named pipe)``, ``a socket``."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "a special file"


def is_null_device(st: os.stat_result) -> bool:
    """Whether ``st`` is the null device (reads empty): the device ``os.devnull`` is."""
    if not stat.S_ISCHR(st.st_mode):
        return False
    try:
        null = os.stat(os.devnull)
    except OSError:
        return False
    return stat.S_ISCHR(null.st_mode) and st.st_rdev == null.st_rdev


def refusal(path: str, st: os.stat_result, *, null_ok: bool) -> FileProblem | None:
    """None when a file of this status may be read, else the problem it is."""
    if stat.S_ISREG(st.st_mode) or (null_ok and is_null_device(st)):
        return None
    what = what_is(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        return FileProblem(path, "is a directory, not a file", reason="directory")
    if stat.S_ISLNK(st.st_mode):
        target = _link_target(path)
        return FileProblem(path, f"is a symbolic link{target}, which gfd does not follow here",
                           reason="link")
    return FileProblem(path, f"is {what}, not a regular file", reason="special")


def _link_target(path: str) -> str:
    try:
        return f" to {shown(os.readlink(path))}"
    except OSError:
        return ""


def _problem(path: str, exc: OSError) -> FileProblem:
    """The OS's own words (``No such file or directory``), and the reason they mean."""
    text = one_line(exc.strerror or str(exc))
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return FileProblem(path, text, reason="missing")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return FileProblem(path, text, reason="denied")
    if exc.errno == errno.ELOOP:
        return FileProblem(path, "is a symbolic link, which gfd does not follow here",
                           reason="link")
    if exc.errno == errno.EISDIR:
        return FileProblem(path, "is a directory, not a file", reason="directory")
    return FileProblem(path, f"cannot be read: {text}", reason="unreadable")


def size_text(limit: int) -> str:
    """``4 MiB``, ``64 KiB``, ``300 bytes``."""
    if limit >= 2**20 and limit % 2**20 == 0:
        return f"{limit // 2**20} MiB"
    if limit >= 2**10 and limit % 2**10 == 0:
        return f"{limit // 2**10} KiB"
    return f"{limit} bytes"


def read_bytes(path: str, *, limit: int, null_ok: bool = False,
               follow_symlinks: bool = True) -> bytes:
    """The content of the regular file at ``path`` (the null device too with ``null_ok``);
    FileProblem when it is missing, unreadable, something else, or larger than ``limit``
    bytes. With ``follow_symlinks=False`` a symbolic link at ``path`` is refused."""
    return read_with_status(path, limit=limit, null_ok=null_ok,
                            follow_symlinks=follow_symlinks)[0]


def read_with_status(path: str, *, limit: int, null_ok: bool = False,
                     follow_symlinks: bool = True) -> tuple[bytes, os.stat_result]:
    """:func:`read_bytes`, and the ``fstat`` of the file it read (its identity: device,
    inode, size, modification time)."""
    if not path:
        raise FileProblem(path, "no path given", reason="missing")
    try:
        before = os.stat(path, follow_symlinks=follow_symlinks)
    except (OSError, ValueError) as exc:
        raise _value_problem(path, exc) from None
    refused = refusal(path, before, null_ok=null_ok)
    if refused is not None:
        raise refused
    flags = _OPEN_FLAGS | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as exc:
        raise _value_problem(path, exc) from None
    try:
        st = os.fstat(fd)
        refused = refusal(path, st, null_ok=null_ok)  # swapped between the look and the open
        if refused is not None:
            raise refused
        data = _read_capped(fd, path, limit)
    finally:
        os.close(fd)
    return data, st


def _value_problem(path: str, exc: OSError | ValueError) -> FileProblem:
    if isinstance(exc, OSError):
        return _problem(path, exc)
    return FileProblem(path, f"not a usable path: {one_line(str(exc))}", reason="missing")


def _read_capped(fd: int, path: str, limit: int) -> bytes:
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        try:
            chunk = os.read(fd, min(CHUNK, limit + 1 - total))
        except BlockingIOError:
            raise FileProblem(path, "would block: not a regular file", reason="special") from None
        except OSError as exc:
            raise _problem(path, exc) from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
    raise FileProblem(path, f"is larger than {size_text(limit)}", reason="too-large")
