"""--resource-manager auto against a real kube-apiserver (v1.36): the node's ResourceSlices
of driver gpu.nvidia.com, listed with the field selector the server supports, as the
ServiceAccount of manifests/ with exactly one mode's RBAC; the decision follows the slices
at the loop's daily check; without the permission a 403 is one warning and no evidence.

ResourceSlices are written by the admin the way a DRA kubelet plugin publishes them."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fakes.apiserver import FakeApiServer
from helpers.controlplane import ApiStatus, ControlPlane
from helpers.process import ENV_PREFIXES
from helpers.realserver import RealApiServer

from gfd.app import make_discovery
from gfd.config import Settings
from gfd.kube import RESOURCESLICE_LIMIT, Kube
from gfd.readers.resourcemanager import DRA_DRIVER

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
SELECTOR = "spec.nodeName={node},spec.driver=gpu.nvidia.com"


def resourceslice(name: str, node: str, driver: str) -> dict[str, object]:
    """One pool of one GPU, as the NVIDIA DRA kubelet plugin publishes it."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"nodeName": node, "driver": driver,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0", "attributes": {
                         "type": {"string": "gpu"},
                         "productName": {"string": "NVIDIA H100 80GB HBM3"}},
                         "capacity": {"memory": {"value": "80Gi"}}}]}}


@pytest.fixture
def slices(control_plane: ControlPlane) -> Iterator[Callable[[str, str], str]]:
    """``slices(node, driver)`` creates a ResourceSlice and returns its name; all are
    deleted after the test."""
    made: list[str] = []

    def add(node: str, driver: str) -> str:
        name = f"{node}-{driver}-{len(made)}"
        control_plane.create(resourceslice(name, node, driver))
        made.append(name)
        return name

    yield add
    for name in made:
        control_plane.delete(f"{SLICES}/{name}", wait=False)


@pytest.fixture
def server(control_plane: ControlPlane, request: pytest.FixtureRequest
           ) -> Iterator[RealApiServer]:
    with RealApiServer(control_plane, getattr(request, "param", "node")) as real:
        yield real


def settings(server: RealApiServer, tmp_path: Path, node: str, sink: str) -> Settings:
    return Settings(simulate="hgx-h100", plugins_registry=str(tmp_path / "registry"),
                    sink=sink, node_name=node, namespace="gfd",
                    kubeconfig=str(server.write_kubeconfig(tmp_path / "sa.kubeconfig")))


def test_the_field_selectors_the_fake_serves_are_the_real_servers(
        control_plane: ControlPlane, slices: Callable[[str, str], str],
        node_name: str, tmp_path: Path) -> None:
    """spec.nodeName and spec.driver select ResourceSlices; another spec field is a 400
    with the message the fake copies (fakes/test_apiserver.py checks the fake's side)."""
    slices(node_name, DRA_DRIVER)
    slices(node_name, "compute-domain.nvidia.com")
    slices(f"{node_name}-other", DRA_DRIVER)
    _, listed = control_plane.request(
        "GET", SLICES, query={"fieldSelector": SELECTOR.format(node=node_name), "limit": "8"})
    assert [(i["spec"]["nodeName"], i["spec"]["driver"]) for i in listed["items"]] == [
        (node_name, DRA_DRIVER)]
    with pytest.raises(ApiStatus) as err:
        control_plane.request("GET", SLICES, query={"fieldSelector": "spec.pool.name=x"})
    assert err.value.status == 400
    assert err.value.body["message"] == (
        "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.pool.name")
    with FakeApiServer() as fake:  # and the fake says the same
        fake.add_resourceslice(node_name, DRA_DRIVER)
        fake.add_resourceslice(node_name, "compute-domain.nvidia.com")
        fake.add_resourceslice(f"{node_name}-other", DRA_DRIVER)
        kube = Kube(kubeconfig=str(fake.write_kubeconfig(tmp_path / "fake")), qps=0)
        try:
            assert kube.count_resourceslices(node_name, DRA_DRIVER) == 1
        finally:
            kube.close()


@pytest.mark.parametrize("server", ["node", "nodefeature"], indirect=True)
def test_the_manifests_rbac_lets_gfd_count_the_nodes_slices(
        server: RealApiServer, slices: Callable[[str, str], str], node_name: str,
        tmp_path: Path) -> None:
    for _ in range(RESOURCESLICE_LIMIT + 1):
        slices(node_name, DRA_DRIVER)
    slices(node_name, "compute-domain.nvidia.com")
    kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "sa.kubeconfig")), qps=0)
    try:
        assert kube.count_resourceslices(node_name, DRA_DRIVER) == RESOURCESLICE_LIMIT
        assert kube.count_resourceslices(f"{node_name}-none", DRA_DRIVER) == 0
    finally:
        kube.close()


@pytest.mark.parametrize("server", ["node", "nodefeature"], indirect=True)
def test_auto_follows_the_nodes_slices_at_each_host_refresh(
        server: RealApiServer, control_plane: ControlPlane,
        slices: Callable[[str, str], str], node_name: str, tmp_path: Path) -> None:
    sink = server.mode or ""
    discovery = make_discovery(settings(server, tmp_path, node_name, sink), api=True)
    try:
        server.clear_log()
        assert discovery.read().resource_manager.name == "device-plugin"
        name = slices(node_name, DRA_DRIVER)
        assert discovery.read().resource_manager.name == "device-plugin"  # not asked again
        discovery.recheck_resource_manager()  # the loop's daily duty
        found = discovery.read().resource_manager
        assert found.name == "dra", found
        assert found.evidence == f"1 ResourceSlice(s) of driver {DRA_DRIVER} for this node"
        control_plane.delete(f"{SLICES}/{name}")
        discovery.recheck_resource_manager()
        assert discovery.read().resource_manager.name == "device-plugin"
    finally:
        discovery.close()
    listed = [(r.method, r.path, r.query.get("fieldSelector")) for r in server.requests]
    assert listed == [("GET", SLICES, SELECTOR.format(node=node_name))] * 3


def test_without_the_permission_a_403_is_one_warning_and_no_evidence(
        control_plane: ControlPlane, slices: Callable[[str, str], str], node_name: str,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    slices(node_name, DRA_DRIVER)
    with RealApiServer(control_plane, None) as server:  # no RBAC at all
        discovery = make_discovery(settings(server, tmp_path, node_name, "node"), api=True)
        try:
            with caplog.at_level(logging.WARNING, "gfd.readers.resourcemanager"):
                found = discovery.read().resource_manager
                discovery.recheck_resource_manager()
                discovery.read()
        finally:
            discovery.close()
    assert found.name == "device-plugin" and "ResourceSlices unreadable" in found.evidence
    assert "HTTP 403" in found.evidence
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot list this node's ResourceSlices" in warnings[0]


def test_gfd_run_labels_a_node_with_gpu_resourceslices_for_dra(
        server: RealApiServer, slices: Callable[[str, str], str], node_name: str,
        tmp_path: Path) -> None:
    """The whole agent (a process, --oneshot, Node sink, the ServiceAccount with the node
    overlay's RBAC): the node's gpu.nvidia.com ResourceSlice makes auto pick dra, and the
    Node gets gpu.present and no device-plugin label; a node without one keeps GFD's set."""
    plain = f"{node_name}-plain"
    server.add_node(plain)
    slices(node_name, DRA_DRIVER)
    slices(plain, "compute-domain.nvidia.com")  # another driver is no evidence
    kubeconfig = server.write_kubeconfig(tmp_path / "sa.kubeconfig")
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    for node in (node_name, plain):
        done = subprocess.run(
            [sys.executable, "-m", "gfd", "run", "--oneshot", "--simulate", "hgx-h100",
             "--sink", "node", "--plugins-registry", str(tmp_path / "registry"),
             "--machine-type-file", str(tmp_path / "dmi")],
            env=base | {"NODE_NAME": node, "KUBECONFIG": str(kubeconfig)},
            capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-2000:]
    dra, device_plugin = server.labels(node_name), server.labels(plain)
    assert dra["nvidia.com/gpu.present"] == "true" and dra["nvidia.com/gpu.count"] == "8"
    assert not {"nvidia.com/gpu.replicas", "nvidia.com/mig.strategy"} & dra.keys()
    assert "nvidia.com/gpu.present" not in device_plugin
    assert device_plugin["nvidia.com/gpu.replicas"] == "1"
