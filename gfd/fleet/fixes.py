"""The smallest change to a pending pod (or its claims) that the scheduler would bind now,
found by changing the manifest and judging the changed pod again by the same filters
(``why.judge``), never by reasoning about the change: a toleration of the GPU taint the nodes
carry, a node-selector value corrected to one the nodes have (``-SHARED``, ``-MIG-<profile>``
or a longer model name: the words of ``gpu.product`` as ``gfd selector`` splits them), another
GPU resource name the nodes advertise, a CEL selector ``gfd selector --dra`` writes for the
product asked (or the attribute value the devices have), a toleration of the devices' taint,
and last a smaller count: the most that one node can give.

A fix is words, the changed manifest, a JSON merge patch of it (RFC 7386: objects merged
key by key, ``null`` removes, lists replaced whole) and the changed ResourceClaim or
ResourceClaimTemplate manifests (their specs cannot be changed in place: delete and create)."""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gfd.errors import ConfigError
from gfd.fleet import placement, why
from gfd.fleet.count import Index
from gfd.fleet.model import gpu_resource
from gfd.fleet.requests import pod_requests
from gfd.fleet.subject import TEMPLATE_AT, Subject, with_manifest
from gfd.selector.claims import cel as selector_cel
from gfd.selector.filters import Options, parse
from gfd.selector.models import words

JSON = dict[str, Any]
SERVER_FIELDS = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation",
                 "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences")
"""Metadata the API server writes: left out of a manifest to create again."""
_EQUALS = re.compile(r"^\s*device\.attributes\['([^']+)'\]\.([A-Za-z0-9_]+)\s*==\s*"
                     r"'((?:[^'\\]|\\.)*)'\s*$")


@dataclass(frozen=True, slots=True, kw_only=True)
class Fix:
    summary: str
    manifest: JSON
    """The changed object (the Pod, or the workload), as it would be applied."""
    patch: JSON
    """A JSON merge patch of the object (RFC 7386), ``{}`` when only claims change."""
    objects: tuple[JSON, ...] = ()
    """Changed ResourceClaims and ResourceClaimTemplates."""
    nodes: tuple[str, ...] = ()
    """Where the changed pod fits now."""

    def to_api(self) -> dict[str, Any]:
        return {"summary": self.summary, "patch": self.patch, "objects": list(self.objects),
                "nodes": list(self.nodes), "manifest": self.manifest}


def merge_patch(before: Any, after: Any) -> Any:
    """The RFC 7386 merge patch that turns ``before`` into ``after`` (objects by key, ``None``
    for a key removed, anything else, lists included, replaced whole)."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return copy.deepcopy(after)
    out: JSON = {}
    for key in before.keys() - after.keys():
        out[key] = None
    for key, value in after.items():
        if key not in before:
            out[key] = copy.deepcopy(value)
        elif before[key] != value:
            if isinstance(before[key], dict) and isinstance(value, dict):
                out[key] = merge_patch(before[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


def apply_patch(target: Any, patch: Any) -> Any:
    """RFC 7386's MergePatch (what ``kubectl patch --type merge`` does)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_patch(out.get(key), value)
    return out


def clean(manifest: JSON) -> JSON:
    """The object as one would create it again: no status, no server-written metadata."""
    out = copy.deepcopy(manifest)
    out.pop("status", None)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        for key in SERVER_FIELDS:
            meta.pop(key, None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
            if not annotations:
                meta.pop("annotations")
    return out


@dataclass(slots=True)
class _Change:
    """A manifest being changed: the pod spec inside it, and the claims changed with it."""

    subject: Subject
    manifest: JSON = field(default_factory=dict)
    objects: dict[tuple[str, str], JSON] = field(default_factory=dict)
    words: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.manifest = clean(self.subject.manifest)

    @property
    def spec(self) -> JSON:
        at: JSON = self.manifest
        for key in TEMPLATE_AT[self.subject.kind]:
            at = at.setdefault(key, {})
        spec = at.setdefault("spec", {})
        assert isinstance(spec, dict)
        return spec

    def claim_object(self, kind: str, name: str) -> JSON | None:
        if (kind, name) not in self.objects:
            raw = self.subject.raw(kind, name)
            if raw is None:
                return None
            self.objects[(kind, name)] = clean(raw)
        return self.objects[(kind, name)]

    def copy(self) -> _Change:
        out = _Change(self.subject)
        out.manifest = copy.deepcopy(self.manifest)
        out.objects = copy.deepcopy(self.objects)
        out.words = list(self.words)
        return out


Candidate = Callable[[_Change], bool]
"""Changes the manifest (True), or finds nothing to change (False)."""


def find(ix: Index, judgement: why.Judgement) -> Fix | None:
    """The first change, smallest first, with which the pod fits some node now (None when
    none does, or the pod already fits, or was rejected before any node was judged): one
    change alone, then the GPU taint's toleration with one other change (judged again once
    tolerated), then a smaller count, unless the pod fits once units free up."""
    if judgement.fits is not False or judgement.pre_filter is not None:
        return None
    subject = judgement.subject
    tolerate = _tolerations(ix, judgement)
    for candidate in _singles(ix, judgement):
        change = _Change(subject)
        if candidate(change):
            fix = _try(ix, change)
            if fix is not None:
                return fix
    start = _Change(subject)
    if tolerate is not None:
        tolerate(start)
        tolerated = _judge(ix, start)
        for candidate in _singles(ix, tolerated):
            change = start.copy()
            if candidate(change):
                fix = _try(ix, change)
                if fix is not None:
                    return fix
    if why.later(ix, judgement):
        return None  # it fits once units free up: asking for fewer is no fix
    return _count(ix, judgement, start)


def _judge(ix: Index, change: _Change) -> why.Judgement:
    try:
        changed = with_manifest(change.subject, change.manifest, change.objects.values())
    except ConfigError:
        return why.Judgement(subject=change.subject)
    return why.judge(ix, changed)


def _try(ix: Index, change: _Change) -> Fix | None:
    judgement = _judge(ix, change)
    if judgement.fits is not True:
        return None
    before = clean(change.subject.manifest)
    return Fix(summary="; ".join(change.words), manifest=change.manifest,
               patch=merge_patch(before, change.manifest),
               objects=tuple(change.objects[k] for k in sorted(change.objects)),
               nodes=judgement.fits_on)


def _singles(ix: Index, judgement: why.Judgement) -> Iterator[Candidate]:
    tolerate = _tolerations(ix, judgement)
    if tolerate is not None:
        yield tolerate
    yield from _selector_values(ix, judgement)
    yield from _resource_names(ix, judgement)
    yield from _cel(ix, judgement)
    yield from _device_tolerations(ix, judgement)


# --------------------------------------------------------------------------- tolerations


def _tolerations(ix: Index, judgement: why.Judgement) -> Candidate | None:
    """Tolerate the GPU taints (``nvidia.com/...``) that keep the pod off nodes."""
    pod = judgement.subject.pod
    taints: dict[tuple[str, str], None] = {}
    for v in judgement.verdicts:
        if v.filter == "TaintToleration":
            for taint in placement.untolerated(pod.tolerations, ix.fleet.nodes[v.node].taints):
                if taint.key.startswith(why.P):
                    taints[(taint.key, taint.effect)] = None
    if not taints:
        return None
    wanted = [{"key": k, "operator": "Exists", "effect": e} for k, e in taints]

    def tolerate(change: _Change) -> bool:
        spec = change.spec
        have = [t for t in spec.get("tolerations") or [] if isinstance(t, dict)]
        spec["tolerations"] = have + [t for t in wanted if t not in have]
        change.words.append("tolerate " + ", ".join(f"{t['key']}:{t['effect']}"
                                                    for t in wanted))
        return True

    return tolerate


# --------------------------------------------------------------------------- node selector


def _corrections(ix: Index, key: str, value: str) -> list[str]:
    """Values of label ``key`` on the nodes that name what ``value`` asks with more words
    (``-SHARED``, ``-MIG-<profile>``, the full model name), most common first."""
    asked = set(words(value))
    counts: dict[str, int] = {}
    for node in ix.fleet.nodes.values():
        have = node.labels.get(key)
        if have is None or have == value or not asked or not asked <= set(words(have)):
            continue
        counts[have] = counts.get(have, 0) + 1
    return sorted(counts, key=lambda v: (-counts[v], len(v), v))


def _selector_values(ix: Index, judgement: why.Judgement) -> Iterator[Candidate]:
    if not any(v.filter == "NodeAffinity" for v in judgement.verdicts):
        return
    pod = judgement.subject.pod
    for key, value in sorted((pod.node_selector or {}).items()):
        if any(n.labels.get(key) == value for n in ix.fleet.nodes.values()):
            continue
        for better in _corrections(ix, key, value):
            yield _set_selector(key, value, better)
    for t, term in enumerate(pod.affinity or ()):
        for key, op, values in term:
            if op != "In" or any(n.labels.get(key) in values for n in ix.fleet.nodes.values()):
                continue
            for value in values:
                for better in _corrections(ix, key, value):
                    yield _set_affinity(t, key, value, better)


def _set_selector(key: str, value: str, better: str) -> Candidate:
    def change(c: _Change) -> bool:
        selector = c.spec.get("nodeSelector")
        if not isinstance(selector, dict) or selector.get(key) != value:
            return False
        selector[key] = better
        c.words.append(f"select {key}={better} (not {value})")
        return True

    return change


def _set_affinity(term: int, key: str, value: str, better: str) -> Candidate:
    def change(c: _Change) -> bool:
        terms = (((c.spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        if not isinstance(terms, list) or term >= len(terms):
            return False
        for expr in terms[term].get("matchExpressions") or []:
            if expr.get("key") == key and value in (expr.get("values") or []):
                expr["values"] = [better if v == value else v for v in expr["values"]]
                c.words.append(f"node affinity {key} In {better} (not {value})")
                return True
        return False

    return change


# --------------------------------------------------------------------------- resources


def _containers(spec: JSON) -> Iterator[JSON]:
    for key in ("initContainers", "containers"):
        for c in spec.get(key) or []:
            if isinstance(c, dict):
                yield c


def _rename(old: str, new: str) -> Candidate:
    def change(c: _Change) -> bool:
        done = False
        for container in _containers(c.spec):
            resources = container.get("resources") or {}
            for part in ("limits", "requests"):
                values = resources.get(part)
                if isinstance(values, dict) and old in values:
                    values[new] = values.pop(old)
                    done = True
        if done:
            c.words.append(f"request {new} instead of {old}")
        return done

    return change


def _resource_names(ix: Index, judgement: why.Judgement) -> Iterator[Candidate]:
    asked = [r for r in judgement.subject.pod.requests if gpu_resource(r)]
    if not asked:
        return
    offered: dict[str, int] = {}
    for node in ix.fleet.nodes.values():
        for r, n in node.allocatable.items():
            if gpu_resource(r) and n > 0:
                offered[r] = offered.get(r, 0) + n
    for old in asked:
        for new in sorted(offered, key=lambda r: (-offered[r], r)):
            if new != old and new not in judgement.subject.pod.requests:
                yield _rename(old, new)


def _set_count(resource: str, count: int) -> Candidate:
    """Ask ``count`` of ``resource`` in all: the largest regular container (or sidecar, or
    init container) that asks for it gives up what is too much."""

    def change(c: _Change) -> bool:
        spec = c.spec
        for _ in range(64):
            total = pod_requests(spec, keep=lambda r: r == resource).get(resource, 0)
            if total <= count:
                break
            holders = [(int(_amount(cont, resource)), i, cont)
                       for i, cont in enumerate(_containers(spec)) if _amount(cont, resource)]
            if not holders:
                return False
            have, _, container = max(holders, key=lambda h: (h[0], -h[1]))
            _put(container, resource, max(0, have - (total - count)))
        else:
            return False
        c.words.append(f"ask {count} {resource} in all (the most one node can give now)")
        return True

    return change


def _amount(container: JSON, resource: str) -> int:
    resources = container.get("resources") or {}
    for part in ("requests", "limits"):
        value = (resources.get(part) or {}).get(resource)
        if value is not None:
            try:
                return int(str(value))
            except ValueError:
                return 0
    return 0


def _put(container: JSON, resource: str, value: int) -> None:
    resources = container.setdefault("resources", {})
    for part in ("limits", "requests"):
        values = resources.get(part)
        if isinstance(values, dict) and resource in values:
            if value:
                values[resource] = str(value)
            else:
                values.pop(resource)


def _claim_count(kind: str, name: str, request: int, count: int) -> Candidate:
    def change(c: _Change) -> bool:
        raw = c.claim_object(kind, name)
        if raw is None:
            return False
        exactly = _request_of(raw, kind, request)
        if exactly is None or exactly.get("allocationMode", "ExactCount") != "ExactCount":
            return False
        exactly["count"] = count
        c.words.append(f"{kind} {name}: ask {count} device(s) (the most one node can give now)")
        return True

    return change


def _count(ix: Index, judgement: why.Judgement, start: _Change) -> Fix | None:
    """The largest count, below what is asked, that lets the pod fit a node now."""
    subject = judgement.subject
    tries: list[tuple[int, Callable[[int], Candidate]]] = []
    for resource, total in sorted(subject.pod.requests.items()):
        if gpu_resource(resource) and total > 1:
            tries.append((total, functools.partial(_set_count, resource)))
    for kind, name, index, count in _claim_requests(subject):
        if count > 1:
            tries.append((count, functools.partial(_claim_count, kind, name, index)))
    for total, make in tries:
        low, high, best = 1, total - 1, None
        while low <= high:
            middle = (low + high) // 2
            change = start.copy()
            fix = _try(ix, change) if make(middle)(change) else None
            if fix is not None:
                best, low = fix, middle + 1
            else:
                high = middle - 1
        if best is not None:
            return best
    return None


# --------------------------------------------------------------------------- claims


def _request_of(raw: JSON, kind: str, index: int) -> JSON | None:
    spec = raw.get("spec") or {}
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    requests = (spec.get("devices") or {}).get("requests") or []
    if index >= len(requests) or not isinstance(requests[index], dict):
        return None
    exactly = requests[index].get("exactly")
    return exactly if isinstance(exactly, dict) else None


def _claim_requests(subject: Subject) -> Iterator[tuple[str, str, int, int]]:
    """(kind, name, request index, count) of each exact request of the pod's claims and
    templates that a fix may change."""
    for ref in subject.pod_claims:
        kind, name = (("ResourceClaimTemplate", ref.template) if ref.template
                      else ("ResourceClaim", ref.claim))
        raw = subject.raw(kind, name)
        if raw is None:
            continue
        for i in range(16):
            exactly = _request_of(raw, kind, i)
            if exactly is None:
                break
            count = exactly.get("count", 1)
            if exactly.get("allocationMode", "ExactCount") == "ExactCount" \
                    and isinstance(count, int):
                yield kind, name, i, count


def _better_expression(ix: Index, expression: str) -> str | None:
    """A selector that matches what ``expression`` (an equality on one attribute) meant: for
    ``productName``, the CEL ``gfd selector --dra --product`` writes for the value's words; for
    another attribute, the devices' value that has the value's words."""
    m = _EQUALS.match(expression)
    if not m:
        return None
    domain, name, literal = m.group(1), m.group(2), re.sub(r"\\(.)", r"\1", m.group(3))
    if name == "productName":
        try:
            return selector_cel(parse(Options(product=literal, dra=True)))[0]
        except (ConfigError, IndexError):
            return None
    wanted = set(words(literal))
    values = sorted({str(d.attributes[name]) for p in ix.gathered.values() for d in p.devices
                     if d.driver == domain and name in d.attributes
                     and wanted and wanted <= set(words(str(d.attributes[name])))})
    if not values:
        return None
    text = values[0].replace("\\", "\\\\").replace("'", "\\'")
    return f"device.attributes['{domain}'].{name} == '{text}'"


def _set_expression(kind: str, name: str, request: int, selector: int, expression: str,
                    before: str) -> Candidate:
    def change(c: _Change) -> bool:
        raw = c.claim_object(kind, name)
        exactly = _request_of(raw, kind, request) if raw is not None else None
        if exactly is None:
            return False
        selectors = exactly.get("selectors") or []
        if selector >= len(selectors):
            return False
        selectors[selector] = {"cel": {"expression": expression}}
        c.words.append(f"{kind} {name}: select {expression} (not {before})")
        return True

    return change


def _cel(ix: Index, judgement: why.Judgement) -> Iterator[Candidate]:
    if not any(v.filter == "DynamicResources" for v in judgement.verdicts):
        return
    subject = judgement.subject
    for kind, name, index, _ in _claim_requests(subject):
        raw = subject.raw(kind, name)
        exactly = _request_of(raw, kind, index) if raw is not None else None
        for j, selector in enumerate((exactly or {}).get("selectors") or []):
            expression = ((selector or {}).get("cel") or {}).get("expression")
            if not isinstance(expression, str):
                continue
            better = _better_expression(ix, expression)
            if better and better != expression:
                yield _set_expression(kind, name, index, j, better, expression)


def _device_tolerations(ix: Index, judgement: why.Judgement) -> Iterator[Candidate]:
    failed = {v.node for v in judgement.verdicts if v.filter == "DynamicResources"}
    taints = {(t.key, t.effect) for p in ix.gathered.values() if p.node in failed
              for d in p.devices for t in d.taints if t.effect in ("NoSchedule", "NoExecute")}
    if not taints:
        return
    wanted = [{"key": k, "operator": "Exists", "effect": e} for k, e in sorted(taints)]
    for kind, name, index, _ in _claim_requests(judgement.subject):

        def change(c: _Change, kind: str = kind, name: str = name, index: int = index) -> bool:
            raw = c.claim_object(kind, name)
            exactly = _request_of(raw, kind, index) if raw is not None else None
            if exactly is None:
                return False
            exactly["tolerations"] = [*(exactly.get("tolerations") or []), *wanted]
            c.words.append(f"{kind} {name}: tolerate the device taints "
                           + ", ".join(f"{t['key']}:{t['effect']}" for t in wanted))
            return True

        yield change
