"""Where a pod may go, by the scheduler's node filters that labels and taints decide: its
``nodeSelector`` and required node affinity (``NodeAffinity``: terms OR-ed, expressions AND-ed;
``Gt``/``Lt`` compare integers), and whether a node can take an ordinary GPU pod at all
(cordoned, or tainted ``NoSchedule``/``NoExecute`` with a key a GPU pod does not tolerate).

The scheduler reads taints, not the ``Ready`` condition: the node lifecycle controller taints a
NotReady node ``node.kubernetes.io/not-ready`` (or ``unreachable``) within seconds, and that
``NoSchedule`` taint keeps pods off; the ``NoExecute`` twin every pod tolerates for a while
(the ``DefaultTolerationSeconds`` admission plugin, on by default, adds the tolerations). A
NotReady node not yet tainted still takes pods, and says so."""

from __future__ import annotations

from gfd.fleet.model import FIELD, NO_SCHEDULE, Node, Pod, Taint, int64

Requirement = tuple[str, str, tuple[str, ...]]
Term = tuple[Requirement, ...]

DEFAULT_TOLERATED = ("nvidia.com/gpu",)
"""Taint keys a GPU pod is assumed to tolerate: GPU nodes are often tainted
``nvidia.com/gpu:NoSchedule`` so that only GPU pods land there (the GPU Operator's docs, and
EKS, AKS and GKE's GPU node pools)."""
_CORDON = "node.kubernetes.io/unschedulable"
_NOT_READY = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
"""Taints of the node lifecycle controller; their ``NoExecute`` effect every pod tolerates by
default (``DefaultTolerationSeconds``: 300 s)."""


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
        have, want = int64(labels.get(key)), int64(values[0] if values else None)
        if have is None or want is None:  # ParseInt fails: the requirement does not match
            return False
        return have > want if op == "Gt" else have < want
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
    for taint in node.taints:
        if taint.effect not in NO_SCHEDULE or taint.key in tolerated or taint.key == _CORDON:
            continue
        if taint.key in _NOT_READY:
            if taint.effect == "NoExecute":
                continue  # tolerated by every pod for a while (DefaultTolerationSeconds)
            name = "not-ready" if name == "ready" else name
        else:
            name = "tainted" if name == "ready" else name
        reasons.append(f"taint {taint}")
    if not node.ready:
        reasons.append("not Ready" if name != "ready" else
                       "not Ready, and not yet tainted: the scheduler still places pods here")
    return name, reasons


# --------------------------------------------------------------------------- a pod's own
# (``gfd why``: the pod's tolerations and node affinity as kube-scheduler's filters read them)

Toleration = tuple[str, str, str, str]
"""(key, operator, value, effect), as ``model.Pod.tolerations`` holds them."""
CORDON = Taint(key=_CORDON, effect="NoSchedule")
"""What ``NodeUnschedulable`` asks a pod to tolerate on a cordoned node."""


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """``Toleration.ToleratesTaint`` (k8s.io/api core/v1): the effect matches (or none is
    given), the key matches (an empty key with ``Exists`` matches every key), and ``Exists``,
    or ``Equal`` (the default) with the same value."""
    key, operator, value, effect = toleration
    if effect and effect != taint.effect:
        return False
    if key and key != taint.key:
        return False
    if operator == "Exists":
        return True
    return operator in ("", "Equal") and value == taint.value


def untolerated(tolerations: tuple[Toleration, ...], taints: tuple[Taint, ...]) -> list[Taint]:
    """The ``NoSchedule``/``NoExecute`` taints no toleration tolerates (``TaintToleration``:
    ``FindMatchingUntoleratedTaint`` with ``DoNotScheduleTaintsFilterFunc``), in the node's
    order."""
    return [t for t in taints if t.effect in NO_SCHEDULE
            and not any(tolerates(tol, t) for tol in tolerations)]


def node_names(affinity: tuple[Term, ...] | None) -> frozenset[str] | None:
    """The node names a required node affinity pins the pod to (``NodeAffinity``'s
    PreFilter): when every term has a ``metadata.name In`` field requirement, the union over
    the terms of each term's intersection; None when some term names no node (every node is
    then tried). An empty set: the terms conflict ("pod affinity terms conflict")."""
    if not affinity:
        return None
    names: set[str] | None = None
    for term in affinity:
        found: set[str] | None = None
        for key, operator, values in term:
            if key == f"{FIELD}metadata.name" and operator == "In":
                found = set(values) if found is None else found & set(values)
        if found is None:
            return None
        names = found if names is None else names | found
    return frozenset(names or ())
