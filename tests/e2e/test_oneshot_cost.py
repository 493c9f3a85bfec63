"""End to end: what a one-shot costs a node. The NVML calls `gfd labels` makes, counted by the
fake libnvidia-ml.so.1 at the process's exit and bounded by what its labels and features need
(issue 28: no more than before, GFD's own count); what `gfd devices` adds for the DRA driver's
facts; and the modules a one-shot with the file sink imports (not the Kubernetes client, YAML
or the metrics server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fakes import profiles
from fakes.fakenvml import Machine, subprocess_env
from fakes.sysfs import gpu_tree
from helpers.process import ENV_PREFIXES

SESSION = {"nvmlInitWithFlags": 1, "nvmlShutdown": 1, "nvmlDeviceGetCount_v2": 1}
"""One NVML session that counts the GPUs."""

SYSTEM = {"nvmlSystemGetDriverVersion": 1, "nvmlSystemGetCudaDriverVersion": 1}
"""The driver and CUDA versions: ``nvidia.com/cuda.driver.*``, ``cuda.runtime.*``."""

PLATFORM = ("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetName")
"""The ``auto`` platform check (its own session): each GPU's name, since a Tegra integrated
GPU names itself ``... (nvgpu)``."""

PER_GPU = {
    "nvmlDeviceGetHandleByIndex_v2": "every query of the GPU",
    "nvmlDeviceGetUUID": "which GPU it is (events, the facts kept between reads)",
    "nvmlDeviceGetName": "gpu.product",
    "nvmlDeviceGetMemoryInfo": "gpu.memory",
    "nvmlDeviceGetCudaComputeCapability": "gpu.compute.major/minor, gpu.family",
    "nvmlDeviceGetBrand": "the features' brand",
    "nvmlDeviceGetPciInfo_v3": "the PCI class of gpu.mode (sysfs, by bus id)",
    "nvmlDeviceGetPowerManagementLimitConstraints": "gpu.power.limit.min/max",
    "nvmlDeviceGetNvLinkState": "gpu.nvlink (the first link answers: active, or none)",
    "nvmlDeviceGetGpuFabricInfoV": "gpu.clique",
    "nvmlDeviceGetMigMode": "mig.capable, the MIG labels, mig.pending",
    "nvmlDeviceGetComputeMode": "gpu.compute-mode",
}
"""What the labels and features need of each GPU, one call each."""

PER_MIG_DEVICE = {
    "nvmlDeviceGetUUID": 1,
    "nvmlDeviceGetAttributes_v2": 1,  # memory, multiprocessors, engines: mig-<p>.memory ...
    "nvmlDeviceGetGpuInstanceId": 1,
    "nvmlDeviceGetComputeInstanceId": 1,
    "nvmlDeviceGetGpuInstanceById": 1,  # its GPU instance, for the profile and its name
    "nvmlGpuInstanceGetInfo": 1,
    "nvmlGpuInstanceGetComputeInstanceById": 1,
    "nvmlComputeInstanceGetInfo_v2": 1,
}
"""A MIG device: its identity, attributes and the ids that name its profile."""

DEVICE_ONLY = ("nvmlDeviceGetMinorNumber", "nvmlDeviceGetArchitecture",
               "nvmlDeviceGetAddressingMode", "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
               "nvmlDeviceGetGpuInstanceProfileInfo")
"""Calls only ``gfd devices`` needs (the DRA driver's names and attributes, DynamicMIG)."""


def needed(machine: Machine, profile_count: int, ci_profile_count: int) -> dict[str, int]:
    """The calls a one-shot `gfd labels` needs on ``machine``, call by call: the platform
    check's session, the read's session, what each GPU's labels need, and on a GPU with MIG on
    its slots, its MIG devices and the profile tables that name them (each GPU-instance profile
    of the GPU once, each compute-instance profile of a GPU-instance profile in use once)."""
    calls: dict[str, int] = {}

    def add(symbol: str, count: int) -> None:
        calls[symbol] = calls.get(symbol, 0) + count

    gpus = machine.resolve()
    for symbol, count in (*SESSION.items(), *SESSION.items(), *SYSTEM.items()):
        add(symbol, count)
    for symbol in (*PLATFORM, *PER_GPU):
        add(symbol, len(gpus))
    for spec, gpu in zip(machine.gpus, gpus, strict=True):
        if not (spec.mig_supported and spec.mig_enabled):
            continue
        add("nvmlDeviceGetMaxMigDeviceCount", 1)  # how many slots to look at
        add("nvmlDeviceGetMigDeviceHandleByIndex", spec.max_mig_devices)  # each slot
        for symbol, count in PER_MIG_DEVICE.items():
            add(symbol, count * len(gpu.mig))
        if gpu.mig:
            add("nvmlDeviceGetGpuInstanceProfileInfoV", profile_count)
            in_use = {m.gi_profile.id for m in gpu.mig}
            add("nvmlGpuInstanceGetComputeInstanceProfileInfoV", ci_profile_count * len(in_use))
    return calls


def run_counted(lib: Path, tmp: Path, machine: Machine, *args: str,
                ) -> tuple[dict[str, int], str]:
    """Run ``gfd ARGS`` over the fake with ``machine`` and a node's sysfs; the NVML calls it
    made, by symbol, and its output."""
    profile = machine.write(tmp / "profile.txt")
    sysfs = gpu_tree(tmp / "sys", [g.pci_bus_id for g in machine.resolve()])
    totals = tmp / "calls.txt"
    base = {k: v for k, v in os.environ.items()
            if not k.startswith((*ENV_PREFIXES, "FAKE_NVML"))}
    env = subprocess_env(lib, profile, base) | {"FAKE_NVML_CALL_TOTALS": str(totals)}
    result = subprocess.run([sys.executable, "-m", "gfd", *args, "--sysfs-root", str(sysfs)],
                            env=env, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = dict(line.split() for line in totals.read_text().splitlines())
    rows.pop("total")
    return {symbol: int(n) for symbol, n in rows.items() if int(n)}, result.stdout


MACHINES = ["hgx_h100", "dgx_a100_layout"]


@pytest.mark.parametrize("name", MACHINES)
def test_a_oneshot_asks_nvml_only_what_its_labels_need(name: str, fake_nvml_lib: Path,
                                                        tmp_path: Path) -> None:
    import pynvml

    machine: Machine = getattr(profiles, name)()
    made, _ = run_counted(fake_nvml_lib, tmp_path, machine, "labels", "--mig-strategy", "mixed",
                          "--nvidia-smi", str(tmp_path / "no-nvidia-smi"),
                          "--machine-type-file", str(tmp_path / "no-dmi"))
    bound = needed(machine, int(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT),
                   int(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT))
    over = {s: (n, bound.get(s, 0)) for s, n in made.items() if n > bound.get(s, 0)}
    assert not over, f"calls beyond what the labels need (made, needed): {over}"
    assert not set(made) & set(DEVICE_ONLY), "a fact only gfd devices uses was read"


def test_gfd_devices_reads_the_dra_drivers_facts_and_lists_every_placement(
        fake_nvml_lib: Path, tmp_path: Path) -> None:
    """8 x H100 under DynamicMIG: each GPU's full device and its 25 partitions (every
    GPU-instance profile at each of its possible placements), named by minor number."""
    machine = profiles.hgx_h100()
    made, out = run_counted(fake_nvml_lib, tmp_path, machine, "devices", "--feature-gates",
                            "DynamicMIG=true", "-o", "json")
    for symbol in DEVICE_ONLY[:-1]:  # the V profile call answers: no fallback to the old one
        assert made.get(symbol, 0) >= len(machine.gpus), symbol
    names = [d["name"] for d in json.loads(out)["devices"]]
    assert len(names) == 8 * 26
    assert "gpu-3-mig-1g20gb-15-6" in names and "gpu-0-mig-1g10gb-me-20-0" in names


def test_gfd_snapshot_records_the_dra_drivers_facts_for_a_replay(fake_nvml_lib: Path,
                                                                 tmp_path: Path) -> None:
    """A recorded snapshot replays into `gfd devices --snapshot`: it carries what only the
    devices need (8 x H100: minor numbers, architecture, addressing mode, profiles with their
    placements)."""
    machine = profiles.hgx_h100()
    made, out = run_counted(fake_nvml_lib, tmp_path, machine, "snapshot")
    gpus = json.loads(out)["gpus"]
    assert [g["minor"] for g in gpus] == list(range(8))
    assert {g["architecture"] for g in gpus} == {"hopper"}
    assert {g["addressing_mode"] for g in gpus} == {"HMM"}
    assert all(p["placements"] for g in gpus for p in g["mig_profiles"])
    assert made.get("nvmlDeviceGetGpuInstancePossiblePlacements_v2", 0) > 0


# ----------------------------------------------------------------------------- imports

NOT_IMPORTED = ("kubernetes", "yaml", "prometheus_client", "gfd.metrics", "gfd.kube",
                "http.server", "gfd.configfile", "celpy", "lark", "re2", "gfd.fleet")
"""What a one-shot with the file sink does not use: the Kubernetes client, YAML (unless
asked for YAML output), the metrics and their HTTP server, the config file's parser, the
cluster view and its CEL."""

RUN_AND_LIST = """\
import atexit, json, runpy, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv[0] = "gfd"
runpy.run_module("gfd", run_name="__main__")
"""


def imported(lib: Path, tmp: Path, *args: str) -> set[str]:
    """The modules ``gfd ARGS`` had imported when it exited (a DGX A100 over the fake)."""
    machine = profiles.dgx_a100_layout()
    profile = machine.write(tmp / "profile.txt")
    sysfs = gpu_tree(tmp / "sys", [g.pci_bus_id for g in machine.resolve()])
    listed = tmp / "modules.json"
    base = {k: v for k, v in os.environ.items()
            if not k.startswith((*ENV_PREFIXES, "FAKE_NVML"))}
    result = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST, str(listed), *args, "--sysfs-root", str(sysfs),
         "--machine-type-file", str(tmp / "no-dmi"), "--nvidia-smi", str(tmp / "no-smi")],
        env=subprocess_env(lib, profile, base), capture_output=True, text=True, timeout=120,
        check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    modules: list[str] = json.loads(listed.read_text())
    return set(modules)


def heavy(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize("args", [["run", "--oneshot", "--output-file", "features"],
                                  ["labels"], ["labels", "-o", "json"]],
                         ids=["run --oneshot", "labels", "labels -o json"])
def test_a_oneshot_with_the_file_sink_imports_no_client_yaml_or_metrics(
        args: list[str], fake_nvml_lib: Path, tmp_path: Path) -> None:
    if "--output-file" in args:
        args = [*args[:-1], str(tmp_path / args[-1])]
    modules = imported(fake_nvml_lib, tmp_path, *args)
    assert "gfd.readers.nvml" in modules and "pynvml" in modules, "it read the GPUs"
    assert heavy(modules, NOT_IMPORTED) == []


def test_yaml_is_imported_when_asked_for(fake_nvml_lib: Path, tmp_path: Path) -> None:
    assert "yaml" in imported(fake_nvml_lib, tmp_path, "labels", "-o", "yaml")
