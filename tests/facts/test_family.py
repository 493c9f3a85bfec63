"""GFD's family table by compute capability, and the list of names it gives (what
``gpu.family``, the ``nvidia.gpu`` feature's ``family`` and ``gfd selector --family`` use;
docs/gfd-compatibility.md, "Architecture family")."""

from __future__ import annotations

import pytest

from gfd.facts.family import FAMILIES, family

TABLE = [
    ((1, 3), "tesla"), ((2, 1), "fermi"), ((3, 7), "kepler"), ((5, 2), "maxwell"),
    ((6, 1), "pascal"), ((7, 0), "volta"), ((7, 4), "volta"), ((7, 5), "turing"),
    ((8, 0), "ampere"), ((8, 6), "ampere"), ((8, 9), "ada-lovelace"), ((9, 0), "hopper"),
    ((10, 0), "blackwell"), ((12, 1), "blackwell"), ((13, 0), "rubin"),
    ((0, 0), "undefined"), ((4, 0), "undefined"), ((11, 0), "undefined"),
    ((-1, -1), "undefined"),
]


@pytest.mark.parametrize(("cc", "name"), TABLE, ids=[f"{c[0]}.{c[1]}" for c, _ in TABLE])
def test_family_by_compute_capability(cc: tuple[int, int], name: str) -> None:
    assert family(*cc) == name


def test_families_are_every_name_the_table_gives_oldest_first() -> None:
    given = [family(major, minor) for major in range(0, 20) for minor in range(0, 12)]
    assert set(FAMILIES) == set(given) - {"undefined"}
    assert list(FAMILIES) == sorted(FAMILIES, key=given.index)
