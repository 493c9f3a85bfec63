"""The architecture family of a compute capability, by GFD's table: what ``gpu.family``, the
``nvidia.gpu`` feature's ``family`` and ``gfd selector --family`` all use."""

from __future__ import annotations

_BY_MAJOR = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper",
             10: "blackwell", 12: "blackwell", 13: "rubin"}


def family(major: int, minor: int) -> str:
    """GFD's architecture family for a compute capability
    (docs/gfd-compatibility.md, "Architecture family")."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor == 9 else "ampere"
    return _BY_MAJOR.get(major, "undefined")


FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(
    name for major in range(1, max(_BY_MAJOR) + 1) for minor in range(10)
    if (name := family(major, minor)) != "undefined"))
"""Every family the table names, oldest first (``undefined`` aside)."""
