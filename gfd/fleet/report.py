"""``gfd fleet``'s output: the document (``-o json|yaml``, its schema in docs/fleet.md) and
the text tables (the summary, the nodes, where a pod fits, what disagrees)."""

from __future__ import annotations

from typing import Any

from gfd.fleet.checks import Finding
from gfd.fleet.count import Counted
from gfd.fleet.fits import Fits
from gfd.fleet.kinds import Kind
from gfd.fleet.model import Fleet

API_VERSION = "gfd/v1"
KIND = "Fleet"
SHARING_NOTE = ("time-slicing and MPS units are replicas as the API server counts them: which "
                "GPU a replica is on is the kubelet's business (its PodResources API), not "
                "shown here")


def document(fleet: Fleet, counted: Counted, *, fits: Fits | None = None,
             findings: list[Finding] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION, "kind": KIND, "source": fleet.source,
        "complete": not fleet.incomplete and not fleet.skipped,
        "incomplete": list(fleet.incomplete), "skipped": list(fleet.skipped),
        "tolerated": list(counted.tolerated),
        "kinds": [k.to_api() for k in counted.kinds],
        "nodes": [r.to_api() for r in counted.rows],
    }
    if fits is not None:
        doc["fits"] = fits.to_api()
    if findings is not None:
        doc["findings"] = [f.to_api() for f in findings]
    return doc


def _memory(kind: Kind) -> str:
    return f"{kind.memory}Mi" if kind.memory is not None else "-"


def _sharing(kind: Kind) -> str:
    return kind.sharing if kind.sharing in ("none", "unknown") else \
        f"{kind.sharing}x{kind.replicas}"


def _table(header: list[str], rows: list[list[str]], headers: bool) -> str:
    lines = ([header] if headers else []) + rows
    if not lines:
        return ""
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "".join("   ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                   + "\n" for line in lines)


def _kind_cells(kind: Kind) -> list[str]:
    return [kind.model or "(no labels)", _memory(kind), kind.mig_profile or "-", _sharing(kind),
            kind.resource, kind.manager]


KIND_HEADER = ["MODEL", "MEMORY", "MIG", "SHARING", "RESOURCE", "BY"]


UNDECIDED = "UNDECIDED"
"""The column of devices whose DeviceClass match could not be decided (shown only when some
row has any)."""


def summary_text(counted: Counted, *, headers: bool = True) -> str:
    undecided = any(k.cannot_tell for k in counted.kinds)
    rows = []
    for k in counted.kinds:
        off = (f"{k.unschedulable_total} on {k.unschedulable_nodes} node"
               f"{'s' if k.unschedulable_nodes != 1 else ''}" if k.unschedulable_nodes else "-")
        rows.append([*_kind_cells(k.kind), str(k.nodes), str(k.total), str(k.allocated),
                     str(k.free), str(k.pending), off,
                     *([str(k.cannot_tell)] if undecided else [])])
    return _table([*KIND_HEADER, "NODES", "TOTAL", "ALLOCATED", "FREE", "PENDING",
                   "UNSCHEDULABLE", *([UNDECIDED] if undecided else [])], rows, headers)


def nodes_text(counted: Counted, *, headers: bool = True) -> str:
    undecided = any(r.cannot_tell for r in counted.rows)
    rows = [[r.node, r.state, *_kind_cells(r.kind), str(r.total), str(r.allocated),
             str(r.free), str(r.pending), *([str(r.cannot_tell)] if undecided else [])]
            for r in counted.rows]
    return _table(["NODE", "STATE", *KIND_HEADER, "TOTAL", "ALLOCATED", "FREE", "PENDING",
                   *([UNDECIDED] if undecided else [])], rows, headers)


def fits_text(fits: Fits, *, headers: bool = True) -> str:
    placed = [n for n in fits.nodes if n.pods]
    head = (f"{fits.pods} pod(s) asking {fits.count} {fits.resource} fit now on "
            f"{len(placed)} node(s)"
            + (f"; cannot tell for {fits.cannot_tell} device(s)" if fits.cannot_tell else "")
            + "\n")
    undecided = fits.cannot_tell > 0
    table = _table(["NODE", "FREE", "PODS", *([UNDECIDED] if undecided else [])],
                   [[n.node, str(n.free), str(n.pods),
                     *([str(n.cannot_tell)] if undecided else [])] for n in fits.nodes],
                   headers)
    return head + table


def findings_text(findings: list[Finding]) -> str:
    if not findings:
        return "no disagreement found\n"
    return "".join(f"{f.node}: {f.check}: {f.message}\n  look at: {f.look_at}\n"
                   for f in findings)


def notes(fleet: Fleet, counted: Counted) -> list[str]:
    """Lines for stderr: what was not read, and what the counts assume."""
    out = [f"incomplete: {line}" for line in fleet.incomplete]
    out += [f"skipped: {line}" for line in fleet.skipped]
    out += [f"note: node {name}: {resource} {value!r} {why}; left out of the counts"
            for name, node in sorted(fleet.nodes.items())
            for resource, value, why in node.unreadable]
    ix = counted.index
    if ix is not None and ix.classes.assumed and ix.pools_of:
        out.append("note: no DeviceClass was read: the DRA driver chart's classes are assumed")
    if any(k.cannot_tell for k in counted.kinds):
        out.append(f"note: {UNDECIDED}: DRA devices whose DeviceClass selectors could not be "
                   "decided here (see docs/fleet.md, \"cannot tell\"); in no TOTAL or FREE")
    if any(k.kind.sharing in ("time-slicing", "mps") for k in counted.kinds):
        out.append(f"note: {SHARING_NOTE}")
    if any(k.unschedulable_nodes for k in counted.kinds):
        out.append("note: UNSCHEDULABLE: units on cordoned or tainted nodes (a GPU "
                   f"pod is assumed to tolerate {', '.join(counted.tolerated)}; --tolerate "
                   "adds keys); not in NODES, TOTAL or FREE")
    return out
