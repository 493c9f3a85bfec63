"""End to end: `gfd labels` in a subprocess, on the real nvidia-ml-py binding over the fake
libnvidia-ml.so.1, with host files laid out like a node's; compared line by line with golden
files written by hand from GFD's rules (tests/data/golden/nvml, docs/gfd-compatibility.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes import profiles
from fakes.fakenvml import subprocess_env
from fakes.sysfs import gpu_tree
from helpers.golden import golden
from helpers.machines import node
from helpers.paths import DATA, FAKES

GOLDEN = DATA / "golden" / "nvml"
STUB_SMI = FAKES / "stub_nvidia_smi.py"
SMI_DEFAULT = DATA / "smi" / "timeslice-default-4gpu.txt"

# machine name -> (profile builder, DMI product name, PCI class of its GPUs)
ENV_PREFIXES = ("GFD_", "MIG_STRATEGY", "FAIL_ON_INIT_ERROR", "CONFIG_FILE", "NODE_NAME",
                "NAMESPACE", "KUBECONFIG", "USE_NODE_FEATURE_API")


def gfd(lib: Path | None, profile: Path, *args: str, env: dict[str, str] | None = None,
        ) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    full_env = subprocess_env(lib, profile, base) | (env or {})
    return subprocess.run([sys.executable, "-m", "gfd", *args], capture_output=True, text=True,
                          env=full_env, timeout=60, check=False)


def stub_smi(tmp: Path, gpus: int) -> tuple[str, dict[str, str]]:
    """A stub nvidia-smi reporting `Timeslice Default` for each GPU, in the recorded shape."""
    exe = tmp / "nvidia-smi"
    shutil.copy(STUB_SMI, exe)
    exe.chmod(0o755)
    head, row, tail = _smi_shape()
    output = tmp / "compute-policy.txt"
    output.write_text(head + "".join(row.replace(" 0 ", f" {i} ", 1) for i in range(gpus)) + tail)
    return str(exe), {"STUB_SMI_OUTPUT": str(output)}


def _smi_shape() -> tuple[str, str, str]:
    lines = SMI_DEFAULT.read_text().splitlines(keepends=True)
    rows = [i for i, line in enumerate(lines) if "Timeslice" in line]
    return "".join(lines[:rows[0]]), lines[rows[0]], "".join(lines[rows[-1] + 1:])


CASES = sorted(p.name for p in GOLDEN.glob("*.labels"))


@pytest.mark.parametrize("filename", CASES)
def test_labels_match_the_golden_file(filename: str, fake_nvml_lib: Path, tmp_path: Path) -> None:
    name, strategy, label_set = filename.removesuffix(".labels").split("__")
    machine, profile, sysfs, dmi = node(tmp_path, name)
    smi, smi_env = stub_smi(tmp_path, len(machine.gpus))
    args = ["labels", "--no-timestamp", "--label-set", label_set, "--mig-strategy", strategy,
            "--machine-type-file", str(dmi), "--sysfs-root", str(sysfs), "--nvidia-smi", smi]
    if name == "driver_not_loaded":
        args.append("--fail-on-init-error=false")
    result = gfd(fake_nvml_lib, profile, *args, env=smi_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == golden(GOLDEN / filename)


def test_driver_not_loaded_fails_with_one_clear_line(fake_nvml_lib: Path, tmp_path: Path) -> None:
    _, profile, sysfs, _ = node(tmp_path, "driver_not_loaded")
    result = gfd(fake_nvml_lib, profile, "labels", "--sysfs-root", str(sysfs))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "NVML could not start" in lines[0] and "Driver Not Loaded" in lines[0]


def test_library_not_found_fails_with_one_clear_line(tmp_path: Path) -> None:
    profile = profiles.hgx_h100().write(tmp_path / "profile.txt")
    result = gfd(None, profile, "labels", "--sysfs-root", str(tmp_path))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "libnvidia-ml.so.1" in lines[0]


def test_env_var_twins_work_like_the_flags(fake_nvml_lib: Path, tmp_path: Path) -> None:
    _, profile, sysfs, dmi = node(tmp_path, "dgx_a100_layout")
    env = {"MIG_STRATEGY": "mixed", "GFD_NO_TIMESTAMP": "true", "GFD_LABEL_SET": "compat",
           "GFD_MACHINE_TYPE_FILE": str(dmi), "GFD_SYSFS_ROOT": str(sysfs)}
    result = gfd(fake_nvml_lib, profile, "labels", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == golden(GOLDEN / "dgx_a100_layout__mixed__compat.labels")


def test_refused_mig_enumeration_leaves_only_the_mig_labels_out_and_names_the_fix(
        fake_nvml_lib: Path, tmp_path: Path) -> None:
    """MIG devices that may not be read: every label the hardware did say is published as on
    a node that allows it; the MIG resource labels are left out, and one line says why."""
    _, _, sysfs, dmi = node(tmp_path, "dgx_a100_layout")
    profile = profiles.mig_permission_denied().write(tmp_path / "profile.txt")
    args = ["labels", "--mig-strategy", "mixed", "--no-timestamp", "--label-set", "compat",
            "--sysfs-root", str(sysfs), "--machine-type-file", str(dmi)]
    result = gfd(fake_nvml_lib, profile, *args)
    assert result.returncode == 0, result.stderr
    allowed = golden(GOLDEN / "dgx_a100_layout__mixed__compat.labels")
    assert result.stdout.splitlines() == [line for line in allowed
                                          if not line.startswith("nvidia.com/mig-")]
    fixes = [line for line in result.stderr.splitlines()
             if "NVIDIA_MIG_MONITOR_DEVICES=all" in line]
    assert len(fixes) == 1 and "GPU 0, 1, 2, 3, 4: mig_devices" in fixes[0]


def test_snapshot_round_trips_through_labels(fake_nvml_lib: Path, tmp_path: Path) -> None:
    _, profile, sysfs, dmi = node(tmp_path, "dgx_a100_layout")
    common = ["--machine-type-file", str(dmi), "--sysfs-root", str(sysfs), "--nvidia-smi",
              str(tmp_path / "absent")]
    snap = gfd(fake_nvml_lib, profile, "snapshot", *common)
    assert snap.returncode == 0, snap.stderr
    (tmp_path / "snap.json").write_text(snap.stdout)
    live = gfd(fake_nvml_lib, profile, "labels", "--no-timestamp", "--mig-strategy", "mixed",
               *common)
    replay = gfd(None, profile, "labels", "--no-timestamp", "--mig-strategy", "mixed",
                 "--snapshot", str(tmp_path / "snap.json"))
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout == live.stdout and live.stdout


def test_vgpu_guest_gets_host_driver_labels(fake_nvml_lib: Path, tmp_path: Path) -> None:
    machine, profile, _, dmi = node(tmp_path, "t4x4")
    buses = [gpu.pci_bus_id for gpu in machine.resolve()]
    sysfs = gpu_tree(tmp_path / "vsys", buses, vgpu=("550.54.16", "r550_40"))
    result = gfd(fake_nvml_lib, profile, "labels", "--no-timestamp", "--sysfs-root", str(sysfs),
                 "--machine-type-file", str(dmi))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "nvidia.com/vgpu.present=true" in lines
    assert "nvidia.com/vgpu.host-driver-version=550.54.16" in lines
    assert "nvidia.com/vgpu.host-driver-branch=r550_40" in lines


def mig_resources(stdout: str) -> list[str]:
    return sorted(line.split("=")[0].removesuffix(".count").removeprefix("nvidia.com/")
                  for line in stdout.splitlines()
                  if line.startswith("nvidia.com/mig-") and ".count=" in line)


# The device plugin names MIG resources from the same NVML profile: "MIG 1g.10gb+me" ->
# nvidia.com/mig-1g.10gb.me (go-nvlib's profile string with '+' -> '.'), compute-instance
# splits as <C>c.<G>g.<GB>gb (docs/gfd-compatibility.md, "MIG profile names"). The labels
# must use exactly those names.
@pytest.mark.parametrize("machine, names", [
    (profiles.h100_mig, ["mig-1g.10gb.me", "mig-1g.20gb", "mig-3g.40gb"]),
    (profiles.a30_mig, ["mig-1g.6gb", "mig-1g.6gb.me", "mig-2g.12gb"]),
    (profiles.a100_compute_split, ["mig-1c.3g.20gb", "mig-2g.10gb"]),
    (profiles.dgx_a100_layout, ["mig-1g.5gb", "mig-2g.10gb", "mig-3g.20gb", "mig-7g.40gb"]),
], ids=["h100", "a30", "compute-split", "dgx-a100"])
def test_mig_resource_names_equal_the_device_plugins(machine: Any, names: list[str],
                                                     fake_nvml_lib: Path, tmp_path: Path) -> None:
    profile = machine().write(tmp_path / "profile.txt")
    result = gfd(fake_nvml_lib, profile, "labels", "--mig-strategy", "mixed", "--sysfs-root",
                 str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert mig_resources(result.stdout) == names


def test_old_driver_without_profile_names_falls_back_to_the_eighths_rule(
        fake_nvml_old_lib: Path, tmp_path: Path) -> None:
    profile = profiles.a100_compute_split().write(tmp_path / "profile.txt")
    result = gfd(fake_nvml_old_lib, profile, "labels", "--mig-strategy", "mixed",
                 "--sysfs-root", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert mig_resources(result.stdout) == ["mig-1c.3g.20gb", "mig-2g.10gb"]


def test_fabric_clique_label_and_its_conflict(fake_nvml_lib: Path, tmp_path: Path) -> None:
    profile = profiles.gb200_clique().write(tmp_path / "profile.txt")
    result = gfd(fake_nvml_lib, profile, "labels", "--sysfs-root", str(tmp_path))
    assert f"nvidia.com/gpu.clique={profiles.GB200_CLUSTER}.1" in result.stdout.splitlines()
    profile = profiles.clique_conflict().write(tmp_path / "profile.txt")
    result = gfd(fake_nvml_lib, profile, "labels", "--sysfs-root", str(tmp_path))
    assert result.returncode == 0
    assert "gpu.clique" not in result.stdout
    assert "different fabric cliques" in result.stderr


def power(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("nvidia.com/gpu.power.")]


@pytest.mark.parametrize("error", ["NOT_SUPPORTED", "FUNCTION_NOT_FOUND"])
def test_a_gpu_whose_nvml_lacks_the_power_query_leaves_the_power_labels_out(
        error: str, fake_nvml_lib: Path, tmp_path: Path) -> None:
    machine = profiles.hgx_h100()
    profile = machine.write(tmp_path / "profile.txt")
    result = gfd(fake_nvml_lib, profile, "labels", "--sysfs-root", str(tmp_path))
    assert power(result.stdout) == ["nvidia.com/gpu.power.limit.max=700000",
                                    "nvidia.com/gpu.power.limit.min=200000"]
    machine.gpus[6].fail["nvmlDeviceGetPowerManagementLimitConstraints"] = error
    profile = machine.write(tmp_path / "profile.txt")
    result = gfd(fake_nvml_lib, profile, "labels", "--sysfs-root", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert power(result.stdout) == []
    assert "nvidia.com/gpu.nvlink=true" in result.stdout.splitlines(), "the rest stays"
    assert "power" not in result.stderr, "an absent feature is not a warning"
