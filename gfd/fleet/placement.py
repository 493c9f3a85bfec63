"""Where a pod may go, by the scheduler's node filters that labels and taints decide: its
``nodeSelector`` and required node affinity (``NodeAffinity``: terms OR-ed, expressions AND-ed;
``Gt``/``Lt`` compare integers), and whether a node can take an ordinary GPU pod at all
(cordoned, not Ready, or tainted ``NoSchedule``/``NoExecute`` with a key a GPU pod does not
tolerate)."""

from __future__ import annotations

import re

from gfd.fleet.model import FIELD, NO_SCHEDULE, Node, Pod

Requirement = tuple[str, str, tuple[str, ...]]
Term = tuple[Requirement, ...]

DEFAULT_TOLERATED = ("nvidia.com/gpu",)
"""Taint keys a GPU pod is assumed to tolerate: GPU nodes are often tainted
``nvidia.com/gpu:NoSchedule`` so that only GPU pods land there (the GPU Operator's docs, and
EKS, AKS and GKE's GPU node pools)."""
_CORDON = "node.kubernetes.io/unschedulable"
_NOT_READY = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
_INTEGER = re.compile(r"-?[0-9]+")


def requirement_matches(req: Requirement, labels: dict[str, str]) -> bool:
    key, op, values = req
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        have, want = labels.get(key, ""), values[0] if values else ""
        if not (_INTEGER.fullmatch(have) and _INTEGER.fullmatch(want)):
            return False
        return int(have) > int(want) if op == "Gt" else int(have) < int(want)
    return False


def terms_match(terms: tuple[Term, ...] | list[list[Requirement]], labels: dict[str, str]) -> bool:
    """Terms OR-ed, each term's requirements AND-ed; an empty term selects nothing
    (``nodeaffinity``'s ``nodeSelectorTerm.match``)."""
    return any(term and all(requirement_matches(r, labels) for r in term) for term in terms)


def admits(pod: Pod, node: Node) -> bool:
    """The pod's nodeSelector and required node affinity admit the node's labels."""
    if pod.node_selector and any(node.labels.get(k) != v for k, v in pod.node_selector.items()):
        return False
    return pod.affinity is None or terms_match(
        pod.affinity, {**node.labels, f"{FIELD}metadata.name": node.name})


STATES = ("ready", "cordoned", "not-ready", "tainted")
"""What ``state`` answers: only a ``ready`` node takes a GPU pod now."""


def state(node: Node, tolerated: tuple[str, ...] = DEFAULT_TOLERATED) -> tuple[str, list[str]]:
    """``ready``, ``cordoned``, ``not-ready`` or ``tainted``, and why, for a pod that tolerates
    the taint keys ``tolerated`` (and nothing else)."""
    reasons = []
    name = "ready"
    if node.unschedulable:
        name = "cordoned"
        reasons.append("cordoned (spec.unschedulable)")
    if not node.ready:
        name = "not-ready" if name == "ready" else name
        reasons.append("not Ready")
    for taint in node.taints:
        if taint.effect not in NO_SCHEDULE or taint.key in tolerated or taint.key == _CORDON:
            continue
        if taint.key in _NOT_READY:
            name = "not-ready" if name == "ready" else name
        else:
            name = "tainted" if name == "ready" else name
        reasons.append(f"taint {taint}")
    return name, reasons
