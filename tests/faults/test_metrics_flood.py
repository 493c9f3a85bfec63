"""Hostile clients of the /metrics /healthz /readyz server under a running `gfd run`.

Promises: 1,200 connections that connect and send nothing, and clients that send a request
one byte at a time, cannot take /healthz down, exhaust the process's file descriptors (gfd
runs here with the common limit of 1,024), grow its memory, or stop it reading its config
file; a client that trickles is cut off; every line of the log stays gfd's own JSON.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from fakes import profiles
from helpers.paths import ROOT
from helpers.process import Agent, free_port, http, wait_for

from gfd.metrics import MAX_CONNECTIONS, REQUEST_TIMEOUT

IDLE = 1200
TRICKLERS = 20
CHILD_FD_LIMIT = 1024
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: gfd\r\n\r\n"
GOOD_4 = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n"
GOOD_2 = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n"


@contextmanager
def fd_soft_limit(limit: int) -> Iterator[None]:
    """This process's soft file-descriptor limit, for the child started meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextmanager
def room_for(count: int) -> Iterator[None]:
    """Raise this process's soft limit so the test can hold ``count`` sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < count:
        pytest.skip(f"the hard file-descriptor limit ({hard}) is below {count}")
    wanted = count if hard == resource.RLIM_INFINITY else hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(wanted, 65536)), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def connect_idle(port: int, count: int) -> list[socket.socket]:
    def one(_: int) -> socket.socket:
        return socket.create_connection(("127.0.0.1", port), timeout=10)

    with ThreadPoolExecutor(max_workers=16) as pool:
        return list(pool.map(one, range(count)))


class Trickler(threading.Thread):
    """Sends a request one byte every 0.2 s; records whether the server cut it off."""

    def __init__(self, port: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stop = stop
        self.cut_off_after: float | None = None

    def run(self) -> None:
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            for byte in REQUEST[:-2]:  # never the final blank line
                if self.stop.wait(0.2):
                    return
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    self.cut_off_after = time.monotonic() - started
                    return
            sock.settimeout(REQUEST_TIMEOUT + 5)
            try:
                sock.recv(1)
            except OSError:
                pass
            self.cut_off_after = time.monotonic() - started


def probe_timeout() -> float:
    """The kubelet's limit on one /healthz probe: the livenessProbe's timeoutSeconds in
    gfd's DaemonSet (manifests/base)."""
    doc = yaml.safe_load((ROOT / "manifests" / "base" / "daemonset.yaml").read_text())
    (gfd,) = [c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == "gfd"]
    return float(gfd["livenessProbe"]["timeoutSeconds"])


def probe(port: int, timeout: float) -> tuple[int, float]:
    """A kubelet probe: /healthz's status (0: no answer within ``timeout``) and its time."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz",
                                    timeout=timeout) as resp:
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        with exc:
            status = exc.code
    except OSError:
        status = 0
    return status, time.monotonic() - started


def test_idle_and_trickling_connections_leave_probes_fds_memory_and_config_alone(
        tmp_path: Path, fake_nvml_lib: Path, agents: list[Agent]) -> None:
    port = free_port()
    cfg = tmp_path / "config.yaml"
    cfg.write_text(GOOD_4)
    with fd_soft_limit(CHILD_FD_LIMIT):
        agent = Agent(tmp_path, fake_nvml_lib, profiles.t4x4(), "--sleep-interval", "200ms",
                      "--metrics-port", str(port), "--config-file", str(cfg),
                      "--log-format", "json", "--no-timestamp")
    agents.append(agent)
    pid = agent.proc.pid
    wait_for(lambda: http(port, "/readyz")[0] == 200)
    wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "4")
    base_fds, base_rss = open_fds(pid), rss_mib(pid)

    stop = threading.Event()
    limit = probe_timeout()
    with room_for(IDLE + 200):
        idle = connect_idle(port, IDLE)
        tricklers = [Trickler(port, stop) for _ in range(TRICKLERS)]
        for trickler in tricklers:  # after the flood: each is cut off by the request timeout
            trickler.start()
        try:
            fds, rss, probes = [], [], []
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                fds.append(open_fds(pid))
                rss.append(rss_mib(pid))
                probes.append(probe(port, limit))
                time.sleep(0.1)
            cfg.write_text(GOOD_2)  # the config file is still readable
            wait_for(lambda: agent.labels().get("nvidia.com/gpu.replicas") == "2", timeout=5)
            for trickler in tricklers:
                trickler.join(timeout=REQUEST_TIMEOUT + 8)
        finally:
            stop.set()
            for sock in idle:
                sock.close()

    figures = (f"fds {base_fds} -> max {max(fds)}, RSS {base_rss:.0f} -> max {max(rss):.0f} "
               f"MiB, /healthz worst {max(p[1] for p in probes) * 1000:.0f} ms")
    assert all(status == 200 for status, _ in probes), (probes, figures)
    # within the probe's timeoutSeconds (5 s): a kubelet restarts gfd only past it; a server
    # held up by the 20 tricklers would take their 5 s request timeout each
    assert max(seconds for _, seconds in probes) < limit, figures
    assert max(fds) <= base_fds + MAX_CONNECTIONS + 8, figures
    assert max(rss) <= base_rss + 24 and max(rss) < 128, figures
    cut = [t.cut_off_after for t in tricklers]
    assert all(c is not None and c < REQUEST_TIMEOUT + 3 for c in cut), cut
    logs = agent.logs()
    assert agent.stop() == 0
    lines = logs.splitlines()
    assert lines and all(json.loads(line)["msg"] for line in lines), "only gfd's JSON lines"
    assert "Traceback" not in logs
