"""SIGKILL at random points while gfd rewrites its feature file.

Promises (the feature file is written as a dot-file in the same directory, fsynced and
renamed into place; no labels are lost on a restart; the previous labels survive a kill
during a write): a reader (nfd-worker) only ever
sees a complete old or complete new file, a killed writer leaves nothing but dot-files
behind (nfd-worker ignores those), and a restarted agent adopts what it finds.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from gfd.sinks.featurefile import FeatureFileSink, parse, render, write_atomically

SEED = 20240611
ITERATIONS = 30
MAX_DELAY_S = 0.050

# A child that rewrites the file as fast as it can, alternating two complete label sets
# through the real sink (each publish is a change, so each one writes). It says "ready"
# once the loop is about to start, so the kill lands inside the write loop, not during
# interpreter start-up.
WRITER = """
import json, sys
from gfd.sinks.featurefile import FeatureFileSink
path, sets = sys.argv[1], json.loads(sys.argv[2])
a, b = sets
sink = FeatureFileSink(path, expiry=0)
sink.publish(a)
sys.stdout.write("ready\\n")
sys.stdout.flush()
while True:
    sink.publish(b)
    sink.publish(a)
"""


def _label_set(tag: str, n: int) -> dict[str, str]:
    """A large-ish set (tens of KiB) so that a write spans several syscalls' worth of time."""
    labels = {f"nvidia.com/fault.{tag}.{i:04d}": f"{tag}-value-{i:04d}-{'x' * 20}"
              for i in range(n)}
    labels["nvidia.com/gpu.product"] = f"NVIDIA-{tag.upper()}"
    return labels


OLD = _label_set("old", 300)
NEW = _label_set("new", 420)


def _stray_names(directory: Path) -> set[str]:
    return {p.name for p in directory.iterdir() if not p.name.startswith(".")}


def test_sigkill_mid_write_leaves_old_or_new_file_never_partial(tmp_path: Path) -> None:
    """Atomic dot-file + rename, no lost labels: 30 SIGKILLs at seeded
    random points (0-50 ms into a tight rewrite loop) -- the feature file is always exactly the
    complete old or the complete new content, and only dot-files are ever left beside it."""
    directory = tmp_path / "features.d"
    directory.mkdir()
    path = directory / "gfd"
    rng = random.Random(SEED)
    # what the sink writes: gfd's mark, then the labels (expiry 0: no directive)
    old_text, new_text = (render(OLD, expires=None, mark=True),
                          render(NEW, expires=None, mark=True))
    outcomes = {"old": 0, "new": 0}
    write_atomically(str(path), old_text)
    for iteration in range(ITERATIONS):
        delay = rng.uniform(0.0, MAX_DELAY_S)
        with subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), json.dumps([OLD, NEW])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ) as proc:
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            assert ready == "ready\n", proc.stderr.read() if proc.stderr else ready
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL, f"iteration {iteration}: writer ended early"
        text = path.read_text()
        labels, expires = parse(text)
        assert expires is None
        assert text in (old_text, new_text), (
            f"iteration {iteration} (kill after {delay * 1000:.1f} ms): partial or mixed file, "
            f"{len(text)} bytes, {len(labels)} labels")
        assert labels in (OLD, NEW)
        outcomes["old" if labels == OLD else "new"] += 1
        assert _stray_names(directory) == {"gfd"}, "only dot-files may be left by a killed writer"
    assert sum(outcomes.values()) == ITERATIONS


def test_restarted_sink_adopts_a_file_left_by_a_killed_writer(tmp_path: Path) -> None:
    """No lost labels on restart, and no rewrite when unchanged: after a
    writer is SIGKILLed, a fresh FeatureFileSink over the same path reads back the complete
    labels, does not rewrite them when they are what it wants, and publishes a change fine,
    unbothered by the dot-files the killed writer may have left."""
    directory = tmp_path / "features.d"
    directory.mkdir()
    path = directory / "gfd"
    with subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), json.dumps([OLD, NEW])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    # A leftover temp file, as a writer killed between mkstemp and rename leaves it.
    (directory / ".gfd-killedwriter").write_text("nvidia.com/gpu.product=half-writ")
    left = parse(path.read_text())[0]
    assert left in (OLD, NEW)
    inode = path.stat().st_ino

    sink = FeatureFileSink(str(path), expiry=0)
    assert sink.published() == left, "the restarted sink sees the labels the killed one wrote"
    again = sink.publish(dict(left))
    assert not again.written and again.change.empty, "adopted as is: no rewrite, no change"
    assert path.stat().st_ino == inode

    wanted = {**left, "nvidia.com/gpu.count": "8"}
    result = sink.publish(wanted)
    assert result.written and result.change.added == ("nvidia.com/gpu.count",)
    assert not result.change.removed and not result.change.changed
    assert parse(path.read_text())[0] == wanted
    assert _stray_names(directory) == {"gfd"}
