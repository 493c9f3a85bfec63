"""``gfd fleet --check`` finds what is planted and nothing on a consistent fleet.

The consistent fleet is what a correct deployment publishes: for every simulated machine x
MIG strategy x sharing config, a device-plugin node with the labels gfd publishes there
(``placement.node_labels``) and the allocatable the device plugin advertises
(``placement.units``); for every machine under the DRA driver (default gates and
DynamicMIG), a node with gfd's ``--resource-manager dra`` labels and the driver's
ResourceSlices (``gfd.devices.resource_slices``), and a claim allocated on a device a slice
publishes; on every labelled node, a Ready gfd pod (``app.kubernetes.io/name: gfd``).

Then one disagreement at a time is planted on one node, and the checks must name that node
with that check and find nothing else (docs/fleet.md, "What disagrees")."""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest
from helpers import fleetobjects as fo
from helpers import placement

from gfd.devices import resource_slices
from gfd.fleet.checks import Finding, check
from gfd.fleet.count import count
from gfd.fleet.model import Claim, Fleet, Node, Pod, slice_of

GPU = "nvidia.com/gpu"
DRIVER = "gpu.nvidia.com"
STRATEGIES = ("none", "single", "mixed")
GATES: dict[str, dict[str, bool] | None] = {"default": None, "dynamic": {"DynamicMIG": True}}
machines = cache(placement.machines)


def several_models(machine: str) -> bool:
    return len({g.name for g in machines()[machine].gpus}) > 1


def replicas_unknown(machine: str, strategy: str, sharing: str) -> bool:
    """MIG-enabled GPUs (every one of the primary model) under --mig-strategy none, shared:
    gfd labels them gpu.replicas=0 (docs/labels.md), which says nothing of how the device
    plugin replicates them (gfd.selector.labels.MISSED, the third kind)."""
    snap = machines()[machine]
    primary = [g for g in snap.gpus if g.name == snap.gpus[0].name]
    return strategy == "none" and sharing != "none" and all(g.mig_enabled for g in primary)


@cache
def device_plugin_combos(*, refused: bool = False) -> list[tuple[str, str, str]]:
    """Deployments where gfd publishes labels and the device plugin starts (or, with
    ``refused``, where it refuses the configuration and advertises nothing)."""
    out = []
    for machine, strategy, sharing in itertools.product(sorted(machines()), STRATEGIES,
                                                        placement.SHARING):
        snap, config = machines()[machine], placement.SHARING[sharing]
        starts = bool(placement.units(snap, strategy, config, "device-plugin"))
        if (placement.node_labels(snap, strategy, config, "extended", "device-plugin")
                and starts != refused):
            out.append((machine, strategy, sharing))
    return out


def plugin_node(name: str, machine: str, strategy: str, sharing: str) -> Node:
    snap, config = machines()[machine], placement.SHARING[sharing]
    labels = placement.node_labels(snap, strategy, config, "extended", "device-plugin")
    units = {r: len(u) for r, u in placement.units(snap, strategy, config,
                                                   "device-plugin").items()}
    return Node(name=name, labels={**labels, "nvidia.com/gfd.timestamp": "1764288000",
                                   "kubernetes.io/hostname": name},
                allocatable=dict(units), capacity=dict(units))


def agent(node: str, ready: bool = True) -> Pod:
    return Pod(namespace="gfd", name=f"gfd-{node}", node=node, requests={}, agent=True,
               agent_ready=ready)


def empty() -> Fleet:
    return Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[])


def add_plugin_node(f: Fleet, name: str, machine: str, strategy: str, sharing: str) -> None:
    f.nodes[name] = plugin_node(name, machine, strategy, sharing)
    f.pods.append(agent(name))


def add_dra_node(f: Fleet, name: str, machine: str, gates: str) -> list[str]:
    """The node, its labels, its agent and its slices; the devices published there."""
    snap = machines()[machine]
    labels = placement.node_labels(snap, "none", None, "extended", "dra")
    f.nodes[name] = Node(name=name, labels={**labels, "nvidia.com/gfd.timestamp": "1",
                                            "kubernetes.io/hostname": name},
                         allocatable={}, capacity={})
    f.pods.append(agent(name))
    slices = [slice_of(s) for s in resource_slices(snap, node=name, gates=GATES[gates])]
    f.slices += slices
    return [d.name for s in slices for d in s.devices]


def dp_name(machine: str, strategy: str, sharing: str) -> str:
    return f"{machine}.{strategy}.{sharing}"


def dra_name(machine: str, gates: str) -> str:
    return f"dra.{machine}.{gates}"


@cache
def _consistent() -> Fleet:
    f = empty()
    for machine, strategy, sharing in device_plugin_combos():
        if several_models(machine) or replicas_unknown(machine, strategy, sharing):
            continue  # the two kinds apart, below
        add_plugin_node(f, dp_name(machine, strategy, sharing), machine, strategy, sharing)
    for machine, gates in itertools.product(sorted(machines()), GATES):
        name = dra_name(machine, gates)
        published = add_dra_node(f, name, machine, gates)
        if published:
            f.claims[("ml", f"{name}-claim")] = Claim(
                namespace="ml", name=f"{name}-claim", node=name,
                allocated=((DRIVER, name, published[0]),))
    f.pods.append(Pod(namespace="ml", name="train", node=dp_name("hgx-h100", "none", "none"),
                      requests={GPU: 8}))
    return f


def consistent() -> Fleet:
    return copy.deepcopy(_consistent())


def findings(f: Fleet) -> list[Finding]:
    return check(f, count(f))


def test_a_consistent_fleet_has_no_finding() -> None:
    f = consistent()
    assert len(f.nodes) > 100 and len(f.slices) > 40 and len(f.claims) > 15
    assert findings(f) == []


# -------------------------------------------------------------------------------- planted


def replace_node(f: Fleet, name: str, **changes: Any) -> None:
    f.nodes[name] = dataclasses.replace(f.nodes[name], **changes)


def one_gpu_short(f: Fleet) -> str:
    """The device plugin advertises one nvidia.com/gpu less than the labels say (a GPU
    marked unhealthy: capacity stays 8)."""
    name = dp_name("hgx-h100", "none", "none")
    replace_node(f, name, allocatable={GPU: 7})
    return name


def time_sliced_short(f: Fleet) -> str:
    name = dp_name("t4-time-sliced", "none", "ts4")
    replace_node(f, name, allocatable={GPU: 12}, capacity={GPU: 12})
    return name


def renamed_over(f: Fleet) -> str:
    name = dp_name("t4-time-sliced", "none", "ts4-renamed")
    replace_node(f, name, allocatable={f"{GPU}.shared": 20}, capacity={f"{GPU}.shared": 20})
    return name


def plugin_gone(f: Fleet) -> str:
    """The device plugin never registered: no GPU resource at all (none allocatable, none
    in capacity) where the labels promise eight."""
    name = dp_name("gb200-nvl", "none", "none")
    replace_node(f, name, allocatable={}, capacity={})
    return name


def mig_short(f: Fleet) -> str:
    """A MIG resource's allocatable off: seven 1g.5gb where the labels say eight."""
    name = dp_name("dgx-a100-mig-mixed", "mixed", "none")
    node = f.nodes[name]
    replace_node(f, name, allocatable={**node.allocatable, "nvidia.com/mig-1g.5gb": 7})
    return name


def mig_replicas_over(f: Fleet) -> str:
    name = dp_name("dgx-a100-mig-mixed", "mixed", "ts-mig")
    node = f.nodes[name]
    replace_node(f, name, allocatable={**node.allocatable, "nvidia.com/mig-3g.20gb": 3 * 3 + 1})
    return name


def dra_count_off(f: Fleet) -> str:
    name = dra_name("hgx-h100", "default")
    node = f.nodes[name]
    replace_node(f, name, labels={**node.labels, "nvidia.com/gpu.count": "7"})
    return name


def dra_product_off(f: Fleet) -> str:
    name = dra_name("gb200-nvl", "dynamic")
    node = f.nodes[name]
    replace_node(f, name, labels={**node.labels, "nvidia.com/gpu.product": "NVIDIA-B200"})
    return name


def dra_mig_count_off(f: Fleet) -> str:
    """h100-mig: both GPUs have MIG enabled; the driver publishes only their MIG devices
    under the default gates, and gpu.count counts the GPUs behind them."""
    name = dra_name("h100-mig", "default")
    node = f.nodes[name]
    replace_node(f, name, labels={**node.labels, "nvidia.com/gpu.count": "3"})
    return name


def unlabelled(f: Fleet) -> str:
    f.nodes["bare"] = Node(name="bare", labels={"kubernetes.io/hostname": "bare"},
                           allocatable={GPU: 4}, capacity={GPU: 4})
    return "bare"


def unlabelled_dra(f: Fleet) -> str:
    snap = machines()["hgx-h100"]
    f.nodes["bare-dra"] = Node(name="bare-dra", labels={"kubernetes.io/hostname": "bare-dra"},
                               allocatable={}, capacity={})
    f.slices += [slice_of(s) for s in resource_slices(snap, node="bare-dra")]
    return "bare-dra"


def no_agent_pod(f: Fleet) -> str:
    name = dp_name("hgx-h100", "none", "none")
    f.pods = [p for p in f.pods if not (p.agent and p.node == name)]
    return name


def agent_not_ready(f: Fleet) -> str:
    name = dra_name("gb200-nvl", "default")
    f.pods = [agent(name, ready=False) if p.agent and p.node == name else p for p in f.pods]
    return name


def orphan_claim(f: Fleet) -> str:
    name = dra_name("hgx-h100", "default")
    f.claims[("ml", "stale")] = Claim(namespace="ml", name="stale", node=name,
                                      allocated=((DRIVER, name, "gpu-99"),))
    return name


PLANTS: list[tuple[Callable[[Fleet], str], str]] = [
    (one_gpu_short, "device-plugin-units"), (time_sliced_short, "device-plugin-units"),
    (renamed_over, "device-plugin-units"), (plugin_gone, "no-device-plugin"),
    (mig_short, "mig-units"), (mig_replicas_over, "mig-units"),
    (dra_count_off, "dra-slices"), (dra_product_off, "dra-slices"),
    (dra_mig_count_off, "dra-slices"),
    (unlabelled, "unlabelled"), (unlabelled_dra, "unlabelled"),
    (no_agent_pod, "no-agent"), (agent_not_ready, "no-agent"),
    (orphan_claim, "orphan-claim"),
]


@pytest.mark.parametrize("plant, expected", PLANTS, ids=[p.__name__ for p, _ in PLANTS])
def test_each_planted_disagreement_is_found_on_its_node_and_nothing_else(
        plant: Callable[[Fleet], str], expected: str) -> None:
    f = consistent()
    node = plant(f)
    found = findings(f)
    assert [(x.node, x.check) for x in found] == [(node, expected)]
    assert found[0].message and found[0].look_at


def test_several_plants_are_each_found_once() -> None:
    f = consistent()
    planted = {(plant(f), expected) for plant, expected in PLANTS[::3]}
    assert {(x.node, x.check) for x in findings(f)} == planted


def test_a_device_plugin_that_refuses_its_config_is_found() -> None:
    """MPS with --mig-strategy mixed: the device plugin refuses to start (placement.units;
    cmd/nvidia-device-plugin/main.go), gfd still labels the sharing it was configured with:
    the labels promise units, and no device plugin registered any."""
    refused = [c for c in device_plugin_combos(refused=True) if c[2] == "mps4"
               and c[1] == "mixed" and not several_models(c[0]) and machines()[c[0]].gpus]
    assert len(refused) >= 3
    for machine, strategy, sharing in refused:
        f = empty()
        name = dp_name(machine, strategy, sharing)
        add_plugin_node(f, name, machine, strategy, sharing)
        assert [(x.node, x.check) for x in findings(f)] == [(name, "no-device-plugin")]


def test_agents_are_not_looked_for_when_pods_could_not_be_read() -> None:
    f = consistent()
    f.pods = []
    f.incomplete.append("list pods: forbidden (grant `list` on pods cluster-wide)")
    assert findings(f) == []


# -------------------------------------------------------------- consistent nodes apart


@pytest.mark.parametrize("machine", ["mixed-a100-a10", "hopper-l4-ada", "a100-40-and-80"])
def test_a_consistent_node_of_several_models_has_no_finding(machine: str) -> None:
    f = empty()
    for _, strategy, sharing in (c for c in device_plugin_combos() if c[0] == machine):
        add_plugin_node(f, dp_name(machine, strategy, sharing), machine, strategy, sharing)
    assert len(f.nodes) > 5
    assert findings(f) == []


@pytest.mark.parametrize("machine", ["h100-mig", "dgx-a100-mig-single"])
def test_a_consistent_node_whose_labels_cannot_tell_the_replicas_has_no_finding(
        machine: str) -> None:
    f = empty()
    for _, strategy, sharing in (c for c in device_plugin_combos() if c[0] == machine
                                 and replicas_unknown(*c)):
        add_plugin_node(f, dp_name(machine, strategy, sharing), machine, strategy, sharing)
    assert len(f.nodes) >= 3
    assert findings(f) == []


def test_a_dra_node_of_several_models_has_no_finding() -> None:
    f = empty()
    for machine in ("mixed-a100-a10", "hopper-l4-ada", "a100-40-and-80"):
        for gates in GATES:
            add_dra_node(f, dra_name(machine, gates), machine, gates)
    assert findings(f) == []


# ------------------------------------------------------------------- the checks, by rule
# Hand-built nodes (helpers.fleetobjects), each with a Ready gfd pod so that only the check
# under test can speak.

DP_LABELS = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8",
             "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
"""gfd's labels under --resource-manager device-plugin (gpu.replicas is the plugin's)."""
DRA_LABELS = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.count": "8",
              "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
"""gfd's labels under --resource-manager dra: no gpu.replicas."""


def with_agent(*objects: dict[str, Any]) -> Fleet:
    """The objects, and a Ready gfd pod on every node among them."""
    agents = []
    for obj in objects:
        if obj["kind"] == "Node":
            name = obj["metadata"]["name"]
            agent_pod = fo.pod(f"gfd-{name}", name, namespace="gfd")
            agent_pod["metadata"]["labels"] = {"app.kubernetes.io/name": "gfd"}
            agent_pod["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
            agents.append(agent_pod)
    return fo.fleet(*objects, *agents)


def checks_of(f: Fleet) -> list[tuple[str, str]]:
    return [(x.node, x.check) for x in findings(f)]


# pools_incubating.go: an incomplete pool (fewer slices than resourceSliceCount) and an
# invalid one are skipped by the allocator (allocator_incubating.go, allocateOne).

POOL_CASES = [
    ("a device name twice", [fo.gpu_slice("d", fo.h100s("d", 2), count=2, name="a"),
                             fo.gpu_slice("d", fo.h100s("d", 1), count=2, name="b")],
     "invalid-pool", "duplicate device name gpu-0"),
    ("a counter set published twice",
     [fo.counter_slice("d", {"s": {"memory": "80Gi"}}, count=3, name="c1"),
      fo.counter_slice("d", {"s": {"memory": "80Gi"}}, count=3, name="c2"),
      fo.gpu_slice("d", [fo.device("gpu-0", consumes=[("s", {"memory": "80Gi"})])], count=3)],
     "invalid-pool", "duplicate counter set name s"),
    ("a counter set no slice publishes",
     [fo.gpu_slice("d", [fo.device("gpu-0", consumes=[("s", {"memory": "80Gi"})])])],
     "invalid-pool", "counter set s not found"),
    ("a counter its set lacks",
     [fo.counter_slice("d", {"s": {"memory": "80Gi"}}, count=2),
      fo.gpu_slice("d", [fo.device("gpu-0", consumes=[("s", {"decoders": "1"})])], count=2)],
     "invalid-pool", "counter decoders not found in counter set s"),
    ("a slice of the generation missing", [fo.gpu_slice("d", fo.h100s("d", 4), count=2)],
     "incomplete-pool", "has 1 of its 2 ResourceSlices"),
]


@pytest.mark.parametrize("slices, expected, said", [(s, e, w) for _, s, e, w in POOL_CASES],
                         ids=[n for n, *_ in POOL_CASES])
def test_a_pool_the_allocator_skips_is_found_with_why(slices: list[dict[str, Any]],
                                                      expected: str, said: str) -> None:
    f = with_agent(fo.node("d", labels=DRA_LABELS), *slices)
    found = [x for x in findings(f) if x.check.endswith("-pool")]
    assert [(x.node, x.check) for x in found] == [("d", expected)]
    assert said in found[0].message


def test_a_complete_valid_pool_is_no_finding() -> None:
    f = with_agent(fo.node("d", labels=DRA_LABELS), fo.gpu_slice("d", fo.h100s("d")))
    assert checks_of(f) == []


# A node gfd labelled a GPU node that no device plugin or DRA driver serves.

UNSERVED = [
    ("device-plugin labels, no GPU resource at all", DP_LABELS, {}, "no-device-plugin"),
    ("device-plugin labels, nvidia.com/gpu kept at 0 by the kubelet", DP_LABELS,
     {GPU: "0"}, "no-device-plugin"),
    ("gpu.count alone (GFD without gpu.present)", {"nvidia.com/gpu.count": "4",
                                                   "nvidia.com/gpu.replicas": "1"}, {},
     "no-device-plugin"),
    ("gpu.present alone", {"nvidia.com/gpu.present": "true"}, {}, "no-device-plugin"),
    ("the DRA labels (gpu.present, gpu.count, no gpu.replicas), no slice", DRA_LABELS, {},
     "no-slices"),
    ("the DRA labels and nvidia.com/gpu at 0", DRA_LABELS, {GPU: "0"}, "no-slices"),
]


@pytest.mark.parametrize("labels, allocatable, expected",
                         [(lab, a, e) for _, lab, a, e in UNSERVED], ids=[n for n, *_ in UNSERVED])
def test_a_labelled_gpu_node_nothing_serves_is_found(labels: dict[str, str],
                                                     allocatable: dict[str, str],
                                                     expected: str) -> None:
    f = with_agent(fo.node("n", labels=labels, allocatable=allocatable, capacity=allocatable))
    assert checks_of(f) == [("n", expected)]


@pytest.mark.parametrize("labels", [DP_LABELS, DRA_LABELS], ids=["device-plugin labels",
                                                                 "DRA labels"])
def test_a_labelled_gpu_node_with_slices_is_served(labels: dict[str, str]) -> None:
    """Slices there: the DRA driver serves it (a device-plugin-labelled node under DRA is
    the driver's; dra-slices compares the rest)."""
    f = with_agent(fo.node("n", labels=labels), fo.gpu_slice("n", fo.h100s("n")))
    assert [c for c in checks_of(f) if c[1] in ("no-device-plugin", "no-slices")] == []


def test_a_node_labelled_with_no_gpu_is_no_finding() -> None:
    f = with_agent(fo.node("n", labels={"nvidia.com/gpu.count": "0",
                                        "nvidia.com/gpu.present": "false"}))
    assert checks_of(f) == []


# A node resource beyond an int64: the scheduler holds each as an int64 (framework.Resource:
# MilliCPU, Memory, ScalarResources), CPU in thousandths (MilliValue).

QUANTITIES = [
    ("nvidia.com/gpu beyond an int64", {GPU: "1e19"}, GPU),
    ("pods beyond an int64", {"pods": "9223372036854775808"}, "pods"),
    ("cpu beyond an int64 in thousandths", {"cpu": "9300000000000000"}, "cpu"),
]


@pytest.mark.parametrize("allocatable, resource", [(a, r) for _, a, r in QUANTITIES],
                         ids=[n for n, *_ in QUANTITIES])
def test_a_node_quantity_the_scheduler_cannot_hold_is_found(allocatable: dict[str, str],
                                                            resource: str) -> None:
    allocatable = dict(allocatable)
    pods = allocatable.pop("pods", "110")
    f = with_agent(fo.node("n", labels=DP_LABELS, allocatable={GPU: "8", **allocatable},
                           capacity={GPU: "8"}, pods=pods))
    found = [x for x in findings(f) if x.check == "quantity"]
    assert [(x.node, x.check) for x in found] == [("n", "quantity")]
    assert found[0].message.startswith(f"{resource} is ")


def test_the_same_text_is_a_quantity_the_scheduler_holds_for_memory_not_for_cpu() -> None:
    """9.3e15 bytes fit an int64; 9.3e15 CPUs are 9.3e18 thousandths, which do not."""
    big = "9300000000000000"
    f = with_agent(fo.node("n", labels=DP_LABELS, allocatable={GPU: "8", "memory": big},
                           capacity={GPU: "8"}))
    assert checks_of(f) == []
    assert f.nodes["n"].allocatable["memory"] == 9_300_000_000_000_000


def test_checks_lists_every_check_a_finding_can_name() -> None:
    """``CHECKS`` (what /metrics exports at 0 when nothing is found) is every check the
    module can name, and docs/fleet.md's table has each."""
    import re
    from pathlib import Path

    import gfd.fleet.checks as module
    from gfd.fleet.checks import CHECKS

    text = Path(module.__file__).read_text()
    named = set(re.findall(r'check="([a-z-]+)"', text)) | set(
        re.findall(r'"([a-z-]+-units)"', text))
    assert named == set(CHECKS) and len(CHECKS) == len(set(CHECKS))
    doc = (Path(__file__).resolve().parents[2] / "docs" / "fleet.md").read_text()
    assert all(f"| `{c}` |" in doc for c in CHECKS), [c for c in CHECKS
                                                      if f"| `{c}` |" not in doc]
