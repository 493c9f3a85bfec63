"""Config file texts and in-place rewrites shared by the config file's parser, source and watch
tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

# The device plugin's documented example file, every gfd-relevant field set.
REFERENCE_FILE = """\
version: v1
flags:
  migStrategy: none
  failOnInitError: true
  gfd:
    oneshot: false
    noTimestamp: false
    sleepInterval: 60s
    outputFile: /etc/kubernetes/node-feature-discovery/features.d/gfd
    machineTypeFile: /sys/class/dmi/id/product_name
sharing:
  timeSlicing:
    renameByDefault: false
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""


def ts(entry: str, section: str = "timeSlicing", extra: str = "") -> str:
    """A sharing section with one resource entry (flow-style YAML)."""
    return f"sharing: {{{section}: {{{extra}resources: [{entry}]}}}}"


TS4 = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
       "      replicas: 4\n")


class Walls:
    """A monotonic and a wall clock that stand still until moved (the file's mtime is real)."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.offset = 0.0

    def clock(self) -> float:
        return self.mono

    def wall(self) -> float:
        return time.time() + self.offset

    def move(self, seconds: float) -> None:
        self.mono += seconds
        self.offset += seconds


def rewrite(path: Path, text: str, walls: Walls | None = None) -> None:
    """An in-place rewrite: the same file truncated, then written (modified at ``walls``'
    time)."""
    with path.open("r+") as handle:
        handle.truncate(0)
        handle.write(text)
    if walls is not None:
        os.utime(path, ns=(int(walls.wall() * 1e9),) * 2)
