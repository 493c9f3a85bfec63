"""`gfd selector --dra` and `gfd devices` against the real kube-apiserver: every document gfd
prints for the filters below (the template, the example Pod) passes a server-side dry run
(the server compiles its CEL and checks its cost),
and the ResourceSlice written from `gfd devices`' projection of each simulated machine, with
the driver chart's DeviceClasses, is a valid object -- under PassthroughSupport too, its
passthrough devices (a GPU bound to vfio-pci among them) included."""

from __future__ import annotations

import itertools

import pytest
from helpers.controlplane import ControlPlane

from gfd.devices import resource_slice, resource_slices
from gfd.dra import DEVICE_CLASSES, PASSTHROUGH_SUPPORT
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.selector import Options, render

_serial = itertools.count(1)

FILTERS: list[tuple[dict[str, object], str, str]] = [
    ({"product": "A100"}, "extended", ""), ({"product": "A10"}, "compat", ""),
    ({"product": "A100-80GB"}, "extended", ""), ({"product": "NVIDIA-Foo-X1.5"}, "extended", ""),
    ({"product": "RTX-PRO-6000", "min_memory": 90000}, "compat", ""),
    ({"min_memory": 40000}, "extended", ""), ({"family": "ada-lovelace"}, "extended", ""),
    ({"min_compute": "8.6"}, "compat", ""), ({"mig_profile": "1g.10gb.me"}, "extended", ""),
    ({"mig_profile": "3g.40gb", "min_memory": 40000}, "extended", "DynamicMIG=true"),
    ({"mig_profile": "1g.10gb"}, "compat", "DynamicMIG=true"),
    ({"product": "A100"}, "extended", "PassthroughSupport=true"),
    # seven words: seven matches() on one attribute, within the API server's CEL cost limit
    ({"product": "RTX-PRO-6000-Blackwell-Max-Q-Workstation"}, "extended", ""),
    ({"product": "H100", "min_memory": 80000, "family": "hopper", "min_compute": "9.0",
      "count": 2}, "extended", ""),
]


@pytest.mark.parametrize("kw, label_set, gates", FILTERS,
                         ids=[f"filter{i}" for i in range(len(FILTERS))])
def test_every_document_passes_a_server_side_dry_run(
        control_plane: ControlPlane, kw: dict[str, object], label_set: str, gates: str) -> None:
    """What `gfd selector --dra ... | kubectl apply --dry-run=server -f -` does: each document
    created with dryRun=All (admission, validation, the CEL compiled and its cost checked)."""
    name = f"gfd-dra-{next(_serial)}"
    docs = render(Options(dra=True, name=name, **kw),  # type: ignore[arg-type]
                  label_set=label_set, feature_gates=gates).documents
    assert [(d["apiVersion"], d["kind"]) for d in docs] == [
        ("resource.k8s.io/v1", "ResourceClaimTemplate"), ("v1", "Pod")]
    namespace = "gfd-dry-run"
    control_plane.create_namespace(namespace)  # with its default ServiceAccount, as a cluster's
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
        status, body = control_plane.request(
            "POST", f"/{'api' if doc['apiVersion'] == 'v1' else 'apis'}/{doc['apiVersion']}"
            f"/namespaces/{namespace}/{doc['kind'].lower()}s", doc, query={"dryRun": "All"},
            expect=None)
        assert status == 201, (doc["kind"], body.get("message") if body else body)
    # the dry run stored nothing
    assert control_plane.get(
        f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates/{name}") is None


@pytest.mark.parametrize("kw", [{"product": "A100"}, {"product": "NVIDIA-Foo-X1.5"}],
                         ids=["words", "exact"])
def test_every_dra_template_is_stored_with_its_cel(control_plane: ControlPlane,
                                                   kw: dict[str, object]) -> None:
    template, _ = render(Options(dra=True, count=2, name=f"gfd-dra-{next(_serial)}",
                                 **kw)).documents  # type: ignore[arg-type]
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
    template, _ = render(Options(dra=True, product="A10", name="gfd-dra-bad")).documents
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


@pytest.mark.parametrize("machine", ["mixed-a100-a10", "dgx-a100-mig-mixed"])
def test_a_passthrough_resource_slice_is_valid_and_stored_as_written(
        control_plane: ControlPlane, machine: str) -> None:
    """The slice under PassthroughSupport: the API server validates the passthrough devices'
    attributes (a bool, an int, the PCI IDs name with its brackets) and their capacity."""
    (rs,) = resource_slices(simulate(machine).snapshot, node=f"{machine}-{next(_serial)}",
                            gates={PASSTHROUGH_SUPPORT: True})
    created = control_plane.create(rs)
    try:
        stored = {d["name"]: d for d in created["spec"]["devices"]}
        written = {d["name"]: d for d in rs["spec"]["devices"]}
        assert set(stored) == set(written)
        vfio = sorted(n for n in stored if n.startswith("gpu-vfio-"))
        assert vfio and all(stored[n]["attributes"] == written[n]["attributes"] for n in vfio)
        assert all(stored[n]["capacity"] == written[n]["capacity"] for n in vfio)
        if machine == "mixed-a100-a10":  # the A10 bound to vfio-pci: no NVML GPU, one device
            assert stored["gpu-vfio-3"]["attributes"]["productName"] == {
                "string": "GA102GL [A10]"}
            assert stored["gpu-vfio-3"]["attributes"]["iommuFDEnabled"] == {"bool": True}
    finally:
        control_plane.delete(created, wait=False)
