"""`gfd why` against the real kube-apiserver, kube-scheduler and kube-controller-manager (its
resourceclaim controller making claims from templates): what gfd says keeps a pod off each
node is what the scheduler's own FailedScheduling message counts, reason for reason, and the
fix it prints binds.

The fleet (tests/helpers/whybuild.py): device-plugin Nodes of simulated machines (a ready
H100 node with 3 of its 8 GPUs held, one tainted ``nvidia.com/gpu``, one cordoned, one whose
device plugin is down, one whose only pod slot is taken, a MIG-only mixed node, a single
strategy MIG node, time-slicing with and without renaming, a node of two models), DRA Nodes
(whole H100s, 2 of them held by a shared claim; a DynamicMIG pair held whole; a pool with a
slice missing, one repeating a device name, one whose devices are tainted), and the driver
chart's DeviceClasses (``gpu.nvidia.com`` serving ``nvidia.com/gpu``).

Then one pending pod per GPU cause (``CASES``), all created at once and each tried by the
scheduler, and for each:

- `gfd why` of the live pod counts, per reason, exactly what the pod's ``PodScheduled``
  message counts (or names the same PreFilter rejection), the node total too;
- `gfd fleet --pending` gives it the reason the scheduler counts the most nodes under;
- `gfd why -f` of the pod's manifest, and `gfd why --from` a kubectl dump of the cluster,
  answer as the live read does;
- the fix gfd prints (or its absence, and the nodes it says could take the pod once units
  free up) is as the case expects, and the pod changed by the merge patch, with the changed
  claims and templates, binds where gfd says.

Pods that fit are judged before they exist (`gfd why -f`: exit 0) and bind."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import whybuild
from helpers.controlplane import ControlPlane, Process
from helpers.whybuild import (
    GPU,
    MIG_CLASS,
    NAMESPACE,
    Fleet,
    claim,
    pod,
    template,
)

from gfd.cli import cli
from gfd.fleet.fixes import apply_patch

JSON = dict[str, Any]
pytestmark = pytest.mark.timeout(900)
H100 = "device.attributes['gpu.nvidia.com'].productName"


@dataclass(frozen=True)
class Case:
    """One pending pod, the objects it needs, and what gfd must offer."""

    objects: tuple[JSON, ...]
    fix: bool = False
    """gfd prints a fix (and it binds)."""
    later: tuple[str, ...] = ()
    """The nodes gfd says could take it once GPU units free up."""
    pre_filter: bool = False


def case(name: str, *objects: JSON, fix: bool = False, later: tuple[str, ...] = (),
         pre_filter: bool = False, **pod_args: Any) -> tuple[str, Case]:
    extra = tuple({**o, "metadata": {**o["metadata"],
                                     "labels": {whybuild.CASE_LABEL: name}}} for o in objects)
    return name, Case(objects=(*extra, pod(name, **pod_args)), fix=fix, later=later,
                      pre_filter=pre_filter)


CASES: dict[str, Case] = dict([
    # the nvidia.com/gpu taint, not tolerated
    case("taint", limits=[{GPU: 1}], hosts=["wy-h100-taint"], tolerate=False, fix=True),
    # a MIG-only node advertises nvidia.com/mig-<profile>, not nvidia.com/gpu (which the
    # DeviceClass serves there: "cannot allocate all claims")
    case("mig-name", limits=[{GPU: 1}], hosts=["wy-h100-mig"], fix=True),
    # renamed sharing advertises nvidia.com/gpu.shared
    case("renamed", limits=[{GPU: 1}], hosts=["wy-laptop-renamed"], fix=True),
    # gpu.product without -SHARED, and without -MIG-1g.5gb
    case("product-shared", limits=[{GPU: 1}], selector={"nvidia.com/gpu.product": "Tesla-T4"},
         fix=True),
    case("product-mig", limits=[{GPU: 1}],
         selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, fix=True),
    # more GPUs than any node has, and than its node has free
    case("more-than-any", limits=[{GPU: 9}],
         hosts=["wy-h100-a", "wy-h100-taint", "wy-h100-down"], fix=True),
    case("more-than-free", limits=[{GPU: 6}], hosts=["wy-h100-a"], later=("wy-h100-a",)),
    # the device plugin is down: labels say 8, 0 allocatable
    case("plugin-down", limits=[{GPU: 1}], hosts=["wy-h100-down"]),
    # the node's pod slots are taken
    case("pod-slots", limits=[{GPU: 1}], hosts=["wy-h100-full"]),
    # a sidecar, and an init container, make the pod's sum too large
    case("sidecar", limits=[{GPU: 8}], init=[({GPU: 1}, True)], hosts=["wy-h100-taint"],
         fix=True),
    case("init", limits=[{GPU: 1}], init=[({GPU: 9}, False)], hosts=["wy-h100-taint"],
         fix=True),
    # a node of two models: nvidia.com/gpu is any of its 3
    case("mixed-model", limits=[{GPU: 4}],
         selector={"nvidia.com/gpu.product": "NVIDIA-A100-80GB-PCIe"}, fix=True),
    # CPU, memory and GPUs all short on one node: counted under each
    case("cpu-memory-gpu", limits=[{GPU: 9, "cpu": "100", "memory": "1Ti"}],
         hosts=["wy-h100-a", "wy-h100-taint"]),
    # pinned by metadata.name (as a DaemonSet pins its pods): the PreFilter leaves out the rest
    case("pinned", limits=[{GPU: 6}], fields=["wy-h100-a"], later=("wy-h100-a",)),
    # a CEL selector comparing productName to 'H100' (the driver publishes the full name)
    case("cel-product", claim("cel-product", cel=f"{H100} == 'H100'"), claims=["cel-product"],
         hosts=["wy-dra-h100"], fix=True),
    # the same in a template (the resourceclaim controller makes the claim)
    case("template-count", template("template-count", count=9), templates=["template-count"],
         hosts=["wy-dra-h100"], fix=True),
    # DynamicMIG: whole-GPU claims consume the counters a MIG partition needs
    case("dynamic-mig", claim("dynamic-mig", MIG_CLASS,
                              cel="device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"),
         claims=["dynamic-mig"], hosts=["wy-dra-dyn"], later=("wy-dra-dyn",)),
    # a pool with a slice missing, and one repeating a device name
    case("incomplete-pool", claim("incomplete-pool"), claims=["incomplete-pool"],
         hosts=["wy-dra-incomplete"]),
    case("invalid-pool", claim("invalid-pool"), claims=["invalid-pool"],
         hosts=["wy-dra-invalid"]),
    # tainted devices, not tolerated by the claim
    case("device-taint", claim("device-taint"), claims=["device-taint"],
         hosts=["wy-dra-tainted"], fix=True),
    # two claims each of which fits alone, not together
    case("several-claims", claim("several-a", count=4), claim("several-b", count=4),
         claims=["several-a", "several-b"], hosts=["wy-dra-h100"], later=("wy-dra-h100",)),
    # a claim allocated on another node for the pod it is shared with
    case("shared-claim", claims=["shared"], hosts=["wy-h100-a"], limits=[{GPU: 1}]),
    # nvidia.com/gpu through the DeviceClass on a DRA node, more than it has
    case("extended", limits=[{GPU: 9}], hosts=["wy-dra-h100"], fix=True),
    # a DeviceClass that does not exist: rejected before any node
    case("no-class", claim("no-class", "nope.gfd-test.example"), claims=["no-class"],
         hosts=["wy-dra-h100"], pre_filter=True),
])
FITS: dict[str, tuple[JSON, ...]] = {
    name: (*(dict(o, metadata={**o["metadata"], "labels": {whybuild.CASE_LABEL: name}})
             for o in extra), pod(name, **args))
    for name, extra, args in [
        ("fits-plugin", (), {"limits": [{GPU: 1}], "hosts": ["wy-h100-a"]}),
        ("fits-shared", (), {"limits": [{"nvidia.com/gpu.shared": 1}],
                             "hosts": ["wy-laptop-renamed"]}),
        ("fits-extended", (), {"limits": [{GPU: 1}], "hosts": ["wy-dra-h100"]}),
        ("fits-cel", (claim("fits-cel", cel=f"{H100} == 'NVIDIA H100 80GB HBM3'"),),
         {"claims": ["fits-cel"], "hosts": ["wy-dra-h100"]}),
        ("fits-template", (template("fits-template"),),
         {"templates": ["fits-template"], "hosts": ["wy-h100-a", "wy-dra-h100"]}),
    ]}


@pytest.fixture(scope="module")
def controllers(control_plane: ControlPlane) -> Iterator[Process]:
    proc = control_plane.start_controller_manager()
    try:
        yield proc
    finally:
        proc.stop()
        control_plane.extra.remove(proc)


@pytest.fixture(scope="module")
def fleet(control_plane: ControlPlane, scheduler: Process, controllers: Process) -> Iterator[Fleet]:
    built = whybuild.build(control_plane)
    try:
        built.create(o for c in CASES.values() for o in c.objects)
        for name in CASES:
            built.tried(name)
        yield built
    finally:
        whybuild.teardown(built)


def gfd_why(*args: str) -> tuple[int, JSON]:
    result = CliRunner().invoke(cli, ["why", *args, "-o", "json"])
    assert result.exit_code in (0, 1, 3), (args, result.output, result.exception)
    return result.exit_code, dict(json.loads(result.stdout))


def live(kubeconfig: Path, name: str) -> tuple[int, JSON]:
    return gfd_why(name, "-n", NAMESPACE, "--kubeconfig", str(kubeconfig))


def needs_device_taints(fleet: Fleet, name: str) -> None:
    if name == "device-taint" and not fleet.device_taints:
        pytest.skip("the API server dropped the devices' taints (DRADeviceTaints is off)")


def counts(doc: JSON) -> Counter[str]:
    out: Counter[str] = Counter()
    for g in doc["groups"]:
        out[g["schedulerReason"]] += g["count"]
    return out


def verdict(doc: JSON) -> JSON:
    """What must agree between two reads of one pod: the answer, not how the claims of a
    template were named."""
    fix = doc["fix"]
    return {"fits": doc["fits"], "nodes": doc["nodes"], "preFilter": doc["preFilter"],
            "groups": [{k: g[k] for k in ("filter", "schedulerReason", "count", "nodes")}
                       for g in doc["groups"]],
            "fix": fix and {k: fix[k] for k in ("summary", "patch", "nodes")},
            "later": doc["later"]}


# --------------------------------------------------------------------------- agreement


@pytest.mark.parametrize("name", sorted(CASES))
def test_gfd_counts_each_reason_as_the_schedulers_message_does(
        fleet: Fleet, admin_kubeconfig: Path, name: str) -> None:
    needs_device_taints(fleet, name)
    found = fleet.get_pod(name)
    assert found is not None and not found["spec"].get("nodeName"), f"{name} was bound"
    truth = whybuild.reasons(whybuild.message(found))
    code, doc = live(admin_kubeconfig, name)
    assert code == 1, doc
    assert doc["fits"] is False and (doc["gpu"] or CASES[name].pre_filter)
    assert doc["nodes"] == truth.nodes
    if CASES[name].pre_filter:
        assert doc["preFilter"]["schedulerReason"] == truth.pre_filter
        assert doc["groups"] == []
        return
    assert doc["preFilter"] is None
    assert counts(doc) == truth.counts, whybuild.message(found)


def test_fleet_pending_gives_each_pending_pod_the_schedulers_largest_count(
        fleet: Fleet, admin_kubeconfig: Path) -> None:
    result = CliRunner().invoke(cli, ["fleet", "--pending", "-o", "json", "--kubeconfig",
                                      str(admin_kubeconfig)])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)["pending"]
            if r["namespace"] == NAMESPACE}
    for name, expected in CASES.items():
        if name == "device-taint" and not fleet.device_taints:
            continue
        found = fleet.get_pod(name)
        assert found is not None
        truth = whybuild.reasons(whybuild.message(found))
        if expected.pre_filter:
            assert rows[name]["preFilter"]["schedulerReason"] == truth.pre_filter
            continue
        reason = rows[name]["reason"]
        assert reason["count"] == max(truth.counts.values()), (name, reason, truth)
        assert truth.counts[reason["schedulerReason"]] == reason["count"], (name, truth)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_manifest_and_a_dump_answer_as_the_live_pod(
        fleet: Fleet, admin_kubeconfig: Path, dump: Path, tmp_path: Path, name: str) -> None:
    needs_device_taints(fleet, name)
    _, answer = live(admin_kubeconfig, name)
    found = fleet.get_pod(name)
    assert found is not None
    manifest = tmp_path / "pod.json"
    manifest.write_text(json.dumps({k: v for k, v in found.items() if k != "status"}))
    _, from_file = gfd_why("-f", str(manifest), "--kubeconfig", str(admin_kubeconfig))
    assert verdict(from_file) == verdict(answer)
    _, offline = gfd_why(name, "-n", NAMESPACE, "--from", str(dump))
    for doc in (answer, offline):
        doc.pop("source")
    assert offline == answer


@pytest.fixture(scope="module")
def dump(fleet: Fleet, admin_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What `kubectl get ... -A -o json` prints of the cluster, the pods' templates too."""
    kubectl = Path(sys.executable).parent / "kubectl"
    if not kubectl.exists():
        pytest.skip("no kubectl beside the interpreter: install the test extras")
    text = subprocess.run(
        [str(kubectl), "--kubeconfig", str(admin_kubeconfig), "get",
         "nodes,pods,resourceslices,resourceclaims,deviceclasses,resourceclaimtemplates", "-A",
         "-o", "json"], capture_output=True, text=True, timeout=120, check=True).stdout
    path = tmp_path_factory.mktemp("why") / "dump.json"
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- fixes


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fix_gfd_prints_binds_and_none_is_printed_where_none_binds(
        fleet: Fleet, admin_kubeconfig: Path, name: str) -> None:
    needs_device_taints(fleet, name)
    expected = CASES[name]
    _, doc = live(admin_kubeconfig, name)
    fix = doc["fix"]
    assert bool(fix) == expected.fix, (fix, doc["groups"])
    assert [x["node"] for x in doc["later"]] == list(expected.later)
    if not fix:
        return
    assert fix["summary"] and fix["nodes"]
    found = fleet.get_pod(name)
    assert found is not None
    fleet.release(name)
    try:
        changed = apply_patch({k: v for k, v in found.items() if k != "status"}, fix["patch"])
        meta = changed["metadata"]
        for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
            meta.pop(key, None)
        originals = {(o["kind"], o["metadata"]["name"]): o for o in expected.objects
                     if o["kind"] != "Pod"}
        for o in fix["objects"]:
            originals[(o["kind"], o["metadata"]["name"])] = o
        fleet.create([*originals.values(), changed])
        assert fleet.bound(name) in fix["nodes"]
    finally:
        fleet.release(name)


# --------------------------------------------------------------------------- pods that fit


@pytest.mark.parametrize("name", sorted(FITS))
def test_a_pod_gfd_says_fits_binds_where_it_says(
        fleet: Fleet, admin_kubeconfig: Path, tmp_path: Path, name: str) -> None:
    objects = FITS[name]
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        o for o in objects if o["kind"] != "ResourceClaim"]}))
    fleet.create(o for o in objects if o["kind"] == "ResourceClaim")
    try:
        code, doc = gfd_why("-f", str(manifest), "--kubeconfig", str(admin_kubeconfig))
        assert code == 0, doc["groups"]
        assert doc["fits"] is True and doc["fitsOn"]
        fleet.create(o for o in objects if o["kind"] != "ResourceClaim")
        assert fleet.bound(name) in doc["fitsOn"]
        code, bound = live(admin_kubeconfig, name)
        assert code == 0 and bound["bound"] in doc["fitsOn"]
    finally:
        fleet.release(name)

