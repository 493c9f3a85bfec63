"""The family table has one home (labelers/family.py); ``gfd selector`` checks against it."""

from __future__ import annotations

import pytest

from gfd.errors import ConfigError
from gfd.labelers.family import FAMILIES, family
from gfd.selector import Constraints, requirements


def test_families_are_every_name_the_table_gives_oldest_first() -> None:
    given = [family(major, minor) for major in range(0, 20) for minor in range(0, 12)]
    assert set(FAMILIES) == set(given) - {"undefined"}
    assert list(FAMILIES) == sorted(FAMILIES, key=given.index)


@pytest.mark.parametrize("name", FAMILIES)
def test_selector_accepts_every_family_the_labelers_can_write(name: str) -> None:
    assert requirements(Constraints(family=name)) == [[("nvidia.com/gpu.family", "In", (name,))]]


@pytest.mark.parametrize("name", ["undefined", "quantum", "Hopper"])
def test_selector_refuses_a_family_the_labelers_never_write(name: str) -> None:
    with pytest.raises(ConfigError, match="must be one of tesla, fermi"):
        requirements(Constraints(family=name))
