"""``gfd why``'s output: the document (``-o json|yaml``, ``apiVersion: gfd/v1``, ``kind: Why``;
its schema in docs/why.md) and the text (what the pod asks, the nodes grouped by the first
filter that keeps the pod off them, the fix), and ``gfd fleet --pending``'s rows: each pending
GPU pod with its largest group."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gfd.fleet import why
from gfd.fleet.count import Index
from gfd.fleet.fixes import Fix
from gfd.fleet.model import FIELD, Claim, Fleet, Pod, Request, gpu_resource
from gfd.fleet.subject import PodClaim, Subject

API_VERSION = "gfd/v1"
KIND = "Why"


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """Everything ``gfd why`` says of one pod."""

    judgement: why.Judgement
    groups: tuple[why.Group, ...] = ()
    fix: Fix | None = None
    later: tuple[why.Later, ...] = ()
    gpu: bool = True

    @property
    def subject(self) -> Subject:
        return self.judgement.subject

    @property
    def bound(self) -> str:
        return self.subject.pod.node


def answer(ix: Index, subject: Subject) -> Answer:
    """The pod judged on every node, grouped, and its fix (or where it could go later)."""
    from gfd.fleet import fixes

    if subject.pod.node:
        return Answer(judgement=why.Judgement(subject=subject, nodes=len(ix.fleet.nodes)),
                      gpu=why.asks_gpu(subject, why.resolve(ix, subject)[0],
                                       ix.classes.by_name))
    judgement = why.judge(ix, subject)
    fix = fixes.find(ix, judgement) if judgement.fits is False else None
    return Answer(judgement=judgement, groups=tuple(why.groups(judgement)), fix=fix,
                  later=tuple(why.later(ix, judgement)) if fix is None else (),
                  gpu=why.asks_gpu(subject, judgement.claims, ix.classes.by_name))


# --------------------------------------------------------------------------- the document


def _toleration(t: tuple[str, str, str, str]) -> dict[str, str]:
    key, operator, value, effect = t
    return {k: v for k, v in (("key", key), ("operator", operator or "Equal"),
                              ("value", value), ("effect", effect)) if v}


def _request(r: Request) -> dict[str, Any]:
    if r.alternatives:
        return {"name": r.name, "firstAvailable": [_request(a) for a in r.alternatives]}
    return {"name": r.name, "deviceClass": r.device_class, "mode": r.mode,
            "count": r.count if r.mode != "All" else None, "selectors": list(r.selectors),
            "adminAccess": r.admin, "tolerations": [_toleration(t) for t in r.tolerations]}


def _claims(subject: Subject, claims: tuple[Claim, ...]) -> list[dict[str, Any]]:
    by_name = {c.name: c for c in claims}
    out = []
    for i, ref in enumerate(subject.pod_claims):
        claim = by_name.get(ref.claim) or (claims[i] if i < len(claims) else None)
        out.append({
            "name": ref.name, "claim": ref.claim or None, "template": ref.template or None,
            "allocated": bool(claim and why.allocated(claim)),
            "node": (claim.node or None) if claim else None,
            "requests": [_request(r) for r in claim.requests] if claim else []})
    return out


def _terms(subject: Subject) -> list[list[dict[str, Any]]] | None:
    if subject.pod.affinity is None:
        return None
    return [[{"key": k.removeprefix(FIELD), "operator": op, "values": list(v),
              **({"field": True} if k.startswith(FIELD) else {})} for k, op, v in term]
            for term in subject.pod.affinity]


def asks(ix: Index, subject: Subject, claims: tuple[Claim, ...]) -> dict[str, Any]:
    pod = subject.pod
    asked = {**pod.usage, **pod.requests}
    return {
        "requests": {r: n for r, n in sorted(pod.requests.items()) if gpu_resource(r)},
        "resources": {r: why.amount(r, n) for r, n in sorted(asked.items())
                      if not gpu_resource(r)},
        "containers": [{"name": c.name, "kind": c.kind, "gpu": dict(c.gpu)}
                       for c in subject.containers if c.gpu],
        "claims": _claims(subject, claims),
        "extendedResources": [{"resource": r, "deviceClass": c.name} for r in sorted(asked)
                              if (c := ix.classes.serving(r)) is not None],
        "nodeSelector": dict(pod.node_selector) if pod.node_selector is not None else None,
        "affinity": _terms(subject),
        "tolerations": [_toleration(t) for t in pod.tolerations],
        "priority": pod.priority,
    }


def document(fleet: Fleet, ix: Index, a: Answer) -> dict[str, Any]:
    j = a.judgement
    s = a.subject
    return {
        "apiVersion": API_VERSION, "kind": KIND, "source": fleet.source,
        "complete": not fleet.incomplete and not fleet.skipped,
        "incomplete": list(fleet.incomplete), "skipped": list(fleet.skipped),
        "pod": {"namespace": s.namespace, "name": s.name, "kind": s.kind,
                "phase": s.phase or None},
        "bound": a.bound or None,
        "gpu": a.gpu,
        "fits": True if a.bound else j.fits,
        "nodes": j.nodes,
        "fitsOn": list(j.fits_on),
        "asks": asks(ix, s, j.claims),
        "notJudged": [{"filter": f, "what": w} for f, w in s.not_judged],
        "preFilter": j.pre_filter.to_api() if j.pre_filter else None,
        "groups": [g.to_api() for g in a.groups],
        "fix": a.fix.to_api() if a.fix else None,
        "later": [x.to_api() for x in a.later],
    }


# --------------------------------------------------------------------------- text


def _claim_line(ref: PodClaim, entry: dict[str, Any]) -> str:
    made = f"claim {ref.claim}" if ref.claim else "no claim made yet"
    head = (f"claim {ref.name}: from template {ref.template} ({made})" if ref.template
            else f"claim {ref.name}: {ref.claim}")
    if entry["allocated"]:
        return head + (f", allocated on {entry['node']}" if entry["node"] else ", allocated")
    parts = []
    for r in entry["requests"]:
        parts.append(_request_text(r))
    return head + (": " + "; ".join(parts) if parts else "")


def _request_text(r: dict[str, Any]) -> str:
    if "firstAvailable" in r:
        return f"request {r['name']}: the first of " + ", or ".join(
            _request_text(a) for a in r["firstAvailable"])
    count = "all" if r["mode"] == "All" else str(r["count"])
    text = f"request {r['name']}: {count} {r['deviceClass']}"
    if r["selectors"]:
        text += " where " + " and ".join(r["selectors"])
    if r["adminAccess"]:
        text += " (admin access)"
    if r["tolerations"]:
        text += " tolerating " + ", ".join(_tol_text(t) for t in r["tolerations"])
    return text


def _tol_text(t: dict[str, str]) -> str:
    """As ``kubectl describe`` shows one: ``key=value:Effect``, ``(Exists)`` without a value
    to match; an empty key with Exists tolerates every taint."""
    key = t.get("key", "")
    if not key and t.get("operator") == "Exists":
        return "every taint" + (f":{t['effect']}" if t.get("effect") else "")
    value = f"={t['value']}" if t.get("value") else ""
    effect = f":{t['effect']}" if t.get("effect") else ""
    exists = " (Exists)" if t.get("operator") == "Exists" else ""
    return f"{key}{value}{effect}{exists}"


def _requests_line(subject: Subject, resource: str, total: int) -> str:
    parts = [f"{c.kind} {c.name} {c.gpu[resource]}" for c in subject.containers
             if c.gpu.get(resource)]
    how = ""
    if len(parts) > 1 or any(c.kind != "container" for c in subject.containers
                             if c.gpu.get(resource)):
        how = f" ({', '.join(parts)}: regular containers and sidecars summed, init " \
              "containers one at a time)"
    return f"{resource}: {total}{how}"


def text(fleet: Fleet, ix: Index, a: Answer, *, wide: bool = False) -> str:
    s, j = a.subject, a.judgement
    out = []
    name = f"{s.kind.lower()} {s.namespace}/{s.name}"
    if a.bound:
        return f"{name}: bound to node {a.bound}\n"
    if j.pre_filter is not None:
        state = "pending: rejected before any node is filtered"
    elif j.fits:
        state = f"fits on {len(j.fits_on)} of {j.nodes} nodes now"
    elif j.fits is None:
        state = f"0/{j.nodes} nodes are known to take it now (some cannot be judged here)"
    else:
        state = f"0/{j.nodes} nodes can take it now"
    out.append(f"{name}: {state}")
    doc = asks(ix, s, j.claims)
    out.append("asks:")
    if not a.gpu:
        out.append("  no GPU (nothing below is a GPU reason)")
    for resource, total in doc["requests"].items():
        out.append(f"  {_requests_line(s, resource, total)}")
    for ref, entry in zip(s.pod_claims, doc["claims"], strict=False):
        out.append(f"  {_claim_line(ref, entry)}")
    for r in doc["extendedResources"]:
        out.append(f"  {r['resource']}: served by DeviceClass {r['deviceClass']} where a node "
                   "has none allocatable")
    if doc["resources"]:
        out.append("  also " + ", ".join(f"{r} {v}" for r, v in doc["resources"].items()))
    if doc["nodeSelector"]:
        out.append("  nodeSelector: " + ", ".join(f"{k}={v}" for k, v in
                                                  sorted(doc["nodeSelector"].items())))
    for i, term in enumerate(doc["affinity"] or [], 1):
        out.append(f"  affinity term {i}: " + ", ".join(
            f"{r['key']} {r['operator']} {r['values']}" for r in term))
    if doc["tolerations"]:
        out.append("  tolerations: " + ", ".join(_tol_text(t) for t in doc["tolerations"]))
    for plugin, what in s.not_judged:
        out.append(f"  {what}: {plugin} checks it, gfd does not")
    if j.pre_filter is not None:
        tried = "" if j.pre_filter.tried else " (the scheduler does not try the pod at all)"
        out.append(f"rejected by {j.pre_filter.filter}: {j.pre_filter.reason}{tried}")
    if a.groups:
        out.append("nodes, by the first filter that keeps the pod off each:")
    for g in a.groups:
        gpu = "" if a.gpu else " (not a GPU reason)"
        out.append(f"  {g.count} {g.reason}   ({g.filter}){gpu}")
        lines = list(g.explanation)
        shown = lines if wide else lines[:why.SHOWN]
        out.extend(f"    {line}" for line in shown)
        if len(lines) > len(shown):
            out.append(f"    ... {len(lines) - len(shown)} more (-o wide)")
    if j.fits_on:
        nodes = list(j.fits_on) if wide else list(j.fits_on[:why.SHOWN])
        more = f" and {len(j.fits_on) - len(nodes)} more" if len(j.fits_on) > len(nodes) else ""
        out.append(f"fits on: {', '.join(nodes)}{more}")
    if a.fix is not None:
        where = ", ".join(a.fix.nodes[:why.SHOWN]) + (
            f" and {len(a.fix.nodes) - why.SHOWN} more" if len(a.fix.nodes) > why.SHOWN else "")
        out.append(f"fix: {a.fix.summary}: then it fits on {where}")
        if a.fix.patch:
            out.append(f"  merge patch: {json.dumps(a.fix.patch, sort_keys=True)}")
        for o in a.fix.objects:
            out.append(f"  changed {o.get('kind')} {o.get('metadata', {}).get('name')} "
                       "(delete and create it: its spec cannot change in place)")
        out.append("  -o yaml prints the changed manifest")
    elif j.fits is False and j.pre_filter is None:
        if a.later:
            out.append("nothing binds now; once GPU units free up it could go to:")
            for x in a.later[: None if wide else why.SHOWN]:
                held = ", ".join(x.held_by) or "nothing of a GPU"
                out.append(f"  {x.node} (held by {held})")
        else:
            out.append("no change gfd knows binds it now, nor would freeing GPU units")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- --pending


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingRow:
    namespace: str
    name: str
    asks: str
    group: why.Group | None
    pre_filter: why.PreFilter | None
    nodes: int

    @property
    def reason(self) -> str:
        if self.pre_filter is not None:
            return f"{self.pre_filter.reason} ({self.pre_filter.filter})"
        if self.group is None:
            return "fits now (not yet scheduled)"
        return f"{self.group.count}/{self.nodes} {self.group.reason} ({self.group.filter})"

    def to_api(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "asks": self.asks,
                "reason": (self.group.to_api() | {"explanation": list(
                    self.group.explanation[:why.SHOWN])}) if self.group else None,
                "preFilter": self.pre_filter.to_api() if self.pre_filter else None,
                "nodes": self.nodes}


def _asks_words(subject: Subject) -> str:
    parts = [f"{n} {r}" for r, n in sorted(subject.pod.requests.items()) if gpu_resource(r)]
    parts += [f"claim {c.claim or c.name}" for c in subject.pod_claims]
    return ", ".join(parts)


def _shape(pod: Pod) -> object:
    """What a pod's judgement depends on, but its claims (pods of one workload share it)."""
    return (pod.namespace, tuple(sorted(pod.requests.items())), tuple(sorted(pod.usage.items())),
            tuple(sorted((pod.node_selector or {}).items())) if pod.node_selector is not None
            else None, pod.affinity, tuple(sorted(pod.tolerations)), pod.priority)


def pending(ix: Index) -> list[PendingRow]:
    """Every pending pod that asks for a GPU or holds claims (not gated), by namespace and
    name, with the largest group of its judgement; pods alike in all a judgement reads and
    holding no claim judged once."""
    from gfd.fleet.subject import from_pod

    out = []
    alike: dict[object, why.Judgement] = {}
    for pod in sorted(ix.pending, key=lambda p: (p.namespace, p.name)):
        if pod.gated or not (pod.requests or pod.claims):
            continue
        subject = from_pod(pod)
        key = None if pod.claims or pod.nominated else _shape(pod)
        j = alike.get(key) if key is not None else None
        if j is None:
            j = why.judge(ix, subject)
            if key is not None:
                alike[key] = j
        out.append(PendingRow(namespace=pod.namespace, name=pod.name, asks=_asks_words(subject),
                              group=None if j.fits else why.largest(j),
                              pre_filter=j.pre_filter, nodes=j.nodes))
    return out


def pending_text(rows: list[PendingRow], *, headers: bool = True) -> str:
    table = [[f"{r.namespace}/{r.name}", r.asks, r.reason] for r in rows]
    lines = ([["POD", "ASKS", "WHY (the most nodes)"]] if headers else []) + table
    if not table:
        return "no pending GPU pod\n"
    widths = [max(len(line[i]) for line in lines) for i in range(2)]
    return "".join(f"{a.ljust(widths[0])}   {b.ljust(widths[1])}   {c}".rstrip() + "\n"
                   for a, b, c in lines)
