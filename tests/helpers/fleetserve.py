"""``gfd fleet --serve`` as a real process: ``Served`` starts it on a free loopback port
over a dump (``--from``) or an API server (``api=``: a kubeconfig), waits for the line that
says where it listens, and ends it with SIGTERM (it exits 0), keeping what it wrote to
stderr."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from helpers.process import ENV_PREFIXES

STARTUP = 120.0
"""Seconds it may take to read the dump and listen (under a second on a quiet machine)."""


class Served:
    def __init__(self, dump: Path | str | None, *args: str, api: Path | None = None,
                 home: Path | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
        if home is not None:
            env["HOME"] = str(home)
        source = ["--from", str(dump)] if dump is not None else ["--kubeconfig", str(api)]
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "gfd", "fleet", "--serve", "127.0.0.1:0", *source, *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env)
        self.lines: list[str] = []
        self.url = ""
        listening = threading.Event()

        def read() -> None:
            assert self._proc.stderr is not None
            for line in self._proc.stderr:
                self.lines.append(line)
                found = re.search(r"serving the fleet on (http://\S+/)", line)
                if found:
                    self.url = found[1]
                    listening.set()
            listening.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not listening.wait(STARTUP) or not self.url:
            self.stop()
            raise AssertionError("gfd fleet --serve did not listen:\n" + self.stderr)

    def settled(self, done: Callable[[dict[str, Any]], bool],
                timeout: float = STARTUP) -> dict[str, Any]:
        """The ``/fleet`` document once ``done`` holds for it: each answer is a long poll
        for the next version of the view (the server holds it until the view changes), so
        this waits for the view's changes, never for a time."""
        deadline = time.monotonic() + timeout
        version = ""
        while True:
            query = f"fleet?version={version}&wait=10" if version else "fleet"
            with urllib.request.urlopen(self.url + query, timeout=60) as resp:
                doc: dict[str, Any] = json.loads(resp.read())
            if done(doc):
                return doc
            if time.monotonic() > deadline:
                raise AssertionError(f"the served view never settled: {doc.get('view')}")
            version = str(doc["view"]["version"])

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def stop(self) -> int:
        """SIGTERM, and its exit status."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=60)
        self._reader.join(timeout=60)
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                pipe.close()
        return int(self._proc.returncode)

    def __enter__(self) -> Served:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
