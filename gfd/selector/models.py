"""GPU model names for ``--product``: from the PCI IDs database gfd ships, with NVML's names
where they differ; a query's words resolved to the ``gpu.product`` values they describe."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from gfd.facts.naming import sanitise
from gfd.pcidb import load_bundled

NVML_NAMES: dict[int, str] = {
    0x20B1: "NVIDIA A100-PCIE-40GB",
    0x20F1: "NVIDIA A100-PCIE-40GB",
    0x20B5: "NVIDIA A100 80GB PCIe",
    0x20F3: "NVIDIA A800-SXM4-80GB",
    0x2330: "NVIDIA H100 80GB HBM3",
    0x2321: "NVIDIA H100 NVL",
    0x2335: "NVIDIA H200",
    0x2342: "NVIDIA GH200 480GB",
    0x2520: "NVIDIA GeForce RTX 3060 Laptop GPU",
    0x2560: "NVIDIA GeForce RTX 3060 Laptop GPU",
    0x1DB1: "Tesla V100-SXM2-16GB",
    0x1DB5: "Tesla V100-SXM2-32GB",
    0x1DB4: "Tesla V100-PCIE-16GB",
    0x1DB6: "Tesla V100-PCIE-32GB",
    0x1DF6: "Tesla V100S-PCIE-32GB",
}
"""PCI device id -> the name NVML reports, where it differs from the database's device name
(word order, case, or the marketing name): ``nvidia-smi -L`` on those GPUs."""

NVML_ONLY: tuple[str, ...] = ("NVIDIA GB200", "NVIDIA GB300", "NVIDIA B300")
"""Names NVML reports for GPUs newer than the bundled database."""

_UNNAMED = re.compile(r"(?i)\b(nvswitch|engineering sample|initial devid|int sku|cmp)\b")
_OLD_BRANDS = ("Tesla ", "Quadro ")
"""Device names NVML reports without the ``NVIDIA`` prefix (older brands)."""


def words(text: str) -> tuple[str, ...]:
    """The words of a name or a query as ``gpu.product`` splits them: sanitise, split at
    ``-``, lower case, empty words dropped (``A100-80GB`` -> ``('a100', '80gb')``)."""
    return tuple(w.lower() for w in sanitise(text).split("-") if w)


def _nvml_name(name: str) -> str:
    return name if name.startswith(_OLD_BRANDS) else f"NVIDIA {name}"


CHIP_FAMILIES: dict[str, str] = {
    "GK": "kepler", "GM": "maxwell", "GP": "pascal", "GV": "volta", "TU": "turing",
    "GA": "ampere", "AD": "ada-lovelace", "GH": "hopper", "GB": "blackwell",
}
"""The GPU chip's prefix in the database (``GA100``, ``AD102GL``) -> gfd's ``gpu.family``."""


@cache
def models() -> dict[str, str]:
    """Every GPU model name gfd knows, as NVML reports it -> its ``gpu.family`` (``""`` when
    the chip is not one of ``CHIP_FAMILIES``): the bundled PCI IDs database's bracketed device
    names (``GA100 [A100 SXM4 40GB]``; ``A2 / A16`` are two), NVML's name instead where it
    differs, and NVML's names newer than the database."""
    found: dict[str, str] = dict.fromkeys(NVML_ONLY, "blackwell")
    for device, line in sorted(load_bundled().names.items()):
        family = CHIP_FAMILIES.get(line[:2], "")
        if device in NVML_NAMES:
            found[NVML_NAMES[device]] = family
            continue
        match = re.search(r"\[(.+)\]", line)
        if not match:
            continue
        for name in match.group(1).split(" / "):
            if name.strip() and not _UNNAMED.search(name):
                found.setdefault(_nvml_name(name.strip()), family)
    return dict(sorted(found.items()))


@dataclass(frozen=True, slots=True)
class Product:
    """A ``--product`` query resolved."""

    query: str
    values: tuple[str, ...]
    """The ``gpu.product`` model values (sanitised NVML names) it describes."""
    exact: bool
    """An exact ``gpu.product`` value: match that model only, not every name with its words."""
    shared: bool | None
    """True when the value carried ``-SHARED`` (a shared, unrenamed resource)."""
    known: bool
    """False when no model gfd knows has these words (the value is then used as given)."""


def resolve(query: str) -> Product:
    """``A100-80GB`` -> every model whose words include ``a100`` and ``80gb``, in any order;
    an exact ``gpu.product`` value (with or without ``-SHARED``) -> that model; anything else
    -> itself, marked unknown (the caller warns)."""
    value = sanitise(query)
    shared = None
    if value.upper().endswith("-SHARED"):
        value, shared = value[: -len("-SHARED")], True
    exact = {sanitise(m).lower(): sanitise(m) for m in models()}
    if value.lower() in exact and (shared or "-" in value):
        return Product(query, (exact[value.lower()],), True, shared, True)
    wanted = set(words(value))
    found = tuple(sorted({sanitise(m) for m in models() if wanted and wanted <= set(words(m))}))
    if found:
        return Product(query, found, False, shared, True)
    return Product(query, (value,), True, shared, False)


def families(product: Product) -> set[str]:
    """The ``gpu.family`` values of the models a resolved query names (empty when unknown)."""
    by_value = {sanitise(m): f for m, f in models().items()}
    return {by_value.get(v, "") for v in product.values} - {""}
