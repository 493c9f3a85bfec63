"""The config file's watch: a ``config`` trigger when the file may have changed, and once quiet.

Inotify on the directories of the file's symlink chain fires a ``config`` trigger when the
file may have changed, and once more when it has been quiet.

What the agent then reads, and when new content counts as settled, is
``gfd.configsource.ConfigSource``'s; this module only wakes the loop.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from gfd.configsource import QUIET, Writers
from gfd.debounce import Debounce
from gfd.fswatch import IN_CLOSE_WRITE, IN_MODIFY, Watch
from gfd.triggers import Fire, Trigger, died

log = logging.getLogger(__name__)

_MAX_SYMLINKS = 40
"""As the kernel's limit: a longer chain is a loop."""


def watched_directories(path: str) -> list[str]:
    """The directories whose entries decide what ``path`` reads: its own, and that of every
    symlink it passes through and of the file it ends at. A ConfigMap volume swaps its
    ``..data`` symlink and GFD's config-manager re-points ``config.yaml``; both show up as an
    entry changing in one of these, as does an edit of the file itself."""
    found: dict[str, None] = {}
    current = os.path.abspath(path)
    for _ in range(_MAX_SYMLINKS):
        found[os.path.dirname(current)] = None
        try:
            target = os.readlink(current)
        except OSError:  # not a symlink (or gone): the chain ends here
            break
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    found[os.path.dirname(os.path.realpath(path))] = None
    return list(found)


def chain_paths(path: str) -> set[str]:
    """Every path whose entry decides what ``path`` reads: each path of its symlink chain,
    the file it ends at, and every directory above them (a ``..data`` link among them)."""
    found: set[str] = set()
    current = os.path.abspath(path)
    for _ in range(_MAX_SYMLINKS):
        found.add(current)
        try:
            target = os.readlink(current)
        except OSError:
            break
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    found.add(os.path.realpath(path))
    for entry in list(found):
        while (parent := os.path.dirname(entry)) != entry:
            found.add(parent)
            entry = parent
    return found


class ConfigWatch:
    """Fires a ``config`` trigger when the config file may have changed (inotify on
    :func:`watched_directories`, re-computed after each change as symlinks move).

    Only entries of the file's symlink chain count (:func:`chain_paths`): a log or any busy
    file beside the config wakes nothing. After a change it fires once more when the file has
    been quiet for ``quiet`` seconds, so a file rewritten in place (which ``ConfigSource``
    takes only once settled) is read again when it is."""

    def __init__(self, path: str, fire: Fire, *, clock: Callable[[], float] = time.monotonic,
                 quiet: float = QUIET, writers: Writers | None = None) -> None:
        self._writers = writers
        self._path = path
        self._fire = fire
        self._clock = clock
        self._quiet = quiet
        self._watch = Watch("config-watch", say=log.info,
                            fallback="the config file is checked every cycle instead")
        """Made here, before it starts: a change seen while it starts finds it."""
        self._settled = Debounce()
        """The ``settled`` trigger, ``quiet`` seconds after the last change."""

    def start(self) -> bool:
        """True when watching; False (with the reason logged once) when the agent must check
        the file every cycle instead."""
        return self._watch.start(watched_directories(self._path), on_event=self._changed,
                                 on_death=self._died)

    @property
    def watching(self) -> bool:
        """Started, and neither dead nor closed."""
        return self._watch.watching

    def _died(self, why: BaseException) -> None:
        self._fire(died("config", why, self._clock()))

    def _changed(self, directory: str, name: str, mask: int) -> None:
        self._watch.watch(watched_directories(self._path))  # a new ..data target, say
        entry = os.path.join(directory, name) if name else directory
        if name and entry not in chain_paths(self._path):
            return  # a file beside the config
        if self._writers is not None and mask & (IN_MODIFY | IN_CLOSE_WRITE):
            real = os.path.realpath(entry)
            if mask & IN_MODIFY:
                self._writers.modified(real)
            else:
                self._writers.closed(real)
        self._fire(Trigger(source="config", kind="changed", at=self._clock(),
                           detail=entry, reload_config=True))
        self._settled.restart(self._quiet + 0.05, lambda: self._fire(Trigger(
            source="config", kind="settled", at=self._clock(), detail=entry,
            reload_config=True)))

    def close(self) -> None:
        self._settled.close()
        self._watch.close()
