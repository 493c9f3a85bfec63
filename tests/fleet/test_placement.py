"""Where a pod may go, by the scheduler's node filters over labels and taints:
``NodeAffinity`` (``k8s.io/component-helpers/scheduling/corev1/nodeaffinity``,
``k8s.io/apimachinery/pkg/labels`` Requirement.Matches): nodeSelector pairs all equal;
required terms OR-ed, each term's expressions AND-ed; ``In``, ``NotIn`` (true for a missing
key), ``Exists``, ``DoesNotExist``, and ``Gt``/``Lt``, which parse the label as an integer
(``strconv.ParseInt``) and fail otherwise; a term's ``matchFields`` (``metadata.name``)
name the node; an empty term selects nothing. And whether a node can take an ordinary GPU
pod now: ``spec.unschedulable`` (NodeUnschedulable), the Ready condition, and
``NoSchedule``/``NoExecute`` taints the pod does not tolerate (TaintToleration);
``PreferNoSchedule`` only scores."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.fleet.model import FIELD, Node, Pod, Taint, node_of, pod_of
from gfd.fleet.placement import (
    admits,
    node_names,
    requirement_matches,
    state,
    terms_match,
    tolerates,
    untolerated,
)

REQUIREMENTS = [
    ("In", ("a", "b"), {"k": "b"}, True), ("In", ("a",), {"k": "c"}, False),
    ("In", ("a",), {}, False),
    ("NotIn", ("a",), {"k": "b"}, True), ("NotIn", ("a",), {"k": "a"}, False),
    ("NotIn", ("a",), {}, True),
    ("Exists", (), {"k": ""}, True), ("Exists", (), {"j": "x"}, False),
    ("DoesNotExist", (), {}, True), ("DoesNotExist", (), {"k": "x"}, False),
    ("Gt", ("5",), {"k": "6"}, True), ("Gt", ("5",), {"k": "5"}, False),
    ("Gt", ("40959",), {"k": "40960"}, True), ("Gt", ("5",), {"k": "007"}, True),
    ("Gt", ("5",), {"k": "6.0"}, False), ("Gt", ("5",), {"k": "6Gi"}, False),
    ("Gt", ("5",), {"k": "x"}, False), ("Gt", ("5",), {"k": ""}, False),
    ("Gt", ("5",), {}, False),
    ("Lt", ("5",), {"k": "4"}, True), ("Lt", ("5",), {"k": "5"}, False),
    ("Lt", ("5",), {"k": "four"}, False), ("Lt", ("5",), {}, False),
    ("Lt", ("10",), {"k": "9"}, True),  # integers, not strings: "9" > "10" as text
    ("Gt", ("9",), {"k": "10"}, True),
    ("Unknown", ("a",), {"k": "a"}, False),
]


@pytest.mark.parametrize("op, values, labels, expected", REQUIREMENTS,
                         ids=[f"{o} {v} on {lb}" for o, v, lb, _ in REQUIREMENTS])
def test_a_requirement_matches_as_the_scheduler_reads_it(
        op: str, values: tuple[str, ...], labels: dict[str, str], expected: bool) -> None:
    assert requirement_matches(("k", op, values), labels) is expected


H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper", "nvidia.com/mig.capable": "true"}


@pytest.mark.parametrize("terms, expected", [
    ([[("nvidia.com/gpu.family", "In", ("hopper",)),
       ("nvidia.com/gpu.memory", "Gt", ("80000",))]], True),
    ([[("nvidia.com/gpu.family", "In", ("hopper",)),
       ("nvidia.com/gpu.memory", "Gt", ("90000",))]], False),
    ([[("nvidia.com/gpu.family", "In", ("ampere",))],
      [("nvidia.com/mig.capable", "In", ("true",))]], True),
    ([[("nvidia.com/gpu.family", "In", ("ampere",))],
      [("nvidia.com/gpu.memory", "Lt", ("1000",))]], False),
    ([], False),
], ids=["every expression of the term holds", "one expression of the only term fails",
        "one term of two holds", "no term holds", "no terms"])
def test_terms_are_or_ed_and_expressions_and_ed(
        terms: list[list[tuple[str, str, tuple[str, ...]]]], expected: bool) -> None:
    assert terms_match(terms, H100) is expected


def gpu_node(labels: dict[str, str] | None = None, **state_: Any) -> Node:
    return Node(name="gpu-a", labels=dict(H100 if labels is None else labels),
                allocatable={"nvidia.com/gpu": 8}, capacity={"nvidia.com/gpu": 8}, **state_)


def pending(node_selector: dict[str, str] | None = None,
            affinity: Any = None) -> Pod:
    return Pod(namespace="ml", name="p", node="", requests={"nvidia.com/gpu": 1},
               node_selector=node_selector, affinity=affinity)


@pytest.mark.parametrize("pod, expected", [
    (pending(), True),
    (pending({"nvidia.com/gpu.family": "hopper"}), True),
    (pending({"nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.memory": "81559"}), True),
    (pending({"nvidia.com/gpu.family": "hopper", "nvidia.com/gpu.memory": "1"}), False),
    (pending({"nvidia.com/gpu.clique": "x"}), False),
    (pending({"nvidia.com/gpu.family": "hopper"},
             ((("nvidia.com/gpu.memory", "Gt", ("80000",)),),)), True),
    (pending({"nvidia.com/gpu.family": "hopper"},
             ((("nvidia.com/gpu.memory", "Gt", ("90000",)),),)), False),
    (pending({"nvidia.com/gpu.family": "ampere"},
             ((("nvidia.com/gpu.memory", "Gt", ("80000",)),),)), False),
], ids=["no selector", "a matching pair", "all pairs match", "one pair differs",
        "a label the node lacks", "selector and affinity both hold", "affinity fails",
        "selector fails"])
def test_a_pod_is_admitted_when_its_selector_and_its_affinity_both_hold(
        pod: Pod, expected: bool) -> None:
    assert admits(pod, gpu_node()) is expected


def api_pod(affinity: dict[str, Any] | None = None,
            node_selector: dict[str, str] | None = None) -> Pod:
    spec: dict[str, Any] = {"containers": [{"name": "main", "resources": {
        "limits": {"nvidia.com/gpu": "1"}}}]}
    if affinity is not None:
        spec["affinity"] = {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": affinity}}
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    p = pod_of({"metadata": {"name": "p", "namespace": "ml"}, "spec": spec,
                "status": {"phase": "Pending"}})
    assert p is not None
    return p


def api_node(name: str, labels: dict[str, str]) -> Node:
    return node_of({"metadata": {"name": name, "labels": labels},
                    "status": {"allocatable": {"nvidia.com/gpu": "8"},
                               "conditions": [{"type": "Ready", "status": "True"}]}})


def test_affinity_read_from_the_api_admits_as_the_scheduler_does() -> None:
    pod = api_pod({"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "nvidia.com/gpu.family", "operator": "In",
                               "values": ["ampere"]}]},
        {"matchExpressions": [{"key": "nvidia.com/gpu.memory", "operator": "Gt",
                               "values": ["80000"]},
                              {"key": "nvidia.com/gpu.clique", "operator": "DoesNotExist"}]}]})
    assert admits(pod, api_node("gpu-a", H100))
    assert not admits(pod, api_node("gpu-b", {**H100, "nvidia.com/gpu.memory": "40960"}))


def test_a_term_of_match_fields_admits_only_the_node_it_names() -> None:
    pod = api_pod({"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["gpu-b"]}]}]})
    assert admits(pod, api_node("gpu-b", H100))
    assert not admits(pod, api_node("gpu-a", H100))


def test_an_empty_term_selects_no_node() -> None:
    pod = api_pod({"nodeSelectorTerms": [{}]})
    assert not admits(pod, api_node("gpu-a", H100))


@pytest.mark.parametrize("pod", [
    api_pod(node_selector={"kubernetes.io/os": "linux"}),
    api_pod({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": ["gpu-pool"]}]}]}),
], ids=["nodeSelector kubernetes.io/os", "affinity on a node pool label"])
def test_any_node_label_can_admit_a_pod(pod: Pod) -> None:
    node = api_node("gpu-a", {**H100, "kubernetes.io/os": "linux",
                              "cloud.google.com/gke-nodepool": "gpu-pool"})
    assert admits(pod, node)


def test_not_in_on_a_node_label_excludes_the_node() -> None:
    pod = api_pod({"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "node.kubernetes.io/instance-type", "operator": "NotIn",
         "values": ["p5.48xlarge"]}]}]})
    node = api_node("gpu-a", {**H100, "node.kubernetes.io/instance-type": "p5.48xlarge"})
    assert not admits(pod, node)


# ---------------------------------------------------------------------------- node state

STATES = [
    ("a Ready, untainted, uncordoned node", {}, (), "ready", 0),
    ("a cordoned node", {"unschedulable": True}, (), "cordoned", 1),
    ("a cordoned node with the cordon's taint: one reason", {"unschedulable": True},
     (Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule"),), "cordoned", 1),
    # the scheduler reads taints, not the Ready condition (TaintToleration): a NotReady node
    # takes pods until the node lifecycle controller taints it
    ("a node not Ready, not yet tainted: still schedulable", {"ready": False}, (), "ready", 1),
    ("a node the controller tainted not-ready", {"ready": False},
     (Taint(key="node.kubernetes.io/not-ready", effect="NoSchedule"),), "not-ready", 2),
    # every pod tolerates the NoExecute twins for 300 s (DefaultTolerationSeconds admission)
    ("an unreachable NoExecute taint alone: tolerated by default", {"ready": False},
     (Taint(key="node.kubernetes.io/unreachable", effect="NoExecute"),), "ready", 1),
    ("both of the controller's unreachable taints", {"ready": False},
     (Taint(key="node.kubernetes.io/unreachable", effect="NoSchedule"),
      Taint(key="node.kubernetes.io/unreachable", effect="NoExecute")), "not-ready", 2),
    ("a not-ready taint alone", {},
     (Taint(key="node.kubernetes.io/not-ready", effect="NoSchedule"),), "not-ready", 1),
    ("a NoSchedule taint a GPU pod does not tolerate", {},
     (Taint(key="dedicated", value="ml", effect="NoSchedule"),), "tainted", 1),
    ("a NoExecute taint a GPU pod does not tolerate", {},
     (Taint(key="maintenance", effect="NoExecute"),), "tainted", 1),
    ("a PreferNoSchedule taint only scores", {},
     (Taint(key="dedicated", value="ml", effect="PreferNoSchedule"),), "ready", 0),
    ("the nvidia.com/gpu taint GPU pods tolerate", {},
     (Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),), "ready", 0),
    ("cordoned and not Ready: cordoned first, both reasons", {"unschedulable": True,
                                                             "ready": False},
     (), "cordoned", 2),
]


@pytest.mark.parametrize("fields, taints, expected, reasons",
                         [(f, t, e, r) for _, f, t, e, r in STATES],
                         ids=[n for n, *_ in STATES])
def test_a_nodes_state_for_a_gpu_pod(fields: dict[str, Any], taints: tuple[Taint, ...],
                                     expected: str, reasons: int) -> None:
    name, why = state(gpu_node(taints=taints, **fields))
    assert name == expected
    assert len(why) == reasons


def test_a_taint_reason_names_the_taint() -> None:
    _, why = state(gpu_node(taints=(Taint(key="dedicated", value="ml", effect="NoSchedule"),)))
    assert why == ["taint dedicated=ml:NoSchedule"]


def test_keys_the_user_says_gpu_pods_tolerate_are_tolerated() -> None:
    node = gpu_node(taints=(Taint(key="dedicated", value="ml", effect="NoSchedule"),
                            Taint(key="nvidia.com/gpu", effect="NoSchedule")))
    assert state(node)[0] == "tainted"
    assert state(node, ("nvidia.com/gpu", "dedicated"))[0] == "ready"
    assert state(node, ("dedicated",))[0] == "tainted"


# --------------------------------------------------------------------------- a pod's own


GPU_TAINT = Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule")


@pytest.mark.parametrize(("toleration", "tolerated"), [
    (("nvidia.com/gpu", "Exists", "", ""), True),
    (("nvidia.com/gpu", "Exists", "", "NoSchedule"), True),
    (("nvidia.com/gpu", "Exists", "", "NoExecute"), False),
    (("nvidia.com/gpu", "Equal", "present", ""), True),
    (("nvidia.com/gpu", "", "present", "NoSchedule"), True),
    (("nvidia.com/gpu", "Equal", "absent", ""), False),
    (("", "Exists", "", ""), True),
    (("other", "Exists", "", ""), False),
    (("nvidia.com/gpu", "Gt", "1", ""), False),
])
def test_a_toleration_tolerates_a_taint_as_toleratestaint_says(
        toleration: tuple[str, str, str, str], tolerated: bool) -> None:
    """k8s.io/api core/v1 ``Toleration.ToleratesTaint``: effect (empty matches all), key
    (empty with Exists matches all), then Exists, or Equal (the default) on the value."""
    assert tolerates(toleration, GPU_TAINT) is tolerated


def test_only_no_schedule_and_no_execute_taints_keep_a_pod_off() -> None:
    soft = Taint(key="x", effect="PreferNoSchedule")
    hard = Taint(key="y", effect="NoExecute")
    assert untolerated((), (soft, hard, GPU_TAINT)) == [hard, GPU_TAINT]
    assert untolerated((("y", "Exists", "", ""),), (soft, hard)) == []


def test_the_nodes_a_required_affinity_names_by_metadata_name() -> None:
    """NodeAffinity's PreFilter: the union over terms of each term's ``metadata.name In``
    intersection; any term without one lets every node through; none in common conflicts."""
    name = f"{FIELD}metadata.name"
    assert node_names(None) is None
    assert node_names(((( name, "In", ("a",)),), ((name, "In", ("b",)),))) == {"a", "b"}
    assert node_names((((name, "In", ("a",)),), (("zone", "In", ("z",)),))) is None
    assert node_names((((name, "In", ("a", "b")), (name, "In", ("b",))),)) == {"b"}
    assert node_names((((name, "In", ("a",)), (name, "In", ("b",))),)) == frozenset()
