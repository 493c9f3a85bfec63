"""The config file as a running agent re-reads it: new content is taken only once settled.

``ConfigSource`` re-reads the file when asked (a ``config`` trigger, SIGHUP, each cycle
without a watch) and takes new content only once it has settled, so a file rewritten in
place is never taken half-written; ``Writers`` is what a ``gfd.configwatch.ConfigWatch``
tells it about files a writer still holds open.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from gfd.configfile import FileConfig, file_label, parse_bytes, read_config_bytes

log = logging.getLogger(__name__)

QUIET = 1.0
"""Seconds a config file rewritten in place must stay unchanged before it is taken: a writer
that truncates the file and then writes it (``slow-cmd > config.yaml``) is never read in its
empty or half-written state, however valid that state is."""


WRITER_GRACE = 10.0
"""Seconds a file a writer modified and still holds open counts as being written; a writer
that keeps it open longer without writing is taken to be done."""


class Writers:
    """Which files a writer modified and has not closed yet, as ``ConfigWatch`` sees it
    (inotify ``IN_MODIFY`` ... ``IN_CLOSE_WRITE``), keyed by real path; thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[str, float] = {}

    def modified(self, path: str) -> None:
        with self._lock:
            self._open[path] = self._clock()

    def closed(self, path: str) -> None:
        with self._lock:
            self._open.pop(path, None)

    def writing(self, path: str) -> bool:
        """A writer modified ``path`` within ``WRITER_GRACE`` and has not closed it."""
        with self._lock:
            since = self._open.get(path)
        return since is not None and self._clock() - since < WRITER_GRACE


@dataclass(frozen=True, slots=True)
class _Stat:
    """What tells one state of a file from another without reading it."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int
    regular: bool


def _stat(path: str) -> _Stat | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return _Stat(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                 stat.S_ISREG(st.st_mode))


class ConfigSource:
    """Watches one config file: poll() returns a new FileConfig when the content changed
    (or force=True, e.g. on SIGHUP), None when unchanged; raises ConfigError when the new
    content is invalid -- the caller keeps the last good config. A missing file after a
    good one is an error too (reported, last good kept).

    New content is taken only once it is settled, else poll() returns None and the last good
    config stays: a file swapped in through a symlink (a ConfigMap's ``..data`` flip, the
    config-manager re-pointing ``config.yaml``) at once; a regular file rewritten in place
    once it has not changed for ``quiet`` seconds (its modification time, or as long as this
    source has seen the same content), so an empty, shrinking or half-written file is never a
    new config. ``ConfigWatch`` polls again when that time is up."""

    def __init__(self, path: str, *, current: FileConfig | None = None, quiet: float = QUIET,
                 clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.writers = Writers(clock)
        """Filled by a ``ConfigWatch``: a file a writer still holds open is not settled."""
        self._path = path
        self._current = current
        """The config in use (e.g. the one read at start), so an unchanged file is no news."""
        self._quiet = quiet
        self._clock = clock
        self._wall = wall
        self._real = os.path.realpath(path)
        """Where the path led when the config in use was read."""
        self._seen: tuple[str, _Stat] | None = None
        self._seen_at = 0.0

    @property
    def path(self) -> str:
        return self._path

    @property
    def quiet(self) -> float:
        return self._quiet

    @property
    def current(self) -> FileConfig | None:
        """The last good config, None before the first successful poll."""
        return self._current

    def poll(self, *, force: bool = False) -> FileConfig | None:
        real = os.path.realpath(self._path)
        before = _stat(self._path)
        raw = read_config_bytes(self._path)
        after = _stat(self._path)
        digest = hashlib.sha256(raw).hexdigest()
        unchanged = self._current is not None and self._current.digest == digest
        if unchanged:
            self._seen = None
            if not force:
                return None
        elif not self._settled(digest, before, after, real):
            return None
        config = parse_bytes(raw, path=self._path, digest=digest)
        self._current, self._real, self._seen = config, real, None
        return config

    def _settled(self, digest: str, before: _Stat | None, after: _Stat | None,
                 real: str) -> bool:
        """Whether content just read may replace the config in use (see the class)."""
        if before is None or after is None or before != after:
            self._seen = None
            return False  # changed while read: being written
        if self._current is None or not after.regular or real != self._real:
            return True  # nothing to keep; /dev/null; or swapped in through a link
        if self.writers.writing(real):
            log.debug("%s: a writer has it open; keeping the last good config",
                      file_label(self._path))
            return False
        coarse = 1.0 if after.mtime_ns % 1_000_000_000 == 0 else 0.0  # whole-second mtimes
        if self._wall() - after.mtime_ns / 1e9 >= self._quiet + coarse:
            return True  # not modified for the quiet period
        now = self._clock()
        if self._seen != (digest, after):
            self._seen, self._seen_at = (digest, after), now
            log.debug("%s is changing; keeping the last good config until it has been "
                      "quiet for %gs", file_label(self._path), self._quiet)
            return False
        return now - self._seen_at >= self._quiet
