"""``gfd fleet --watch`` as a process over the fake API server, as a user runs it in a
terminal: the view once every collection is read, then one JSON document a line each time
what it shows changes (a pod bound, a node cordoned), and Ctrl-C ends it with exit 0. The
test waits for each line, never for time."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer
from helpers.fleetevents import NODES, node_object, pod_object
from helpers.process import ENV_PREFIXES

WAIT = 60.0
"""Seconds for a line to come (well under one); the bound is for a loaded machine."""


class Watching:
    """The process, and its stdout line by line as it prints them."""

    def __init__(self, argv: list[str]) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def document(self) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=WAIT)
        except queue.Empty:
            raise AssertionError(f"no line within {WAIT:.0f} s; stderr: "
                                 f"{self.stderr_so_far()}") from None
        return dict(json.loads(line))

    def stderr_so_far(self) -> str:
        if self.proc.poll() is None:
            return "(running)"
        assert self.proc.stderr is not None
        return self.proc.stderr.read()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(WAIT)
        self.reader.join(WAIT)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer() as server:
        server.put_object("nodes", node_object(NODES[0]))
        yield server


@pytest.fixture
def watching(api: FakeApiServer, tmp_path: Path) -> Iterator[Watching]:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    found = Watching([sys.executable, "-m", "gfd", "fleet", "--watch", "-o", "json",
                      "--kubeconfig", str(kubeconfig)])
    yield found
    found.close()


def gpus(doc: dict[str, Any]) -> tuple[int, int, int]:
    (kind,) = [k for k in doc["kinds"] if k["resource"] == "nvidia.com/gpu"]
    return kind["total"], kind["allocated"], kind["unschedulable"]["total"]


def test_watch_prints_a_document_a_line_per_change_and_ctrl_c_ends_it_with_0(
        api: FakeApiServer, watching: Watching) -> None:
    first = watching.document()
    assert (first["apiVersion"], first["complete"]) == ("gfd/v1", True)
    assert gpus(first) == (8, 0, 0)
    api.put_object("pods", pod_object("train", node=NODES[0].name,
                                      limits={"nvidia.com/gpu": 3}))
    assert gpus(watching.document()) == (8, 3, 0)
    api.put_object("nodes", node_object(NODES[0], "cordoned"))
    assert gpus(watching.document()) == (0, 0, 8)
    watching.proc.send_signal(signal.SIGINT)
    assert watching.proc.wait(WAIT) == 0
    assert watching.lines.empty()
