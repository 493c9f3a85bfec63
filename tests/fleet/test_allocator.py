"""A pod's unallocated claims allocated together on one node, as the DRA allocator does it
(k8s.io/dynamic-resource-allocation/structured, ``allocator_incubating.go``): devices taken
by one request are not free for another, counters consumed by allocated devices and by the
ones taken before are not free either, incomplete and invalid pools are skipped, ``All`` wants
every selectable device and at least one, ``firstAvailable`` the first subrequest that lets
the rest be met, a NoSchedule or NoExecute device taint needs a toleration, ``adminAccess``
may use a device in use; an undecided selector or a claim's constraints answer "cannot tell"
unless the claims fail even so."""

from __future__ import annotations

from typing import Any

from helpers.whyobjects import claim, device_classes, indexed, node, request, slices

from gfd.fleet import allocator
from gfd.fleet.count import Index
from gfd.fleet.model import Claim, claim_of

PROFILE = "device.attributes['gpu.nvidia.com'].profile == '{}'"


def h100(*more: Any) -> Index:
    return indexed(node("n", "hgx-h100", manager="dra"), slices("n", "hgx-h100"),
                   device_classes(), *more)


def claims(*raw: dict[str, Any]) -> list[Claim]:
    return [claim_of(r) for r in raw]


def allocated(ix: Index, *raw: dict[str, Any]) -> bool | None:
    return allocator.allocate(ix, "n", claims(*raw)).allocated


def test_claims_are_allocated_together_from_what_no_allocation_holds() -> None:
    ix = h100(claim("held", request(count=3), node_name="n", devices=["gpu-0", "gpu-1",
                                                                       "gpu-2"]))
    assert allocated(ix, claim("a", request(count=5))) is True
    assert allocated(ix, claim("a", request(count=6))) is False
    assert allocated(ix, claim("a", request(count=2)), claim("b", request(count=3))) is True
    assert allocated(ix, claim("a", request(count=3)), claim("b", request(count=3))) is False


def test_the_allocation_found_names_each_claims_devices() -> None:
    found = allocator.allocate(h100(), "n", claims(claim("a", request(count=2))))
    assert [who for who, _ in found.devices] == ["ml/a", "ml/a"]
    assert len({key for _, key in found.devices}) == 2


def test_two_requests_of_one_claim_take_different_devices() -> None:
    both = claim("a", request(count=4, name="x"), request(count=4, name="y"))
    assert allocated(h100(), both) is True
    assert allocated(h100(), claim("a", request(count=5, name="x"),
                                   request(count=4, name="y"))) is False


def test_all_wants_every_selectable_device_free_and_at_least_one() -> None:
    ix = h100(claim("held", node_name="n", devices=["gpu-0"]))
    assert allocated(h100(), claim("a", request(mode="All"))) is True
    assert allocated(ix, claim("a", request(mode="All"))) is False
    assert allocated(h100(), claim("a", request("mig.nvidia.com", mode="All"))) is False


def test_first_available_takes_the_first_subrequest_the_rest_allows() -> None:
    ix = h100()
    prioritized = {"name": "gpu", "firstAvailable": [
        {"name": "many", "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
         "count": 9},
        {"name": "few", "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
         "count": 4}]}
    assert allocated(ix, claim("a", prioritized)) is True
    assert allocated(ix, claim("a", prioritized), claim("b", request(count=5))) is False
    assert allocated(ix, claim("a", prioritized), claim("b", request(count=4))) is True


def test_a_device_taint_needs_a_toleration_of_the_request() -> None:
    (rs,) = slices("n", "geforce-laptop")
    for device in rs["spec"]["devices"]:
        device["taints"] = [{"key": "maint", "value": "x", "effect": "NoSchedule"}]
    ix = indexed(node("n", "geforce-laptop", manager="dra"), rs, device_classes())
    assert allocated(ix, claim("a")) is False
    tolerated = request(tolerations=[{"key": "maint", "operator": "Exists"}])
    assert allocated(ix, claim("a", tolerated)) is True
    no_execute_only = request(tolerations=[{"key": "maint", "operator": "Exists",
                                            "effect": "NoExecute"}])
    assert allocated(ix, claim("a", no_execute_only)) is False


def test_admin_access_may_use_a_device_in_use() -> None:
    (rs,) = slices("n", "geforce-laptop")
    ix = indexed(node("n", "geforce-laptop", manager="dra"), rs, device_classes(),
                 claim("held", node_name="n", devices=["gpu-0"]))
    assert allocated(ix, claim("a")) is False
    assert allocated(ix, claim("a", request(admin=True))) is True


def test_partitions_share_their_gpus_counters() -> None:
    ix = indexed(node("n", "h100-mig", manager="dra"),
                 slices("n", "h100-mig", dynamic_mig=True), device_classes())
    seven = request("mig.nvidia.com", selectors=[PROFILE.format("7g.80gb")])
    three = request("mig.nvidia.com", selectors=[PROFILE.format("3g.40gb")], name="three")
    assert allocated(ix, claim("a", {**seven, "exactly": {**seven["exactly"], "count": 2}})) \
        is True
    assert allocated(ix, claim("a", {**seven, "exactly": {**seven["exactly"], "count": 2}}),
                     claim("b", three)) is False
    assert allocated(ix, claim("a", seven), claim("b", {**three, "exactly": {
        **three["exactly"], "count": 2}})) is True
    assert allocated(ix, claim("a", request(count=2)), claim("b", three)) is False


def test_an_incomplete_pool_is_skipped_and_an_invalid_one_named() -> None:
    (rs,) = slices("n", "geforce-laptop")
    rs["spec"]["pool"]["resourceSliceCount"] = 2
    ix = indexed(node("n", "geforce-laptop", manager="dra"), rs, device_classes())
    found = allocator.allocate(ix, "n", claims(claim("a")))
    assert (found.allocated, found.invalid) == (False, "")
    twin = {**rs, "metadata": {"name": "twin"}}
    ix = indexed(node("n", "geforce-laptop", manager="dra"), rs, twin, device_classes())
    found = allocator.allocate(ix, "n", claims(claim("a")))
    assert (found.allocated, found.invalid) == (False, "duplicate device name gpu-0")


def test_an_undecided_selector_is_cannot_tell_unless_nothing_could_fit() -> None:
    # the url library is one gfd does not evaluate: the CEL's answer cannot be told
    undecided = ("device.attributes['gpu.nvidia.com'].productName == "
                 "url('https://nvidia.com').getHost()")
    ix = h100()
    assert allocated(ix, claim("a", request(selectors=[undecided]))) is None
    assert allocated(ix, claim("a", request(count=9, selectors=[undecided]))) is False


def test_constraints_are_not_evaluated_and_not_guessed() -> None:
    raw = claim("a", request(count=2))
    raw["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/productName"}]
    found = allocator.allocate(h100(), "n", claims(raw))
    assert found.allocated is None and "constraints" in found.why_not_told
    raw = claim("a", request(count=9))
    raw["spec"]["devices"]["constraints"] = [{"matchAttribute": "gpu.nvidia.com/productName"}]
    assert allocator.allocate(h100(), "n", claims(raw)).allocated is False


def test_a_node_without_devices_allocates_nothing() -> None:
    ix = indexed(node("n"), device_classes())
    assert allocated(ix, claim("a")) is False
    assert allocator.allocate(ix, "n", []).allocated is True
