"""The page of ``gfd fleet --serve`` over the live view of a real kube-apiserver, in headless
Chromium: it shows what ``/fleet`` serves; after kube-scheduler binds a GPU pod, it shows the
new numbers without a reload, and they are those of ``gfd fleet -o json`` of the same server.

The fleet is one 8-GPU device-plugin Node of this module's own label (``--selector``), so
what other modules leave on the session's control plane is not counted. Without a browser
these skip, and fail under GFD_REQUIRE_CHROMIUM=1 (CI)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.browser import Browser, Tab
from helpers.controlplane import ControlPlane, Process
from helpers.fleetpage import expected, fleet_doc, shown
from helpers.fleetserve import Served
from helpers.fleetviews import H100, node

NAMESPACE = "fleet-page-live"
WAIT = 120.0


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("chromium"))
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def tab(browser: Browser) -> Iterator[Tab]:
    t = browser.tab()
    try:
        yield t
    finally:
        t.goto("about:blank")
        t.close()


def test_the_live_page_shows_a_pod_the_scheduler_binds_without_a_reload(
        control_plane: ControlPlane, scheduler: Process, admin_kubeconfig: Path,
        tab: Tab, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:8]
    label = f"gfd-test/fleet-page={run}"
    key, value = label.split("=")
    name = f"fleet-page-{run}"
    control_plane.create_node(name, {**node(name, H100, 8)["metadata"]["labels"], key: value,
                                     "kubernetes.io/hostname": name}, {"nvidia.com/gpu": "8"})
    control_plane.create_namespace(NAMESPACE)
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"train-{run}", "namespace": NAMESPACE},
           "spec": {"nodeSelector": {key: value}, "terminationGracePeriodSeconds": 0,
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                    "containers": [{"name": "main", "image": "registry.example/train:1",
                                    "resources": {"limits": {"nvidia.com/gpu": "3"}}}]}}
    try:
        with Served(None, "--selector", label, api=admin_kubeconfig,
                    home=tmp_path) as served:
            first = served.settled(lambda doc: doc["view"]["ready"])
            tab.goto(served.url)
            before = shown(tab, generation=first["view"]["generation"])
            assert before == expected(fleet_doc(served.url))
            (h100,) = before["kinds"]
            assert (h100["total"], h100["allocated"], h100["free"]) == (8, 0, 8)
            tab.evaluate("window.gfdTestMarker = 'still this page'")
            control_plane.create(pod)
            bound = served.settled(lambda doc: any(
                k["allocated"] == 3 for k in doc["kinds"]), timeout=WAIT)
            after = shown(tab, generation=bound["view"]["generation"])
            doc = fleet_doc(served.url)
            assert after == expected(doc)
            (h100,) = after["kinds"]
            assert (h100["total"], h100["allocated"], h100["free"]) == (8, 3, 5)
            assert tab.evaluate("window.gfdTestMarker") == "still this page", "reloaded"
            one_shot = subprocess.run(
                [sys.executable, "-m", "gfd", "fleet", "--check", "-o", "json",
                 "--kubeconfig", str(admin_kubeconfig), "--selector", label],
                capture_output=True, text=True, timeout=WAIT)
            assert {k: v for k, v in doc.items() if k not in ("view", "notes")} == \
                json.loads(one_shot.stdout)
            assert served.stop() == 0, served.stderr
    finally:
        control_plane.request("DELETE", f"/api/v1/namespaces/{NAMESPACE}/pods/train-{run}",
                              query={"gracePeriodSeconds": "0"}, expect=(200, 404))
        control_plane.delete(f"/api/v1/nodes/{name}", wait=False)
