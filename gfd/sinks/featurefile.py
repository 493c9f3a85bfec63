"""The NFD feature file: sorted ``key=value`` lines under a ``# +expiry-time=`` header,
written atomically (dot-file in the same directory, fsync, chmod, rename), never deleted
on exit, rewritten only when labels change or, to refresh the expiry, when the loop's
expiry-refresh duty says so (every expiry / 2, whatever the interval)."""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime

from gfd.errors import PublishError
from gfd.fswatch import DirWatch, open_watch
from gfd.sinks.base import PublishResult, diff
from gfd.triggers import Fire, Trigger

log = logging.getLogger(__name__)

EXPIRY_DIRECTIVE = "# +expiry-time="
MAX_BYTES = 65536  # nfd-worker skips larger files whole
MODE = 0o644


def render(labels: dict[str, str], *, expires: float | None) -> str:
    """The file's content: the expiry directive (when set), then sorted label lines."""
    head = ""
    if expires is not None:
        stamp = datetime.fromtimestamp(int(expires), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        head = f"{EXPIRY_DIRECTIVE}{stamp}\n"
    return head + "".join(f"{k}={labels[k]}\n" for k in sorted(labels))


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
    if exc.errno == errno.ENOENT:
        return (f"cannot write feature file {path}: directory {directory} does not exist "
                "(mount NFD's features.d there, e.g. a hostPath with type DirectoryOrCreate)")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (f"cannot write feature file {path}: {exc.strerror} (mount {directory} "
                "writable for gfd's user)")
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"cannot write feature file {path}: {exc.strerror} (free space on that filesystem)"
    return f"cannot write feature file {path}: {exc.strerror or exc}"


def write_atomically(path: str, content: str) -> None:
    """Write ``content`` to ``path`` so a reader sees the old or the new file, never a mix."""
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


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(slots=True)
class FeatureFileSink:
    """Publishes to an NFD feature file (``features.d/gfd``)."""

    path: str
    expiry: float
    """Seconds until nfd-worker ignores the labels if gfd is gone; 0 = never."""
    clock: Callable[[], float] = time.time
    name: str = "file"
    _state: tuple[dict[str, str], float | None] | None = field(default=None, init=False)
    _written: tuple[int, int, int] | None = field(default=None, init=False)
    """Inode, size and mtime of the file as gfd last wrote it: a change is someone else's."""
    _stale: bool = field(default=False, init=False)
    """Someone else changed or removed the file: rewrite it at the next publish."""
    _writing: bool = field(default=False, init=False)
    """gfd is writing the file: the events it causes are its own."""
    _watch: DirWatch | None = field(default=None, init=False)

    def refresh(self) -> None:
        """Rewrite the file now, with the labels it holds and a new expiry: the loop's
        expiry-refresh duty (every expiry / 2). It does not wait for a successful read, so the
        labels of a writer that is alive -- idle, or failing to read the GPUs -- never age
        out; only those of a writer gone for good do."""
        if self.expiry <= 0:
            return
        if self._state is None:
            self._state = self._load()
        if self._state is not None and os.path.exists(self.path):
            self._write(self._state[0], self.clock())

    def watch(self, fire: Fire) -> None:
        """Watch the file's directory: when the file is removed, replaced or edited by anyone
        but gfd, fire an ``output`` trigger whose action makes the next publish rewrite it
        (nfd-worker re-reads the directory on every change, so the labels come back at once).
        Without inotify, the next publish after the expiry refresh heals it as before."""
        if self._watch is not None:
            return
        directory, name = os.path.split(os.path.abspath(self.path))

        def changed(_directory: str, entry: str) -> None:
            if entry not in (name, "") or self._writing or _identity(self.path) == self._written:
                return  # another file, or gfd's own write
            kind = "deleted" if not os.path.lexists(self.path) else "changed"
            fire(Trigger(source="output", kind=kind, at=time.monotonic(),
                         action=self._mark_stale, detail=self.path))

        opened = open_watch(changed, name="output-watch")
        if isinstance(opened, str):
            log.info("%s; a changed feature file is healed at the next expiry refresh", opened)
            return
        problems = opened.watch([directory])
        if problems:
            opened.close()
            log.info("%s; a changed feature file is healed at the next expiry refresh",
                     problems[0])
            return
        self._watch = opened.start()

    def _mark_stale(self) -> None:
        """On the loop's thread, after any write of gfd's own: is it still someone else's?"""
        if self._stale or _identity(self.path) == self._written:
            return  # said already, or the event was gfd's own write seen before it finished
        log.warning("feature file %s was changed or removed by someone else; rewriting it",
                    self.path)
        self._stale = True

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None

    def _load(self) -> tuple[dict[str, str], float | None] | None:
        try:
            with open(self.path, encoding="utf-8") as f:
                return parse(f.read())
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read current feature file %s: %s", self.path, exc.strerror)
            return None

    def published(self, also: Collection[str] = ()) -> dict[str, str]:
        state = self._load()
        return dict(state[0]) if state else {}

    def _fresh(self, expires: float | None, now: float) -> bool:
        if self.expiry <= 0:
            return expires is None
        return expires is not None and expires - now > self.expiry / 2

    def _remove_stale_temporaries(self) -> None:
        """Dot-files a killed gfd left behind (nfd-worker ignores them; they just pile up)."""
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

    def publish(self, labels: dict[str, str]) -> PublishResult:
        if self._state is None:
            self._remove_stale_temporaries()
            self._state = self._load() or ({}, None)
        old, expires = self._state
        now = self.clock()
        change = diff(old, labels)
        if (change.empty and self._fresh(expires, now) and not self._stale
                and os.path.exists(self.path)):
            return PublishResult(written=False, change=change)
        self._write(labels, now)
        return PublishResult(written=True, change=change)

    def _write(self, labels: dict[str, str], now: float) -> None:
        new_expiry = now + self.expiry if self.expiry > 0 else None
        content = render(labels, expires=new_expiry)
        if len(content.encode()) > MAX_BYTES:
            raise PublishError(
                f"feature file {self.path} would be {len(content.encode())} bytes; nfd-worker "
                f"ignores files over {MAX_BYTES} bytes (reduce labels: --label-set compat)")
        self._writing = True
        try:
            write_atomically(self.path, content)
            self._state = (dict(labels), new_expiry)
            self._written = _identity(self.path)
            self._stale = False
        finally:
            self._writing = False

    def prune(self) -> PublishResult:
        old = self.published()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return PublishResult(written=False)
        except OSError as exc:
            raise PublishError(f"cannot remove feature file {self.path}: {exc.strerror}") from exc
        self._state = None
        return PublishResult(written=True, change=diff(old, {}))
