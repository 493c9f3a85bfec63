"""gfd run for a long time under a schedule of changes and faults: does anything grow?

One ``gfd run --sink node --sleep-interval 1s`` process on the simulated DGX A100 of
``benchmarks.agent`` (fake ``libnvidia-ml.so.1``), publishing to the local fake API server,
with a config file. Every minute the same schedule runs (seconds into the minute):

- 0 / 30: the MIG layout switches (13 MIG devices <-> 56 x 1g.5gb): labels change, a write;
- 10-20: GPU 2's ``nvmlDeviceGetMigMode`` answers UNKNOWN (a degraded fact);
- 20: the config file changes (time-slicing replicas 2 <-> 4);
- 25-33: the API server is down (connections closed unanswered);
- 35: another writer overwrites ``nvidia.com/gpu.count`` on the Node (drift);
- 40-45: GPU 5 is lost (``GPU_IS_LOST``);
- 50: three API requests answer 500; every fifth minute the config file is invalid from
  50 to 55 (the last good config is kept).

Every 5 s it samples the process: VmRSS, open fds, threads, CPU seconds and the cycles
counted by ``/metrics``. The report compares the first and the last 5 minutes and fits
a line to RSS over the second half (KiB per minute): flat is the target.

    python -m benchmarks.soak [--minutes 20] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parents[1] / "tests") not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # ``fakes.*``

from fakes import profiles
from fakes.apiserver import FakeApiServer
from fakes.fakenvml import Machine

from benchmarks.agent import (
    RESULTS_DIR,
    ROOT,
    Node,
    cpu_sample,
    gfd_run,
    machine_info,
    memory_mib,
    wait_until,
    write_report,
)

RESULTS = RESULTS_DIR / "soak.json"
SAMPLE_EVERY = 5.0
WINDOW = 300.0
"""First and last windows compared (seconds; half the run when it is shorter than 10 min)."""
NODE, NAMESPACE, POD = "gpu-node-1", "gfd", "gfd-abcde"
CONFIGS = (
    "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 2}]}}\n",
    "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 4}]}}\n",
)
INVALID = "sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: -1}]}}\n"


@dataclass(frozen=True, slots=True)
class Sample:
    t: float
    rss_kib: int
    fds: int
    threads: int
    cpu_s: float
    cycles: float


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    raise KeyError(key)


def _cycles(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("gfd_cycles_total{"))


def sample(pid: int, port: int, t: float) -> Sample:
    cpu = cpu_sample(pid)
    return Sample(t=round(t, 1), rss_kib=_status(pid, "VmRSS"),
                  fds=len(os.listdir(f"/proc/{pid}/fd")), threads=_status(pid, "Threads"),
                  cpu_s=cpu.own + cpu.children, cycles=_cycles(port))


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


class Schedule:
    """Applies the per-minute schedule of the module docstring at second ``t``."""

    def __init__(self, profile: Path, config: Path, server: FakeApiServer) -> None:
        self.profile, self.config, self.server = profile, config, server
        self.layout = 0
        self.replicas = 0
        self.applied: dict[str, int] = {}

    def machine(self, second: int) -> Machine:
        machine = (profiles.dgx_a100_layout() if second < 30
                   else profiles.dgx_a100_all_1g5gb())
        if 10 <= second < 20:
            machine.gpus[2].fail["nvmlDeviceGetMigMode"] = "UNKNOWN"
        if 40 <= second < 45:
            machine.gpus[5].fault = "lost"
        return machine

    def count(self, what: str) -> None:
        self.applied[what] = self.applied.get(what, 0) + 1

    def at(self, t: int) -> None:
        minute, second = divmod(t, 60)
        if second in (0, 10, 20, 30, 40, 45):
            self.machine(second).write(self.profile)
            self.count("profile rewrites")
        if second == 20:
            self.replicas ^= 1
            _write(self.config, CONFIGS[self.replicas])
            self.count("config changes")
        if second == 25:
            self.server.set_down(True)
            self.count("API outages (8 s)")
        if second == 33:
            self.server.set_down(False)
        if second == 35:
            self.server.set_label(NODE, "nvidia.com/gpu.count", "99")
            self.count("label overwrites")
        if second == 50:
            self.server.inject(500, 3)
            self.count("API 500 bursts (3 requests)")
            if minute % 5 == 4:
                _write(self.config, INVALID)
                self.count("invalid configs (5 s)")
        if second == 55 and minute % 5 == 4:
            _write(self.config, CONFIGS[self.replicas])
        if second == 59:
            self.server.clear_log()  # the fake server's own log, not gfd's memory


def soak(minutes: float) -> dict[str, Any]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gfd-soak-") as tmp, FakeApiServer() as server:
        node = Node.create(Path(tmp))
        server.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
        server.add_pod(NAMESPACE, POD, owner_daemonset="gfd", node_name=NODE)
        kubeconfig = server.write_kubeconfig(Path(tmp) / "kubeconfig")
        config = Path(tmp) / "config.yaml"
        config.write_text(CONFIGS[0])
        port = _free_port()
        env = {"NODE_NAME": NODE, "NAMESPACE": NAMESPACE, "POD_NAME": POD,
               "KUBECONFIG": str(kubeconfig)}
        with gfd_run(node, "soak", profiles.dgx_a100_layout(), "--sink", "node",
                     "--sleep-interval", "1s", "--config-file", str(config),
                     "--metrics-port", str(port), extra_env=env) as (proc, workdir):
            wait_until(lambda: server.count(method="PATCH") > 0, 30, proc, "the first publish")
            schedule = Schedule(workdir / "profile.txt", config, server)
            samples: list[Sample] = []
            begin = time.monotonic()
            next_sample, last_second = 0.0, -1
            while (elapsed := time.monotonic() - begin) < minutes * 60:
                if proc.poll() is not None:
                    tail = (workdir / "gfd.log").read_text().splitlines()[-20:]
                    raise RuntimeError(f"gfd exited with {proc.returncode}:\n" + "\n".join(tail))
                second = int(elapsed)
                if second != last_second:
                    for s in range(last_second + 1, second + 1):
                        schedule.at(s)
                    last_second = second
                if elapsed >= next_sample:
                    samples.append(sample(proc.pid, port, elapsed))
                    next_sample += SAMPLE_EVERY
                time.sleep(0.05)
            server.set_down(False)
            final_memory = memory_mib(proc.pid)
            log_lines = (workdir / "gfd.log").read_text().count("\n")
    return {
        "benchmark": "soak",
        "config": {"minutes": minutes, "sleep_interval_s": 1.0, "sink": "node",
                   "sample_every_s": SAMPLE_EVERY, "window_s": WINDOW},
        "machine": machine_info(),
        "results": {"summary": summarise(samples), "injected": schedule.applied,
                    "final_memory_mib": final_memory, "log_lines": log_lines,
                    "samples": [asdict(s) for s in samples]},
        "runtime_seconds": round(time.monotonic() - started, 1),
    }


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _window(samples: list[Sample], start: float, end: float) -> dict[str, float]:
    inside = [s for s in samples if start <= s.t <= end]
    first, last = inside[0], inside[-1]
    cycles = max(last.cycles - first.cycles, 1.0)
    return {
        "rss_mib_mean": round(statistics.fmean(s.rss_kib for s in inside) / 1024, 1),
        "rss_mib_max": round(max(s.rss_kib for s in inside) / 1024, 1),
        "fds_mean": round(statistics.fmean(s.fds for s in inside), 1),
        "fds_max": max(s.fds for s in inside),
        "threads_max": max(s.threads for s in inside),
        "threads_min": min(s.threads for s in inside),
        "cycles": round(last.cycles - first.cycles),
        "cpu_ms_per_cycle": round((last.cpu_s - first.cpu_s) * 1000 / cycles, 2),
        "cpu_percent": round((last.cpu_s - first.cpu_s) * 100 / max(last.t - first.t, 1), 2),
    }


def _slope_kib_per_minute(samples: list[Sample]) -> float:
    """Least-squares slope of RSS over the second half of the run."""
    half = [s for s in samples if s.t >= samples[-1].t / 2]
    xs, ys = [s.t / 60 for s in half], [float(s.rss_kib) for s in half]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs) or 1.0
    return round(sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den, 2)


def summarise(samples: list[Sample]) -> dict[str, Any]:
    end = samples[-1].t
    window = min(WINDOW, end / 2)
    return {"first": _window(samples, 0, window), "last": _window(samples, end - window, end),
            "window_min": round(window / 60, 1),
            "rss_slope_kib_per_min_second_half": _slope_kib_per_minute(samples),
            "duration_min": round(end / 60, 1)}


def tables(result: dict[str, Any]) -> str:
    r, m = result["results"], result["machine"]
    first, last = r["summary"]["first"], r["summary"]["last"]
    rows = [("VmRSS MiB, mean", "rss_mib_mean"), ("VmRSS MiB, max", "rss_mib_max"),
            ("open fds, mean", "fds_mean"), ("open fds, max", "fds_max"),
            ("threads, min / max", None), ("cycles", "cycles"),
            ("CPU ms per cycle", "cpu_ms_per_cycle"), ("CPU % of one core", "cpu_percent")]
    lines = [
        f"Command: `python -m benchmarks.soak --minutes {result['config']['minutes']:g} "
        f"--write` — {m['date']}, {m['cpu']} x{m['nproc']}, Python {m['python']}; ran "
        f"{result['runtime_seconds']:.0f} s. `gfd run --sink node --sleep-interval 1s` with a "
        "config file, on the simulated DGX A100, against the fake API server.",
        "",
        "Injected: " + ", ".join(f"{n} {what}" for what, n in r["injected"].items()) + ".",
        "",
        f"| | first {r['summary']['window_min']:g} min | last {r['summary']['window_min']:g} min |",
        "|---|---:|---:|",
    ]
    for name, key in rows:
        if key is None:
            lines.append(f"| {name} | {first['threads_min']} / {first['threads_max']} | "
                         f"{last['threads_min']} / {last['threads_max']} |")
        else:
            lines.append(f"| {name} | {first[key]} | {last[key]} |")
    lines += ["", f"RSS trend over the second half: "
              f"**{r['summary']['rss_slope_kib_per_min_second_half']} KiB/min** "
              f"({r['summary']['duration_min']} min sampled every {SAMPLE_EVERY:g} s); "
              f"{r['log_lines']} log lines in all."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0,
                        help="how long to run (the first and last 5 minutes are compared)")
    parser.add_argument("--write", action="store_true",
                        help="update BENCHMARKS.md (section between the soak markers)")
    args = parser.parse_args(argv)
    if args.minutes < 1:
        parser.error("--minutes must be at least 1")
    result = soak(args.minutes)
    print(tables(result))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    if args.write:
        write_report("soak", tables(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
