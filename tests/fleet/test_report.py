"""``gfd fleet``'s output: the document (``-o json|yaml``) holds exactly the keys
docs/fleet.md's schema lists, with integers where it shows integers and only the values its
comments enumerate (``none | time-slicing | mps``...); the text tables have their headers
(or none with ``--no-headers``) and one aligned row per kind or node, carrying the counts.

The schema is read from docs/fleet.md itself (its ``yaml`` block), so the page and the
document cannot drift apart."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest
import yaml
from helpers import placement
from helpers.paths import ROOT

from gfd import render
from gfd.devices import resource_slices
from gfd.fleet import report
from gfd.fleet.checks import Finding, check
from gfd.fleet.count import Counted, count
from gfd.fleet.fits import fits
from gfd.fleet.model import Claim, Fleet, Node, Pod, Taint, slice_of
from gfd.readers.simulate import simulate
from gfd.selector import Options, parse

GPU = "nvidia.com/gpu"
machines = cache(placement.machines)

# ------------------------------------------------------------------------ the documented schema


@cache
def schema_text() -> str:
    page = (ROOT / "docs" / "fleet.md").read_text()
    section = page[page.index("## The JSON and YAML schema"):]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


@cache
def schema() -> dict[str, Any]:
    return dict(yaml.safe_load(schema_text()))


def enumerated() -> dict[str, set[str]]:
    """``key: value   # a | b | c`` comments: the values the schema allows for ``key``."""
    out = {}
    for line in schema_text().splitlines():
        m = re.match(r"\s*-?\s*(\w+):[^#]*#\s*([\w-]+(?:\s*\|\s*[\w-]+)+)\s*$", line)
        if m:
            out[m.group(1)] = {v.strip() for v in m.group(2).split("|")}
    return out


COUNTS = {"nodes", "total", "allocated", "free", "pending", "unschedulable"}


def kind_fields() -> set[str]:
    return set(schema()["kinds"][0]) - COUNTS


def test_the_schema_block_is_read() -> None:
    assert {"apiVersion", "kind", "kinds", "nodes", "fits", "findings"} <= set(schema())
    assert {"sharing", "manager", "state"} <= set(enumerated())
    assert {"model", "memory", "migProfile", "resource"} <= kind_fields()


# ---------------------------------------------------------------------------------- a fleet


def plugin_node(name: str, machine: str, sharing: str = "none", **state: Any) -> Node:
    snap, config = machines()[machine], placement.SHARING[sharing]
    labels = placement.node_labels(snap, "none", config, "extended", "device-plugin")
    units = {r: len(u) for r, u in placement.units(snap, "none", config,
                                                   "device-plugin").items()}
    return Node(name=name, labels=labels, allocatable={**units, "pods": 110}, capacity=units,
                **state)


def build(*, unlabelled: bool = False) -> Fleet:
    nodes = [plugin_node("h100-a", "hgx-h100"),
             plugin_node("h100-b", "hgx-h100", unschedulable=True),
             plugin_node("t4", "t4-time-sliced", "ts4",
                         taints=(Taint(key=GPU, effect="NoSchedule"),))]
    snap = machines()["hgx-h100"]
    dra_labels = placement.node_labels(snap, "none", None, "extended", "dra")
    nodes.append(Node(name="dra-1", labels=dra_labels, allocatable={"pods": 110}, capacity={}))
    if unlabelled:
        nodes.append(Node(name="bare", labels={}, allocatable={GPU: 2}, capacity={GPU: 2}))
    f = Fleet(nodes={n.name: n for n in nodes}, pods=[
        Pod(namespace="ml", name="train", node="h100-a", requests={GPU: 3}),
        Pod(namespace="ml", name="nb", node="t4", requests={GPU: 1}),
        Pod(namespace="ml", name="wait", node="", requests={GPU: 2}),
        Pod(namespace="gfd", name="gfd-h100-a", node="h100-a", requests={}, agent=True,
            agent_ready=True)],
        slices=[slice_of(s) for s in resource_slices(simulate("hgx-h100").snapshot,
                                                     node="dra-1")],
        claims={("ml", "c"): Claim(namespace="ml", name="c", node="dra-1",
                                   allocated=(("gpu.nvidia.com", "dra-1", "gpu-0"),))},
        incomplete=[], source="file dump.json")
    return f


def document(f: Fleet | None = None, *, with_fits: bool = True,
             with_findings: bool = True) -> tuple[dict[str, Any], Counted]:
    f = f or build()
    c = count(f)
    fit = fits(f, c, parse(Options(product="H100", count=2))) if with_fits else None
    found = check(f, c) if with_findings else None
    return report.document(f, c, fits=fit, findings=found), c


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------------------ the document


def test_the_document_has_the_documented_top_level_keys() -> None:
    doc, _ = document()
    assert set(doc) == set(schema())
    assert (doc["apiVersion"], doc["kind"]) == (schema()["apiVersion"], schema()["kind"])
    assert doc["complete"] is True and doc["incomplete"] == []
    assert doc["tolerated"] == [GPU]
    assert doc["source"] == "file dump.json"


def test_fits_and_findings_appear_only_when_asked() -> None:
    doc, _ = document(with_fits=False, with_findings=False)
    assert set(doc) == set(schema()) - {"fits", "findings"}


def test_an_incomplete_read_is_marked() -> None:
    f = build()
    f.incomplete.append("list resourceclaims: forbidden (grant `list` on resourceclaims)")
    doc, _ = document(f)
    assert doc["complete"] is False
    assert doc["incomplete"] == ["list resourceclaims: forbidden (grant `list` on "
                                 "resourceclaims)"]


def test_each_kind_has_the_documented_keys_and_integer_counts() -> None:
    doc, c = document()
    assert len(doc["kinds"]) == len(c.kinds) >= 3
    for k in doc["kinds"]:
        assert set(k) == set(schema()["kinds"][0])
        assert set(k["unschedulable"]) == set(schema()["kinds"][0]["unschedulable"])
        for key in ("nodes", "total", "allocated", "free", "pending", "replicas"):
            assert is_int(k[key]), (key, k)
        assert all(is_int(v) for v in k["unschedulable"].values())
        assert k["memory"] is None or is_int(k["memory"])
        assert isinstance(k["migProfile"], str) and isinstance(k["model"], str)


def test_each_node_row_has_the_documented_keys() -> None:
    doc, c = document()
    documented = set(schema()["nodes"][0]) | kind_fields()
    assert len(doc["nodes"]) == len(c.rows) >= 4
    for row in doc["nodes"]:
        assert set(row) == documented
        assert all(is_int(row[k]) for k in ("total", "allocated", "free", "pending"))
        assert all(isinstance(r, str) for r in row["reasons"])


def test_enumerated_fields_hold_only_the_documented_values() -> None:
    doc, _ = document()
    allowed = enumerated()
    for entry in doc["kinds"] + doc["nodes"]:
        for key, values in allowed.items():
            if key in entry:
                assert entry[key] in values, (key, entry)
    assert {e["state"] for e in doc["nodes"]} == {"ready", "cordoned"}


def test_a_node_without_labels_holds_only_documented_values() -> None:
    doc, _ = document(build(unlabelled=True))
    for entry in doc["kinds"] + doc["nodes"]:
        assert entry["sharing"] in enumerated()["sharing"], entry


def test_kinds_are_sorted_by_manager_model_memory_and_profile() -> None:
    """The schema: 'one per GPU kind, sorted by manager, model, memory, profile'."""
    f = build()
    mixed = machines()["dgx-a100-mig-mixed"]
    labels = placement.node_labels(mixed, "mixed", None, "extended", "device-plugin")
    units = placement.units(mixed, "mixed", None, "device-plugin")
    f.nodes["a100"] = Node(name="a100", labels=labels,
                           allocatable={r: len(u) for r, u in units.items()}, capacity={})
    doc, _ = document(f)
    keys = [(k["manager"], k["model"], k["memory"] or 0, k["migProfile"]) for k in doc["kinds"]]
    assert keys == sorted(keys)
    assert len(keys) >= 7


def test_the_counts_are_the_fleets() -> None:
    doc, _ = document()
    h100 = next(k for k in doc["kinds"] if k["model"] == "NVIDIA-H100-80GB-HBM3"
                and k["manager"] == "device-plugin")
    assert (h100["nodes"], h100["total"], h100["allocated"], h100["free"],
            h100["pending"]) == (1, 8, 3, 5, 2)
    assert h100["unschedulable"] == {"nodes": 1, "total": 8, "allocated": 0}
    dra = next(k for k in doc["kinds"] if k["manager"] == "dra")
    assert (dra["total"], dra["allocated"], dra["free"], dra["resource"]) == (
        8, 1, 7, "gpu.nvidia.com")


def test_fits_has_the_documented_keys() -> None:
    doc, _ = document()
    fit = doc["fits"]
    assert set(fit) == set(schema()["fits"])
    assert (fit["resource"], fit["count"]) == (GPU, 2)
    assert is_int(fit["pods"]) and fit["pods"] == sum(n["pods"] for n in fit["nodes"])
    for n in fit["nodes"]:
        assert set(n) == set(schema()["fits"]["nodes"][0])
        assert is_int(n["free"]) and is_int(n["pods"])
    assert fit["nodes"] == [{"node": "h100-a", "free": 5, "pods": 2, "cannotTell": 0}]
    assert isinstance(fit["selector"], dict)


def test_findings_have_the_documented_keys() -> None:
    f = build()
    f.nodes["h100-a"] = Node(name="h100-a", labels=f.nodes["h100-a"].labels,
                             allocatable={GPU: 7}, capacity={GPU: 8})
    doc, _ = document(f)
    assert doc["findings"]
    for finding in doc["findings"]:
        assert set(finding) == set(schema()["findings"][0])
        assert all(isinstance(v, str) and v for v in finding.values())


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_the_document_prints_and_reads_back_unchanged(fmt: str) -> None:
    doc, _ = document()
    text = render.document(doc, fmt)
    assert (json.loads(text) if fmt == "json" else yaml.safe_load(text)) == doc


# --------------------------------------------------------------------------------- the text

SUMMARY = ["MODEL", "MEMORY", "MIG", "SHARING", "RESOURCE", "BY", "NODES", "TOTAL",
           "ALLOCATED", "FREE", "PENDING", "UNSCHEDULABLE"]
NODES = ["NODE", "STATE", "MODEL", "MEMORY", "MIG", "SHARING", "RESOURCE", "BY", "TOTAL",
         "ALLOCATED", "FREE", "PENDING"]


def cells(line: str) -> list[str]:
    return re.split(r" {3,}", line.rstrip())


def starts(line: str, header: str) -> None:
    """Every cell of ``line`` begins at its header's column."""
    offsets = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    for offset in offsets:
        assert offset == 0 or line[offset - 1] == " ", (line, header)


def test_the_summary_has_its_header_and_a_row_per_kind() -> None:
    _, c = document()
    lines = report.summary_text(c).splitlines()
    assert cells(lines[0]) == SUMMARY
    assert len(lines) == 1 + len(c.kinds)
    for line, k in zip(lines[1:], c.kinds, strict=True):
        row = cells(line)
        assert len(row) == len(SUMMARY)
        assert row[6:11] == [str(k.nodes), str(k.total), str(k.allocated), str(k.free),
                             str(k.pending)]
        assert row[4] == k.kind.resource
        starts(line, lines[0])


def test_the_summary_shows_memory_sharing_and_what_is_unschedulable() -> None:
    _, c = document()
    rows = {(r[0], r[5]): r for r in map(cells, report.summary_text(c).splitlines()[1:])}
    h100 = rows[("NVIDIA-H100-80GB-HBM3", "device-plugin")]
    assert (h100[1], h100[2], h100[3], h100[11]) == ("81559Mi", "-", "none", "8 on 1 node")
    t4 = rows[("Tesla-T4", "device-plugin")]
    assert (t4[3], t4[11]) == ("time-slicingx4", "-")


def test_no_headers_leaves_the_rows() -> None:
    _, c = document()
    with_headers = report.summary_text(c).splitlines()
    without = report.summary_text(c, headers=False).splitlines()
    assert [cells(x) for x in without] == [cells(x) for x in with_headers[1:]]
    nodes_with = report.nodes_text(c).splitlines()
    nodes_without = report.nodes_text(c, headers=False).splitlines()
    assert [cells(x) for x in nodes_without] == [cells(x) for x in nodes_with[1:]]


def test_the_node_table_has_a_row_per_node_and_kind() -> None:
    _, c = document()
    lines = report.nodes_text(c).splitlines()
    assert cells(lines[0]) == NODES
    assert [cells(x)[:2] for x in lines[1:]] == [[r.node, r.state] for r in c.rows]
    for line, r in zip(lines[1:], c.rows, strict=True):
        assert cells(line)[8:] == [str(r.total), str(r.allocated), str(r.free), str(r.pending)]
        starts(line, lines[0])


def test_where_a_pod_fits_is_a_sentence_and_a_table() -> None:
    f = build()
    c = count(f)
    fit = fits(f, c, parse(Options(product="H100", count=2)))
    lines = report.fits_text(fit).splitlines()
    assert lines[0] == "2 pod(s) asking 2 nvidia.com/gpu fit now on 1 node(s)"
    assert cells(lines[1]) == ["NODE", "FREE", "PODS"]
    assert cells(lines[2]) == ["h100-a", "5", "2"]
    without = report.fits_text(fit, headers=False).splitlines()
    assert without[0] == lines[0]
    assert [cells(x) for x in without[1:]] == [cells(x) for x in lines[2:]]


def test_findings_are_listed_with_where_to_look() -> None:
    assert report.findings_text([]) == "no disagreement found\n"
    found = [Finding(node="n1", check="no-agent", message="m1", look_at="l1"),
             Finding(node="n2", check="orphan-claim", message="m2", look_at="l2")]
    assert report.findings_text(found).splitlines() == [
        "n1: no-agent: m1", "  look at: l1", "n2: orphan-claim: m2", "  look at: l2"]


def test_the_notes_say_what_is_incomplete_and_what_is_assumed() -> None:
    f = build()
    f.incomplete.append("list pods: forbidden")
    c = count(f)
    notes = report.notes(f, c)
    assert notes[0] == "incomplete: list pods: forbidden"
    assert any("time-slicing" in n for n in notes)  # the T4's replicas
    assert any("UNSCHEDULABLE" in n and GPU in n for n in notes)  # the cordoned H100
