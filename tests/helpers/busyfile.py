"""A file written without pause by another thread: a busy directory for the watches' tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def written_without_pause(path: Path) -> Iterator[None]:
    """While inside, another thread appends lines to ``path`` as fast as it can (flushing
    each: every line is an inotify event in the file's directory)."""
    stop = threading.Event()

    def keep_writing() -> None:
        with path.open("w") as handle:
            while not stop.is_set():
                handle.write("line\n")
                handle.flush()

    writer = threading.Thread(target=keep_writing, name="busy-file", daemon=True)
    writer.start()
    try:
        yield
    finally:
        stop.set()
        writer.join(timeout=10)
