"""DirWatch: inotify on directories, reported from a thread that costs nothing while idle and
stops at once; open_watch says why when there is no inotify (the caller then polls)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.busyfile import written_without_pause
from helpers.process import wait_for

from gfd import fswatch
from gfd.fswatch import DirWatch, Watch, open_watch


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def __call__(self, directory: str, name: str) -> None:
        with self.lock:
            self.events.append((directory, name))

    def names(self) -> set[str]:
        with self.lock:
            return {name for _, name in self.events}

    def clear(self) -> None:
        with self.lock:
            self.events.clear()


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def watch(seen: Seen) -> Iterator[DirWatch]:
    opened = open_watch(seen, name="test-watch")
    assert isinstance(opened, DirWatch), opened
    yield opened
    opened.close()


def test_every_kind_of_change_in_a_watched_directory_is_reported(
        tmp_path: Path, seen: Seen, watch: DirWatch) -> None:
    assert watch.watch([str(tmp_path)]) == []
    watch.start()
    (tmp_path / "created").write_text("a")
    wait_for(lambda: "created" in seen.names(), timeout=5)
    (tmp_path / "created").rename(tmp_path / "renamed")
    wait_for(lambda: "renamed" in seen.names(), timeout=5)
    (tmp_path / "renamed").chmod(0o600)
    os.symlink("renamed", tmp_path / "link")
    (tmp_path / "renamed").unlink()
    wait_for(lambda: {"link", "renamed"} <= seen.names(), timeout=5)
    assert all(directory == str(tmp_path) for directory, _ in seen.events)


def test_changes_elsewhere_are_not_reported(tmp_path: Path, seen: Seen, watch: DirWatch) -> None:
    (tmp_path / "watched").mkdir()
    (tmp_path / "other").mkdir()
    watch.watch([str(tmp_path / "watched")])
    watch.start()
    (tmp_path / "other" / "x").write_text("x")
    (tmp_path / "watched" / "y").write_text("y")
    wait_for(lambda: "y" in seen.names(), timeout=5)
    assert "x" not in seen.names()


def test_a_missing_directory_is_no_problem_and_a_removed_one_is_forgotten(
        tmp_path: Path, seen: Seen, watch: DirWatch) -> None:
    assert watch.watch([str(tmp_path / "not-yet")]) == []
    sub = tmp_path / "sub"
    sub.mkdir()
    watch.watch([str(sub)])
    watch.start()
    sub.rmdir()  # its watch ends (IN_IGNORED); nothing is reported for it afterwards
    sub.mkdir()
    (sub / "z").write_text("z")
    threading.Event().wait(0.3)  # nothing to wait for: give a wrong report time to arrive
    assert "z" not in seen.names()


def test_a_file_instead_of_a_directory_is_not_watched(tmp_path: Path, watch: DirWatch) -> None:
    (tmp_path / "file").write_text("")
    assert watch.watch([str(tmp_path / "file")]) == []


def test_close_ends_the_thread_at_once_and_is_idempotent(
        tmp_path: Path, seen: Seen) -> None:
    opened = open_watch(seen, name="closing")
    assert isinstance(opened, DirWatch)
    opened.watch([str(tmp_path)])
    opened.start()
    before = {t.name for t in threading.enumerate()}
    assert "gfd-closing" in before
    opened.close()
    opened.close()
    assert "gfd-closing" not in {t.name for t in threading.enumerate()}


def test_without_inotify_open_watch_says_why(monkeypatch: pytest.MonkeyPatch,
                                               seen: Seen) -> None:
    monkeypatch.setattr(fswatch, "_libc", lambda: "inotify is not available: no libc")
    assert open_watch(seen, name="x") == "inotify is not available: no libc"


def test_an_overflow_reports_every_directory_as_changed(tmp_path: Path, seen: Seen,
                                                        watch: DirWatch) -> None:
    watch.watch([str(tmp_path)])
    header = fswatch._HEADER.pack(-1, fswatch.IN_Q_OVERFLOW, 0, 0)
    assert list(watch._events(header)) == [(str(tmp_path), "")]


def test_it_works_with_descriptors_past_1024(tmp_path: Path, seen: Seen) -> None:
    # a busy process (the metrics server's connections, a fleet of clients) has such fds
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        opened = open_watch(seen, name="high-fds")
        assert isinstance(opened, DirWatch)
        try:
            opened.watch([str(tmp_path)])
            opened.start()
            (tmp_path / "x").write_text("x")
            wait_for(lambda: "x" in seen.names(), timeout=5)
        finally:
            opened.close()
    finally:
        for fd in filler:
            os.close(fd)


def test_a_watch_whose_callback_fails_says_so_once_and_reports_its_death(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    deaths: list[BaseException] = []

    def broken(directory: str, name: str) -> None:
        raise ValueError(f"cannot handle {name}")

    opened = open_watch(broken, name="test-watch", on_death=deaths.append,
                        fallback="checked every cycle instead")
    assert isinstance(opened, DirWatch), opened
    try:
        assert opened.watch([str(tmp_path)]) == []
        opened.start()
        (tmp_path / "a").write_text("a")
        wait_for(lambda: bool(deaths), timeout=5)
        (tmp_path / "b").write_text("b")  # nobody is listening any more
        assert [str(d) for d in deaths] == ["cannot handle a"] and opened.dead
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert errors == ["test-watch watch stopped: ValueError: cannot handle a; checked "
                          "every cycle instead"]
    finally:
        opened.close()


def test_closing_a_watch_is_not_a_death(tmp_path: Path, seen: Seen) -> None:
    deaths: list[BaseException] = []
    opened = open_watch(seen, name="test-watch", on_death=deaths.append)
    assert isinstance(opened, DirWatch)
    opened.watch([str(tmp_path)])
    opened.start()
    opened.close()
    assert deaths == [] and not opened.dead


def test_a_watch_without_inotify_says_why_and_what_instead_and_stays_usable(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(fswatch, "_libc", lambda: "inotify is not available: no libc")
    said: list[str] = []
    held = Watch("test-watch", fallback="polled instead", say=said.append)
    assert not held.start([str(tmp_path)])
    assert said == ["inotify is not available: no libc; polled instead"]
    assert not held.watching
    assert held.watch([str(tmp_path)]) == []  # nothing to add to, and no error
    held.close()


def test_a_directory_it_cannot_watch_is_said_with_the_fallback(tmp_path: Path) -> None:
    said: list[str] = []
    held = Watch("test-watch", fallback="polled instead", say=said.append)
    unwatchable = tmp_path / ("x" * 300)  # a name longer than any file system takes
    assert not held.start([str(tmp_path), str(unwatchable)])
    assert said == [f"cannot watch {unwatchable}: File name too long; polled instead"]
    assert not held.watching
    assert "gfd-test-watch" not in {t.name for t in threading.enumerate()}


def test_a_watch_runs_once_however_often_started_and_stops_on_close(tmp_path: Path) -> None:
    seen: list[str] = []
    said: list[str] = []
    held = Watch("test-watch", fallback="polled instead", say=said.append)
    assert "gfd-test-watch" not in {t.name for t in threading.enumerate()}
    try:
        assert held.start([str(tmp_path)], lambda directory, name: seen.append(name))
        assert held.start([str(tmp_path)], lambda directory, name: None)  # the same one
        assert held.watching and said == []
        assert [t.name for t in threading.enumerate()].count("gfd-test-watch") == 1
        (tmp_path / "new").write_text("x")
        wait_for(lambda: "new" in seen)
    finally:
        held.close()
    assert not held.watching
    assert "gfd-test-watch" not in {t.name for t in threading.enumerate()}
    held.close()  # idempotent


def test_a_callback_can_use_the_watch_from_the_first_event_on(tmp_path: Path) -> None:
    """The watch is held before its thread starts: events already waiting when it starts (a
    busy directory) reach a callback that finds it, never a watch still being made."""
    later = tmp_path / "later"
    later.mkdir()

    def one_round(round_: int) -> None:
        deaths: list[BaseException] = []
        added: list[list[str]] = []
        said: list[str] = []
        held = Watch("test-watch", fallback="polled instead", say=said.append)
        try:
            assert held.start([str(tmp_path)], lambda directory, name: added.append(
                held.watch([str(later)])), on_death=deaths.append), said
            wait_for(lambda: len(added) + len(deaths) > 0)
            assert deaths == [] and held.watching, f"round {round_}: {deaths}"
            assert added[0] == [], "the directory is added without a problem"
        finally:
            held.close()

    with written_without_pause(tmp_path / "log"):
        for round_ in range(20):
            one_round(round_)
