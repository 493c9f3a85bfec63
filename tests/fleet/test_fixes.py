"""The smallest change that binds a pending pod now, found by judging the changed pod again
(never by reasoning about the change), and written as RFC 7386 JSON merge patches: a
toleration of the GPU taint, a corrected node-selector value, another GPU resource name, a
CEL selector that matches, a device toleration, a smaller count; none where freeing the
units the pod's nodes hold would do (then it waits: ``why.later``)."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.whyobjects import (
    GPU,
    claim,
    device_classes,
    indexed,
    node,
    pod,
    request,
    slices,
    template,
)

from gfd.fleet import fixes, why
from gfd.fleet.count import Index
from gfd.fleet.subject import read

# RFC 7386, Appendix A: (target, patch, result)
RFC_EXAMPLES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "result"), RFC_EXAMPLES)
def test_a_merge_patch_applies_as_rfc_7386_says(target: Any, patch: Any, result: Any) -> None:
    assert fixes.apply_patch(target, patch) == result


@pytest.mark.parametrize(("before", "after"), [
    ({"spec": {"a": 1, "b": [1, 2]}}, {"spec": {"a": 1, "b": [1, 2, 3]}}),
    ({"spec": {"a": 1, "b": 2}}, {"spec": {"a": 1}}),
    ({"x": {"y": {"z": 1}}}, {"x": {"y": {"z": 2}, "w": "new"}}),
])
def test_the_patch_written_turns_the_manifest_into_the_changed_one(
        before: dict[str, Any], after: dict[str, Any]) -> None:
    patch = fixes.merge_patch(before, after)
    assert fixes.apply_patch(before, patch) == after
    assert fixes.merge_patch(after, after) == {}


def fix_of(ix: Index, raw: dict[str, Any], **kw: Any) -> fixes.Fix | None:
    judgement = why.judge(ix, read(raw, **kw))
    assert judgement.fits is False
    return fixes.find(ix, judgement)


def test_the_gpu_taint_is_tolerated() -> None:
    ix = indexed(node("a", "hgx-h100", taints=[{"key": GPU, "value": "present",
                                                "effect": "NoSchedule"}]), device_classes())
    found = fix_of(ix, pod("p", limits={GPU: 1}, tolerations=()))
    assert found is not None and found.nodes == ("a",)
    assert found.patch == {"spec": {"tolerations": [
        {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]}}


def test_another_taint_is_not_tolerated_for_the_user() -> None:
    ix = indexed(node("a", "hgx-h100", taints=[{"key": "dedicated", "value": "x",
                                                "effect": "NoSchedule"}]), device_classes())
    assert fix_of(ix, pod("p", limits={GPU: 1})) is None


@pytest.mark.parametrize(("machine", "strategy", "sharing", "asked", "value"), [
    ("t4-time-sliced", "none", "ts4", "Tesla-T4", "Tesla-T4-SHARED"),
    ("dgx-a100-mig-single", "single", "none", "NVIDIA-A100-SXM4-40GB",
     "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
    ("hgx-h100", "none", "none", "NVIDIA-H100", "NVIDIA-H100-80GB-HBM3"),
])
def test_a_selector_value_is_corrected_to_the_one_the_nodes_carry(
        machine: str, strategy: str, sharing: str, asked: str, value: str) -> None:
    ix = indexed(node("a", machine, strategy=strategy, sharing=sharing), device_classes())
    found = fix_of(ix, pod("p", limits={GPU: 1}, selector={"nvidia.com/gpu.product": asked}))
    assert found is not None
    assert found.patch == {"spec": {"nodeSelector": {"nvidia.com/gpu.product": value}}}
    assert value in found.summary and asked in found.summary


@pytest.mark.parametrize(("machine", "strategy", "sharing", "resource"), [
    ("h100-mig", "mixed", "none", "nvidia.com/mig-1g.10gb.me"),
    ("geforce-laptop", "none", "ts4-renamed", "nvidia.com/gpu.shared"),
])
def test_another_resource_name_the_node_advertises_is_asked(
        machine: str, strategy: str, sharing: str, resource: str) -> None:
    ix = indexed(node("a", machine, strategy=strategy, sharing=sharing), device_classes())
    found = fix_of(ix, pod("p", limits={GPU: 1}))
    assert found is not None and f"request {resource} instead of {GPU}" == found.summary
    (container,) = found.manifest["spec"]["containers"]
    assert container["resources"]["limits"] == {resource: "1"}
    assert list(found.patch["spec"]) == ["containers"]  # a list: replaced whole


def test_a_count_no_node_has_becomes_the_most_one_node_gives_and_a_sidecar_keeps_its_own() -> None:
    ix = indexed(node("a", "hgx-h100"), device_classes())
    found = fix_of(ix, pod("p", limits={GPU: 8}, init=[({GPU: 1}, True)]))
    assert found is not None and found.summary.startswith("ask 8 nvidia.com/gpu in all")
    spec = found.manifest["spec"]
    assert spec["containers"][0]["resources"]["limits"] == {GPU: "7"}
    assert spec["initContainers"][0]["resources"]["limits"] == {GPU: "1"}


def test_no_count_is_offered_where_the_pod_fits_once_units_free_up() -> None:
    ix = indexed(node("a", "hgx-h100"), pod("holder", node_name="a", limits={GPU: 4}),
                 device_classes())
    raw = pod("p", limits={GPU: 6})
    assert fix_of(ix, raw) is None
    later = why.later(ix, why.judge(ix, read(raw)))
    assert [(x.node, x.held_by) for x in later] == [("a", ("pod ml/holder",))]


def dra() -> Index:
    return indexed(node("d", "hgx-h100", manager="dra"), slices("d", "hgx-h100"),
                   device_classes())


def test_a_product_selector_of_too_few_words_becomes_the_selectors_cel() -> None:
    cel = "device.attributes['gpu.nvidia.com'].productName == 'H100'"
    given = claim("c", request(selectors=[cel]))
    found = fix_of(dra(), pod("p", claims=["c"]), given=[given])
    assert found is not None and found.patch == {}
    (changed,) = found.objects
    expression = changed["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"][
        "expression"]
    assert expression == ("device.attributes['gpu.nvidia.com'].productName.lowerAscii()"
                          ".matches('(^|[- ])h100($|[- ])')")


def test_a_template_count_too_large_for_any_node_is_lowered_in_the_template() -> None:
    found = fix_of(dra(), pod("p", templates=["t"]), given=[template("t", request(count=9))])
    assert found is not None
    (changed,) = found.objects
    assert changed["kind"] == "ResourceClaimTemplate"
    assert changed["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 8


def test_tainted_devices_are_tolerated_in_the_claim() -> None:
    (rs,) = slices("d", "geforce-laptop")
    rs["spec"]["devices"][0]["taints"] = [{"key": "maint", "value": "x",
                                           "effect": "NoSchedule"}]
    ix = indexed(node("d", "geforce-laptop", manager="dra"), rs, device_classes())
    found = fix_of(ix, pod("p", claims=["c"]), given=[claim("c")])
    assert found is not None
    (changed,) = found.objects
    assert changed["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] == [
        {"key": "maint", "operator": "Exists", "effect": "NoSchedule"}]


def test_a_fix_may_need_a_toleration_and_another_change() -> None:
    ix = indexed(node("a", "t4-time-sliced", sharing="ts4",
                      taints=[{"key": GPU, "effect": "NoSchedule"}]), device_classes())
    found = fix_of(ix, pod("p", limits={GPU: 1}, tolerations=(),
                           selector={"nvidia.com/gpu.product": "Tesla-T4"}))
    assert found is not None
    assert set(found.patch["spec"]) == {"tolerations", "nodeSelector"}


def test_the_changed_manifest_leaves_out_what_the_api_server_writes() -> None:
    raw = pod("p", limits={GPU: 1})
    raw["metadata"] |= {"resourceVersion": "7", "creationTimestamp": "now",
                        "managedFields": [], "annotations": {
                            "kubectl.kubernetes.io/last-applied-configuration": "{}"}}
    cleaned = fixes.clean(raw)
    assert "status" not in cleaned
    assert set(cleaned["metadata"]) == {"name", "namespace"}
