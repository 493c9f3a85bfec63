"""The interpreter's own parts: what an expression is refused for before it runs (the DRA
environment declares only ``device`` with four fields; a name not declared does not compile),
the parse tree without its one-operand rules, the attributes an expression reads (what its
kept outcomes are keyed by), and the device variable as ``DeviceMatches`` builds it."""

from __future__ import annotations

import pytest
from celpy import celtypes as ct

from gfd.fleet import celeval, celops
from gfd.fleet.model import Device, Version

PARSER = celeval.parser()


def compiled(expression: str) -> celeval.Compiled:
    got = celeval.compile_expression(PARSER, expression)
    assert isinstance(got, celeval.Compiled), got
    return got


@pytest.mark.parametrize("expression, reason", [
    ("y > 1", "does not compile: undeclared reference to 'y'"),
    ("[1].all(x, x > 0) && x > 0", "does not compile: undeclared reference to 'x'"),
    ("device.name == 'x'", "does not compile: undefined field 'name'"),
    ("[1].all(1, true)", "does not compile: all() variable name must be a simple identifier"),
    ("cel.bind(1, 2, true)", "does not compile: cel.bind() variable name must be a simple"),
    ("device == device", "device used other than through its fields is not evaluated here"),
    ("lists.range(3).size() == 3", "function lists.range is not evaluated here"),
    ("'a'.quote() == 'a'", "function quote is not evaluated here"),
    ("size() == 0", "function size is not evaluated here"),
    (".device.driver == ''", "a qualified name or a message is not evaluated here"),
    ("'a' in [1, 'a']", "does not compile: expected type of the aggregate literal's"),
    ("{'a': 1, 'b': 'x'}.size() == 2", "does not compile: expected type of the aggregate"),
])
def test_what_the_environment_does_not_declare_is_refused_before_it_runs(
        expression: str, reason: str) -> None:
    got = celeval.compile_expression(PARSER, expression)
    assert isinstance(got, str) and got.startswith(reason), got


def test_a_macro_binds_its_variable_in_its_own_expressions_only() -> None:
    compiled("[1, 2].all(x, [3].exists(y, x < y))")
    compiled("cel.bind(d, device.attributes['a'], d.x == 1 && [1].all(e, d.y == e))")


def test_the_tree_keeps_no_rule_of_one_operand() -> None:
    tree = compiled("(device.driver == 'a') && !(1 > 2)").tree
    kept = {str(t.data) for t in tree.iter_subtrees()}
    assert kept.isdisjoint({"expr", "paren_expr", "addition", "multiplication"})
    assert celeval.depth(tree) < 12


@pytest.mark.parametrize("expression, attributes, capacity", [
    ("device.attributes['d'].a == 1 && has(device.attributes['e'].b)",
     {("d", "a"), ("e", "b")}, set()),
    ("device.capacity['d'].memory.isGreaterThan(quantity('1'))", set(), {("d", "memory")}),
    ("device.driver == 'x'", set(), set()),
    ("device.attributes['d'].exists(k, k == 'a')", None, set()),
    ("'d' in device.attributes", None, set()),
    ("cel.bind(x, device.capacity['d'], sign(x.m) > 0)", set(), None),
])
def test_the_attributes_an_expression_reads_are_known(
        expression: str, attributes: set[tuple[str, str]] | None,
        capacity: set[tuple[str, str]] | None) -> None:
    got = compiled(expression)
    assert got.attributes == (None if attributes is None else frozenset(attributes))
    assert got.capacity == (None if capacity is None else frozenset(capacity))


def test_the_device_is_built_as_device_matches_builds_it() -> None:
    d = Device(driver="gpu.nvidia.com", pool="p", name="d", node="n",
               attributes={"type": "gpu", "count": 2, "on": True, "v": Version("1.2.3"),
                           "resource.kubernetes.io/pcieRoot": "pci0000:00"},
               capacity={"memory": 1024, "other.example.com/slots": 3})
    value = celeval.device_value(d)
    attributes = value[ct.StringType("attributes")]
    assert isinstance(attributes, celops.DomainMap)
    mine = attributes[ct.StringType("gpu.nvidia.com")]
    assert isinstance(mine[ct.StringType("on")], ct.BoolType)
    assert isinstance(mine[ct.StringType("count")], ct.IntType)
    assert isinstance(mine[ct.StringType("v")], celops.Semver)
    assert attributes[ct.StringType("resource.kubernetes.io")][ct.StringType("pcieRoot")] == \
        "pci0000:00"
    capacity = value[ct.StringType("capacity")]
    assert capacity[ct.StringType("other.example.com")][ct.StringType("slots")] == \
        celops.Quantity(3)
    assert value[ct.StringType("allowMultipleAllocations")] == ct.BoolType(False)


def test_a_version_that_is_no_semver_is_found_before_any_expression() -> None:
    d = Device(driver="x", pool="p", name="d", node="n",
               attributes={"ok": Version("1.0.0"), "bad": Version("1.0")}, capacity={})
    assert celeval.bad_version(d, {}).startswith("attribute bad: parse semantic version:")
