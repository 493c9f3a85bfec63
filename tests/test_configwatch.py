"""ConfigWatch: inotify on the config file's symlink chain fires a ``config`` trigger for a
ConfigMap update, a re-pointed symlink or an edit in place -- not for a busy file beside it --
and once more when the file has been quiet."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers.busyfile import written_without_pause
from helpers.configfiles import TS4, rewrite
from helpers.process import wait_for

from gfd import fswatch
from gfd.configfile import FileConfig, load_config_file
from gfd.configsource import ConfigSource
from gfd.configwatch import ConfigWatch, watched_directories
from gfd.triggers import Trigger


def configmap_volume(root: Path, files: dict[str, str], version: str = "a") -> Path:
    """A ConfigMap volume as the kubelet lays it out: the keys are symlinks through
    ``..data``, itself a symlink to a timestamped directory; an update swaps ``..data``."""
    root.mkdir(exist_ok=True)
    data = root / f"..2026_11_23_{version}"
    data.mkdir()
    for name, text in files.items():
        (data / name).write_text(text)
    tmp = root / "..data_tmp"
    tmp.symlink_to(data.name)
    tmp.replace(root / "..data")
    for name in files:
        if not (root / name).is_symlink():
            (root / name).symlink_to(f"..data/{name}")
    return root


def test_watched_directories_follow_a_configmap_volume(tmp_path: Path) -> None:
    volume = configmap_volume(tmp_path / "config", {"config.yaml": "{}"})
    dirs = watched_directories(str(volume / "config.yaml"))
    assert dirs[0] == str(volume)
    assert str(volume / "..data") in dirs  # inotify follows it to the timestamped directory
    assert dirs[-1] == str(volume / "..2026_11_23_a")


def test_watched_directories_follow_the_config_managers_symlink(tmp_path: Path) -> None:
    available = configmap_volume(tmp_path / "available-configs", {"a100": "{}"})
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").symlink_to(available / "a100")
    dirs = watched_directories(str(tmp_path / "config" / "config.yaml"))
    assert dirs[:2] == [str(tmp_path / "config"), str(available)]
    assert dirs[-1] == str(available / "..2026_11_23_a")


def test_watched_directories_of_a_plain_or_missing_file_are_its_directory(
        tmp_path: Path) -> None:
    assert watched_directories(str(tmp_path / "missing.yaml")) == [str(tmp_path)]
    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    assert watched_directories(str(loop)) == [str(tmp_path)]


class Fired:
    def __init__(self) -> None:
        self.triggers: list[Trigger] = []

    def __call__(self, trigger: Trigger) -> None:
        self.triggers.append(trigger)

    def count(self) -> int:
        return len(self.triggers)

    def seen_a_change_or_a_death(self) -> bool:
        return any(t.kind in ("changed", "watcher-died") for t in self.triggers)


@pytest.fixture
def fired() -> Fired:
    return Fired()


def start_watch(path: Path, fired: Fired) -> ConfigWatch:
    watch = ConfigWatch(str(path), fired)
    assert watch.start()
    return watch


def test_a_configmap_update_fires_a_config_trigger(tmp_path: Path, fired: Fired) -> None:
    volume = configmap_volume(tmp_path / "config", {"config.yaml": "{}"})
    watch = start_watch(volume / "config.yaml", fired)
    try:
        configmap_volume(volume, {"config.yaml": "flags: {migStrategy: mixed}"}, version="b")
        wait_for(lambda: fired.count() > 0, timeout=5)
        trigger = fired.triggers[0]
        assert (trigger.source, trigger.kind, trigger.reload_config) == ("config", "changed",
                                                                          True)
        # the watch moved with ..data: a second update is seen too
        fired.triggers.clear()
        configmap_volume(volume, {"config.yaml": "flags: {migStrategy: single}"}, version="c")
        wait_for(lambda: fired.count() > 0, timeout=5)
    finally:
        watch.close()


def test_the_config_manager_repointing_the_symlink_fires(tmp_path: Path, fired: Fired) -> None:
    available = configmap_volume(tmp_path / "available-configs", {"a": "{}", "b": "{}"})
    link = tmp_path / "config" / "config.yaml"
    link.parent.mkdir()
    link.symlink_to(available / "a")
    watch = start_watch(link, fired)
    try:
        tmp = link.with_name("config.yaml.tmp")
        tmp.symlink_to(available / "b")
        tmp.replace(link)
        wait_for(lambda: fired.count() > 0, timeout=5)
        fired.triggers.clear()
        configmap_volume(available, {"a": "{}", "b": "flags: {}"}, version="b")
        wait_for(lambda: fired.count() > 0, timeout=5)  # the ConfigMap behind it changed
    finally:
        watch.close()


def test_an_edit_in_place_fires(tmp_path: Path, fired: Fired) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("{}")
    watch = start_watch(path, fired)
    try:
        with path.open("w") as handle:
            handle.write("flags: {}")
        wait_for(lambda: fired.count() > 0, timeout=5)
    finally:
        watch.close()


def test_a_busy_file_beside_the_config_wakes_nothing(tmp_path: Path, fired: Fired) -> None:
    """Regression (issue 20): every write to gfd's log beside its config fired a config
    trigger, and each trigger a cycle (and, during an API outage, a request)."""
    volume = configmap_volume(tmp_path / "config", {"config.yaml": "{}"})
    watch = ConfigWatch(str(volume / "config.yaml"), fired, quiet=0.2)
    assert watch.start()
    try:
        with (volume / "gfd.log").open("w") as log_file:
            for line in range(50):
                log_file.write(f"line {line}\n")
                log_file.flush()
        (volume / "..data" / "other-key").write_text("x")  # a key gfd does not read
        time.sleep(0.5)
        assert fired.count() == 0, [t.detail for t in fired.triggers]
        configmap_volume(volume, {"config.yaml": "flags: {}"}, version="b")
        wait_for(lambda: fired.count() > 0, timeout=5)
    finally:
        watch.close()


def test_a_change_fires_again_once_the_file_has_been_quiet(tmp_path: Path,
                                                           fired: Fired) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("{}")
    watch = ConfigWatch(str(path), fired, quiet=0.2)
    assert watch.start()
    try:
        rewrite(path, "flags: {}")
        wait_for(lambda: any(t.kind == "settled" for t in fired.triggers), timeout=5)
        assert fired.triggers[0].kind == "changed" and fired.triggers[-1].kind == "settled"
        assert all(t.reload_config for t in fired.triggers)
    finally:
        watch.close()


def test_a_file_its_writer_still_holds_open_is_not_taken_however_long_it_pauses(
        tmp_path: Path, fired: Fired) -> None:
    """A writer that truncates the file and pauses longer than the quiet period: inotify saw
    it modify the file and not close it, so the empty file is still no config."""
    path = tmp_path / "config.yaml"
    path.write_text(TS4)
    source = ConfigSource(str(path), current=load_config_file(str(path)), quiet=0.1)
    watch = ConfigWatch(str(path), fired, quiet=0.1, writers=source.writers)
    assert watch.start()
    try:
        with path.open("w") as handle:
            wait_for(lambda: source.writers.writing(str(path.resolve())), timeout=5)
            time.sleep(0.3)  # three quiet periods, the file empty and open
            assert source.poll() is None
            handle.write(TS4.replace("4", "8"))
        wait_for(lambda: not source.writers.writing(str(path.resolve())), timeout=5)
        polled: list[FileConfig | None] = []  # closed: taken once quiet (0.1 s), however late
        wait_for(lambda: polled.append(source.poll()) or polled[-1] is not None)
        config = polled[-1]
        assert config is not None and config.sharing.replicas("nvidia.com/gpu") == 8
    finally:
        watch.close()


def test_without_inotify_the_watch_does_not_start(tmp_path: Path, fired: Fired,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(fswatch, "_libc", lambda: "inotify is not available: test")
    caplog.set_level("INFO", logger="gfd.configwatch")
    assert not ConfigWatch(str(tmp_path / "config.yaml"), fired).start()
    assert "checked every cycle instead" in caplog.text


def test_a_config_watch_that_dies_fires_a_reload_and_says_the_file_is_polled(
        tmp_path: Path, fired: Fired, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from gfd import configwatch

    path = tmp_path / "config.yaml"
    path.write_text("{}")
    watch = start_watch(path, fired)
    try:
        def broken(path: str) -> list[str]:
            raise RuntimeError("symlink chain unreadable")

        monkeypatch.setattr(configwatch, "watched_directories", broken)
        path.write_text("flags: {migStrategy: mixed}")
        wait_for(lambda: fired.count() > 0, timeout=5)
        trigger = fired.triggers[0]
        assert (trigger.source, trigger.kind, trigger.reload_config) == (
            "config", "watcher-died", True)
        assert "RuntimeError: symlink chain unreadable" in trigger.detail
        assert ("config-watch watch stopped: RuntimeError: symlink chain unreadable; the "
                "config file is checked every cycle instead") in caplog.text
    finally:
        watch.close()


def test_a_watch_started_while_its_directory_is_busy_stays_alive_and_sees_the_next_change(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Regression (issue 29): the watch thread could take a change (here: a log written
    beside the config) before the watch was stored, and died on it for the life of the process
    ("config-watch watch stopped: AssertionError"), leaving the file polled each cycle."""
    path = tmp_path / "config.yaml"
    path.write_text("{}")
    with written_without_pause(tmp_path / "gfd.log"):
        for round_ in range(40):
            fired = Fired()
            watch = ConfigWatch(str(path), fired)
            try:
                assert watch.start()
                path.write_text(f"flags: {{}}  # round {round_}")
                wait_for(fired.seen_a_change_or_a_death, timeout=10)
                died = [t.detail for t in fired.triggers if t.kind == "watcher-died"]
                assert died == [] and watch.watching, f"round {round_}: {died}"
            finally:
                watch.close()
    assert "watch stopped" not in caplog.text
