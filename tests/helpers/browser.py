"""A real headless browser for the tests: Debian's ``chromium-headless-shell`` (or
``chromium``), driven over the Chrome DevTools Protocol with websocket-client (the
Kubernetes client's own dependency). ``Browser`` starts one (its own profile, loopback only)
and ``Tab`` loads a page, evaluates JavaScript in it, waits for what its DOM shows and takes
a screenshot. Without a browser the tests skip, and fail under GFD_REQUIRE_CHROMIUM=1 (CI,
whose .ci/run installs it)."""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

BINARIES = ("chromium-headless-shell", "chromium")
STARTUP = 120.0
"""Seconds a browser may take to listen (seconds on a quiet machine; a loaded 2-core one
is much slower)."""


def binary() -> str:
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    if os.environ.get("GFD_REQUIRE_CHROMIUM") == "1":
        pytest.fail("a headless Chromium is required (GFD_REQUIRE_CHROMIUM=1): apt-get install "
                    "chromium-headless-shell")
    pytest.skip("no headless Chromium (Debian: apt-get install chromium-headless-shell)")


class Browser:
    """One headless Chromium with its DevTools on a loopback port; ``close`` ends it."""

    def __init__(self, profile: Path) -> None:
        self._proc = subprocess.Popen(
            [binary(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", f"--user-data-dir={profile}",
             "--window-size=1280,1500", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True, start_new_session=True)
        """Its own process group: its zygote, GPU, network and renderer processes end with
        it (they hold its stderr open)."""
        self._log: list[str] = []
        listening = threading.Event()
        self.endpoint = ""

        def read() -> None:
            assert self._proc.stderr is not None
            for line in self._proc.stderr:
                self._log.append(line)
                found = re.search(r"DevTools listening on ws://([^/]+)/", line)
                if found:
                    self.endpoint = found[1]
                    listening.set()
            listening.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        if not listening.wait(STARTUP) or not self.endpoint:
            self.close()
            raise AssertionError("the browser did not listen:\n" + "".join(self._log[-20:]))

    def tab(self) -> Tab:
        with urllib.request.urlopen(f"http://{self.endpoint}/json/list", timeout=30) as resp:
            targets = json.load(resp)
        page = next(t for t in targets if t["type"] == "page")
        return Tab(page["webSocketDebuggerUrl"])

    @property
    def log(self) -> str:
        return "".join(self._log)

    def close(self) -> None:
        """Browser.close over DevTools, then SIGTERM and SIGKILL to its process group."""
        if self._proc.poll() is None and self.endpoint:
            try:
                import websocket

                with urllib.request.urlopen(f"http://{self.endpoint}/json/version",
                                            timeout=10) as resp:
                    url = json.load(resp)["webSocketDebuggerUrl"]
                ws = websocket.create_connection(url, timeout=10, suppress_origin=True)
                try:
                    ws.send(json.dumps({"id": 1, "method": "Browser.close"}))
                finally:
                    ws.close()
                self._proc.wait(timeout=30)
            except Exception:  # ended below
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self._proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self._proc.wait(timeout=30)
                if sig == signal.SIGTERM:
                    os.killpg(self._proc.pid, signal.SIGKILL)  # what is left of the group
            except (subprocess.TimeoutExpired, ProcessLookupError):
                continue
            break
        self._proc.wait(timeout=30)
        self._reader.join(timeout=30)
        if not self._reader.is_alive() and self._proc.stderr is not None:
            self._proc.stderr.close()


class Tab:
    """One page of the browser, over its DevTools websocket."""

    def __init__(self, url: str) -> None:
        import websocket  # websocket-client, which the kubernetes client depends on

        self._ws = websocket.create_connection(url, timeout=60, suppress_origin=True)
        self._ids = itertools.count(1)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str, *, timeout: float = 60.0) -> Any:
        """The value of ``expression`` (a promise is awaited, ``timeout`` seconds at most)."""
        self._ws.settimeout(timeout + 30)
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True,
                           returnByValue=True, timeout=int(timeout * 1000))
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression[:200]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, condition: str, *, timeout: float = 120.0) -> Any:
        """The value of the JavaScript expression ``condition`` once it is truthy: looked at
        now and at each change of the page's DOM (a MutationObserver), never on a clock.
        Before the page has loaded (a navigation under way) it is looked at again."""
        script = f"""new Promise((resolve, reject) => {{
            const look = () => {{ try {{ return ({condition}); }} catch (e) {{ return null; }} }};
            const first = look();
            if (first) {{ resolve(first); return; }}
            const seen = new MutationObserver(() => {{
                const got = look();
                if (got) {{ seen.disconnect(); resolve(got); }}
            }});
            seen.observe(document, {{subtree: true, childList: true, attributes: true,
                                     characterData: true}});
        }})"""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.evaluate(script, timeout=max(1.0, deadline - time.monotonic()))
            except AssertionError as exc:  # the document went away under a navigation
                gone = ("Execution context was destroyed" in str(exc)
                        or "Cannot find context" in str(exc))
                if time.monotonic() >= deadline or not gone:
                    raise

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png",
                                          captureBeyondViewport=True)["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        self._ws.close()
