"""GFD's auto rule: which back end --device-discovery-strategy auto picks, and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.readers.platform import has_dxcore, resolve


def sysfs(tmp: Path, family: str | None) -> Path:
    root = tmp / "sys"
    soc = root / "devices" / "soc0"
    soc.mkdir(parents=True)
    if family is not None:
        (soc / "family").write_text(family)
    return root


@pytest.mark.parametrize("family, names, dxcore, expected", [
    ("Tegra\n", None, False, "tegra"),            # Jetson: Tegra files, no NVML
    ("Tegra\n", ["Orin (nvgpu)"], False, "tegra"),  # NVML names an integrated GPU
    (None, ["NVIDIA Thor"], False, "tegra"),
    ("Tegra\n", ["NVIDIA H100 80GB HBM3"], False, "nvml"),  # NVML loads, a discrete GPU
    (None, ["NVIDIA A100-SXM4-40GB"], False, "nvml"),
    (None, None, False, "nvml"),                  # nothing found: NVML reports its own error
    ("Tegra\n", None, True, "nvml"),              # WSL first
    ("x86_64\n", None, False, "nvml"),
], ids=["tegra-files", "nvgpu-name", "thor-name", "discrete-on-tegra-files", "discrete",
        "nothing", "wsl", "other-soc"])
def test_auto_rule(tmp_path: Path, family: str | None, names: list[str] | None, dxcore: bool,
                   expected: str) -> None:
    chosen, why = resolve(sysfs_root=str(sysfs(tmp_path, family)),
                          nvml_device_names=lambda: names,
                          release_file=str(tmp_path / "no-release-file"),
                          dxcore=lambda: dxcore)
    assert chosen == expected and why


def test_the_l4t_release_file_marks_tegra(tmp_path: Path) -> None:
    release = tmp_path / "nv_tegra_release"
    release.write_text("# R36 (release), REVISION: 4.0\n")
    chosen, why = resolve(sysfs_root=str(sysfs(tmp_path, None)), nvml_device_names=lambda: None,
                          release_file=str(release), dxcore=lambda: False)
    assert chosen == "tegra" and str(release) in why


def test_no_dxcore_outside_wsl() -> None:
    assert has_dxcore("libdxcore-that-does-not-exist.so") is False
