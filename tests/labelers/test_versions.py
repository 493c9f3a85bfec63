"""``cuda.driver.*``, ``cuda.driver-version.*``, ``cuda.runtime.*``, ``cuda.runtime-version.*``:
the driver version split into text parts and the CUDA version into integers
(docs/gfd-compatibility.md, "Driver and CUDA versions")."""

from __future__ import annotations

import pytest
from helpers.builders import gpu, labelling, labels, snapshot

from gfd.errors import DiscoveryError
from gfd.labelers.options import LabelOptions
from gfd.labelers.versions import versions

DRIVER_CASES = [
    ("three-parts", "550.54.15", ("550", "54", "15")),
    ("two-parts-empty-rev", "535.104", ("535", "104", "")),
    ("leading-zeros-kept", "580.159.04", ("580", "159", "04")),
    ("leading-zeros-everywhere", "0550.054.005", ("0550", "054", "005")),
]


@pytest.mark.parametrize(("driver", "parts"), [(d, p) for _, d, p in DRIVER_CASES],
                         ids=[i for i, _, _ in DRIVER_CASES])
def test_driver_version_splitting(driver: str, parts: tuple[str, str, str]) -> None:
    got = labels(snapshot(gpu(), driver=driver))
    major, minor, rev = parts
    assert got["cuda.driver.major"] == major
    assert got["cuda.driver.minor"] == minor
    assert got["cuda.driver.rev"] == rev
    assert got["cuda.driver-version.major"] == major
    assert got["cuda.driver-version.minor"] == minor
    assert got["cuda.driver-version.revision"] == rev
    assert got["cuda.driver-version.full"] == driver


@pytest.mark.parametrize("driver", ["550", "1.2.3.4", "550.54.15.1"],
                         ids=["one-part", "four-parts", "four-parts-real"])
def test_driver_version_with_wrong_number_of_parts_is_a_discovery_error(driver: str) -> None:
    with pytest.raises(DiscoveryError):
        labelling(snapshot(gpu(), driver=driver))


CUDA_CASES = [
    (12040, "12", "4"),
    (13000, "13", "0"),
    (12060, "12", "6"),
    (11080, "11", "8"),
    (12045, "12", "4"),  # (v % 1000) / 10 is integer division
]


@pytest.mark.parametrize(("cuda", "major", "minor"), CUDA_CASES,
                         ids=[str(c) for c, _, _ in CUDA_CASES])
def test_cuda_driver_version_splitting(cuda: int, major: str, minor: str) -> None:
    got = labels(snapshot(gpu(), cuda=cuda))
    assert got["cuda.runtime.major"] == major
    assert got["cuda.runtime.minor"] == minor
    assert got["cuda.runtime-version.major"] == major
    assert got["cuda.runtime-version.minor"] == minor
    assert got["cuda.runtime-version.full"] == f"{major}.{minor}"


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_unknown_versions_give_no_version_labels() -> None:
    assert versions(snapshot(gpu(), driver=None, cuda=None), LabelOptions()).labels == {}


def test_the_raw_driver_version_is_kept_for_every_part() -> None:
    labels = versions(snapshot(gpu(), driver="535.104"), LabelOptions()).labels
    assert {label.raw for k, label in labels.items() if ".driver" in k} == {"535.104"}
