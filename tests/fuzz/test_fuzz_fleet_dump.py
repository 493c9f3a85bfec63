"""Property tests: ``gfd fleet --from FILE -o json`` on damaged dumps.

Promises (docs/fleet.md, "Offline" and "Exit codes"; issue 38, item 5): a dump is read as the
API server's LISTs would be, and whatever is done to a well-formed one (any field at any depth
replaced by a value of another type, null, a huge or odd quantity, a huge number, a deeply
nested value, a lone surrogate; fields deleted or added; objects repeated) gfd never ends in a
traceback. It exits 0, 1 (with ``--check``: something disagrees) or 3 (marked incomplete), and
2 (one line naming the problem) only when no object of the five kinds is left as it was; it
prints one ``gfd/v1`` Fleet document whenever it does not exit 2; every object it skips is one
line naming its kind, its name and the field, in ``skipped`` and on stderr; an object listed
twice is counted once; and a field gfd reads, given a value of the wrong type, skips exactly
that object and leaves the rest counted as helpers/fleetdump.py works out by hand.

Two well-formed dumps are damaged: the small one helpers/fleetdump.py writes by hand, and the
sample gfd ships (``gfd/data/fleet-sample.json``: device-plugin nodes under each MIG strategy
and sharing, DRA nodes with DynamicMIG counters)."""

from __future__ import annotations

import copy
import json
import math
import re
import traceback
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import fleetdump
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz.strategies import fuzz_settings, json_values, texts

BASE = fleetdump.objects()
SAMPLE = json.loads(files("gfd").joinpath("data/fleet-sample.json").read_text())["items"]
KINDS = fleetdump.KINDS

ODD_QUANTITIES = (
    "1e99999", "1e99999999999", "1E+99999999999", "9223372036854775807", "9223372036854775808",
    "9223372036854775807.1", "10E", "9Ei", "8191Pi", "-1", "-9223372036854775809", "0", "500m",
    "0.1n", "1e-99999999999", ".", "+", "1.", "1e", "1Ki1", " 8 ", "8 GPUs", "0x10", "²", "٣",
    "8\u00a0", "Infinity", "NaN", "9" * 5000, "1" + "0" * 30, "0." + "0" * 400 + "1",
)
LONE_SURROGATES = ("\ud800", "gpu-\udfff", "\udbff\udbff")


def _nested(depth: int, inner: Any) -> Any:
    for i in range(depth):
        inner = [inner] if i % 2 else {"a": inner}
    return inner


confusions = st.sampled_from([None, True, 0, -1, 1.5, math.inf, "", "x", [], [{}], ["x"], {},
                              {"a": 1}, {"0": {}}])
"""The value of another type that a field of any type may be given (null included)."""
odd_values = st.one_of(
    confusions, st.sampled_from(ODD_QUANTITIES),
    st.one_of(
        st.booleans(), st.integers(-(2**70), 2**70),
        st.sampled_from([2**63, -(2**63) - 1, 10**30, -0.0, 1e308, -math.inf]),
        st.floats(allow_nan=False, allow_infinity=False), texts,
        st.sampled_from(LONE_SURROGATES), json_values,
        st.builds(_nested, st.integers(1, 100), st.sampled_from([None, "8", 1, [], {}]))),
)
"""What a field is replaced by: a value of another type a third of the time, an odd quantity a
third, and any JSON value (huge numbers, deep nesting, lone surrogates) the rest."""


# ---------------------------------------------------------------------------- damage


def _step(node: Any) -> list[Any]:
    return list(node) if isinstance(node, dict) else list(range(len(node)))


@st.composite
def spots(draw: st.DrawFn, doc: Any) -> tuple[Any, ...]:
    """A path to any value of ``doc`` below its root: it descends into a random child,
    stopping at each level with probability 1/5 (so the leaves of a device's capacity, seven
    levels down, are reached)."""
    path: list[Any] = []
    node = doc
    while isinstance(node, (dict, list)) and node:
        if path and draw(st.integers(0, 4)) == 0:
            break
        key = draw(st.sampled_from(_step(node)))
        path.append(key)
        node = node[key]
    return tuple(path)


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        doc = doc[key]
    return doc


Op = tuple[Any, ...]
"""One thing done to a dump: ("replace", path, value), ("delete", path), ("add", path, value)
(an unknown field beside the one at path) or ("repeat", i, at) (items[i] again at ``at``)."""


def _apply(doc: Any, op: Op) -> None:
    if op[0] == "repeat":
        doc["items"].insert(op[2], copy.deepcopy(doc["items"][op[1]]))
        return
    path = op[1]
    parent = _parent(doc, path)
    if op[0] == "delete":
        del parent[path[-1]]
    elif op[0] == "add":  # (a copy: a later op may change what is inside it)
        parent[f"{path[-1]}X"] = copy.deepcopy(op[2])
    else:
        parent[path[-1]] = copy.deepcopy(op[2])


def apply(items: list[Any], ops: list[Op]) -> Any:
    """A List of ``items`` with ``ops`` done to it, in order."""
    doc: Any = fleetdump.as_list(copy.deepcopy(items))
    for op in ops:
        _apply(doc, op)
    return doc


@st.composite
def damage(draw: st.DrawFn, items: list[Any]) -> list[Op]:
    """One to three things done to a List of ``items`` (drawn against the List as each one
    leaves it; only the list of them is returned, so that a failure prints it small)."""
    doc: Any = fleetdump.as_list(copy.deepcopy(items))
    ops: list[Op] = []
    for _ in range(draw(st.integers(1, 3))):
        action = draw(st.sampled_from(["replace"] * 6 + ["delete", "add", "repeat"]))
        op: Op
        if action == "repeat" and isinstance(doc.get("items"), list) and doc["items"]:
            op = ("repeat", draw(st.integers(0, len(doc["items"]) - 1)),
                  draw(st.integers(0, len(doc["items"]))))
        else:
            path = draw(spots(doc))
            if not path:
                continue
            if action == "delete":
                op = ("delete", path)
            elif action == "add" and isinstance(_parent(doc, path), dict):
                op = ("add", path, draw(odd_values))
            else:
                op = ("replace", path, draw(odd_values))
        _apply(doc, op)
        ops.append(op)
    return ops


def _items_of(doc: Any) -> list[Any]:
    """The items gfd finds in a document: a List's, a list's, or the object itself."""
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        return [i for item in doc["items"] for i in _items_of(item)]
    if isinstance(doc, list):
        return [i for item in doc for i in _items_of(item)]
    return [doc]


def _intact(doc: Any, originals: list[Any]) -> bool:
    """Whether some object of the five kinds is left exactly as it was."""
    return any(isinstance(item, dict) and item.get("kind") in KINDS and item in originals
               for item in _items_of(doc))


# ------------------------------------------------------------------------------ the run


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dumps")


def _write(workdir: Path, doc: Any, form: str) -> str:
    path = workdir / f"dump.{form}"
    text = yaml.safe_dump(doc) if form == "yaml" else ""
    if text and yaml.safe_load(text) == doc:  # (PyYAML writes a few strings it cannot read)
        path.write_text(text, encoding="utf-8")
    else:
        path.write_text(fleetdump.json_text(doc, indent=None), encoding="utf-8")
    return str(path)


SKIPPED = re.compile(r"(?P<kind>\S+) (?P<ref>.+?): (?:(?P<path>(?:kind|apiVersion|metadata|spec"
                     r"|status)(?:[.\[]\S*)?): )?(?P<why>\S.*)")
"""A skipped line: "<Kind> <namespace/name | name | #index>: <field path>: <why>"."""
FIELD = re.compile(r": (?:kind|apiVersion|metadata|spec|status)(?:[.\[]\S*)?: ")
"""The field path in a skipped line, however its object's name is spelled."""


def check(path: str, *args: str, intact: bool, done: Any = "") -> dict[str, Any] | None:
    """Run ``gfd fleet --from path -o json ARGS`` and hold it to the promises; its document
    (None when it exited 2)."""
    code, out, err, escaped = fleetdump.fleet("--from", path, "-o", "json", *args)
    assert escaped is None, (done, "".join(traceback.format_exception(escaped)))
    assert "Traceback" not in err, (done, err)
    allowed = {0, 1, 3} if "--check" in args else {0, 3}
    if code == 2:
        assert not intact, (done, err)
        assert out == "" and len(err.splitlines()) == 1, (done, err)
        return None
    assert code in allowed, (done, code, err)
    doc = json.loads(out)
    assert doc["apiVersion"] == "gfd/v1" and doc["kind"] == "Fleet", done
    assert isinstance(doc["complete"], bool), done
    for row in doc["kinds"] + doc["nodes"]:
        for key in ("total", "allocated", "free", "pending"):
            assert type(row[key]) is int, (done, row)
    skipped = doc.get("skipped", [])
    for line in skipped:
        assert isinstance(line, str) and len(line.splitlines()) == 1, (done, line)
        assert line.split(" ", 1)[0] in KINDS or ": kind: " in line, (done, line)
        assert FIELD.search(line) or ": not an object" in line, (done, line)
        # (stderr writes a lone surrogate escaped: "\\ud800")
        printed = line.encode("utf-8", "backslashreplace").decode("utf-8")
        assert f"skipped: {printed}" in err.splitlines(), (done, line, err)
    if skipped:
        assert doc["complete"] is False and code != 0, (done, skipped)
    return doc


ISSUE_38 = [  # issue 38's dumps that ended in a traceback, as things done to BASE's List
    [("replace", ("items", 0, "kind"), ["Node"])],
    [("replace", ("items", 3, "status"), [{"phase": "Running"}])],
    [("replace", ("items", 3, "status"), "Running")],
    [("replace", ("items", 7, "spec", "pool", "generation"), "abc")],
    [("replace", ("items", 7, "spec", "pool", "generation"), math.inf)],
    [("replace", ("items", 7, "spec", "pool", "resourceSliceCount"), [1])],
    [("replace", ("items", 9, "spec", "devices", "requests", 0, "exactly", "count"), "two")],
    [("replace", ("items", 8, "status", "allocation", "nodeSelector", "nodeSelectorTerms", 0,
                  "matchFields", 0, "values"), {"0": "gpu-node-1"})],
    [("replace", ("items", 0, "status", "allocatable", "nvidia.com/gpu"), "1e99999")],
    [("repeat", 7, 8)],
]


def issue_38(test: Any) -> Any:
    """The property tried on issue 38's dumps first, every time."""
    for ops in ISSUE_38:
        test = example(done=ops, form="json", check_too=True, text="wide")(test)
    return test


@issue_38
@fuzz_settings(80)
@given(damage(BASE), st.sampled_from(["json", "json", "yaml"]), st.booleans(),
       st.sampled_from([None, None, None, "wide", "nodes"]))
@pytest.mark.timeout(120)
def test_a_damaged_dump_is_counted_or_refused_on_one_line_never_a_traceback(
        workdir: Path, done: list[Op], form: str, check_too: bool, text: str | None) -> None:
    doc = apply(BASE, done)
    path = _write(workdir, doc, form)
    intact = _intact(doc, BASE)
    check(path, intact=intact, done=done)
    if check_too:
        check(path, "--check", intact=intact, done=done)
    if text:  # the text tables print the same objects, names and all
        code, out, err, escaped = fleetdump.fleet(
            "--from", path, *(["-o", "wide"] if text == "wide" else ["--nodes"]))
        assert escaped is None, (done, "".join(traceback.format_exception(escaped)))
        assert code in (0, 2, 3) and "Traceback" not in err, (done, code, err)
        out.encode("utf-8")


@example(done=[("replace", ("items", 0, "kind"), 7)], form="json", check_too=False)
@example(done=[("replace", ("items", 7, "status"), "Running")], form="json", check_too=False)
@example(done=[("replace", ("items", 22, "spec", "pool", "generation"), "abc")], form="json",
         check_too=True)
@example(done=[("replace", ("items", 28, "status", "allocation", "nodeSelector",
                            "nodeSelectorTerms", 0, "matchFields", 0, "values"), {"0": "x"})],
         form="json", check_too=False)
@fuzz_settings(40)
@given(damage(SAMPLE), st.just("json"), st.booleans())
@pytest.mark.timeout(120)
def test_the_shipped_sample_damaged_is_counted_or_refused_never_a_traceback(
        workdir: Path, done: list[Op], form: str, check_too: bool) -> None:
    doc = apply(SAMPLE, done)
    path = _write(workdir, doc, form)
    check(path, *(["--check"] if check_too else []), intact=_intact(doc, SAMPLE), done=done)


# ------------------------------------------------------ the fields gfd reads, mistyped

OBJECT, LIST, STRING, INTEGER, QUANTITY = "object", "list", "string", "integer", "quantity"
WRONG: dict[str, tuple[Any, ...]] = {
    OBJECT: ("x", 1, 2.5, True, [], [{"a": 1}]),
    LIST: ("x", 1, True, {}, {"0": {}}),
    STRING: (1, 2.5, True, [], ["x"], {"x": "y"}),
    INTEGER: ("abc", "1", 1.5, True, [1], {}, math.inf, 2**63),
    QUANTITY: (True, ["8"], {"value": "8"}),  # a JSON number is a quantity (UnmarshalJSON)
}
"""Values of another type than each kind of field holds, as Go's JSON decoder refuses them
(an int64 field takes no 1.5, "1" or true; a string field no number)."""

REQ = "spec.devices.requests[0]"
TERM = ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms")
ALLOC = "status.allocation"
READ: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    # object -> (its kind and name as the skipped line says them, (field, its type)...):
    # the fields gfd/fleet/model.py reads
    "gpu-node-2": ("Node gpu-node-2", (
        ("metadata", OBJECT), ("metadata.name", STRING), ("metadata.labels", OBJECT),
        ("metadata.labels[nvidia.com/gpu.product]", STRING), ("spec", OBJECT),
        ("spec.taints", LIST), ("spec.taints[0]", OBJECT), ("spec.taints[0].key", STRING),
        ("spec.taints[0].effect", STRING), ("status", OBJECT), ("status.allocatable", OBJECT),
        ("status.allocatable[nvidia.com/gpu]", QUANTITY), ("status.capacity", OBJECT),
        ("status.capacity[nvidia.com/gpu]", QUANTITY), ("status.conditions", LIST),
        ("status.conditions[1]", OBJECT), ("status.conditions[1].type", STRING),
        ("status.conditions[1].status", STRING))),
    "train-0": ("Pod team/train-0", (
        ("metadata", OBJECT), ("metadata.name", STRING), ("spec", OBJECT),
        ("spec.nodeName", STRING), ("spec.containers", LIST), ("spec.containers[0]", OBJECT),
        ("spec.containers[0].resources", OBJECT),
        ("spec.containers[0].resources.limits", OBJECT),
        ("spec.containers[0].resources.limits[nvidia.com/gpu]", QUANTITY),
        ("spec.containers[0].resources.requests", OBJECT),
        ("spec.containers[0].resources.requests[nvidia.com/gpu]", QUANTITY),
        ("spec.tolerations", LIST), ("spec.tolerations[0]", OBJECT), ("status", OBJECT),
        ("status.phase", STRING), ("status.conditions", LIST))),
    "wait-0": ("Pod team/wait-0", (
        ("spec.nodeSelector", OBJECT), ("spec.nodeSelector[nvidia.com/gpu.product]", STRING),
        ("spec.affinity", OBJECT), ("spec.affinity.nodeAffinity", OBJECT), (TERM, LIST),
        (f"{TERM}[0]", OBJECT), (f"{TERM}[0].matchExpressions", LIST),
        (f"{TERM}[0].matchExpressions[0]", OBJECT),
        (f"{TERM}[0].matchExpressions[0].key", STRING),
        (f"{TERM}[0].matchExpressions[0].operator", STRING),
        (f"{TERM}[0].matchExpressions[0].values", LIST),
        (f"{TERM}[0].matchExpressions[0].values[0]", STRING))),
    "dra-0": ("Pod team/dra-0", (
        ("spec.resourceClaims", LIST), ("spec.resourceClaims[0]", OBJECT),
        ("spec.resourceClaims[0].resourceClaimName", STRING))),
    "gpu-node-1-xyz": ("ResourceSlice gpu-node-1-xyz", (
        ("spec", OBJECT), ("spec.driver", STRING), ("spec.nodeName", STRING),
        ("spec.pool", OBJECT), ("spec.pool.name", STRING), ("spec.pool.generation", INTEGER),
        ("spec.pool.resourceSliceCount", INTEGER), ("spec.devices", LIST),
        ("spec.devices[0]", OBJECT), ("spec.devices[0].name", STRING),
        ("spec.devices[0].attributes", OBJECT), ("spec.devices[0].capacity", OBJECT),
        ("spec.devices[0].capacity.memory", OBJECT),
        ("spec.devices[0].capacity.memory.value", QUANTITY))),
    "claim-0": ("ResourceClaim team/claim-0", (
        ("status", OBJECT), (ALLOC, OBJECT), (f"{ALLOC}.devices", OBJECT),
        (f"{ALLOC}.devices.results", LIST), (f"{ALLOC}.devices.results[0]", OBJECT),
        (f"{ALLOC}.devices.results[0].driver", STRING),
        (f"{ALLOC}.devices.results[0].pool", STRING),
        (f"{ALLOC}.devices.results[0].device", STRING), (f"{ALLOC}.nodeSelector", OBJECT),
        (f"{ALLOC}.nodeSelector.nodeSelectorTerms", LIST),
        (f"{ALLOC}.nodeSelector.nodeSelectorTerms[0].matchFields", LIST),
        (f"{ALLOC}.nodeSelector.nodeSelectorTerms[0].matchFields[0].values", LIST),
        (f"{ALLOC}.nodeSelector.nodeSelectorTerms[0].matchFields[0].values[0]", STRING))),
    "claim-1": ("ResourceClaim team/claim-1", (
        ("spec", OBJECT), ("spec.devices", OBJECT), ("spec.devices.requests", LIST),
        (REQ, OBJECT), (f"{REQ}.exactly", OBJECT), (f"{REQ}.exactly.deviceClassName", STRING),
        (f"{REQ}.exactly.count", INTEGER), (f"{REQ}.exactly.allocationMode", STRING),
        (f"{REQ}.exactly.selectors", LIST), (f"{REQ}.exactly.selectors[0]", OBJECT),
        (f"{REQ}.exactly.selectors[0].cel.expression", STRING))),
}
MISTYPED = [(name, field, kind, wrong) for name, (_, fields) in READ.items()
            for field, kind in fields for wrong in WRONG[kind]]


def _normal(path: str) -> str:
    path = re.sub(r"\[\d*\]", "[]", path)
    return re.sub(r"\[([^\]]+)\]", r".\1", path)


def test_every_field_the_property_mistypes_is_in_the_dump() -> None:
    """The table below is the dump's: each field it names is there, of the type it says."""
    types = {OBJECT: dict, LIST: list, STRING: str, INTEGER: int, QUANTITY: str}
    for name, (_, fields) in READ.items():
        for field, kind in fields:
            value: Any = fleetdump.find(BASE, name)
            for part in fleetdump._parts(field):
                value = value[part]
            assert isinstance(value, types[kind]), (name, field)


@fuzz_settings(60)
@given(st.sampled_from(MISTYPED))
@pytest.mark.timeout(120)
def test_a_field_gfd_reads_mistyped_skips_exactly_its_object_and_names_the_field(
        workdir: Path, mistyped: tuple[str, str, str, Any]) -> None:
    name, field, _, wrong = mistyped
    items = fleetdump.damaged(BASE, name, field, wrong)
    doc = check(_write(workdir, fleetdump.as_list(items), "json"), intact=True, done=mistyped)
    assert doc is not None
    ref = READ[name][0]
    skipped = doc.get("skipped", [])
    assert len(skipped) == 1, (mistyped, skipped)
    line = skipped[0]
    found = SKIPPED.fullmatch(line)
    assert found and found["path"], (mistyped, line)
    kind = ref.split()[0]
    assert found["kind"] == kind, (mistyped, line)
    if not field.startswith("metadata"):  # a broken name or namespace names it otherwise
        assert f"{found['kind']} {found['ref']}" == ref, (mistyped, line)
    assert _normal(found["path"]) == _normal(field), (mistyped, line)
    assert fleetdump.node_rows(doc) == fleetdump.rows(without=(name,)), mistyped


# ------------------------------------------------------------------- repeated objects


def repeated(items: list[Any], again: list[int], positions: list[int] | None) -> str:
    """The dump with ``items[i]`` for each i in ``again`` listed again: in the same List at
    ``positions``, or (None) in a second List after it (two overlapping Lists, as support
    bundles hold them)."""
    copies = [copy.deepcopy(items[i]) for i in again]
    if positions is not None:
        mixed = list(copy.deepcopy(items))
        for item, at in zip(copies, positions, strict=False):
            mixed.insert(at % (len(mixed) + 1), item)
        return fleetdump.json_text(fleetdump.as_list(mixed), indent=None)
    return "\n".join(fleetdump.json_text(fleetdump.as_list(part), indent=None)
                     for part in (copy.deepcopy(items), copies))


def repeats(items: list[Any]) -> st.SearchStrategy[tuple[list[int], list[int] | None]]:
    return st.tuples(st.lists(st.integers(0, len(items) - 1), min_size=1, max_size=6),
                     st.none() | st.lists(st.integers(0, 100), min_size=6, max_size=6))


@fuzz_settings(12)
@given(repeats(BASE))
@pytest.mark.timeout(120)
def test_objects_listed_again_are_counted_once(
        workdir: Path, again: tuple[list[int], list[int] | None]) -> None:
    path = workdir / "repeated.json"
    path.write_text(repeated(BASE, *again))
    doc = check(str(path), intact=True, done=again)
    assert doc is not None and doc["complete"] is True and doc.get("skipped", []) == []
    assert fleetdump.node_rows(doc) == fleetdump.rows()


@pytest.fixture(scope="module")
def sample_answer() -> dict[str, Any]:
    doc = check("@sample", intact=True)
    assert doc is not None
    return doc


@fuzz_settings(8)
@given(repeats(SAMPLE))
@pytest.mark.timeout(120)
def test_the_sample_with_objects_listed_again_answers_as_the_sample(
        workdir: Path, sample_answer: dict[str, Any],
        again: tuple[list[int], list[int] | None]) -> None:
    path = workdir / "repeated.json"
    path.write_text(repeated(SAMPLE, *again))
    doc = check(str(path), intact=True, done=again)
    assert doc is not None
    assert (doc["kinds"], doc["nodes"], doc["complete"]) == (
        sample_answer["kinds"], sample_answer["nodes"], sample_answer["complete"])


# ------------------------------------------------- inputs that broke gfd, found here
#
# Each of these ended `gfd fleet` in a traceback; the promise is the same as above: an
# answer (the well-formed rest counted) or one line, never a traceback.


def _answer(tmp_path: Path, items: list[Any], *args: str) -> dict[str, Any]:
    path = tmp_path / "dump.json"
    path.write_text(fleetdump.json_text(fleetdump.as_list(items)))
    doc = check(str(path), *args, intact=True)
    assert doc is not None
    return doc


@pytest.mark.parametrize("label", ["nvidia.com/gpu.count", "nvidia.com/gpu.replicas",
                                   "nvidia.com/gpu.memory"])
@pytest.mark.parametrize("value", ["²", "9" * 5000], ids=["a superscript two", "5000 digits"])
def test_a_gpu_label_that_str_isdigit_accepts_but_int_refuses_is_no_number(
        tmp_path: Path, label: str, value: str) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` raises; so does ``int()`` of more than 4300
    digits: such a label is no number of GPUs, replicas or MiB (an API server refuses both:
    a label value is at most 63 characters of [A-Za-z0-9._-])."""
    items = copy.deepcopy(BASE)
    fleetdump.find(items, "gpu-node-2")["metadata"]["labels"][label] = value
    for args in ((), ("--check",)):
        doc = _answer(tmp_path, items, *args)
        rows = fleetdump.node_rows(doc)
        assert rows[("gpu-node-0", fleetdump.GPU)] == fleetdump.rows()[("gpu-node-0",
                                                                         fleetdump.GPU)]


def test_a_node_affinity_gt_of_5000_digits_admits_no_node(tmp_path: Path) -> None:
    """A ``Gt`` value must be one integer (the API server parses it as an int64); one of 5000
    digits admits no node, as the scheduler's parse error does, and never raises."""
    items = copy.deepcopy(BASE)
    wait = fleetdump.find(items, "wait-0")
    wait["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["9" * 5000]
    doc = _answer(tmp_path, items)
    # wait-0 admits neither H100 node now: no PENDING on either
    expected = {k: (t, a, f, 0) for k, (t, a, f, _) in fleetdump.rows().items()}
    assert fleetdump.node_rows(doc) == expected


@pytest.mark.parametrize("memory", ["lots", "1e99999", ["81559Mi"]])
def test_a_device_whose_memory_is_no_quantity_beside_one_whose_is_never_breaks_the_sort(
        tmp_path: Path, memory: Any) -> None:
    """Two devices of one node, one with no memory gfd can read: the rows of that node are
    sorted with a memory of None beside an int (it raised TypeError), or the slice is
    skipped and named."""
    items = copy.deepcopy(BASE)
    fleetdump.find(items, "gpu-node-1-xyz")["spec"]["devices"][0]["capacity"]["memory"][
        "value"] = memory
    doc = _answer(tmp_path, items)
    rows = fleetdump.node_rows(doc)
    assert rows[("gpu-node-0", fleetdump.GPU)] == fleetdump.rows()[("gpu-node-0", fleetdump.GPU)]
    dra = {k: v for k, v in rows.items() if k[0] == "gpu-node-1"}
    if doc.get("skipped"):
        assert dra == {} and doc["skipped"][0].startswith("ResourceSlice gpu-node-1-xyz: ")
    else:  # two kinds of one device each: gpu-1 free, gpu-0 held by claim-0
        assert sorted(v[0] for v in dra.values()) == [1, 1]
        assert sum(v[1] for v in dra.values()) == 1
