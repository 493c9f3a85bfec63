"""``gpu.family`` and ``gpu.compute.major|minor`` from the compute capability by GFD's family
table (docs/gfd-compatibility.md, "Architecture family"). The table has one home
(gfd/facts/family.py); ``gfd selector`` checks against it."""

from __future__ import annotations

import pytest
from helpers.builders import P, gpu, labelling, labels, snapshot

from gfd.errors import ConfigError
from gfd.facts.family import FAMILIES
from gfd.selector import Options, parse
from gfd.selector.labels import terms


@pytest.mark.parametrize("name", FAMILIES)
def test_selector_accepts_every_family_the_labelers_can_write(name: str) -> None:
    assert terms(parse(Options(family=name))) == [[("nvidia.com/gpu.family", "In", (name,)),
                                                   ("nvidia.com/gpu.heterogeneous", "In",
                                                    ("false",))]]


@pytest.mark.parametrize("name", ["undefined", "quantum", "Hopper"])
def test_selector_refuses_a_family_the_labelers_never_write(name: str) -> None:
    with pytest.raises(ConfigError, match="must be one of tesla, fermi"):
        parse(Options(family=name))


# --- the labels --------------------------------------------------------------------------------


FAMILY_TABLE = [
    ((1, 3), "tesla"),
    ((2, 1), "fermi"),
    ((3, 7), "kepler"),
    ((5, 2), "maxwell"),
    ((6, 1), "pascal"),
    ((7, 0), "volta"),
    ((7, 2), "volta"),
    ((7, 5), "turing"),
    ((8, 0), "ampere"),
    ((8, 6), "ampere"),
    ((8, 7), "ampere"),
    ((8, 9), "ada-lovelace"),
    ((9, 0), "hopper"),
    ((10, 0), "blackwell"),
    ((10, 3), "blackwell"),
    ((12, 0), "blackwell"),
    ((13, 0), "rubin"),
    ((4, 0), "undefined"),
    ((11, 0), "undefined"),
    ((14, 0), "undefined"),
]


@pytest.mark.parametrize(("cc", "family"), FAMILY_TABLE,
                         ids=[f"{c[0]}.{c[1]}-{f}" for c, f in FAMILY_TABLE])
def test_family_table(cc: tuple[int, int], family: str) -> None:
    got = labels(snapshot(gpu(cc=cc)))
    assert got["gpu.family"] == family
    assert got["gpu.compute.major"] == str(cc[0])
    assert got["gpu.compute.minor"] == str(cc[1])


def test_negative_compute_capability_is_undefined_and_its_invalid_values_are_dropped() -> None:
    # The vfio back end reports -1.-1: family 'undefined'; "-1" is not a valid label value
    # (it must start with an alphanumeric), so gfd drops those two labels alone where GFD
    # would write them for NFD to drop (docs/gfd-compatibility.md, "Back ends").
    result = labelling(snapshot(gpu(cc=(-1, -1))))
    assert result.labels[P + "gpu.family"] == "undefined"
    assert P + "gpu.compute.major" not in result.labels
    assert P + "gpu.compute.minor" not in result.labels
    assert {r.key for r in result.rejected} == {P + "gpu.compute.major", P + "gpu.compute.minor"}
    assert {r.value for r in result.rejected} == {"-1"}
    assert result.labels[P + "gpu.product"] == "NVIDIA-A100-SXM4-40GB"


@pytest.mark.parametrize("cc", [(0, 0), (0, 5)], ids=["0.0", "0.5"])
def test_compute_major_zero_gives_no_family_and_no_compute_labels(cc: tuple[int, int]) -> None:
    got = labels(snapshot(gpu(cc=cc)))
    assert "gpu.family" not in got
    assert "gpu.compute.major" not in got
    assert "gpu.compute.minor" not in got
    assert got["gpu.product"] == "NVIDIA-A100-SXM4-40GB"  # the rest is still written
