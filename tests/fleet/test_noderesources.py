"""``NodeResourcesFit`` for one pod on one node (kube-scheduler ``noderesources/fit.go``,
``fitsRequest``): one pod more than ``pods`` allocatable is "Too many pods"; CPU, memory and
ephemeral storage are compared only when asked; every scalar resource asked (extended,
hugepages) is "Insufficient <name>" when more than allocatable less what the node's pods
take (bound and unfinished, nominated of at least the pod's priority, never the pod itself);
an extended resource a DeviceClass serves is left to DRA where the node has none or 0."""

from __future__ import annotations

from helpers.whyobjects import GPU, device_classes, indexed, node, pod

from gfd.fleet import noderesources
from gfd.fleet.count import Index


def shorts(ix: Index, name: str, requests: dict[str, int], **kw: object) -> list[str]:
    return [s.reason for s in noderesources.insufficient(ix, ix.fleet.nodes[name], requests,
                                                         **kw)]  # type: ignore[arg-type]


def test_the_reasons_are_the_schedulers_words_in_its_order() -> None:
    ix = indexed(node("a", "hgx-h100", pods=0))
    assert shorts(ix, "a", {GPU: 9, "cpu": 100_000, "memory": 2**41,
                            "ephemeral-storage": 2**50, "hugepages-2Mi": 2**21}) == [
        "Too many pods", "Insufficient cpu", "Insufficient memory",
        "Insufficient ephemeral-storage", "Insufficient hugepages-2Mi",
        "Insufficient nvidia.com/gpu"]


def test_what_the_nodes_pods_take_is_not_free_whether_they_ask_for_gpus_or_not() -> None:
    ix = indexed(node("a", "hgx-h100", cpu="4", pods=3),
                 pod("gpu", node_name="a", limits={GPU: 6, "cpu": "1"}),
                 pod("web", node_name="a", limits={"cpu": "2"}),
                 pod("done", node_name="a", limits={"cpu": "4", GPU: 2}, phase="Succeeded"))
    assert shorts(ix, "a", {GPU: 2, "cpu": 1000}) == []
    assert shorts(ix, "a", {GPU: 3}) == ["Insufficient nvidia.com/gpu"]
    assert shorts(ix, "a", {"cpu": 1001}) == ["Insufficient cpu"]
    found = noderesources.insufficient(ix, ix.fleet.nodes["a"], {GPU: 3})
    assert (found[0].free, found[0].holders) == (2, ("ml/gpu",))
    full = indexed(node("a", pods=2), pod("x", node_name="a"), pod("y", node_name="a"))
    assert shorts(full, "a", {}) == ["Too many pods"]


def test_a_resource_the_node_lacks_is_zero_allocatable() -> None:
    ix = indexed(node("a"), device_classes(extended=False))
    assert shorts(ix, "a", {"example.com/fpga": 1}) == ["Insufficient example.com/fpga"]
    assert shorts(ix, "a", {"unprefixed": 1}) == []


def test_an_extended_resource_a_class_serves_is_left_to_dra_where_the_node_has_none() -> None:
    ix = indexed(node("a"), node("zero", allocatable={GPU: "0"}), node("some", "hgx-h100"),
                 device_classes())
    assert shorts(ix, "a", {GPU: 1}) == []
    assert shorts(ix, "zero", {GPU: 1}) == []
    assert shorts(ix, "some", {GPU: 9}) == ["Insufficient nvidia.com/gpu"]


def test_nominated_pods_hold_against_pods_of_no_higher_priority_and_not_against_self() -> None:
    waiting = pod("w", limits={GPU: 8}, nominated="a", priority=10)
    ix = indexed(node("a", "hgx-h100"), waiting)
    assert shorts(ix, "a", {GPU: 1}, priority=10) == ["Insufficient nvidia.com/gpu"]
    assert shorts(ix, "a", {GPU: 1}, priority=11) == []
    (me,) = ix.pending
    assert shorts(ix, "a", {GPU: 8}, pod=me, priority=10) == []
