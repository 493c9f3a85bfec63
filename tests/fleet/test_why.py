"""Each node judged for a pending pod as kube-scheduler's filters judge it, on hand-built
fleets: the first filter of the default profile's order that fails (default_plugins.go:
NodeUnschedulable, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, ...,
DynamicResources), every reason that filter gives, in the scheduler's words:

- ``nodeunschedulable``: "node(s) were unschedulable" (``ErrReasonUnschedulable``), unless the
  pod tolerates ``node.kubernetes.io/unschedulable:NoSchedule``;
- ``tainttoleration``: "node(s) had untolerated taint(s)" for a NoSchedule/NoExecute taint;
- ``nodeaffinity``: "node(s) didn't match Pod's node affinity/selector" (``ErrReasonPod``); its
  PreFilter pins a pod whose terms all name nodes by ``metadata.name``, the rest being
  "node(s) didn't satisfy plugin(s) [NodeAffinity]" (schedule_one.go), and terms with no name
  in common are "pod affinity terms conflict" (``errReasonConflict``);
- ``noderesources/fit.go``: "Too many pods", "Insufficient <resource>" for each resource short;
- ``dynamicresources.go``: "cannot allocate all claims", "invalid resource pools were
  encountered" (the allocator's error when it fails with an invalid pool), "resourceclaim not
  available on the node"; PreFilter "request <name>: device class <class> does not exist";
  PreEnqueue (no attempt at all) for a claim that does not exist or was not made yet.

The real scheduler's messages for the same causes: tests/realapi/test_why_scheduler.py."""

from __future__ import annotations

from collections import Counter
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

from gfd.fleet import why
from gfd.fleet.count import Index
from gfd.fleet.subject import Subject, from_pod, read


def judge(ix: Index, raw: dict[str, Any], **kw: Any) -> why.Judgement:
    return why.judge(ix, read(raw, **kw))


def counts(j: why.Judgement) -> Counter[str]:
    return Counter({g.reason: g.count for g in why.groups(j)})


def first(j: why.Judgement, name: str) -> why.Verdict:
    (found,) = [v for v in j.verdicts if v.node == name]
    return found


# --------------------------------------------------------------------------- the order


def test_each_node_counts_at_the_first_filter_it_fails_in_the_schedulers_order() -> None:
    ix = indexed(
        node("cordoned", "hgx-h100", cordoned=True,
             taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]),
        node("tainted", "hgx-h100", taints=[{"key": "dedicated", "value": "x",
                                             "effect": "NoSchedule"}],
             labels={"pool": "other"}),
        node("elsewhere", "hgx-h100", labels={"pool": "other"}, pods=0),
        node("small", "hgx-h100", labels={"pool": "gpu"}),
        node("big", "hgx-h100", labels={"pool": "gpu"}, allocatable={GPU: "16"}))
    j = judge(ix, pod("p", limits={GPU: 9}, selector={"pool": "gpu"}))
    assert [(v.node, v.filter) for v in j.verdicts] == [
        ("big", ""), ("cordoned", "NodeUnschedulable"), ("elsewhere", "NodeAffinity"),
        ("small", "NodeResourcesFit"), ("tainted", "TaintToleration")]
    assert first(j, "cordoned").reasons == (why.UNSCHEDULABLE,)
    assert first(j, "tainted").reasons == (why.UNTOLERATED,)
    assert first(j, "elsewhere").reasons == (why.AFFINITY,)
    assert first(j, "small").reasons == ("Insufficient nvidia.com/gpu",)
    assert j.fits is True and j.fits_on == ("big",)


def test_a_cordon_is_passed_by_a_pod_that_tolerates_it_and_every_taint_by_exists() -> None:
    ix = indexed(node("cordoned", "hgx-h100", cordoned=True,
                      taints=[{"key": GPU, "value": "present", "effect": "NoSchedule"}]))
    everything = [{"operator": "Exists"}]
    assert judge(ix, pod("p", limits={GPU: 1}, tolerations=everything)).fits is True
    cordon = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
               "effect": "NoSchedule"}]
    j = judge(ix, pod("p", limits={GPU: 1}, tolerations=cordon))
    assert first(j, "cordoned").filter == "TaintToleration"


def test_prefer_no_schedule_taints_keep_no_pod_off() -> None:
    ix = indexed(node("soft", "hgx-h100", taints=[{"key": "x", "effect": "PreferNoSchedule"}]))
    assert judge(ix, pod("p", limits={GPU: 1}, tolerations=())).fits is True


def test_a_node_short_of_several_resources_counts_under_each() -> None:
    ix = indexed(node("a", "hgx-h100"), node("b", "hgx-h100"))
    j = judge(ix, pod("p", limits={GPU: 9, "cpu": "100", "memory": "1Ti",
                                   "ephemeral-storage": "1Ti"}))
    assert counts(j) == {"Insufficient nvidia.com/gpu": 2, "Insufficient cpu": 2,
                         "Insufficient memory": 2, "Insufficient ephemeral-storage": 2}
    assert first(j, "a").reasons == ("Insufficient cpu", "Insufficient memory",
                                     "Insufficient ephemeral-storage",
                                     "Insufficient nvidia.com/gpu")


def test_full_pod_slots_are_too_many_pods_whatever_the_pod_asks() -> None:
    ix = indexed(node("a", "hgx-h100", pods=1), pod("there", node_name="a", limits={"cpu": 1}))
    j = judge(ix, pod("p", limits={GPU: 1}))
    assert first(j, "a").reasons == ("Too many pods",)


# --------------------------------------------------------------------------- NodeAffinity


def test_a_pod_pinned_by_name_leaves_the_other_nodes_to_the_prefilter() -> None:
    ix = indexed(*(node(n, "hgx-h100") for n in ("a", "b", "c")))
    j = judge(ix, pod("p", limits={GPU: 9}, fields=["a"]))
    assert counts(j) == {"Insufficient nvidia.com/gpu": 1, why.PINNED_ELSEWHERE: 2}
    assert why.PINNED_ELSEWHERE == "node(s) didn't satisfy plugin(s) [NodeAffinity]"


def test_terms_that_name_no_node_in_common_conflict_before_any_node() -> None:
    ix = indexed(node("a", "hgx-h100"))
    raw = pod("p", limits={GPU: 1})
    raw["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                                {"nodeSelectorTerms": [{"matchFields": [
                                                    {"key": "metadata.name", "operator": "In",
                                                     "values": ["a"]},
                                                    {"key": "metadata.name", "operator": "In",
                                                     "values": ["b"]}]}]}}}
    j = judge(ix, raw)
    assert j.pre_filter == why.PreFilter(filter="NodeAffinity",
                                         reason="pod affinity terms conflict")
    assert why.groups(j) == [] and j.fits is False


def test_the_affinity_words_show_the_label_the_node_has_beside_the_one_asked() -> None:
    ix = indexed(node("single", "dgx-a100-mig-single", strategy="single"),
                 node("shared", "t4-time-sliced", sharing="ts4"))
    j = judge(ix, pod("p", limits={GPU: 1},
                      selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}))
    words = dict(first(j, "single").details)[why.AFFINITY]
    assert "'NVIDIA-A100-SXM4-40GB-MIG-1g.5gb'" in words and "-MIG-<profile>" in words
    words = dict(first(j, "shared").details)[why.AFFINITY]
    assert "'Tesla-T4-SHARED'" in words and "-SHARED" in words


# --------------------------------------------------------------------------- resources


def test_the_gpu_words_name_what_the_node_offers_instead_and_who_holds_the_units() -> None:
    ix = indexed(node("mixed", "dgx-a100-mig-mixed", strategy="mixed"),
                 pod("holder", node_name="mixed", limits={GPU: 3}), device_classes())
    j = judge(ix, pod("p", limits={GPU: 2}))
    words = dict(first(j, "mixed").details)["Insufficient nvidia.com/gpu"]
    assert "asks 2, 4 allocatable, 1 free (taken by ml/holder)" in words
    assert "nvidia.com/mig-1g.5gb (8)" in words


def test_a_device_plugin_that_is_down_is_named_from_the_labels() -> None:
    ix = indexed(node("down", "hgx-h100", allocatable={GPU: "0"}), device_classes(False))
    j = judge(ix, pod("p", limits={GPU: 1}))
    words = dict(first(j, "down").details)["Insufficient nvidia.com/gpu"]
    assert "nvidia.com/gpu.count=8" in words and "device plugin running" in words
    # with the DRA driver's chart, nvidia.com/gpu is claimed through its class there
    ix = indexed(node("down", "hgx-h100", allocatable={GPU: "0"}), device_classes())
    j = judge(ix, pod("p", limits={GPU: 1}))
    words = dict(first(j, "down").details)[why.CANNOT_ALLOCATE]
    assert "nvidia.com/gpu.count=8" in words and "device plugin running" in words


def test_on_a_node_of_two_models_nvidia_com_gpu_is_any_of_them() -> None:
    ix = indexed(node("two", "mixed-a100-a10"))
    j = judge(ix, pod("p", limits={GPU: 4}))
    words = dict(first(j, "two").details)["Insufficient nvidia.com/gpu"]
    assert "NVIDIA-A10 + NVIDIA-A100-80GB-PCIe" in words and "more than the node has" in words


def test_a_sidecar_adds_to_the_containers_and_an_init_container_runs_alone() -> None:
    ix = indexed(node("a", "hgx-h100"))
    assert judge(ix, pod("p", limits={GPU: 8}, init=[({GPU: 1}, True)])).fits is False
    assert judge(ix, pod("p", limits={GPU: 8}, init=[({GPU: 1}, False)])).fits is True
    assert judge(ix, pod("p", limits={GPU: 1}, init=[({GPU: 9}, False)])).fits is False


# --------------------------------------------------------------------------- DRA


def dra_fleet(*more: Any, extended: bool = True) -> Index:
    return indexed(node("dra", "hgx-h100", manager="dra"), slices("dra", "hgx-h100"),
                   node("plain"), device_classes(extended), *more)


def test_an_extended_resource_a_class_serves_is_claimed_where_a_node_has_none() -> None:
    ix = dra_fleet()
    j = judge(ix, pod("p", limits={GPU: 9}))
    assert counts(j) == {why.CANNOT_ALLOCATE: 2}
    words = dict(first(j, "plain").details)[why.CANNOT_ALLOCATE]
    assert "the node has no DRA devices" in words
    assert judge(ix, pod("p", limits={GPU: 8})).fits_on == ("dra",)


def test_without_a_class_serving_it_a_node_without_the_resource_is_insufficient() -> None:
    ix = dra_fleet(extended=False)
    j = judge(ix, pod("p", limits={GPU: 1}))
    assert counts(j) == {"Insufficient nvidia.com/gpu": 2}


def test_a_selector_no_device_meets_names_the_value_the_devices_have() -> None:
    cel = "device.attributes['gpu.nvidia.com'].productName == 'H100'"
    ix = dra_fleet(claim("c", request(selectors=[cel])))
    j = judge(ix, pod("p", claims=["c"], hosts=["dra"]))
    assert first(j, "dra").reasons == (why.CANNOT_ALLOCATE,)
    words = " ".join(w for _, w in first(j, "dra").details)
    assert "0 meeting its selectors" in words and "'NVIDIA H100 80GB HBM3'" in words


def test_claims_that_fit_alone_may_not_fit_together() -> None:
    ix = dra_fleet(claim("a", request(count=5)), claim("b", request(count=4)))
    assert judge(ix, pod("p", claims=["a"], hosts=["dra"])).fits is True
    assert judge(ix, pod("p", claims=["b"], hosts=["dra"])).fits is True
    j = judge(ix, pod("p", claims=["a", "b"], hosts=["dra"]))
    assert first(j, "dra").reasons == (why.CANNOT_ALLOCATE,)


def test_a_claim_allocated_on_another_node_is_not_available_on_this_one() -> None:
    ix = dra_fleet(node("other", "hgx-h100", manager="dra"), slices("other", "hgx-h100"),
                   claim("shared", node_name="dra", devices=["gpu-0"], reserved=["first"]))
    j = judge(ix, pod("p", claims=["shared"], tolerations=()))
    assert first(j, "other").reasons == (why.NOT_AVAILABLE,)
    assert first(j, "plain").reasons == (why.NOT_AVAILABLE,)
    assert first(j, "dra").fits


def test_whole_gpus_held_consume_the_counters_a_mig_partition_needs() -> None:
    ix = indexed(node("dyn", "h100-mig", manager="dra"),
                 slices("dyn", "h100-mig", dynamic_mig=True), device_classes(),
                 claim("whole", request(count=2), node_name="dyn", devices=["gpu-0", "gpu-1"]))
    profile = "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"
    j = judge(ix, pod("p", claims=["mig"]), given=[
        claim("mig", request("mig.nvidia.com", selectors=[profile]))])
    assert first(j, "dyn").reasons == (why.CANNOT_ALLOCATE,)
    words = " ".join(w for _, w in first(j, "dyn").details)
    assert "shared counters are consumed by gpu-0 (claim ml/whole)" in words
    later = why.later(ix, j)
    assert [(x.node, x.held_by) for x in later] == [("dyn", ("claim ml/whole",))]


def test_an_invalid_pool_changes_the_reason_when_allocation_fails() -> None:
    (rs,) = slices("bad", "geforce-laptop")
    rs["spec"]["pool"]["resourceSliceCount"] = 2
    twin = {**rs, "metadata": {"name": "twin"}}
    ix = indexed(node("bad", "geforce-laptop", manager="dra"), rs, twin, device_classes())
    j = judge(ix, pod("p", claims=["c"]), given=[claim("c")])
    assert first(j, "bad").reasons == (why.INVALID_POOLS,)


def test_a_missing_class_is_rejected_before_any_node() -> None:
    ix = dra_fleet(claim("c", request("nope.example.com")))
    j = judge(ix, pod("p", claims=["c"]))
    assert j.pre_filter == why.PreFilter(
        filter="DynamicResources", reason="request gpu: device class nope.example.com does "
                                          "not exist")


def test_a_claim_not_yet_made_or_not_there_is_never_tried() -> None:
    ix = dra_fleet()
    j = judge(ix, pod("p", templates=["t"]))
    assert j.pre_filter == why.PreFilter(filter="DynamicResources", tried=False,
                                         reason='pod "ml/p": ResourceClaim not created yet')
    j = judge(ix, pod("p", claims=["gone"]))
    assert j.pre_filter is not None and not j.pre_filter.tried
    assert j.pre_filter.reason == 'resourceclaim.resource.k8s.io "gone" not found'


def test_a_template_given_or_fetched_stands_for_the_claim_it_will_make() -> None:
    ix = dra_fleet()
    j = judge(ix, pod("p", templates=["t"]), given=[template("t", request(count=9))])
    assert first(j, "dra").reasons == (why.CANNOT_ALLOCATE,)
    j = judge(ix, pod("p", templates=["t"]), fetched=[template("t", request(count=2))])
    assert j.fits_on == ("dra",)


# --------------------------------------------------------------------------- not judged


def test_a_host_port_makes_every_node_that_reaches_node_ports_not_judged() -> None:
    ix = indexed(node("a", "hgx-h100"), node("off", "hgx-h100", cordoned=True))
    raw = pod("p", limits={GPU: 9})
    raw["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    j = judge(ix, raw)
    assert first(j, "off").filter == "NodeUnschedulable"
    verdict = first(j, "a")
    assert (verdict.filter, verdict.reasons, verdict.judged) == (
        "NodePorts", (why.NOT_JUDGED,), False)
    assert "beyond it: Insufficient nvidia.com/gpu" in verdict.details[0][1]
    assert j.fits is None


def test_a_persistent_volume_leaves_the_nodes_that_pass_resources_not_judged() -> None:
    ix = indexed(node("a", "hgx-h100"))
    raw = pod("p", limits={GPU: 1}, extra={"volumes": [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]})
    j = judge(ix, raw)
    assert first(j, "a").filter == "VolumeRestrictions" and j.fits is None


# --------------------------------------------------------------------------- groups


def test_groups_come_in_filter_order_and_the_largest_is_the_one_line_reason() -> None:
    ix = indexed(node("c", "hgx-h100", cordoned=True), node("a", "hgx-h100"),
                 node("b", "hgx-h100"))
    j = judge(ix, pod("p", limits={GPU: 9}))
    assert [(g.filter, g.reason, g.nodes) for g in why.groups(j)] == [
        ("NodeUnschedulable", why.UNSCHEDULABLE, ("c",)),
        ("NodeResourcesFit", "Insufficient nvidia.com/gpu", ("a", "b"))]
    largest = why.largest(j)
    assert largest is not None and largest.count == 2


def test_a_pending_pod_as_the_fleet_holds_it_is_judged_the_same() -> None:
    raw = pod("p", limits={GPU: 9})
    ix = indexed(node("a", "hgx-h100"), raw)
    (held,) = ix.pending
    assert counts(why.judge(ix, from_pod(held))) == counts(judge(ix, raw))


def test_units_nominated_to_a_node_are_held_against_pods_of_no_higher_priority() -> None:
    ix = indexed(node("a", "hgx-h100"), pod("preemptor", limits={GPU: 8}, nominated="a",
                                            priority=100))
    assert judge(ix, pod("p", limits={GPU: 1})).fits is False
    assert judge(ix, pod("p", limits={GPU: 1}, priority=1000)).fits is True


def test_the_pod_itself_is_never_counted_against_itself() -> None:
    raw = pod("p", limits={GPU: 8}, nominated="a")
    ix = indexed(node("a", "hgx-h100"), raw)
    assert judge(ix, raw).fits is True


@pytest.mark.parametrize(("resource", "value", "shown"), [
    ("cpu", 1500, "1500m"), ("cpu", 4000, "4"), ("memory", 2**40, "1Ti"),
    ("memory", 1000, "1000"), ("nvidia.com/gpu", 3, "3")])
def test_amounts_are_shown_as_a_person_reads_them(resource: str, value: int,
                                                  shown: str) -> None:
    assert why.amount(resource, value) == shown


def test_a_pod_asking_no_gpu_is_named_as_such() -> None:
    ix = indexed(node("a", "hgx-h100"))
    assert not why.asks_gpu(read(pod("p", limits={"cpu": 1})))
    assert why.asks_gpu(read(pod("p", limits={GPU: 1})))
    subject: Subject = read(pod("p", claims=["c"]))
    assert why.asks_gpu(subject, why.resolve(dra_fleet(claim("c")), subject)[0],
                        ix.classes.by_name)



def test_a_gated_pod_or_one_for_another_scheduler_is_not_tried() -> None:
    ix = indexed(node("a", "hgx-h100"))
    gated = pod("p", limits={GPU: 1}, extra={"schedulingGates": [{"name": "example.com/q"}]})
    assert judge(ix, gated).pre_filter == why.PreFilter(
        filter="SchedulingGates", tried=False,
        reason="Scheduling is blocked due to non-empty scheduling gates")
    other = pod("p", limits={GPU: 1}, extra={"schedulerName": "volcano"})
    found = judge(ix, other).pre_filter
    assert found is not None and not found.tried and "volcano" in found.reason
