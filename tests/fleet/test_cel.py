"""The CEL gfd writes, evaluated as the scheduler would: the expressions of
``gfd.selector.claims.cel`` for several filters (parsed by the selector's own parser) and the
driver's DeviceClass selectors (``gfd.dra.DEVICE_CLASSES``, its Helm chart's), over the
devices the NVIDIA DRA driver publishes (``gfd.devices.resource_slices``) on every simulated
machine, with its default gates and with DynamicMIG. An expression holds exactly where the
device's own attribute and capacity values meet the filter (worked out here from the API
objects).

Then CEL as Kubernetes' DRA allocator evaluates it, each expected value taken from the CEL
language definition (cel-spec ``doc/langdef.md``), cel-go (``ext/strings.go``, the
interpreter), Kubernetes' libraries (``k8s.io/apiserver/pkg/cel/library``: ``quantity.go``,
``semverlib.go``, ``regex.go``, ``lists.go``), the DRA environment
(``k8s.io/dynamic-resource-allocation/cel/compile.go`` and its ``compile_test.go``) and the
allocator (``selectorsMatch``: a runtime error aborts the allocation, so it is "cannot tell",
never a mismatch); what gfd does not evaluate exactly is None with the reason."""

from __future__ import annotations

import itertools
from functools import cache
from typing import Any

import pytest
from helpers import placement

from gfd import dra
from gfd.devices import resource_slices
from gfd.facts.naming import sanitise
from gfd.fleet.cel import MAX_LENGTH, Evaluator, Outcome, matches
from gfd.fleet.model import Device, Version, slice_of
from gfd.selector import Options, parse
from gfd.selector.claims import cel

Raw = dict[str, Any]
EVALUATOR = Evaluator()
"""One for the module: compiled expressions and outcomes are kept across its tests."""
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
        answers = [EVALUATOR.matches(e, device) for e in expressions]
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
        assert EVALUATOR.matches(expression, device) is (attr(raw, "type") == wanted), \
            raw["name"]
        seen.add(attr(raw, "type"))
    assert seen == {"gpu", "mig", "vfio"}


def test_a_device_class_does_not_select_another_drivers_device() -> None:
    other = Device(driver="gpu.example.com", pool="n", name="gpu-0", node="n",
                   attributes={"type": "gpu"}, capacity={})
    for expression in dra.DEVICE_CLASSES.values():
        assert EVALUATOR.matches(expression, other) is False


def test_a_uuid_selects_that_device_only() -> None:
    f = parse(Options(dra=True, product="H100"))
    devices = [(raw, d) for m, g, raw, d in published() if m == "hgx-h100" and g == "None"]
    uuid = attr(devices[3][0], "uuid")
    expressions = cel(f, None, uuid=uuid)
    chosen = [raw["name"] for raw, d in devices
              if all(EVALUATOR.matches(e, d) for e in expressions)]
    assert chosen == [devices[3][0]["name"]]


H100 = next(d for m, g, _, d in published() if m == "hgx-h100" and g == "None")
ATTR = "device.attributes['gpu.nvidia.com']"
CAP = "device.capacity['gpu.nvidia.com']"
def outcome(expression: str, device: Device = H100) -> Outcome:
    return EVALUATOR.evaluate(expression, device)


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
    (f"{ATTR}.type == 'gpu' && {ATTR}.architecture == 'Ampere'", False),
], ids=lambda v: str(v))
def test_each_form_gfd_writes_is_evaluated(expression: str, expected: bool) -> None:
    assert matches(expression, H100) is expected
    assert outcome(expression) == Outcome(expected)


@pytest.mark.parametrize("expression, expected", [
    (f"{ATTR}.productName.startsWith('NVIDIA')", True),
    (f"has({ATTR}.uuid)", True),
    (f"has({ATTR}.profile)", False),
    (f"{ATTR}.architecture == 'Hopper' || {ATTR}.architecture == 'Ampere'", True),
    (f"!({ATTR}.architecture == 'Ampere')", True),
    (f"{CAP}.memory.compareTo(quantity('1Gi')) > 0", True),
    (f"{ATTR}.architecture != 'Ampere'", True),
    (f"{ATTR}.architecture in ['Hopper', 'Ampere']", True),
    (f"{ATTR}.architecture in ['Ampere', 'Turing']", False),
    ("true", True),
    (f"{ATTR}.type == 'gpu' && {ATTR}.productName.startsWith('NVIDIA')", True),
    ("device.attributes['resource.kubernetes.io'].pciBusID.startsWith('0000:')", True),
], ids=lambda v: str(v))
def test_the_forms_users_write_beside_gfds_are_evaluated_too(expression: str,
                                                             expected: bool) -> None:
    assert outcome(expression) == Outcome(expected)


# --------------------------------------------------------------------------- the language

DEVICE = Device(
    driver="gpu.nvidia.com", pool="p", name="gpu-0", node="n",
    attributes={"type": "gpu", "productName": "NVIDIA H100 80GB HBM3", "architecture": "Hopper",
                "driverVersion": Version("550.54.15"),
                "cudaComputeCapability": Version("9.0.0"), "count": 3, "healthy": True,
                "resource.kubernetes.io/pciBusID": "0000:18:00.0"},
    capacity={"memory": 81559 * 2**20})
A = "device.attributes['gpu.nvidia.com']"
C = "device.capacity['gpu.nvidia.com']"
MISSING = f"{A}.profile == '1g.5gb'"
"""A runtime error on DEVICE: it has no ``profile`` ("no such key: profile")."""


def on(expression: str, device: Device = DEVICE) -> bool | None:
    return EVALUATOR.evaluate(expression, device).matched


@pytest.mark.parametrize("expression, expected", [
    # langdef "String and Bytes Literals": either quote, raw, triple-quoted, escapes
    ('device.driver == "gpu.nvidia.com"', True),
    ("device.driver == 'gpu.nvidia.com'", True),
    ("device.driver == r'gpu.nvidia.com'", True),
    ("device.driver == '''gpu.nvidia.com'''", True),
    ('device.driver == """gpu.nvidia.com"""', True),
    (r"'\x41\u0042\103' == 'ABC'", True),
    (r"r'\d' == '\\d'", True),
    (f'{A}["architecture"] == "Hopper"', True),
    ("device.driver == 'gpu.nvidia.com' // the driver's devices", True),
    # langdef "Field Selection", has(): a map's key presence
    (f"has({A}.productName)", True),
    (f"has({A}.profile)", False),
    ("has(device.attributes['other.example.com'].name)", False),
    # in: a list's element, a map's key (compile_test "domain-check-negative/positive")
    (f"{A}.architecture in ['Ampere', 'Hopper']", True),
    (f"'productName' in {A}", True),
    ("'gpu.nvidia.com' in device.attributes", True),
    ("'other.example.com' in device.attributes", False),
    # the conditional: the branch not taken is not evaluated
    (f"{A}.architecture == 'Hopper' ? true : {A}.profile == 'x'", True),
    (f"{A}.count > 2 ? {A}.healthy : false", True),
    # heterogeneous equality (dyn values): another type is unequal, numbers by value
    (f"{A}.architecture == 1", False),
    (f"{A}.count == 3.0", True),
    (f"{A}.count == 3u", True),
    (f"{A}.count > 2.5", True),
    (f"{A}.healthy", True),
    (f"{A}.healthy == true && {A}.count >= 3", True),
    ("[1, 2] == [1, 2] && {'a': 1} == {'a': 1} && [1] != [1, 2]", True),
    # arithmetic: truncating division, Go's remainder, concatenation
    ("-7 / 2 == -3 && -7 % 2 == -1 && 7 % -2 == 1", True),
    (f"{A}.architecture + '-' + {A}.type == 'Hopper-gpu'", True),
    ("size([1] + [2, 3]) == 3 && 'abc'.size() == 3 && size('é') == 1", True),
], ids=lambda v: str(v))
def test_the_language_is_cels(expression: str, expected: bool) -> None:
    assert on(expression) is expected


@pytest.mark.parametrize("expression, expected", [
    (f"false && {MISSING}", False),
    (f"{MISSING} && false", False),
    (f"true || {MISSING}", True),
    (f"{MISSING} || true", True),
    (f"true && {MISSING}", None),
    (f"{MISSING} || false", None),
    (f"!({MISSING})", None),
    (f"{MISSING} ? true : true", None),
    ("[1, 0].exists(x, 1 / x > 0)", True),
    ("[0, 1].all(x, 1 / x < 0)", False),
    ("[1, 0].all(x, 1 / x > 0)", None),
    ("[1, 0].exists_one(x, 1 / x > 0)", None),
], ids=lambda v: str(v))
def test_and_or_and_the_macros_absorb_errors_as_cel_does(expression: str,
                                                        expected: bool | None) -> None:
    """langdef "Logical Operators": ``&&`` and ``||`` are commutative over errors (false
    and anything is false, true or anything is true); ``all`` and ``exists`` likewise."""
    assert on(expression) is expected


def test_a_missing_attribute_is_a_runtime_error_not_a_mismatch() -> None:
    assert outcome(MISSING, DEVICE) == Outcome(None, "CEL runtime error: no such key: profile")
    assert matches(MISSING, DEVICE) is None


def test_a_missing_domain_is_an_empty_map() -> None:
    """compile.go: a domain the device lacks looks up as an empty map, so a name read in it
    is "no such key" (compile_test "runtime-error-lookup-identifier")."""
    e = "device.attributes['no-such-domain'].noSuchAttr.isGreaterThan(quantity('0'))"
    assert outcome(e, DEVICE) == Outcome(None, "CEL runtime error: no such key: noSuchAttr")
    e = "device.capacity['no-such-domain']['memory'].isGreaterThan(quantity('0'))"
    assert outcome(e, DEVICE) == Outcome(None, "CEL runtime error: no such key: memory")
    assert on("device.attributes['no-such-domain'].size() == 0") is True
    assert on("has(device.attributes['no-such-domain'].name)") is False


def test_unqualified_names_are_the_drivers_and_qualified_ones_their_domains() -> None:
    """compile.go ``parseQualifiedName`` (compile_test "driver-name-qualifier",
    "qualified-attribute-name", "bind")."""
    d = Device(driver="dra.example.com", pool="p", name="d", node="n",
               attributes={"name": True, "other.example.com/name": False}, capacity={})
    assert on('device.attributes["dra.example.com"].name', d) is True
    assert on('device.attributes["dra.example.com"]["name"]', d) is True
    assert on('device.attributes["other.example.com"].name', d) is False
    assert on('cel.bind(dra, device.attributes["dra.example.com"], dra.name)', d) is True


def test_a_device_of_another_driver_is_read_in_its_own_domain() -> None:
    other = Device(driver="gpu.example.com", pool="p", name="d", node="n",
                   attributes={"type": "gpu"}, capacity={"memory": 2**30})
    assert outcome(f"{A}.type == 'gpu'", other) == \
        Outcome(None, "CEL runtime error: no such key: type")
    assert on("device.attributes['gpu.example.com'].type == 'gpu'", other) is True
    assert on(f"device.driver == 'gpu.nvidia.com' && {A}.type == 'gpu'", other) is False


def test_allow_multiple_allocations_is_a_field() -> None:
    shared = Device(driver="gpu.nvidia.com", pool="p", name="d", node="n", attributes={},
                    capacity={}, allow_multiple=True)
    assert on("device.allowMultipleAllocations == true", shared) is True
    assert on("device.allowMultipleAllocations", DEVICE) is False


def test_a_version_attribute_that_is_no_semver_fails_every_expression() -> None:
    """compile.go ``getAttributeValue``: ``semver.Parse`` of each version attribute, before
    the expression runs."""
    d = Device(driver="gpu.nvidia.com", pool="p", name="d", node="n",
               attributes={"type": "gpu", "driverVersion": Version("535.183.01")}, capacity={})
    got = outcome(f"{A}.type == 'gpu'", d)
    assert got.matched is None
    assert got.reason.startswith("CEL runtime error: attribute driverVersion: parse semantic "
                                 "version")


# --------------------------------------------------------------------------- the libraries

@pytest.mark.parametrize("expression, expected", [
    # semverlib.go (blang/semver v4: semver.org precedence, build metadata ignored)
    (f"{A}.driverVersion.isGreaterThan(semver('550.54.14'))", True),
    (f"{A}.driverVersion.isLessThan(semver('550.54.14'))", False),
    (f"{A}.driverVersion.compareTo(semver('550.54.15')) == 0", True),
    (f"{A}.driverVersion == semver('550.54.15')", True),
    (f"{A}.driverVersion.major() == 550 && {A}.driverVersion.minor() == 54", True),
    (f"{A}.cudaComputeCapability.patch() == 0", True),
    ("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))", True),
    ("semver('1.0.0-alpha.1').isLessThan(semver('1.0.0-alpha.beta'))", True),
    ("semver('1.0.0-beta.2').isLessThan(semver('1.0.0-beta.11'))", True),
    ("semver('1.0.0+build.1') == semver('1.0.0+build.2')", True),
    ("isSemver('1.0.0') && !isSemver('v1.0') && isSemver('v1.0', true)", True),
    ("semver('01.01.01', true) == semver('1.1.1')", True),
    ("semver('1.0', true).minor() == 0", True),
    ("semver('1.0').major() == 1", None),
    ("semver('01.0.0') == semver('1.0.0')", None),
    # quantity.go (resource.Quantity: exact values)
    ("quantity('1Gi') == quantity('1073741824')", True),
    ("quantity('1G').isLessThan(quantity('1Gi'))", True),
    ("quantity('1Gi').isGreaterThan(quantity('1G'))", True),
    ("quantity('1000Mi').compareTo(quantity('1G')) == 1", True),
    ("quantity('1000M').compareTo(quantity('1G')) == 0", True),
    (f"{C}.memory.isGreaterThan(quantity('79Gi')) && {C}.memory.isLessThan(quantity('80Gi'))",
     True),
    (f"{C}.memory.asInteger() == 81559 * 1024 * 1024", True),
    ("quantity('50k').add(20).asInteger() == 50020", True),
    ("quantity('50k').sub(quantity('20k')) == quantity('30k')", True),
    ("quantity('50k').sub(20000).asApproximateFloat() == 30000.0", True),
    ("quantity('9999999999999999999999999999999999999G').isInteger()", False),
    ("quantity('500m').isInteger()", False),
    ("sign(quantity('-1')) == -1 && sign(quantity('0')) == 0", True),
    ("isQuantity('20Mi') && !isQuantity('20Mo') && !isQuantity('10Mm')", True),
    ("quantity('50k').add(quantity('20')) == quantity('50.02k')", True),
    ("quantity('50.703k').asApproximateFloat() == 50703.0", True),
    ("quantity('200K') == quantity('200k')", None),
    ("quantity('9999999999999999999999999999999999999G').asInteger() > 0", None),
    # ext/strings.go, version 2 (Kubernetes' environment since 1.29)
    ("'ÀB'.lowerAscii() == 'Àb' && 'àb'.upperAscii() == 'àB'", True),
    ("'a,b,c'.split(',') == ['a', 'b', 'c'] && 'a,b,c'.split(',', 2) == ['a', 'b,c']", True),
    ("'abc'.split('') == ['a', 'b', 'c'] && 'a'.split(',', 0) == []", True),
    ("['a', 'b'].join() == 'ab' && ['a', 'b'].join('-') == 'a-b'", True),
    ("'oink oink oink'.replace('k', 'ky', 2) == 'oinky oinky oink'", True),
    (r"'  \t a b \n'.trim() == 'a b'", True),
    ("'hello'.indexOf('l') == 2 && 'hello'.lastIndexOf('l') == 3", True),
    ("'hello'.indexOf('l', 3) == 3 && 'hello'.indexOf('') == 0", True),
    ("'hello'.substring(1, 3) == 'el' && 'hello'.substring(4) == 'o'", True),
    ("'hello'.charAt(1) == 'e' && 'hello'.charAt(5) == ''", True),
    ("'hello'.substring(3, 1) == ''", None),
    ("'hello'.charAt(6) == ''", None),
    # RE2 (cel-go's matches; regex.go's find and findAll)
    ("'abc'.matches('b')", True),
    ("'abc'.matches('^b')", False),
    ("matches('abc', 'c$')", True),
    ("'NVIDIA A100-SXM4-40GB'.matches('(?i)a100')", True),
    ("'abc 123 def 456'.find('[0-9]+') == '123'", True),
    ("'abc 123 def 456'.findAll('[0-9]+') == ['123', '456']", True),
    ("'abc 123 def 456'.findAll('[0-9]+', 1) == ['123']", True),
    ("'abc'.find('[0-9]') == ''", True),
    (r"'aaa'.matches('(a)\\1')", None),
    ("'aaa'.matches('a(?=a)')", None),
    # lists.go
    ("[1, 2, 3].isSorted() && !['b', 'a'].isSorted()", True),
    ("[1, 2, 3].sum() == 6 && [1.5, 2.5].sum() == 4.0", True),
    ("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ['b', 'a'].min() == 'a'", True),
    ("[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [1].indexOf(5) == -1",
     True),
    ("[].min() == 0", None),
    ("{'a': 1 / 0}.size() == 1", None),
    ("{'a': 1, 'a': 2}.size() == 2", None),
    ("{1: 'a', 2: 'b'}[2] == 'b' && {true: 'b'}[true] == 'b' && !(3 in {1: 'a'})", True),
    ("{1: 'a', true: 'b'}[1] == 'a'", None),
    ("'hello'.contains('ell') && 'hello'.endsWith('lo') && !'hello'.startsWith('lo')", True),
    # the macros
    ("[1, 2, 3].all(x, x > 0) && [1, 2, 3].exists(x, x > 2)", True),
    ("[1, 2, 3].exists_one(x, x > 1)", False),
    ("[1, 2, 3].map(x, x * 2) == [2, 4, 6] && [1, 2, 3].filter(x, x > 1) == [2, 3]", True),
    ("[1, 2, 3].map(x, x > 1, x * 10) == [20, 30]", True),
    (f"{A}.exists(k, k == 'productName')", True),
    ("device.attributes.exists_one(d, d == 'gpu.nvidia.com')", True),
    (f"cel.bind(a, {A}, a.architecture == 'Hopper' && a.type == 'gpu')", True),
], ids=lambda v: str(v))
def test_the_kubernetes_libraries(expression: str, expected: bool | None) -> None:
    assert on(expression) is expected


# --------------------------------------------------------------------------- cannot tell

@pytest.mark.parametrize("expression, reason", [
    ("foo(1)", "function foo is not evaluated here"),
    (f"{A}.productName.reverse() == 'x'", "function reverse is not evaluated here"),
    ("'%d'.format([1]) == '1'", "function format is not evaluated here"),
    ("sets.contains([1, 2], [1])", "function sets.contains is not evaluated here"),
    ("ip('10.0.0.1').family() == 4", "function ip is not evaluated here"),
    ("url('https://example.com').getHost() == 'example.com'",
     "function url is not evaluated here"),
    ("optional.of(1).hasValue()", "function optional.of is not evaluated here"),
    ("[1, 2].all(i, v, v > 0)", "function all is not evaluated here"),
    (f"{A}.?profile.orValue('') == ''", "does not parse here"),
    ("x == 1", "does not compile: undeclared reference to 'x'"),
    ("device.nosuch == 1", "does not compile: undefined field 'nosuch'"),
    ("has(1)", "does not compile: invalid argument to has() macro"),
    ("(1 + ", "does not parse here"),
    (f"{A}.productName", "CEL runtime error: the result is of type string, not bool"),
    ("1", "CEL runtime error: the result is of type int, not bool"),
    ("9223372036854775807 + 1 > 0", "CEL runtime error: integer overflow"),
    ("1 / 0 == 1", "CEL runtime error: division by zero"),
    (r"'aaa'.matches('(a)\\1')",
     r"CEL runtime error: error parsing regexp: invalid escape sequence: \1"),
    ("{'a': 1, 'b': 2}.map(k, k).size() == 2", "map() over a map is not evaluated here"),
], ids=lambda v: str(v))
def test_what_is_not_evaluated_exactly_cannot_be_told(expression: str, reason: str) -> None:
    got = outcome(expression, DEVICE)
    assert got.matched is None
    assert got.reason.startswith(reason), got.reason
    assert "\n" not in got.reason


def test_a_reason_is_one_short_line_whatever_it_quotes() -> None:
    key = "k\n" * 300
    got = outcome(f"device.attributes['gpu.nvidia.com']['{key}'] == 1".replace("\n", "\\n"))
    assert got.matched is None and got.reason.startswith("CEL runtime error: no such key: k")
    assert "\n" not in got.reason and len(got.reason) <= 200


def test_an_expression_longer_than_the_api_server_allows_cannot_be_told() -> None:
    longest = "true" + " " * (MAX_LENGTH - 4)
    assert outcome(longest) == Outcome(True)
    got = outcome(longest + " ")
    assert got.matched is None and "CELSelectorExpressionMaxLength" in got.reason


def test_an_expensive_expression_is_refused_not_run_out() -> None:
    """compile_test "expensive": 10^7 comprehension steps, past the allocator's cost limit
    (it answers "actual cost limit exceeded"); here the step budget stops it."""
    ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
    e = (f"{ten}.all(x, {ten}.all(y, {ten}.all(z, {ten}.all(z2, {ten}.all(z3, {ten}.all(z4, "
         f"{ten}.all(z5, int('1'.find('[0-9]*')) < 100)))))))")
    got = outcome(e)
    assert got.matched is None and got.reason.startswith("too costly to evaluate here")


def test_a_string_doubled_in_binds_is_refused() -> None:
    e = "cel.bind(a, 'xxxxxxxxxxxxxxxx', " * 30 + "true" + ")" * 30
    assert outcome(e).matched is True  # bound, never concatenated
    e = "".join(f"cel.bind(a{i + 1}, a{i} + a{i}, " for i in range(40))
    got = outcome(f"cel.bind(a0, 'xx', {e} a40.size() > 0{')' * 41}")
    assert got.matched is None and got.reason.startswith("too costly to evaluate here")


def test_deep_nesting_cannot_be_told_and_never_overflows_the_stack() -> None:
    got = outcome("[" * 300 + "1" + "]" * 300 + " != []")
    assert got == Outcome(None, "nested too deeply to evaluate here")
    assert outcome("!" * 400 + "true").matched is None
    assert outcome("(" * 100 + "true" + ")" * 100) == Outcome(True)
    assert outcome(" && ".join(["true"] * 60)) == Outcome(True)


# --------------------------------------------------------------------------- the Evaluator

def test_outcomes_kept_by_the_evaluator_follow_what_the_expression_reads() -> None:
    """The outcomes an Evaluator keeps are keyed by what of the device an expression reads:
    devices differing elsewhere share one, devices differing there do not."""
    evaluator = Evaluator()
    a = Device(driver="gpu.nvidia.com", pool="p", name="a", node="n",
               attributes={"type": "gpu", "uuid": "GPU-a"}, capacity={"memory": 2**30})
    b = Device(driver="gpu.nvidia.com", pool="p", name="b", node="n",
               attributes={"type": "gpu", "uuid": "GPU-b"}, capacity={"memory": 2**30})
    c = Device(driver="gpu.nvidia.com", pool="p", name="c", node="n",
               attributes={"type": "mig"}, capacity={"memory": 2**31})
    for e, want in [(f"{A}.type == 'gpu'", (True, True, False)),
                    (f"{A}.uuid == 'GPU-a'", (True, False, None)),
                    (f"has({A}.uuid)", (True, True, False)),
                    (f"{A}.exists(k, {A}[k] == 'GPU-b')", (False, True, False)),
                    (f"'uuid' in {A}", (True, True, False)),
                    (f"{C}.memory == quantity('1Gi')", (True, True, False)),
                    (f"cel.bind(x, {A}, x.uuid == 'GPU-b')", (False, True, None))]:
        assert tuple(evaluator.matches(e, d) for d in (a, b, c)) == want, e
        assert tuple(evaluator.matches(e, d) for d in (c, b, a)) == want[::-1], e


PLAIN = [
    *dra.DEVICE_CLASSES.values(),
    'device.driver == "gpu.nvidia.com" && device.attributes["gpu.nvidia.com"].type == "gpu"',
    "device.attributes['gpu.nvidia.com'].profile == '1g.10gb' && device.driver == "
    "'gpu.nvidia.com'",
    "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
    "device.attributes['resource.kubernetes.io'].pciBusID == '0000:18:00.0'",
    "device.attributes['other.example.com'].type == 'gpu' && device.driver == 'x'",
]
"""Selectors the evaluator decides without the interpreter (string equalities joined by
``&&``): the chart's classes, both quote styles, a missing attribute beside a false clause."""


@pytest.mark.parametrize("expression", PLAIN)
def test_string_equalities_are_decided_as_the_interpreter_decides_them(
        expression: str) -> None:
    """The plain path is a shortcut, never a second meaning: on every published device its
    answer (and a cannot-tell's runtime error) is the interpreter's."""
    from gfd.fleet.cel import _plain

    evaluator = Evaluator()
    decided = 0
    for _, _, _, device in published():
        quick = _plain(expression, device)
        if quick is None:
            continue
        decided += 1
        full = evaluator._evaluate(expression, device)
        assert quick.matched == full.matched, (expression, device.name, full.reason)
        if quick.matched is None:
            assert "no such key" in full.reason
    assert decided
