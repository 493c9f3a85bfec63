"""`gfd why`'s document (``apiVersion: gfd/v1``, ``kind: Why``: docs/why.md's schema, each key
kept), its text (what the pod asks, the groups in filter order with a few nodes each and the
rest with ``-o wide``, the fix as words and a merge patch), a bound pod in one line, and
`gfd fleet --pending`'s rows (each pending GPU pod and its largest group)."""

from __future__ import annotations

from helpers.whyobjects import GPU, device_classes, fleet, node, pod

from gfd.fleet import whyreport
from gfd.fleet.count import Index, index
from gfd.fleet.model import Fleet
from gfd.fleet.subject import read

KEYS = ["apiVersion", "kind", "source", "complete", "incomplete", "skipped", "pod", "bound",
        "gpu", "fits", "nodes", "fitsOn", "asks", "notJudged", "preFilter", "groups", "fix",
        "later"]
ASKS = ["requests", "resources", "containers", "claims", "extendedResources", "nodeSelector",
        "affinity", "tolerations", "priority"]


def setup() -> tuple[Fleet, Index]:
    f = fleet(*(node(f"h{i}", "hgx-h100") for i in range(5)),
              node("t", "hgx-h100", taints=[{"key": GPU, "effect": "NoSchedule"}]),
              device_classes())
    return f, index(f)


def test_the_document_has_the_documented_keys_in_order() -> None:
    f, ix = setup()
    a = whyreport.answer(ix, read(pod("p", limits={GPU: 9, "cpu": "2"})))
    doc = whyreport.document(f, ix, a)
    assert list(doc) == KEYS and list(doc["asks"]) == ASKS
    assert (doc["apiVersion"], doc["kind"], doc["fits"], doc["nodes"]) == ("gfd/v1", "Why",
                                                                           False, 6)
    assert doc["asks"]["requests"] == {GPU: 9} and doc["asks"]["resources"] == {"cpu": "2"}
    (group,) = doc["groups"]
    assert list(group) == ["filter", "schedulerReason", "count", "nodes", "explanation"]
    assert (group["filter"], group["schedulerReason"], group["count"]) == (
        "NodeResourcesFit", "Insufficient nvidia.com/gpu", 6)
    assert doc["fix"]["summary"].startswith("ask 8 nvidia.com/gpu")
    assert list(doc["fix"]) == ["summary", "patch", "objects", "nodes", "manifest"]


def test_the_text_shows_a_few_nodes_per_group_and_all_with_wide() -> None:
    f, ix = setup()
    a = whyreport.answer(ix, read(pod("p", limits={GPU: 9})))
    text = whyreport.text(f, ix, a)
    assert text.startswith("pod ml/p: 0/6 nodes can take it now\nasks:\n  nvidia.com/gpu: 9\n")
    assert "  6 Insufficient nvidia.com/gpu   (NodeResourcesFit)\n" in text
    assert "... 3 more (-o wide)" in text
    assert "fix: ask 8 nvidia.com/gpu in all" in text and "merge patch: {" in text
    wide = whyreport.text(f, ix, a, wide=True)
    assert "more (-o wide)" not in wide and wide.count("    h") == 5


def test_a_bound_pod_is_one_line() -> None:
    f, ix = setup()
    a = whyreport.answer(ix, read(pod("p", limits={GPU: 1}, node_name="h1")))
    assert whyreport.text(f, ix, a) == "pod ml/p: bound to node h1\n"
    doc = whyreport.document(f, ix, a)
    assert (doc["bound"], doc["fits"], doc["groups"]) == ("h1", True, [])


def test_a_pod_asking_no_gpu_says_so_and_names_no_gpu_reason() -> None:
    f, ix = setup()
    a = whyreport.answer(ix, read(pod("p", limits={"cpu": "100"})))
    text = whyreport.text(f, ix, a)
    assert "  no GPU (nothing below is a GPU reason)\n" in text
    assert "Insufficient cpu   (NodeResourcesFit) (not a GPU reason)" in text


def test_pending_rows_name_each_pending_gpu_pods_largest_group() -> None:
    f = fleet(node("a", "hgx-h100"), node("b", "hgx-h100"), node("c", "hgx-h100", cordoned=True),
              pod("big", limits={GPU: 9}), pod("small", limits={GPU: 1}),
              pod("web", limits={"cpu": "1"}), device_classes())
    rows = whyreport.pending(index(f))
    assert [(r.name, r.reason) for r in rows] == [
        ("big", "2/3 Insufficient nvidia.com/gpu (NodeResourcesFit)"),
        ("small", "fits now (not yet scheduled)")]
    text = whyreport.pending_text(rows)
    assert text.splitlines()[0].split() == ["POD", "ASKS", "WHY", "(the", "most", "nodes)"]
    assert rows[0].to_api()["reason"]["count"] == 2
