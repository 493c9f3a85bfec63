"""The PCI IDs database as data: device lines of one vendor, read the way go-nvlib reads them,
and the NVIDIA section gfd ships."""

from __future__ import annotations

import importlib.resources
import tomllib
from pathlib import Path

from gfd.pcidb import BUNDLED, NVIDIA, load_bundled, parse_pci_ids

SAMPLE = """\
#
#\tList of PCI ID's
#
#\tVersion: 2099.01.02
#
# Syntax:
# vendor  vendor_name
#\tdevice  device_name\t\t\t\t<-- single tab
10dd  Evans & Sutherland
\t20b0  Not an NVIDIA device
10de  NVIDIA Corporation
# a comment inside the section
\t1eb8  TU104GL [Tesla T4]
\t\t10de 12a2  T4 16GB (a subsystem name, never used)
\t20b0  GA100 [A100 SXM4 40GB]
\t\t10de 134f  A100-SXM4-40GB
\t2330  GH100[H100 SXM5 80GB]
\t2331   GH100 [H100 PCIe]\t

\t1eb8  TU104GL [Tesla T4, renamed]
10df  Emulex Corporation
\t2330  Not an NVIDIA device either
C 03  Display controller
\t00  VGA compatible controller
\t\t00  VGA controller
"""


def test_a_device_is_named_by_its_device_line_alone() -> None:
    db = parse_pci_ids(SAMPLE)
    assert db.device_name(NVIDIA, 0x20B0) == "GA100 [A100 SXM4 40GB]"
    # the name as written: no space is added, surrounding blanks are trimmed
    assert db.device_name(NVIDIA, 0x2330) == "GH100[H100 SXM5 80GB]"
    assert db.device_name(NVIDIA, 0x2331) == "GH100 [H100 PCIe]"


def test_only_the_vendors_own_device_lines_count() -> None:
    db = parse_pci_ids(SAMPLE)
    assert dict(db.names) == {0x1EB8: "TU104GL [Tesla T4, renamed]",
                              0x20B0: "GA100 [A100 SXM4 40GB]",
                              0x2330: "GH100[H100 SXM5 80GB]", 0x2331: "GH100 [H100 PCIe]"}


def test_a_device_listed_twice_keeps_its_last_name() -> None:
    assert parse_pci_ids(SAMPLE).device_name(NVIDIA, 0x1EB8) == "TU104GL [Tesla T4, renamed]"


def test_an_unlisted_device_or_another_vendor_has_no_name() -> None:
    db = parse_pci_ids(SAMPLE)
    assert db.device_name(NVIDIA, 0x2901) is None
    assert db.device_name(0x10DD, 0x20B0) is None


def test_the_version_header_is_kept_and_may_be_absent() -> None:
    assert parse_pci_ids(SAMPLE).version == "2099.01.02"
    assert parse_pci_ids("10de  NVIDIA Corporation\n\t20b0  GA100\n").version == ""


def test_another_vendor_can_be_read() -> None:
    db = parse_pci_ids(SAMPLE, vendor=0x10DF)
    assert dict(db.names) == {0x2330: "Not an NVIDIA device either"}


def test_the_bundled_database_is_the_nvidia_section_with_the_upstream_header() -> None:
    text = importlib.resources.files("gfd").joinpath(BUNDLED).read_text(encoding="utf-8")
    vendors = [line for line in text.splitlines() if line[:1].isalnum()]
    assert vendors == ["10de  NVIDIA Corporation"]
    assert "#\tVersion: 2025.07.11" in text
    assert "GNU General Public License" in text and "3-clause BSD License" in text
    assert "the copy NVIDIA's GFD v0.20.0 embeds" in text


def test_the_bundled_database_names_nvidia_gpus() -> None:
    db = load_bundled()
    assert db.version == "2025.07.11"
    assert db.device_name(NVIDIA, 0x20B0) == "GA100 [A100 SXM4 40GB]"
    # GFD v0.20.0's copy (go-nvlib's default_pci.ids), not Debian's 2023 one, which spelt
    # it "GH100[H100 SXM5 80GB]" and so named the GPU GH100H100-SXM5-80GB
    assert db.device_name(NVIDIA, 0x2330) == "GH100 [H100 SXM5 80GB]"
    assert db.device_name(NVIDIA, 0x1EB8) == "TU104GL [Tesla T4]"
    assert len(db.names) > 1500


def test_the_bundled_database_is_package_data() -> None:
    pyproject = Path(__file__).parents[1] / "pyproject.toml"
    data = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["package-data"]["gfd"]
    assert BUNDLED in data
