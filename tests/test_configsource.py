"""ConfigSource: the config file re-read by a running agent, new content taken only once it has
settled (never an empty or half-written file), the last good config kept on an error."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers.configfiles import REFERENCE_FILE, TS4, Walls, rewrite, ts

from gfd.configfile import load_config_file
from gfd.configsource import QUIET, ConfigSource
from gfd.errors import ConfigError


def test_config_source(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(REFERENCE_FILE)
    source = ConfigSource(str(path), quiet=0)  # each write counts as settled at once
    assert source.current is None

    first = source.poll()
    assert first is not None and first.values["sleep_interval"] == 60.0
    assert source.current == first
    assert source.poll() is None  # unchanged

    path.write_text(REFERENCE_FILE.replace("60s", "30s"))
    second = source.poll()
    assert second is not None and second.values["sleep_interval"] == 30.0
    assert second.digest != first.digest
    assert source.current == second

    forced = source.poll(force=True)  # SIGHUP: re-read even when unchanged
    assert forced == second

    path.write_text(REFERENCE_FILE.replace("60s", "soon"))
    with pytest.raises(ConfigError, match=r"flags\.gfd\.sleepInterval"):
        source.poll()
    assert source.current == second  # the last good config stays in effect
    with pytest.raises(ConfigError):
        source.poll(force=True)

    path.write_text(REFERENCE_FILE.replace("60s", "30s"))  # back to the good content
    assert source.poll() is None
    assert source.current == second

    path.unlink()
    with pytest.raises(ConfigError, match="not found"):
        source.poll()
    assert source.current == second


def test_config_source_refuses_a_fifo_swapped_in_and_keeps_the_last_good_config(
        tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(REFERENCE_FILE)
    source = ConfigSource(str(path))
    good = source.poll()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fifo.replace(path)
    with pytest.raises(ConfigError, match="is a FIFO"):
        source.poll()
    assert source.current == good


def test_config_source_missing_at_start(tmp_path: Path) -> None:
    source = ConfigSource(str(tmp_path / "absent.yaml"))
    with pytest.raises(ConfigError, match="not found"):
        source.poll()
    assert source.current is None


def test_config_source_follows_symlink_swap(tmp_path: Path) -> None:
    """The config-manager sidecar re-points a symlink; content comparison notices."""
    (tmp_path / "a").write_text(ts("{name: gpu, replicas: 2}"))
    (tmp_path / "b").write_text(ts("{name: gpu, replicas: 5}"))
    link = tmp_path / "config.yaml"
    link.symlink_to(tmp_path / "a")
    source = ConfigSource(str(link))
    assert source.poll() is not None
    link.unlink()
    link.symlink_to(tmp_path / "b")
    changed = source.poll()
    assert changed is not None and changed.sharing.replicas("nvidia.com/gpu") == 5


def test_an_empty_or_half_written_file_is_no_new_config_until_quiet(tmp_path: Path) -> None:
    """Regression (issue 20): two identical reads 50 ms apart took the truncated, empty file
    as a valid empty config (replicas 1, no sharing) while the writer was still at work."""
    path = tmp_path / "config.yaml"
    path.write_text(TS4)
    walls = Walls()
    source = ConfigSource(str(path), current=load_config_file(str(path)), clock=walls.clock,
                          wall=walls.wall)
    rewrite(path, "", walls)
    assert source.poll() is None and source.poll(force=True) is None, "empty: keep the last"
    walls.move(QUIET / 2)
    assert source.poll() is None
    rewrite(path, TS4[:21], walls)  # "version: v1\nsharing:": valid, and still being written
    walls.move(QUIET * 0.9)
    assert source.poll() is None
    rewrite(path, TS4.replace("4", "8"), walls)
    assert source.poll() is None
    walls.move(QUIET)  # quiet long enough: taken
    config = source.poll()
    assert config is not None and config.sharing.replicas("nvidia.com/gpu") == 8


def test_content_unchanged_for_the_quiet_period_is_taken_even_with_a_fresh_mtime(
        tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(TS4)
    walls = Walls()
    source = ConfigSource(str(path), current=load_config_file(str(path)), clock=walls.clock,
                          wall=lambda: 0.0)  # an mtime in the future: only what gfd saw counts
    rewrite(path, "")
    assert source.poll() is None
    walls.move(QUIET)
    config = source.poll()
    assert config is not None and config.sharing.strategy == "none", "an empty file, settled"


def test_a_whole_second_mtime_counts_one_second_less_quiet(tmp_path: Path) -> None:
    """A file system that keeps whole seconds rounds a fresh write's time down."""
    path = tmp_path / "config.yaml"
    path.write_text(TS4)
    source = ConfigSource(str(path), current=load_config_file(str(path)),
                          wall=lambda: 1_800_000_000.0 + QUIET + 0.5)
    rewrite(path, TS4.replace("4", "8"))
    os.utime(path, ns=(1_800_000_000 * 10**9,) * 2)
    assert source.poll() is None


def test_an_old_file_and_a_symlink_swap_are_taken_at_once(tmp_path: Path) -> None:
    (tmp_path / "a").write_text(TS4)
    (tmp_path / "b").write_text(TS4.replace("4", "5"))
    link = tmp_path / "config.yaml"
    link.symlink_to(tmp_path / "a")
    source = ConfigSource(str(link), current=load_config_file(str(link)))
    tmp = tmp_path / "config.yaml.tmp"
    tmp.symlink_to(tmp_path / "b")  # just written, but complete: swapped in through a link
    tmp.replace(link)
    swapped = source.poll()
    assert swapped is not None and swapped.sharing.replicas("nvidia.com/gpu") == 5
    rewrite(tmp_path / "b", TS4.replace("4", "6"))
    assert source.poll() is None, "the same file rewritten in place waits"
    old = time.time() - 2 * QUIET
    os.utime(tmp_path / "b", (old, old))
    again = source.poll()
    assert again is not None and again.sharing.replicas("nvidia.com/gpu") == 6
