"""The NodeFeature's spec.features on a real kube-apiserver with NFD's CRDs: for every
simulated machine, `gfd run --oneshot --sink nodefeature` (a real process, as the
ServiceAccount with the RBAC of manifests/overlays/nodefeature) writes an object the
server keeps whole -- read back, it carries the instances docs/features.md documents, with
the facts of the machine's snapshot and of its hand-derived golden label files -- and the
example NodeFeatureRules of manifests/nodefeaturerules are valid NodeFeatureRule objects
there (the server validates them against the CRD's schema on create)."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from helpers.controlplane import MANIFESTS, ApiStatus, ControlPlane
from helpers.paths import ROOT
from helpers.process import ENV_PREFIXES
from helpers.realserver import RealApiServer

from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.sinks.nodefeature import object_name

NS = "gfd"
POD = "gfd-features"
GOLDEN = ROOT / "tests" / "data" / "golden" / "simulate"
RULES = "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules"


@pytest.fixture(scope="module")
def written(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[dict[str, dict]]:
    """Each simulated machine's NodeFeature, as gfd wrote it and the real server kept it."""
    tmp = tmp_path_factory.mktemp("features")
    out: dict[str, dict] = {}
    with RealApiServer(control_plane, "nodefeature") as server:
        server.add_pod(NS, POD, owner_daemonset="gfd")
        kubeconfig = server.write_kubeconfig(tmp / "sa.kubeconfig")
        base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
        for machine in SIMULATIONS:
            node = f"features-{machine}"
            env = base | {"NODE_NAME": node, "NAMESPACE": NS, "POD_NAME": POD,
                          "KUBECONFIG": str(kubeconfig)}
            done = subprocess.run(
                [sys.executable, "-m", "gfd", "run", "--oneshot", "--simulate", machine,
                 "--sink", "nodefeature", "--plugins-registry", str(tmp / "registry"),
                 "--machine-type-file", str(tmp / "dmi")],
                env=env, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr[-2000:]
            obj = server.nodefeature(NS, object_name(node))
            assert obj is not None, machine
            out[machine] = obj
        yield out


def golden(machine: str, pattern: str) -> dict[str, str]:
    (path,) = sorted(GOLDEN.glob(f"{machine}__{pattern}.labels"))[:1] or [None]
    assert path is not None, f"no golden file {machine}__{pattern}.labels"
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    return dict(ln.split("=", 1) for ln in lines)


def elements(obj: dict, feature: str) -> list[dict[str, str]]:
    instances = obj["spec"].get("features", {}).get("instances", {})
    return [e["attributes"] for e in instances.get(feature, {}).get("elements", [])]


@pytest.mark.parametrize("machine", sorted(SIMULATIONS))
def test_each_gpu_is_one_documented_instance_with_its_facts(written: dict[str, dict],
                                                            machine: str) -> None:
    snap = simulate(machine).snapshot
    gpus = elements(written[machine], "nvidia.gpu")
    assert [g["uuid"] for g in gpus] == [g.uuid for g in sorted(snap.gpus,
                                                                 key=lambda g: g.index)]
    for got, gpu in zip(gpus, sorted(snap.gpus, key=lambda g: g.index), strict=True):
        assert got["index"] == str(gpu.index) and got["name"] == gpu.name
        assert got["memory"] == str(gpu.memory_total_bytes // 2**20), machine
        assert got["compute"] == "{}.{}".format(*gpu.compute_capability)
        assert got["mig"] == ("unsupported" if not gpu.mig_capable else
                              "enabled" if gpu.mig_enabled else "disabled")
        assert got["brand"] == gpu.brand
    if not gpus:
        return
    labels = golden(machine, "*__dra")  # the hand-derived labels of the same machine
    per_model = {k.removeprefix("nvidia.com/gpu.product."): int(v) for k, v in labels.items()
                 if k.startswith("nvidia.com/gpu.product.")}
    assert collections.Counter(g["product"] for g in gpus) == (
        per_model or {labels["nvidia.com/gpu.product"]: len(gpus)})
    assert max(int(g["memory"]) for g in gpus) == int(labels["nvidia.com/gpu.memory"])
    if "nvidia.com/gpu.heterogeneous" not in labels:
        assert {g["family"] for g in gpus} == {labels["nvidia.com/gpu.family"]}
        assert {g["compute"] for g in gpus} == {
            f"{labels['nvidia.com/gpu.compute.major']}.{labels['nvidia.com/gpu.compute.minor']}"}
    driver = written[machine]["spec"]["features"]["attributes"]["nvidia.driver"]["elements"]
    assert driver == {"version": labels["nvidia.com/cuda.driver-version.full"],
                      "cuda": labels["nvidia.com/cuda.runtime-version.full"]}


@pytest.mark.parametrize("machine", ["dgx-a100-mig-mixed", "h100-mig"])
def test_each_mig_device_is_one_instance_under_its_parent(written: dict[str, dict],
                                                          machine: str) -> None:
    snap = simulate(machine).snapshot
    migs = elements(written[machine], "nvidia.mig")
    expected = sorted((m.uuid, str(g.index)) for g in snap.gpus if g.mig_enabled
                      for m in g.mig_devices)
    assert sorted((m["uuid"], m["parent"]) for m in migs) == expected
    counts = {k.removeprefix("nvidia.com/mig-").removesuffix(".count"): int(v)
              for k, v in golden(machine, "mixed__compat").items()
              if k.startswith("nvidia.com/mig-") and k.endswith(".count")}
    assert collections.Counter(m["profile"] for m in migs) == counts
    assert all(int(m["memory"]) > 0 and int(m["multiprocessors"]) > 0 for m in migs)


@pytest.mark.parametrize("machine", sorted(SIMULATIONS))
def test_gfd_features_shows_what_run_wrote(written: dict[str, dict], machine: str,
                                           tmp_path: Path) -> None:
    """`gfd features` (no server involved) prints exactly gfd's part of the object `gfd run`
    wrote and the real server kept."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    shown = subprocess.run(
        [sys.executable, "-m", "gfd", "features", "--simulate", machine, "-o", "json",
         "--plugins-registry", str(tmp_path / "registry"),
         "--machine-type-file", str(tmp_path / "dmi")],
        env=base, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr[-2000:]
    stored = written[machine]["spec"]["features"]
    owned = {kind: {k: v for k, v in stored.get(kind, {}).items() if k.startswith("nvidia.")}
             for kind in ("attributes", "flags", "instances")}
    assert json.loads(shown.stdout) == owned


def test_the_server_kept_every_element_gfd_wrote(written: dict[str, dict]) -> None:
    """Nothing pruned by the CRD's structural schema: every value a non-empty string."""
    for machine, obj in written.items():
        features = obj["spec"]["features"]
        assert set(features) <= {"attributes", "flags", "instances"}, machine
        for value in features.get("instances", {}).values():
            for element in value["elements"]:
                assert element["attributes"] and all(
                    isinstance(v, str) and v for v in element["attributes"].values())


def test_the_example_rules_are_valid_nodefeaturerule_objects(
        control_plane: ControlPlane) -> None:
    rules = [d for d in yaml.safe_load_all(
        (MANIFESTS / "nodefeaturerules" / "rules.yaml").read_text()) if d]
    assert len(rules) == 3
    try:
        for rule in rules:
            created = control_plane.create(rule)
            assert created["spec"] == rule["spec"], "the server pruned or changed the rule"
        broken = {**rules[0], "metadata": {"name": "broken-rule"},
                  "spec": {"rules": [{"name": "x", "labels": {"a": "b"},
                                      "matchFeatures": [{"feature": "nvidia.gpu",
                                                         "matchExpressions": {"family": {
                                                             "op": "Above"}}}]}]}}
        with pytest.raises(ApiStatus) as err:  # the check can fail: a bad operator is a 422
            control_plane.create(broken)
        assert err.value.status == 422
    finally:
        for rule in rules:
            control_plane.delete(f"{RULES}/{rule['metadata']['name']}", wait=False)
