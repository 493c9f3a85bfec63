"""The CEL gfd writes, evaluated as the scheduler would: the expressions of
``gfd.selector.claims.cel`` for several filters (parsed by the selector's own parser) and the
driver's DeviceClass selectors (``gfd.dra.DEVICE_CLASSES``, its Helm chart's), over the
devices the NVIDIA DRA driver publishes (``gfd.devices.resource_slices``) on every simulated
machine, with its default gates and with DynamicMIG. An expression holds exactly where the
device's own attribute and capacity values meet the filter (worked out here from the API
objects); a form gfd does not write is not guessed at (None)."""

from __future__ import annotations

import itertools
from functools import cache
from typing import Any

import pytest
from helpers import placement

from gfd import dra
from gfd.devices import resource_slices
from gfd.facts.naming import sanitise
from gfd.fleet.cel import matches
from gfd.fleet.model import Device, slice_of
from gfd.selector import Options, parse
from gfd.selector.claims import cel

Raw = dict[str, Any]
GATES: tuple[dict[str, bool] | None, ...] = (None, {"DynamicMIG": True},
                                             {"PassthroughSupport": True})


@cache
def published() -> list[tuple[str, str, Raw, Device]]:
    """(machine, gates, the device as the API holds it, gfd's reduction of it)."""
    out = []
    for (machine, snap), gates in itertools.product(placement.machines().items(), GATES):
        for obj in resource_slices(snap, node="n", gates=gates):
            for raw, d in zip(obj["spec"].get("devices", []), slice_of(obj).devices,
                              strict=True):
                out.append((machine, str(gates), raw, d))
    return out


def attr(raw: Raw, name: str) -> Any:
    value = raw["attributes"].get(name)
    return None if value is None else next(iter(value.values()))


def memory_bytes(raw: Raw) -> int | None:
    text = raw["capacity"].get("memory", {}).get("value")
    if text is None:
        return None
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def compute(raw: Raw) -> tuple[int, int] | None:
    cc = attr(raw, "cudaComputeCapability")
    return None if cc is None else (int(cc.split(".")[0]), int(cc.split(".")[1]))


def words(text: str) -> set[str]:
    return {w.lower() for w in sanitise(text).split("-") if w}


def meets(o: dict[str, Any], exact: bool, raw: Raw) -> bool:
    """What the filters ask of a device, read from its attributes and the options alone."""
    name = attr(raw, "productName")
    if o.get("product"):
        if name is None:
            return False
        if exact and sanitise(name).lower() != sanitise(o["product"]).lower():
            return False
        if not words(o["product"]) <= words(name):
            return False
    if "min_memory" in o:
        have = memory_bytes(raw)
        if have is None or have < o["min_memory"] * 2**20:
            return False
    cc = compute(raw)
    if o.get("family") and (cc is None or placement.family(cc) != o["family"]):
        return False
    if o.get("min_compute"):
        major, minor = (int(x) for x in o["min_compute"].split("."))
        if cc is None or cc < (major, minor):
            return False
    return not (o.get("mig_profile")
                and attr(raw, "profile") != o["mig_profile"].replace(".me", "+me"))


FILTERS: list[dict[str, Any]] = [
    {"product": "A100"}, {"product": "A10"}, {"product": "H100"}, {"product": "A100-80GB"},
    {"product": "NVIDIA-A100-SXM4-40GB"}, {"product": "T4"}, {"product": "GeForce RTX 3060"},
    {"product": "GB200", "min_compute": "10.0"},
    {"min_memory": 4864}, {"min_memory": 4865}, {"min_memory": 30000}, {"min_memory": 81559},
    {"min_memory": 81560}, {"min_compute": "8.6"}, {"min_compute": "9.0"},
    {"family": "hopper"}, {"family": "turing"}, {"family": "ampere", "min_memory": 40000},
    {"family": "ada-lovelace"}, {"family": "blackwell"},
    {"mig_profile": "1g.5gb"}, {"mig_profile": "1g.10gb.me"}, {"mig_profile": "1g.23gb"},
    {"mig_profile": "3g.40gb", "min_memory": 40000}, {"mig_profile": "3g.20gb",
                                                     "product": "A100"},
    {"mig_profile": "7g.80gb", "family": "hopper"},
]


@pytest.mark.parametrize("gates", [None, {"DynamicMIG": True}], ids=["default gates",
                                                                      "DynamicMIG"])
@pytest.mark.parametrize("o", FILTERS, ids=str)
def test_the_claims_cel_holds_exactly_where_the_device_meets_the_filters(
        o: dict[str, Any], gates: dict[str, bool] | None) -> None:
    f = parse(Options(dra=True, **o))
    expressions = cel(f, gates)
    assert expressions
    checked = 0
    for machine, _, raw, device in published():
        if attr(raw, "type") != ("mig" if f.mig_profile else "gpu"):
            continue  # the claim's DeviceClass selects only these (the next test)
        answers = [matches(e, device) for e in expressions]
        assert None not in answers, (expressions, raw["name"])
        want = meets(o, bool(f.product and f.product.exact), raw)
        assert all(answers) is want, (machine, raw["name"], expressions)
        checked += 1
    assert checked > 50


@pytest.mark.parametrize("device_class", sorted(dra.DEVICE_CLASSES))
def test_a_device_class_selects_its_type_of_the_drivers_devices(device_class: str) -> None:
    expression = dra.DEVICE_CLASSES[device_class]
    wanted = dra.DEVICE_TYPES[device_class]
    seen = set()
    for _, _, raw, device in published():
        assert matches(expression, device) is (attr(raw, "type") == wanted), raw["name"]
        seen.add(attr(raw, "type"))
    assert seen == {"gpu", "mig", "vfio"}


def test_a_device_class_does_not_select_another_drivers_device() -> None:
    other = Device(driver="gpu.example.com", pool="n", name="gpu-0", node="n",
                   attributes={"type": "gpu"}, capacity={})
    for expression in dra.DEVICE_CLASSES.values():
        assert matches(expression, other) is False


def test_a_uuid_selects_that_device_only() -> None:
    f = parse(Options(dra=True, product="H100"))
    devices = [(raw, d) for m, g, raw, d in published() if m == "hgx-h100" and g == "None"]
    uuid = attr(devices[3][0], "uuid")
    expressions = cel(f, None, uuid=uuid)
    chosen = [raw["name"] for raw, d in devices if all(matches(e, d) for e in expressions)]
    assert chosen == [devices[3][0]["name"]]


H100 = next(d for m, g, _, d in published() if m == "hgx-h100" and g == "None")
ATTR = "device.attributes['gpu.nvidia.com']"
CAP = "device.capacity['gpu.nvidia.com']"


@pytest.mark.parametrize("expression, expected", [
    (f"{ATTR}.architecture == 'Hopper'", True),
    (f"{ATTR}.architecture == 'Ampere'", False),
    (f"({ATTR}.architecture == 'Hopper')", True),
    (f"{ATTR}.productName.lowerAscii().matches('h100')", True),
    (f"{ATTR}.productName.lowerAscii().matches('^nvidia h100 80gb hbm3$')", True),
    (f"{ATTR}.productName.lowerAscii().matches('a100')", False),
    (f"{CAP}.memory.compareTo(quantity('80Gi')) >= 0", False),
    (f"{CAP}.memory.compareTo(quantity('81559Mi')) >= 0", True),
    (f"{CAP}.memory.compareTo(quantity('79Gi')) >= 0", True),
    (f"{ATTR}.driverVersion.compareTo(semver('550.0.0')) >= 0", True),
    (f"{ATTR}.driverVersion.compareTo(semver('580.159.5')) >= 0", False),
    (f"{ATTR}.cudaComputeCapability.compareTo(semver('9.0.0')) >= 0", True),
    (f"{ATTR}.cudaComputeCapability.compareTo(semver('10.0.0')) >= 0", False),
    ("device.driver == 'gpu.nvidia.com'", True),
    ("device.driver == 'compute-domain.nvidia.com'", False),
    (f"{ATTR}.nosuch == 'x'", False),
    (f"{ATTR}.type == 'gpu' && {ATTR}.architecture == 'Ampere'", False),
], ids=lambda v: str(v))
def test_each_form_gfd_writes_is_evaluated(expression: str, expected: bool) -> None:
    assert matches(expression, H100) is expected


@pytest.mark.parametrize("expression", [
    f"{ATTR}.productName.startsWith('NVIDIA')",
    f"has({ATTR}.uuid)",
    f"{ATTR}.architecture == 'Hopper' || {ATTR}.architecture == 'Ampere'",
    f"!({ATTR}.architecture == 'Ampere')",
    f"{CAP}.memory.compareTo(quantity('1Gi')) > 0",
    f"{ATTR}.architecture != 'Ampere'",
    f"{ATTR}.architecture in ['Hopper', 'Ampere']",
    "true",
    f"{ATTR}.type == 'gpu' && {ATTR}.productName.startsWith('NVIDIA')",
], ids=lambda v: str(v))
def test_a_form_gfd_does_not_write_is_not_guessed(expression: str) -> None:
    assert matches(expression, H100) is None


def test_a_known_false_clause_decides_beside_an_unknown_one() -> None:
    """CEL's && is false when either side is false, whatever the other."""
    assert matches(f"{ATTR}.architecture == 'Ampere' && has({ATTR}.uuid)", H100) is False


def test_a_clause_over_the_standard_domain_is_not_answered_false() -> None:
    expression = "device.attributes['resource.kubernetes.io'].pciBusID == '0000:18:00.0'"
    assert matches(expression, H100) is not False
