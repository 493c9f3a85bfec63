"""End to end on the Tegra back end: `gfd labels --device-discovery-strategy tegra` in a
subprocess over the fake libcuda.so.1 (LD_LIBRARY_PATH), with host files laid out like a
Jetson's; compared line by line with golden files written from the reference rules
(tests/data/golden/tegra)."""

from __future__ import annotations

import ctypes.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from fakes.fakecuda import CudaMachine, jetson_agx_orin, jetson_orin_nano, subprocess_env
from fakes.sysfs import config_space, pci_device
from helpers.golden import golden
from helpers.paths import DATA

GOLDEN = DATA / "golden" / "tegra"
ENV_PREFIXES = ("GFD_", "MIG_STRATEGY", "FAIL_ON_INIT_ERROR", "CONFIG_FILE", "NODE_NAME",
                "NAMESPACE", "KUBECONFIG", "USE_NODE_FEATURE_API", "DEVICE_DISCOVERY_STRATEGY",
                "FAKE_CUDA_PROFILE")

# machine name -> profile builder (None: no libcuda.so.1 on the library path)
MACHINES: dict[str, Callable[[], CudaMachine] | None] = {
    "agx_orin": jetson_agx_orin,
    "orin_nano": jetson_orin_nano,
    "no_libcuda": None,
}

HOST_HAS_LIBCUDA = ctypes.util.find_library("cuda") is not None
needs_no_host_libcuda = pytest.mark.skipif(
    HOST_HAS_LIBCUDA, reason="this host has a real libcuda.so.1 the loader would find")


def jetson_sysfs(root: Path) -> Path:
    """A Jetson's sysfs: the SoC family, a PCIe root port (an NVIDIA device, no vGPU
    capability) and an NVMe drive; the integrated GPU is no PCI device."""
    soc = root / "devices" / "soc0"
    soc.mkdir(parents=True)
    (soc / "family").write_text("Tegra\n")
    pci_device(root, "0001:00:00.0", pci_class="0x060400", config=config_space())
    pci_device(root, "0004:01:00.0", pci_class="0x010802", vendor="0x144d")
    return root


def gfd(lib: Path | None, profile: Path | None, *args: str,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    full_env = subprocess_env(lib, profile, base) | (env or {})
    return subprocess.run([sys.executable, "-m", "gfd", *args], capture_output=True, text=True,
                          env=full_env, timeout=60, check=False)


def node(tmp: Path, machine: CudaMachine | None) -> tuple[Path | None, list[str]]:
    """The profile (None without one) and the host-file arguments of a Jetson node."""
    profile = machine.write(tmp / "profile.txt") if machine is not None else None
    sysfs = jetson_sysfs(tmp / "sys")
    # No DMI on the board: the default machine-type file does not exist there.
    return profile, ["--sysfs-root", str(sysfs), "--machine-type-file", str(tmp / "product_name"),
                     "--nvidia-smi", str(tmp / "no-nvidia-smi")]


CASES = sorted(p.name for p in GOLDEN.glob("*.labels"))


@pytest.mark.parametrize("filename", CASES)
def test_labels_match_the_golden_file(filename: str, fake_cuda_lib: Path, tmp_path: Path) -> None:
    name, strategy, label_set = filename.removesuffix(".labels").split("__")
    build = MACHINES[name]
    if build is None and HOST_HAS_LIBCUDA:
        pytest.skip("this host has a real libcuda.so.1 the loader would find")
    profile, host = node(tmp_path, build() if build else None)
    args = ["labels", "--device-discovery-strategy", "tegra", "--no-timestamp",
            "--label-set", label_set, "--mig-strategy", strategy, *host]
    if build is None:
        args.append("--fail-on-init-error=false")
    result = gfd(fake_cuda_lib if build else None, profile, *args)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == golden(GOLDEN / filename)


def test_env_var_selects_the_tegra_back_end(fake_cuda_lib: Path, tmp_path: Path) -> None:
    profile, host = node(tmp_path, jetson_agx_orin())
    result = gfd(fake_cuda_lib, profile, "labels", "--no-timestamp", "--label-set", "compat",
                 *host, env={"DEVICE_DISCOVERY_STRATEGY": "tegra"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == golden(GOLDEN / "agx_orin__none__compat.labels")


@needs_no_host_libcuda
def test_no_libcuda_fails_with_one_clear_line(tmp_path: Path) -> None:
    _, host = node(tmp_path, None)
    result = gfd(None, None, "labels", "--device-discovery-strategy", "tegra", *host)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("gfd: error: CUDA could not start: libcuda.so.1 not found (")
    assert "NVIDIA container runtime" in lines[0]


def test_no_device_fails_with_one_clear_line(fake_cuda_lib: Path, tmp_path: Path) -> None:
    machine = jetson_agx_orin()
    machine.init_error = "CUDA_ERROR_NO_DEVICE"
    profile, host = node(tmp_path, machine)
    result = gfd(fake_cuda_lib, profile, "labels", "--device-discovery-strategy", "tegra", *host)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [lines[0]]
    assert "cuInit failed: CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)" in lines[0]


def test_no_device_without_fail_on_init_error_publishes_the_no_gpu_labels(
        fake_cuda_lib: Path, tmp_path: Path) -> None:
    machine = jetson_agx_orin()
    machine.init_error = "CUDA_ERROR_NO_DEVICE"
    profile, host = node(tmp_path, machine)
    result = gfd(fake_cuda_lib, profile, "labels", "--device-discovery-strategy", "tegra",
                 "--no-timestamp", "--fail-on-init-error=false", *host)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == golden(GOLDEN / "no_libcuda__none__compat.labels")
    assert "CUDA_ERROR_NO_DEVICE" in result.stderr


def test_a_failed_call_fails_the_run_with_one_line(fake_cuda_lib: Path, tmp_path: Path) -> None:
    machine = jetson_agx_orin()
    machine.gpus[0].fail["cuDeviceGetAttribute"] = "CUDA_ERROR_UNKNOWN"
    profile, host = node(tmp_path, machine)
    result = gfd(fake_cuda_lib, profile, "labels", "--device-discovery-strategy", "tegra", *host)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "gfd: error: CUDA cuDeviceGetAttribute failed for GPU 0: CUDA_ERROR_UNKNOWN "
        "(unknown error)"]


def test_tegra_snapshot_round_trips_through_labels(fake_cuda_lib: Path, tmp_path: Path) -> None:
    profile, host = node(tmp_path, jetson_agx_orin())
    snap = gfd(fake_cuda_lib, profile, "snapshot", "--device-discovery-strategy", "tegra", *host)
    assert snap.returncode == 0, snap.stderr
    assert '"backend": "tegra"' in snap.stdout
    (tmp_path / "snap.json").write_text(snap.stdout)
    replay = gfd(None, None, "labels", "--no-timestamp", "--label-set", "compat",
                 "--snapshot", str(tmp_path / "snap.json"))
    assert replay.returncode == 0, replay.stderr
    assert replay.stdout.splitlines() == golden(GOLDEN / "agx_orin__none__compat.labels")


def test_auto_picks_tegra_on_a_tegra_soc_without_nvml(fake_cuda_lib: Path, tmp_path: Path) -> None:
    """GFD's auto rule: Tegra marker files (here the SoC family in sysfs) and no NVML."""
    profile, host = node(tmp_path, jetson_agx_orin())
    result = gfd(fake_cuda_lib, profile, "labels", "--no-timestamp", "--label-set", "compat",
                 "--log-level", "debug", *host)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == golden(GOLDEN / "agx_orin__none__compat.labels")
    assert "auto chose tegra" in result.stderr
