"""Directory watches with Linux inotify (libc through ctypes; no extra dependency).

A :class:`DirWatch` watches a few directories and calls ``on_change(directory, name)`` from
its own daemon thread for every entry created, written, moved, deleted or changed in them.
The thread blocks in ``poll()`` on the inotify descriptor and a stop pipe: no CPU while
nothing happens, and ``close()`` ends it at once.

A thread that dies (an error in ``on_change``, a failing read) says so once, at error
level, and calls ``on_death``: its owner goes back to polling at once.

Where inotify is unavailable (not Linux, a seccomp profile that refuses it, the per-user
watch or instance limit reached) :func:`open_watch` returns the reason instead, and the
caller keeps polling: a watch is an optimisation, never a requirement. An owner holds a
:class:`Watch`: made before it starts, started (or told why not) and closed in one way.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import struct
import threading
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

IN_MODIFY = 0x002
IN_ATTRIB = 0x004
IN_CLOSE_WRITE = 0x008
IN_MOVED_FROM = 0x040
IN_MOVED_TO = 0x080
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

CHANGES = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
           | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF)
_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)
_READ_SIZE = 64 * 1024

OnDeath = Callable[[BaseException], None]
"""``on_death(error)``: the watch thread ended on this error; nothing is watched any more."""
OnChange = Callable[[str, str], None]
"""``on_change(directory, name)``; ``name`` is "" for the directory itself, or after an
overflow (events were lost: treat everything as changed)."""
OnEvent = Callable[[str, str, int], None]
"""``on_event(directory, name, mask)``: as ``OnChange``, with the inotify mask of the entry's
events in one read OR-ed together -- except that of ``IN_MODIFY`` and ``IN_CLOSE_WRITE`` only
the later one is kept, so the mask tells whether a writer still had the file open."""


class _Inotify:
    """The three libc calls, with errno."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.init1 = libc.inotify_init1
        self.init1.argtypes = [ctypes.c_int]
        self.init1.restype = ctypes.c_int
        self.add_watch = libc.inotify_add_watch
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.add_watch.restype = ctypes.c_int


def _libc() -> _Inotify | str:
    try:
        return _Inotify()
    except (OSError, AttributeError) as exc:
        return f"inotify is not available: {exc}"


class DirWatch:
    """inotify on a set of directories; see the module docstring."""

    def __init__(self, calls: _Inotify, fd: int, on_change: OnChange, name: str,
                 on_event: OnEvent | None = None, *, on_death: OnDeath | None = None,
                 fallback: str = "") -> None:
        self._calls = calls
        self._fd = fd
        self._on_change = on_change
        self._on_event = on_event
        self._on_death = on_death
        self._name = name
        self._fallback = fallback or "changes are no longer watched"
        self.dead = False
        """The thread ended on an error (``close`` does not set it)."""
        self._dirs: dict[int, str] = {}
        self._lock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"gfd-{name}", daemon=True)

    def watch(self, directories: Iterable[str]) -> list[str]:
        """Add these directories (already watched ones are kept); the problems, one line each
        (a directory that does not exist is not one: it may appear later, see ``replace``)."""
        problems = []
        for directory in directories:
            wd = self._calls.add_watch(self._fd, os.fsencode(directory), CHANGES | IN_ONLYDIR)
            if wd >= 0:
                with self._lock:
                    self._dirs[wd] = directory
                continue
            err = ctypes.get_errno()
            if err not in (errno.ENOENT, errno.ENOTDIR):
                problems.append(f"cannot watch {directory}: {os.strerror(err)}")
        return problems

    def start(self) -> DirWatch:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread (at once) and release the descriptor; idempotent."""
        if self._closed:
            return
        self._closed = True
        os.write(self._stop_w, b"x")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        for fd in (self._fd, self._stop_r, self._stop_w):
            os.close(fd)

    def _run(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # a watcher that dies says so, and its owner polls again
            if self._closed:
                return
            self.dead = True
            log.error("%s watch stopped: %s: %s; %s", self._name, type(exc).__name__, exc,
                      self._fallback)
            log.debug("%s watch failure", self._name, exc_info=True)
            if self._on_death is not None:
                self._on_death(exc)

    def _serve(self) -> None:
        poller = select.poll()  # not select(): it cannot take a descriptor past 1024
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            ready = {fd for fd, _ in poller.poll()}
            if self._stop_r in ready:
                return
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                continue
            for (directory, name), mask in self._events(data).items():
                if self._on_event is not None:
                    self._on_event(directory, name, mask)
                else:
                    self._on_change(directory, name)

    def _events(self, data: bytes) -> dict[tuple[str, str], int]:
        """(directory, name) for each event in one read, duplicates folded in order, with
        their masks (see ``OnEvent``)."""
        seen: dict[tuple[str, str], int] = {}
        offset = 0
        while offset + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            raw = data[offset + _HEADER.size: offset + _HEADER.size + length]
            offset += _HEADER.size + length
            if mask & IN_Q_OVERFLOW:
                with self._lock:
                    dirs = list(self._dirs.values())
                for d in dirs:
                    seen[(d, "")] = seen.get((d, ""), 0) | mask
                continue
            with self._lock:
                directory = self._dirs.get(wd)
                if mask & IN_IGNORED:  # the directory went away: its watch is gone
                    self._dirs.pop(wd, None)
            if directory is None or mask & IN_IGNORED:
                continue
            key = (directory, os.fsdecode(raw.rstrip(b"\0")))
            before = seen.get(key, 0)
            if mask & (IN_MODIFY | IN_CLOSE_WRITE):
                before &= ~(IN_MODIFY | IN_CLOSE_WRITE)
            seen[key] = before | mask
        return seen


def open_watch(on_change: OnChange, *, name: str, on_event: OnEvent | None = None,
               on_death: OnDeath | None = None, fallback: str = "") -> DirWatch | str:
    """A started-to-be DirWatch (call ``watch()`` then ``start()``), or why there is none;
    ``on_event``, when given, is called instead of ``on_change``; ``fallback``: what the
    owner does instead once the watch is gone (said when it dies)."""
    calls = _libc()
    if isinstance(calls, str):
        return calls
    fd = calls.init1(IN_NONBLOCK | IN_CLOEXEC)
    if fd < 0:
        return f"inotify is not available: {os.strerror(ctypes.get_errno())}"
    return DirWatch(calls, fd, on_change, name, on_event, on_death=on_death, fallback=fallback)


def _ignore(directory: str, name: str) -> None:
    """``on_change`` of a watch that reports through ``on_event``."""


class Watch:
    """A directory watch as its owner holds it: made with the owner (stored before anything
    starts, so a callback may use it from the first event on), then started -- or not, with
    the one line that says why -- and closed, whatever became of it. Thread-safe.

    The owner never sees a half-made watch: :meth:`watch` and :meth:`close` work before
    :meth:`start`, after a start that failed and after :meth:`close`, doing nothing there."""

    def __init__(self, name: str, *, fallback: str, say: Callable[[str], None]) -> None:
        self._name = name
        self._fallback = fallback
        """What the owner does instead (said when the watch cannot start or dies)."""
        self._say = say
        """How the owner logs why its watch did not start (one line, with the fallback)."""
        self._lock = threading.Lock()
        self._running: DirWatch | None = None

    @property
    def watching(self) -> bool:
        """Started, and neither dead nor closed."""
        with self._lock:
            running = self._running
        return running is not None and not running.dead

    def start(self, directories: Iterable[str], on_change: OnChange = _ignore, *,
              on_event: OnEvent | None = None, on_death: OnDeath | None = None) -> bool:
        """Watch ``directories`` and call ``on_change`` (or ``on_event``, when given) from the
        watch's thread; whether it watches (already, too). When it cannot, the owner's ``say``
        gets why, and the fallback, in one line. A watch closed may be started again."""
        with self._lock:
            if self._running is not None:
                return True
            opened = open_watch(on_change, name=self._name, on_event=on_event,
                                on_death=on_death, fallback=self._fallback)
            if isinstance(opened, str):
                why = opened
            elif problems := opened.watch(directories):
                opened.close()
                why = problems[0]
            else:
                self._running = opened.start()  # its callbacks wait for the lock: stored first
                return True
        self._say(f"{why}; {self._fallback}")
        return False

    def watch(self, directories: Iterable[str]) -> list[str]:
        """Add directories to a started watch (see ``DirWatch.watch``); none otherwise."""
        with self._lock:
            running = self._running
        return running.watch(directories) if running is not None else []

    def close(self) -> None:
        """Stop watching; idempotent, and safe from the watch's own callbacks."""
        with self._lock:
            running, self._running = self._running, None
        if running is not None:
            running.close()
