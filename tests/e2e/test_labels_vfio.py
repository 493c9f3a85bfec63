"""End to end: `gfd labels --device-discovery-strategy vfio` in a subprocess, on sysfs trees laid
out like a KubeVirt host's (GPUs bound to vfio-pci next to ones bound to nvidia), compared
line by line with golden files written by hand from GFD's vfio rules (tests/data/golden/vfio).
No NVML library is reachable: the vfio back end must not need one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from fakes.sysfs import NVIDIA, NVSWITCH, VFIO, MiB, a100, pci_device, resource_text
from helpers.golden import golden
from helpers.paths import DATA

GOLDEN = DATA / "golden" / "vfio"
ENV_PREFIXES = ("GFD_", "MIG_STRATEGY", "FAIL_ON_INIT_ERROR", "CONFIG_FILE", "NODE_NAME",
                "NAMESPACE", "KUBECONFIG", "USE_NODE_FEATURE_API", "DEVICE_DISCOVERY_STRATEGY",
                "LD_LIBRARY_PATH", "FAKE_NVML")


def two_a100_one_on_nvidia(root: Path) -> None:
    a100(root, "0000:07:00.0", 0)
    a100(root, "0000:0f:00.0", 1)
    a100(root, "0000:47:00.0", 2, driver=NVIDIA)
    pci_device(root, "0000:c1:00.0", pci_class=NVSWITCH, device="0x1af1", driver=VFIO,
               resource=resource_text((0xE1000000, 32 * MiB, 0x40200)))
    pci_device(root, "0000:31:00.0", pci_class="0x020000", vendor="0x8086", device="0x1593",
               driver="ice", resource=resource_text((0xE8000000, 32 * MiB, 0x14220C)))


def no_vfio_gpu(root: Path) -> None:
    a100(root, "0000:07:00.0", 0, driver=NVIDIA)
    a100(root, "0000:0f:00.0", 1, driver=NVIDIA)
    pci_device(root, "0000:31:00.0", pci_class="0x020000", vendor="0x8086", device="0x1593",
               driver="ice")


NODES: dict[str, tuple[Callable[[Path], None], str]] = {
    "two_a100_one_on_nvidia": (two_a100_one_on_nvidia, "PowerEdge XE8545\n"),
    "no_vfio_gpu": (no_vfio_gpu, "PowerEdge XE8545\n"),
}


def node(tmp: Path, name: str) -> tuple[Path, Path]:
    build, dmi = NODES[name]
    sysfs = tmp / "sys"
    build(sysfs)
    dmi_file = tmp / "product_name"
    dmi_file.write_text(dmi)
    return sysfs, dmi_file


def gfd(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    return subprocess.run([sys.executable, "-m", "gfd", *args], capture_output=True, text=True,
                          env=env, timeout=60, check=False)


CASES = sorted(p.name for p in GOLDEN.glob("*.labels"))


@pytest.mark.parametrize("filename", CASES)
def test_labels_match_the_golden_file(filename: str, tmp_path: Path) -> None:
    name, label_set = filename.removesuffix(".labels").split("__")
    sysfs, dmi = node(tmp_path, name)
    # an nvidia-smi that leaves a mark: the vfio back end must never run it
    marker = tmp_path / "nvidia-smi-ran"
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ntouch {marker}\n")
    smi.chmod(0o755)
    result = gfd("labels", "--device-discovery-strategy", "vfio", "--sysfs-root", str(sysfs),
                 "--label-set", label_set, "--no-timestamp", "--machine-type-file", str(dmi),
                 "--nvidia-smi", str(smi))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == golden(GOLDEN / filename)
    assert not marker.exists()


def test_every_golden_case_names_a_node() -> None:
    assert CASES and {c.split("__")[0] for c in CASES} == set(NODES)


def test_gpus_on_the_nvidia_driver_are_logged_not_labelled(tmp_path: Path) -> None:
    sysfs, _ = node(tmp_path, "two_a100_one_on_nvidia")
    result = gfd("labels", "--device-discovery-strategy", "vfio", "--sysfs-root", str(sysfs),
                 "--no-timestamp", "--log-level", "debug")
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.count=2" in result.stdout.splitlines()
    assert "GPU 0000:47:00.0 is bound to 'nvidia', not vfio-pci" in result.stderr


def test_missing_pci_devices_directory_fails_with_one_clear_line(tmp_path: Path) -> None:
    result = gfd("labels", "--device-discovery-strategy", "vfio", "--sysfs-root",
                 str(tmp_path / "nothing"))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"cannot list PCI devices in {tmp_path / 'nothing'}/bus/pci/devices" in lines[0]
    assert "--sysfs-root" in lines[0]


def test_missing_pci_devices_directory_with_fail_on_init_error_false_labels_without_gpus(
        tmp_path: Path) -> None:
    result = gfd("labels", "--device-discovery-strategy", "vfio", "--sysfs-root",
                 str(tmp_path / "nothing"), "--fail-on-init-error=false")
    assert result.returncode == 0, result.stderr
    # no GPU labels; no vgpu labels either, since the same directory cannot be scanned
    assert [line for line in result.stdout.splitlines()
            if not line.startswith("nvidia.com/gfd.timestamp=")] == []
    assert "cannot list PCI devices" in result.stderr


def test_pci_ids_names_a_gpu_newer_than_the_bundled_database(tmp_path: Path) -> None:
    """--pci-ids: a newer pci.ids (e.g. from a ConfigMap) names a device the bundled copy does
    not know; the bundled copy gives GFD's UNKNOWN_DEVICE."""
    sysfs = tmp_path / "sys"
    pci_device(sysfs, "0000:07:00.0", device="0x2ff1", driver=VFIO,
               resource=resource_text((0xE1000000, 32 * MiB, 0x40200)))
    database = tmp_path / "pci.ids"
    database.write_text("# a newer database\n10de  NVIDIA Corporation\n"
                        "\t2ff1  GB999 [Imaginary Future GPU]\n\t\t10de 1234  Board\n"
                        "10df  Someone Else\n\t2ff1  Not this one\n")
    args = ["labels", "--device-discovery-strategy", "vfio", "--sysfs-root", str(sysfs),
            "--label-set", "compat", "--no-timestamp"]
    bundled = gfd(*args)
    assert "nvidia.com/gpu.product=UNKNOWN_DEVICE" in bundled.stdout.splitlines(), bundled.stderr
    newer = gfd(*args, "--pci-ids", str(database))
    assert "nvidia.com/gpu.product=GB999-Imaginary-Future-GPU" in newer.stdout.splitlines(), (
        newer.stderr)


def test_an_unreadable_pci_ids_file_is_one_line(tmp_path: Path) -> None:
    sysfs = tmp_path / "sys"
    a100(sysfs, "0000:07:00.0", 0)
    result = gfd("labels", "--device-discovery-strategy", "vfio", "--sysfs-root", str(sysfs),
                 "--pci-ids", str(tmp_path / "missing.ids"))
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"gfd: error: vfio: cannot read the PCI IDs database {tmp_path}/missing.ids: "
        "No such file or directory (check --pci-ids)"]
