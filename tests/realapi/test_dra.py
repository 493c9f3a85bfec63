"""`gfd selector --dra` and `gfd devices` against the real kube-apiserver: every template
gfd prints for the filters below is accepted (the server compiles and type-checks its CEL),
and the ResourceSlice written from `gfd devices`' projection of each simulated machine, with
the driver chart's DeviceClasses, is a valid object."""

from __future__ import annotations

import itertools

import pytest
from helpers.controlplane import ControlPlane

from gfd.devices import resource_slice
from gfd.dra import DEVICE_CLASSES
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.selector import Constraints, claim

_serial = itertools.count(1)

FILTERS = [Constraints(product="A100"), Constraints(product="A10"),
           Constraints(product="NVIDIA-Foo-X1.5"), Constraints(min_memory=40000),
           Constraints(family="ada-lovelace"), Constraints(min_compute="8.6"),
           Constraints(mig_profile="1g.10gb.me"),
           Constraints(product="H100", min_memory=80000, family="hopper", min_compute="9.0")]


@pytest.mark.parametrize("c", FILTERS, ids=[f"filter{i}" for i in range(len(FILTERS))])
def test_every_dra_template_is_accepted_by_the_api_server(control_plane: ControlPlane,
                                                          c: Constraints) -> None:
    template, _ = claim(c, count=2, name=f"gfd-dra-{next(_serial)}")
    template["metadata"]["namespace"] = "default"
    created = control_plane.create(template)
    try:
        request = created["spec"]["spec"]["devices"]["requests"][0]["exactly"]
        assert [s["cel"]["expression"] for s in request["selectors"]] == [
            s["cel"]["expression"] for s in
            template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"]]
    finally:
        control_plane.delete(created, wait=False)


def test_a_template_with_cel_that_does_not_compile_is_refused(
        control_plane: ControlPlane) -> None:
    template, _ = claim(Constraints(product="A10"), name="gfd-dra-bad")
    template["metadata"]["namespace"] = "default"
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = [
        {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName =="}}]
    status, body = control_plane.request(
        "POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates",
        template, expect=None)
    assert status == 422, body


@pytest.mark.parametrize("machine", sorted(set(SIMULATIONS) - {"no-gpu"}))
def test_each_machines_resource_slice_and_the_device_classes_are_valid(
        control_plane: ControlPlane, machine: str) -> None:
    for name, expression in DEVICE_CLASSES.items():
        if control_plane.get(f"/apis/resource.k8s.io/v1/deviceclasses/{name}") is None:
            control_plane.create({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                                  "metadata": {"name": name},
                                  "spec": {"selectors": [{"cel": {"expression": expression}}]}})
    rs = resource_slice(simulate(machine).snapshot, node=f"{machine}-{next(_serial)}")
    created = control_plane.create(rs)
    try:
        devices = created["spec"]["devices"]
        assert [d["name"] for d in devices] == [d["name"] for d in rs["spec"]["devices"]]
        assert devices and all(d["attributes"]["type"]["string"] in ("gpu", "mig")
                               for d in devices)
    finally:
        control_plane.delete(created, wait=False)
