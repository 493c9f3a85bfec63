"""NVML calls gfd makes, call by call, on the two benchmark machines, beside GFD's.

On a real GPU each NVML call is an ioctl into the driver (some take milliseconds, some wake
a GPU from a low-power state), so the number of calls is what a node pays; on the fake
library a call costs nothing, so it is counted, not timed. Machines: a DGX A100 with 13 MIG
devices (``dgx_a100_layout``, ``--mig-strategy mixed``) and an 8 x H100 HGX (``hgx_h100``).

- steady read: the agent as deployed (``NvmlReader`` with its NVML event set registered),
  a read after the first ones; also without events (a driver or GPU that has none);
- full read: the first read of an NVML session (nvmlInit included), which also reads what a
  steady read does not ask again;
- one-shot: ``gfd run --oneshot`` as a process, every call to its exit (the platform check
  ``--device-discovery-strategy auto`` makes included), from the fake's
  ``$FAKE_NVML_CALL_TOTALS``.

``--before PATH`` measures another checkout of gfd the same way (the same fake library,
``PYTHONPATH=PATH``), for the before/after breakdown. GFD's figures are the ones issue 28
measured with NVIDIA's gpu-feature-discovery v0.20.0 binary on the same fake machines (the
binary cannot be built here: its vendored client-go needs Go >= 1.25).

    python -m benchmarks.nvml_calls [--before ../main] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))  # the fakes import each other as ``fakes.*``

from fakes import profiles  # noqa: E402
from fakes.fakenvml import SOURCE, Machine, build_library, subprocess_env  # noqa: E402
from fakes.sysfs import gpu_tree  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "nvml-calls.json"
MACHINES = {"DGX A100, 13 MIG devices (mixed)": "dgx_a100_layout", "8 x H100": "hgx_h100"}
GFD = {"DGX A100, 13 MIG devices (mixed)": {"steady": 371, "oneshot": 398},
       "8 x H100": {"steady": 108, "oneshot": 135}}
"""GFD v0.20.0's real binary, issue 28 (interleaved with gfd on the same fake machines)."""
BUDGET = 0.35
"""NVML calls per steady cycle: at most this share of GFD's (issue 28)."""
SYMBOLS = tuple(sorted(set(re.findall(r"^nvmlReturn_t (nvml\w+)\(", SOURCE.read_text(), re.M))))
"""Every NVML entry point the fake library has (what a breakdown can name)."""


def _machine(name: str) -> Machine:
    machine: Machine = getattr(profiles, name)()
    return machine


# ----------------------------------------------------------------------------- one checkout


def measure_here(lib: Path, tmp: Path) -> dict[str, Any]:
    """Steady and full reads in this process (whatever ``gfd`` imports from)."""
    from fakes.fakenvml import load_in_process

    import gfd
    from gfd.readers.nvml import NvmlReader

    profile = tmp / "profile.txt"
    os.environ["FAKE_NVML_PROFILE"] = str(profile)
    fake = load_in_process(lib)

    def counted(action: Any) -> dict[str, int]:
        fake.reset_counts()
        action()
        calls = {s: n for s in SYMBOLS if (n := fake.call_count(s))}
        return {"total": fake.call_count(), **dict(sorted(calls.items()))}

    out: dict[str, Any] = {"gfd": str(Path(gfd.__file__).parent)}
    for label, name in MACHINES.items():
        _machine(name).write(profile)
        got: dict[str, Any] = {}
        reader = NvmlReader()
        got["full read"] = counted(reader.read)  # nvmlInit + the session's first read
        events = reader.events()
        events.open()
        for _ in range(3):
            reader.read()
        got["steady read, events registered"] = counted(reader.read)
        events.close()
        reader.read()
        got["steady read, no events"] = counted(reader.read)
        reader.close()
        out[label] = got
    return out


def measure_oneshot(lib: Path, tmp: Path, pythonpath: str | None) -> dict[str, Any]:
    """``gfd run --oneshot`` as a process on each machine: its calls, call by call."""
    out: dict[str, Any] = {}
    for label, name in MACHINES.items():
        workdir = tmp / f"oneshot-{name}"
        workdir.mkdir(parents=True, exist_ok=True)
        machine = _machine(name)
        profile = machine.write(workdir / "profile.txt")
        sysfs = gpu_tree(workdir / "sys", [g.pci_bus_id for g in machine.resolve()])
        totals = workdir / "calls.txt"
        env = subprocess_env(lib.parent, profile, {
            k: v for k, v in os.environ.items()
            if not k.startswith(("GFD_", "FAKE_NVML", "MIG_STRATEGY", "NODE_NAME"))})
        env["FAKE_NVML_CALL_TOTALS"] = str(totals)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        argv = [sys.executable, "-m", "gfd", "run", "--oneshot", "--output-file",
                str(workdir / "features"), "--mig-strategy", "mixed", "--sysfs-root", str(sysfs),
                "--nvidia-smi", str(workdir / "no-nvidia-smi"), "--machine-type-file",
                str(workdir / "no-dmi")]
        # cwd: ``python -m`` puts the working directory first on sys.path, before PYTHONPATH
        result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                                cwd=workdir)
        if result.returncode != 0:
            raise RuntimeError(f"gfd run --oneshot failed on {name}: {result.stderr[-500:]}")
        rows = dict(line.split() for line in totals.read_text().splitlines())
        total = int(rows.pop("total"))
        out[label] = {"total": total,
                      **{s: int(n) for s, n in sorted(rows.items()) if int(n)}}
    return out


def measure(lib: Path, tmp: Path, pythonpath: str | None) -> dict[str, Any]:
    """Everything for one checkout: in a child process, so that ``pythonpath`` decides which
    gfd is imported and the fake is loaded afresh."""
    code = ("import importlib.util, json, sys; from pathlib import Path; "
            "spec = importlib.util.spec_from_file_location('nvml_calls', sys.argv[1]); "
            "bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench); "
            "print(json.dumps(bench.measure_here(Path(sys.argv[2]), Path(sys.argv[3]))))")
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    reads_dir = tmp / "reads"
    reads_dir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run([sys.executable, "-c", code, __file__, str(lib), str(reads_dir)],
                            env=env, capture_output=True, text=True, check=False, cwd=tmp)
    if result.returncode != 0:
        raise RuntimeError(f"measuring reads failed: {result.stderr[-800:]}")
    reads = json.loads(result.stdout.splitlines()[-1])
    reads["one-shot"] = measure_oneshot(lib, tmp, pythonpath)
    return reads


# ----------------------------------------------------------------------------- report


def run(before: str | None) -> dict[str, Any]:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="gfd-nvml-calls-") as tmp:
        lib = build_library(Path(tmp) / "lib")
        after = measure(lib, Path(tmp) / "after", None)
        results: dict[str, Any] = {"after": after}
        if before:
            results["before"] = measure(lib, Path(tmp) / "before", str(Path(before).resolve()))
    return {"benchmark": "nvml-calls", "gfd_v0_20_0": GFD, "results": results,
            "runtime_seconds": round(time.monotonic() - started, 1),
            "targets": targets(results)}


def _steady(got: dict[str, Any], label: str) -> int:
    total: int = got[label]["steady read, events registered"]["total"]
    return total


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    after = results["after"]
    before = results.get("before")
    command = "python -m benchmarks.nvml_calls --before ../main --write"
    steady = {label: _steady(after, label) for label in MACHINES}
    rows = [{
        "id": "nvml-steady",
        "target": f"NVML calls per steady cycle <= {BUDGET} x GFD's on both benchmark machines",
        "value": max(steady[label] / GFD[label]["steady"] for label in MACHINES),
        "limit": BUDGET,
        "met": all(steady[label] <= BUDGET * GFD[label]["steady"] for label in MACHINES),
        "measured": "; ".join(
            f"{label}: {steady[label]} vs GFD {GFD[label]['steady']} "
            f"({steady[label] / GFD[label]['steady']:.2f} x)" for label in MACHINES),
        "command": command}]
    if before:
        full = {label: (after[label]["full read"]["total"], before[label]["full read"]["total"])
                for label in MACHINES}
        oneshot = {label: (after["one-shot"][label]["total"],
                           before["one-shot"][label]["total"]) for label in MACHINES}
        rows.append({
            "id": "nvml-full",
            "target": "NVML calls of a full read and of a one-shot: no more than before",
            "value": None, "limit": None,
            "met": all(a <= b for a, b in (*full.values(), *oneshot.values())),
            "measured": "; ".join(
                f"{label}: full read {full[label][0]} (was {full[label][1]}), one-shot "
                f"{oneshot[label][0]} (was {oneshot[label][1]})" for label in MACHINES),
            "command": command})
    return rows


def tables(result: dict[str, Any]) -> str:
    r = result["results"]
    after, before = r["after"], r.get("before")
    lines = [
        "Command: `python -m benchmarks.nvml_calls --before ../main --write` "
        f"(ran {result['runtime_seconds']:.0f} s). Calls counted by the fake library; GFD's "
        "figures are issue 28's measurement of NVIDIA's v0.20.0 binary on the same machines.",
        "",
        "| machine | what | GFD v0.20.0 | gfd before | gfd now | now / GFD |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for label in MACHINES:
        for what, gfd_key in (("steady read, events registered", "steady"),
                              ("steady read, no events", None), ("full read", None),
                              ("one-shot", "oneshot")):
            now = (after["one-shot"][label] if what == "one-shot" else after[label][what])
            was = ((before["one-shot"][label] if what == "one-shot" else before[label][what])
                   if before else None)
            gfd = GFD[label][gfd_key] if gfd_key else None
            ratio = f"{now['total'] / gfd:.2f}" if gfd else "-"
            lines.append(
                f"| {label} | {what} | {gfd if gfd is not None else '-'} | "
                f"{was['total'] if was else '-'} | **{now['total']}** | {ratio} |")
    lines += ["", "Call by call (steady read with events, and one-shot):", "",
              "| machine | call | steady before | steady now | one-shot before | "
              "one-shot now |", "|---|---|---:|---:|---:|---:|"]
    for label in MACHINES:
        key = "steady read, events registered"
        calls = sorted(({*after[label][key], *after["one-shot"][label]}
                        | ({*before[label][key], *before["one-shot"][label]} if before else set()))
                       - {"total"})
        for call in calls:
            cells = []
            for side, part in ((before, key), (after, key), (before, "one-shot"),
                               (after, "one-shot")):
                if side is None:
                    cells.append("-")
                    continue
                table = side["one-shot"][label] if part == "one-shot" else side[label][part]
                cells.append(str(table.get(call, 0)))
            lines.append(f"| {label} | `{call}` | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nvml_calls", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", metavar="PATH",
                        help="another checkout of gfd to measure the same way (e.g. ../main)")
    parser.add_argument("--write", action="store_true",
                        help="update BENCHMARKS.md (the nvml-calls section, the targets table)")
    args = parser.parse_args(argv)
    result = run(args.before)
    from benchmarks.agent import finish

    return finish(result, tables(result), results=RESULTS, section="nvml-calls",
                  write=args.write)


if __name__ == "__main__":
    sys.exit(main())
