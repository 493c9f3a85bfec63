"""The NFD feature file: gfd's mark (a comment line), then sorted ``key=value`` lines under a
``# +expiry-time=`` header, written atomically (dot-file in the same directory, fsync,
chmod, rename), never deleted on exit, rewritten only when labels change, when the file
is no longer the one gfd wrote (someone edited, replaced or removed it: healed at the next
cycle) or lacks gfd's mark, or, to refresh the expiry, when the loop's expiry-refresh
duty says so (every expiry / 2).

What is gfd's (``gfd prune`` removes nothing else): a regular file that carries gfd's mark
(:data:`MARK`, a comment line nfd-worker ignores: only ``# +`` lines are directives there), or
-- written by an older gfd or by NVIDIA's GFD, which carry no mark -- a file named ``gfd``
(GFD's and gfd's default name) holding nothing but ``key=value`` lines with at least one
``nvidia.com/`` key and at most the ``# +expiry-time=`` directive. A file gfd adopts without
the mark gets it at its next write. Anything else is refused with one line (:func:`foreign`).

The output path is gfd's alone:

* Only a regular file is read, replaced or deleted there. A symbolic link (planted to make
  gfd read or overwrite another file), a FIFO, a socket, a device or a directory at the
  path is refused with one line saying what is there and what to do; gfd never follows,
  reads, replaces or deletes it.
* One gfd per directory: a sink that writes holds an exclusive ``flock`` on the output's
  directory itself (``features.d``) from its first write until it is closed, so nothing
  but the feature file is left there, whatever way gfd ends (``--oneshot``, SIGTERM,
  SIGKILL: the kernel drops the lock with the process). Another gfd that finds it held
  fails with one line naming the holder; stale temporary files are removed only while
  holding it, so one gfd never deletes another's temporary file. Reading (``gfd diff``)
  takes no lock. The lock file older gfd versions kept there (``.<name>.lock``) is removed
  once no process holds it.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gfd.errors import PublishError, Refused
from gfd.features import Features
from gfd.fswatch import Watch
from gfd.hostfile import FileProblem, read_with_status, shown, size_text, what_is
from gfd.sinks.base import PublishResult, diff
from gfd.triggers import Fire, Trigger, died

log = logging.getLogger(__name__)

EXPIRY_DIRECTIVE = "# +expiry-time="
MARK = "# written by gfd (GPU feature discovery); gfd prune removes this file"
"""gfd's mark, the file's first line: a comment nfd-worker skips (not a ``# +`` directive)."""
LEGACY_NAME = "gfd"
"""The name GFD and older gfd releases wrote their unmarked files under (``features.d/gfd``)."""
_LABEL_LINE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*=[^\n]*")
MAX_BYTES = 65536  # nfd-worker skips larger files whole
MODE = 0o644
LEGACY_LOCK_SUFFIX = ".lock"
_STDOUT_LINKS = ("/proc/self/fd/", "/dev/fd/", "/dev/pts/", "/dev/tty", "pipe:", "socket:")
"""Link targets that mean the path is a terminal or a standard stream, not a file."""


def render(labels: dict[str, str], *, expires: float | None, mark: bool = False) -> str:
    """The content: gfd's mark (``mark``: the feature file; not the labels printed on
    standard output), the expiry directive (when set), then sorted label lines."""
    head = f"{MARK}\n" if mark else ""
    if expires is not None:
        stamp = datetime.fromtimestamp(int(expires), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        head += f"{EXPIRY_DIRECTIVE}{stamp}\n"
    return head + "".join(f"{k}={labels[k]}\n" for k in sorted(labels))


def marked(text: str) -> bool:
    """The file carries gfd's mark."""
    return any(line.strip() == MARK for line in text.splitlines())


def foreign(text: str, path: str) -> str:
    """Why the feature file ``text`` at ``path`` is not gfd's (the module docstring's rule),
    or "" when it is: marked, or an unmarked ``gfd`` file of only labels (older gfd, GFD)."""
    if marked(text):
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    name = os.path.basename(path)
    legacy = (name == LEGACY_NAME and any(line.startswith("nvidia.com/") for line in lines)
              and all(line.startswith(EXPIRY_DIRECTIVE) or _LABEL_LINE.fullmatch(line)
                      for line in lines))
    if legacy:
        return ""
    if name != LEGACY_NAME:
        return (f"it does not carry gfd's mark (the line {MARK!r}) and is not named "
                f"{LEGACY_NAME!r}, as the unmarked files of older gfd releases and GFD are")
    return ("it does not carry gfd's mark and holds more than nvidia.com labels and the "
            "expiry directive (older gfd releases and GFD wrote nothing else)")


def parse(text: str) -> tuple[dict[str, str], float | None]:
    """Labels and expiry (Unix time) from a feature file, read the way nfd-worker reads it."""
    labels: dict[str, str] = {}
    expires: float | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith(EXPIRY_DIRECTIVE):
            try:
                when = datetime.strptime(line[len(EXPIRY_DIRECTIVE):], "%Y-%m-%dT%H:%M:%SZ")
                expires = when.replace(tzinfo=UTC).timestamp()
            except ValueError:
                expires = None
            continue
        if not line or line.startswith("#"):
            continue
        k, sep, v = line.partition("=")
        labels[k] = v if sep else "true"
    return labels, expires


def _explain_os_error(path: str, exc: OSError) -> str:
    directory = os.path.dirname(path) or "."
    if exc.errno == errno.ENOENT and os.path.isdir(directory):  # /proc answers ENOENT
        return (f"cannot write feature file {path}: directory {directory} exists but gfd "
                f"cannot create files in it ({exc.strerror}: not a writable file system); "
                "point --output-file at NFD's features.d")
    if exc.errno == errno.ENOENT:
        return (f"cannot write feature file {path}: directory {directory} does not exist "
                "(mount NFD's features.d there, e.g. a hostPath with type DirectoryOrCreate)")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (f"cannot write feature file {path}: {exc.strerror} (mount {directory} "
                "writable for gfd's user)")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"cannot write feature file {path}: {exc.strerror} (free space on that filesystem)"
    return f"cannot write feature file {path}: {exc.strerror or exc}"


def write_atomically(path: str, content: str) -> os.stat_result:
    """Write ``content`` to ``path`` so a reader sees the old or the new file, never a mix.
    Returns the new file's status (its identity: device, inode, size, modification time)."""
    directory = os.path.dirname(os.path.abspath(path))
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", dir=directory)
        try:
            os.fchmod(fd, MODE)
            data = content.encode()
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
            written = os.fstat(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        tmp = ""
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        raise PublishError(_explain_os_error(path, exc)) from exc
    finally:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return written


Identity = tuple[int, int, int, int]
"""A file's device, inode, size and modification time (ns): changes when anyone rewrites,
replaces or edits it."""


def identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def lock_path(path: str) -> str:
    """What a writer locks: the feature file's directory (``features.d``)."""
    return os.path.dirname(os.path.abspath(path))


def legacy_lock_path(path: str) -> str:
    """The hidden lock file older gfd versions kept next to the feature file
    (``features.d/.gfd.lock``)."""
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}{LEGACY_LOCK_SUFFIX}")


def lock_holder(st: os.stat_result) -> str:
    """Who holds a flock on the file ``st`` describes, from ``/proc/locks`` (``pid N``, as
    this process's PID namespace sees it), or ``another process`` when it cannot tell."""
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read(1 << 20).splitlines()
    except OSError:
        return "another process"
    for line in lines:
        parts = line.split()
        if "FLOCK" in parts and wanted in parts:
            pid = parts[parts.index(wanted) - 1]
            if pid.isdigit() and int(pid) > 0:
                return f"pid {pid}"
    return "another process"


def refusal(path: str, st: os.stat_result) -> str | None:
    """Why gfd will not read, replace or delete what ``lstat`` found at its output path (one
    line: what is there and what to do); None for a regular file."""
    where = f"feature file {shown(path)}"
    if stat.S_ISREG(st.st_mode):
        return None
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        if target.startswith(_STDOUT_LINKS) or os.path.abspath(path) in (
                "/dev/stdout", "/dev/stderr"):
            return (f"{where} is a symbolic link to {shown(target)}, a standard stream: gfd "
                    "writes its feature file by renaming a new file into place; to print the "
                    "labels on standard output use -o - (or --output-file '')")
        return (f"{where} is a symbolic link to {shown(target)}; gfd does not follow, read, "
                "replace or delete a link at its output path: remove the link if gfd should "
                "write there, or point --output-file at another path")
    what = what_is(st.st_mode)
    return (f"{where} is {what}, not a regular file; gfd does not read, replace or delete it: "
            "remove it if gfd should write there, or point --output-file at another path")


@dataclass(frozen=True, slots=True)
class _Found:
    """A feature file as read: its labels and expiry, identity, and whose it is."""

    labels: dict[str, str]
    expires: float | None
    identity: Identity
    foreign: str
    """Why it is not gfd's (:func:`foreign`); "" when it is."""
    marked: bool


@dataclass(slots=True)
class FeatureFileSink:
    """Publishes to an NFD feature file (``features.d/gfd``)."""

    path: str
    expiry: float
    """Seconds until nfd-worker ignores the labels if gfd is gone; 0 = never."""
    clock: Callable[[], float] = time.time
    name: str = "file"
    _state: tuple[dict[str, str], float | None] | None = field(default=None, init=False)
    _written: Identity | None = field(default=None, init=False)
    """The identity of the file as gfd last wrote (or adopted) it; None when unknown."""
    _writing: bool = field(default=False, init=False)
    """gfd is writing the file: the directory events it causes are its own."""
    _missed: bool = field(default=False, init=False)
    """An event on the file came while gfd was writing: checked once the write is done (it
    may be someone else's edit of what gfd had just renamed into place)."""
    _fire: Fire | None = field(default=None, init=False, compare=False, repr=False)
    _events_lock: threading.Lock = field(default_factory=threading.Lock, init=False,
                                         compare=False, repr=False)
    _watch: Watch = field(init=False, compare=False, repr=False, default_factory=lambda: Watch(
        "output-watch", fallback="a changed feature file is healed at the next cycle",
        say=log.info))
    _lock: int | None = field(default=None, init=False)
    """The open, flock-ed lock file while this sink writes; None before and after."""
    _unmarked: bool = field(default=False, init=False)
    """The file adopted does not carry gfd's mark yet (an older gfd's): written again."""
    _unreadable: str = field(default="", init=False)
    """Why the last read found a file it could not read (for prune's refusal)."""

    @property
    def where(self) -> str:
        return f"feature file {shown(self.path)}"

    # -- the output path ------------------------------------------------------------

    def _target(self) -> os.stat_result | None:
        """What is at the output path now (not following a link); None when nothing is.
        PublishError for anything but a regular file."""
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PublishError(_explain_os_error(self.path, exc)) from exc
        problem = refusal(self.path, st)
        if problem is not None:
            raise PublishError(problem)
        return st

    def _read(self) -> _Found | None:
        """What the file at the path holds (:class:`_Found`); None when there is none or it
        cannot be read (logged). PublishError for a link or a special file."""
        try:
            raw, st = read_with_status(self.path, limit=MAX_BYTES, follow_symlinks=False)
        except FileProblem as exc:
            if exc.reason == "missing":
                return None
            if exc.reason in ("link", "special", "directory"):
                self._target()  # says what is there and what to do
                raise PublishError(f"feature file {exc}") from exc
            if exc.reason == "too-large":
                self._unreadable = (f"it is larger than {size_text(MAX_BYTES)}, which gfd "
                                    "never writes")
                log.warning("feature file %s is larger than %s, so not one gfd wrote "
                            "(nfd-worker ignores it); it will be replaced", shown(self.path),
                            size_text(MAX_BYTES))
                return None
            self._unreadable = f"it cannot be read to tell whose it is ({exc.problem})"
            log.warning("cannot read current feature file %s: %s", shown(self.path),
                        exc.problem)
            return None
        text = raw.decode("utf-8", errors="replace")
        labels, expires = parse(text)
        return _Found(labels, expires, identity(st), foreign(text, self.path), marked(text))

    # -- the lock -------------------------------------------------------------------

    def _acquire(self) -> None:
        """Hold the directory's lock from now until close(); PublishError when another gfd
        holds it. The first time, remove the temporary files a killed gfd left behind and
        an older gfd's lock file."""
        if self._lock is not None:
            return
        directory = lock_path(self.path)
        for _ in range(5):
            try:
                fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno == errno.ENOTDIR:
                    raise PublishError(f"cannot write feature file {shown(self.path)}: "
                                       f"{shown(directory)} is not a directory") from exc
                raise PublishError(_explain_os_error(self.path, exc)) from exc
            try:
                if not self._locked(fd, directory):
                    continue  # the directory was replaced: lock the new one
                self._lock, fd = fd, -1
                break
            finally:
                if fd >= 0:
                    os.close(fd)
        else:
            raise PublishError(f"feature file {shown(self.path)}: its directory "
                               f"{shown(directory)} keeps being replaced")
        self._remove_stale_temporaries()
        self._remove_legacy_lock()

    def _locked(self, fd: int, directory: str) -> bool:
        """Lock ``fd``; False when the path no longer names the directory locked (retry)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = lock_holder(os.fstat(fd))
            raise PublishError(
                f"feature file {shown(self.path)}: another gfd is writing in "
                f"{shown(directory)} ({holder} holds its lock); run one gfd per features "
                "directory: stop the other one, or give this one an --output-file in another "
                "directory") from None
        except OSError as exc:
            raise PublishError(f"feature file {shown(self.path)}: cannot lock "
                               f"{shown(directory)}: {exc.strerror or exc}") from exc
        try:
            now = os.stat(directory)
        except OSError:
            return False
        locked = os.fstat(fd)
        return (now.st_dev, now.st_ino) == (locked.st_dev, locked.st_ino)

    def share_lock(self, other: FeatureFileSink) -> None:
        """Hold the lock ``other`` holds, when both write in one directory: a reload that
        moves the output file there builds this sink while ``other`` still runs (and then
        prunes its file). The lock is shared, not taken twice: it stays held until both
        have closed it."""
        if (self._lock is None and other._lock is not None
                and lock_path(self.path) == lock_path(other.path)):
            self._lock = os.dup(other._lock)

    def _release(self) -> None:
        fd, self._lock = self._lock, None
        if fd is not None:
            os.close(fd)

    def _remove_legacy_lock(self) -> None:
        """The lock file an older gfd kept next to the output: removed once no process holds
        it (an older gfd still running keeps it, and its lock, until it exits)."""
        path = legacy_lock_path(self.path)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
        try:
            fd = os.open(path, flags)
        except OSError:
            return  # none (or a link or something gfd never made: left alone)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # held: an older gfd is still writing
            os.unlink(path)
        except OSError as exc:
            log.debug("cannot remove %s: %s", path, exc.strerror)
        finally:
            os.close(fd)

    def _remove_stale_temporaries(self) -> None:
        """Dot-files a killed gfd left behind (nfd-worker ignores them; they just pile up).
        Called only while holding the lock: no live gfd is writing one."""
        directory = os.path.dirname(os.path.abspath(self.path))
        prefix = f".{os.path.basename(self.path)}-"
        try:
            names = [n for n in os.listdir(directory) if n.startswith(prefix)]
        except OSError:
            return
        for name in names:
            try:
                os.unlink(os.path.join(directory, name))
            except OSError as exc:
                log.debug("cannot remove stale %s: %s", name, exc.strerror)

    # -- the Sink protocol ----------------------------------------------------------

    def refresh(self) -> None:
        """Rewrite the file now, with the labels it holds and a new expiry: the loop's
        expiry-refresh duty (every expiry / 2). It does not wait for a successful read, so the
        labels of a writer that is alive -- idle, or failing to read the GPUs -- never age
        out; only those of a writer gone for good do."""
        if self.expiry <= 0:
            return
        self._acquire()
        present = self._target() is not None
        if self._state is None:
            self._state = self._adopt()
        if self._state is not None and present:
            self._write(self._state[0], self.clock())

    def watch(self, fire: Fire) -> None:
        """Watch the file's directory: when the file is removed, replaced or edited by anyone
        but gfd, fire an ``output`` trigger, so a cycle runs at once and its publish, which
        finds the file is no longer the one gfd wrote, rewrites it (nfd-worker re-reads the
        directory on every change: the labels are back within a second). Without inotify,
        the next cycle heals it as before."""
        directory, name = os.path.split(os.path.abspath(self.path))
        self._fire = fire

        def changed(_directory: str, entry: str) -> None:
            if entry not in (name, ""):
                return  # another file (the lock, a temporary file)
            with self._events_lock:
                if self._writing:  # gfd's own, or an edit right after it: told when done
                    self._missed = True
                    return
            self._check(fire)

        self._watch.start([directory], changed,
                          on_death=lambda why: fire(died("output", why, time.monotonic())))

    def _check(self, fire: Fire) -> None:
        """Fire an ``output`` trigger unless the file is the one gfd last wrote."""
        try:
            now: Identity | None = identity(os.lstat(self.path))
        except OSError:
            now = None
        if now == self._written:
            return  # gfd's own write, seen after it finished
        fire(Trigger(source="output", kind="deleted" if now is None else "changed",
                     at=time.monotonic(), detail=self.path))

    def close(self) -> None:
        """Stop watching and release the lock (the feature file stays)."""
        self._watch.close()
        self._release()

    def _adopt(self) -> tuple[dict[str, str], float | None] | None:
        """Take the file a previous gfd wrote as this sink's own."""
        found = self._read()
        if found is None:
            return None
        self._written = found.identity
        self._unmarked = not found.marked
        return found.labels, found.expires

    def published_features(self) -> dict[str, str] | None:
        return None  # labels only

    def published(self, also: Collection[str] = ()) -> dict[str, str]:
        found = self._read()
        return dict(found.labels) if found else {}

    def _fresh(self, expires: float | None, now: float) -> bool:
        if self.expiry <= 0:
            return expires is None
        return expires is not None and expires - now > self.expiry / 2

    def publish(self, labels: dict[str, str], *,
                features: Features | None = None) -> PublishResult:
        self._acquire()
        current = self._target()
        if self._state is None:
            self._state = self._adopt() or ({}, None)
            current = self._target()
        old, expires = self._state
        now = self.clock()
        change = diff(old, labels)
        intact = current is not None and identity(current) == self._written
        if change.empty and self._fresh(expires, now) and intact and not self._unmarked:
            return PublishResult(written=False, change=change)
        if change.empty and not intact and self._written is not None:
            log.warning("feature file %s is no longer the one gfd wrote (%s); rewriting it",
                        shown(self.path), "removed" if current is None else "changed")
        self._write(labels, now)
        return PublishResult(written=True, change=change)

    def _write(self, labels: dict[str, str], now: float) -> None:
        new_expiry = now + self.expiry if self.expiry > 0 else None
        content = render(labels, expires=new_expiry, mark=True)
        if len(content.encode()) > MAX_BYTES:
            raise PublishError(
                f"feature file {self.path} would be {len(content.encode())} bytes; nfd-worker "
                f"ignores files over {MAX_BYTES} bytes (reduce labels: --label-set compat)")
        self._target()  # never replace a link or a special file
        with self._events_lock:
            self._writing, self._missed = True, False
        try:
            written = write_atomically(self.path, content)
            self._state = (dict(labels), new_expiry)
            self._written = identity(written)
            self._unmarked = False
        finally:
            with self._events_lock:
                self._writing, missed = False, self._missed
            if missed and self._fire is not None:
                self._check(self._fire)

    def prune(self) -> PublishResult:
        """Remove the feature file if it is gfd's (:func:`foreign`), else refuse with one line
        (``Refused``); refused too while another gfd holds the lock (it would write the file
        again)."""
        if self._target() is None and not os.path.lexists(legacy_lock_path(self.path)):
            return PublishResult(written=False)
        self._acquire()
        try:
            self._unreadable = ""
            found = self._read()
            why = found.foreign if found is not None else self._unreadable
            if why:
                raise Refused(f"feature file {shown(self.path)} left in place: {why}; gfd "
                              "prune removes only what gfd wrote (remove it yourself if it "
                              "is no longer wanted)")
            old = found.labels if found else {}
            self._target()
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                return PublishResult(written=False)
            except OSError as exc:
                raise PublishError(f"cannot remove feature file {self.path}: "
                                   f"{exc.strerror}") from exc
            self._state = None
            self._written = None
            return PublishResult(written=True, change=diff(old, {}))
        finally:
            self._release()
