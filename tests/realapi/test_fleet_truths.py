"""`gfd fleet`'s counting rules one at a time, each against the real kube-scheduler: what gfd
says is free, or fits, is what kube-scheduler binds, and one pod more is refused.

Each scenario puts a few Nodes on a control plane of this module's own
(tests/helpers/fleettruths.py: the rules include which DeviceClass serves an extended
resource, and the session's fleet relies on the chart's classes as they are), as the real
components leave them: a kubelet's Node (``pods: 110`` unless the scenario says otherwise),
gfd's labels, the device plugin's allocatable units, the NVIDIA DRA driver's ResourceSlices.
It passes ``Truths.sync`` (kube-scheduler has seen all of it), runs `gfd fleet -o json -l
<its label>` in this process, and probes.

The truth is what kube-scheduler binds, never gfd's output. A probe creates, at once,
max(gfd's number, the rule's number) + 1 pods and waits until the scheduler has tried each
(bound, or ``PodScheduled=False`` Unschedulable): so a gfd that says the rule's number sees
exactly one refused, and one that says anything else fails with the scheduler's own count in
the message. That the scheduler binds the rule's number (the Kubernetes source is cited at
each scenario) is asserted after, and the refusal's own words where they name the rule.

1. Pod slots: a device-plugin node with ``pods: 3`` and two CPU-only pods bound.
2. DRA migration: allocatable ``nvidia.com/gpu: 0`` and the driver's slices.
3. Two DeviceClasses naming ``nvidia.com/gpu``: the newer one serves it; at the same second,
   the lower name.
4. The cluster's ``gpu.nvidia.com`` with a selector of its own.
5. A class selector written with double-quoted strings.
6. Invalid DynamicMIG pools: a counter set no slice publishes, one published twice, a counter
   its set lacks.
7. A nominated pod that keeps its nomination.
8. Nodes tainted ``nvidia.com/gpu``: the printed stanza binds as printed.
9. Cordoned nodes, device plugin and DRA.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from helpers import fleetbuild
from helpers.controlplane import ASSETS_ENV, ENABLE_HINT, assets_from_env
from helpers.fleetbuild import GPU_CLASS, MIG_CLASS, NAMESPACE, Batch, Outcome
from helpers.fleettruths import (
    CLASSES,
    Truths,
    chart_classes,
    device_class,
    gfd_fleet,
    machine,
    one_unit_pods,
    row,
    rows,
    stanza_pods,
    start,
)

from gfd.dra import DEVICE_CLASSES, DRIVER, DYNAMIC_MIG

JSON = dict[str, Any]
GPU = "nvidia.com/gpu"
H100 = "NVIDIA H100 80GB HBM3"
pytestmark = pytest.mark.timeout(300)
"""The first test starts this module's control plane (5-15 s on 2 cores, more when busy)."""
SKIP_REASON = f"real API server tier off: {ASSETS_ENV} is unset; to run it: {ENABLE_HINT}"
"""tests/conftest.py's words, so the skip folds with the tier's others."""
_serial = itertools.count(1)


@pytest.fixture(scope="module")
def truths(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Truths]:
    assets = assets_from_env()
    if assets is None:
        pytest.skip(SKIP_REASON)
    built = start(assets, tmp_path_factory.mktemp("fleet-truths"))
    try:
        yield built
    finally:
        built.plane.stop()


def label(stem: str) -> str:
    return f"{stem}-{next(_serial)}"


def probe(truths: Truths, make: Callable[[int], Batch], *, said: int, rule: int, what: str,
          said_per_node: dict[str, int] | None = None, refusal: str = "") -> Outcome:
    """Create max(said, rule) + 1 pods (``make(count)``) at once, let kube-scheduler try each,
    free them; then hold gfd's ``said`` to what bound, and what bound to the rule."""
    count = max(said, rule) + 1
    batch = make(count)
    try:
        outcome = truths.fleet.run(batch)
    finally:
        truths.fleet.release(batch.label)
    bound = len(outcome.bound)
    refused = sorted(set(outcome.refused.values()))[:2]
    assert (bound, len(outcome.refused)) == (said, count - said), (
        f"{what}: gfd says {said}; of {count} pods kube-scheduler bound {bound} "
        f"{dict(outcome.per_node())} and refused {len(outcome.refused)}: {refused}")
    assert bound == rule, f"{what}: kube-scheduler bound {bound} where the rule says {rule}"
    if said_per_node is not None:
        assert dict(outcome.per_node()) == said_per_node, (
            f"{what}: gfd says {said_per_node}; kube-scheduler bound {dict(outcome.per_node())}")
    if refusal:
        assert all(refusal in m for m in outcome.refused.values()), (what, refused)
    return outcome


def fits_of(truths: Truths, scenario: str, *filters: str) -> JSON:
    return dict(gfd_fleet(truths, scenario, *filters)["fits"])


def said_per_node(fits: JSON) -> dict[str, int]:
    return {n["node"]: n["pods"] for n in fits["nodes"] if n["pods"]}


def probe_fits(truths: Truths, scenario: str, fits: JSON, *, rule: int, what: str,
               refusal: str = "") -> Outcome:
    """Pods made exactly from `fits.selector` (no toleration of the test's own)."""
    stem = label(scenario)
    return probe(truths, lambda n: stanza_pods(fits, n, stem, scenario), said=fits["pods"],
                 rule=rule, what=what, said_per_node=said_per_node(fits), refusal=refusal)


def kind_rows(report: JSON, manager: str, resource: str) -> list[JSON]:
    return [k for k in report["kinds"] if (k["manager"], k["resource"]) == (manager, resource)]


# --------------------------------------------------------------------------- 1. pod slots


SLOTS = "slots"


@pytest.fixture(scope="class")
def slots(truths: Truths) -> Iterator[JSON]:
    """An 8-GPU device-plugin node whose kubelet allows 3 pods, two CPU-only pods bound
    there by the scheduler."""
    try:
        truths.device_classes(chart_classes())
        truths.node(SLOTS, SLOTS, machine("hgx-h100"), allocatable={"pods": "3"})
        for i in range(2):
            truths.plane.create(fleetbuild.pod(f"cpu-only-{i}", "cpu-only", nodes=[SLOTS],
                                               limits=[{"cpu": 1}], tolerate=False))
        placed = truths.fleet.settle("cpu-only", 2)
        assert placed.bound == {"cpu-only-0": SLOTS, "cpu-only-1": SLOTS}, placed
        truths.sync()
        yield gfd_fleet(truths, SLOTS)
    finally:
        truths.end()


class TestPodSlots:
    """``pods`` is an allocatable resource like any other: a node with as many bound,
    unfinished pods (GPU or not) as ``pods`` allocatable takes no more ("Too many pods",
    ``pkg/scheduler/framework/plugins/noderesources/fit.go``, ``fitsRequest``). 8 GPUs and
    3 slots, 2 taken: 1 GPU pod fits."""

    def test_the_nodes_row_says_one_free_and_one_pod_slot(self, slots: JSON) -> None:
        r = row(slots, SLOTS, GPU)
        got = {k: r.get(k) for k in ("total", "allocated", "free", "freePodSlots")}
        assert got == {"total": 8, "allocated": 0, "free": 1, "freePodSlots": 1}, (
            f"gfd's row of {SLOTS}: {got}")

    def test_the_kinds_free_counts_the_one(self, slots: JSON) -> None:
        (kind,) = kind_rows(slots, "device-plugin", GPU)
        assert (kind["total"], kind["free"]) == (8, 1), f"gfd's kind: {kind}"

    def test_one_gpu_pod_binds_and_the_next_is_refused_for_want_of_a_pod_slot(
            self, truths: Truths, slots: JSON) -> None:
        stem = label("slots")
        probe(truths, lambda n: one_unit_pods(stem, SLOTS, n, resource=GPU),
              said=row(slots, SLOTS, GPU)["free"], rule=1, what="one-GPU pods on a node "
              "with 1 pod slot left", refusal="Too many pods")


# --------------------------------------------------------------------------- 2. DRA migration


MIGRATED = "migrated"


@pytest.fixture(scope="class")
def migrated(truths: Truths) -> Iterator[None]:
    """A node moved from the device plugin to the DRA driver: the kubelet keeps the removed
    plugin's resource at ``nvidia.com/gpu: 0`` (``pkg/kubelet/nodestatus/setters.go``), the
    driver publishes 2 H100s, the chart's ``gpu.nvidia.com`` names ``nvidia.com/gpu``."""
    try:
        truths.device_classes(chart_classes())
        truths.node(MIGRATED, MIGRATED, machine("hgx-h100", 2), dra=True,
                    allocatable={GPU: "0"})
        truths.sync()
        yield
    finally:
        truths.end()


class TestDraMigration:
    """``filterExtendedResources``
    (``pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources.go``): a
    resource some DeviceClass maps, on a node whose allocatable of it is 0 (or absent), is
    allocated through DRA, from that class's devices: 2 plain ``nvidia.com/gpu: 1`` pods."""

    def test_plain_gpu_pods_from_the_stanza_bind_on_the_drivers_devices(
            self, truths: Truths, migrated: None) -> None:
        fits = fits_of(truths, MIGRATED, "--product", "H100")
        probe_fits(truths, MIGRATED, fits, rule=2, what="nvidia.com/gpu pods on a node "
                   "with nvidia.com/gpu: 0 and 2 DRA GPUs")


# --------------------------------------------------------------------------- 3. two classes


TWO_CLASSES = "two-classes"
NEWER, SAME_SECOND = "newer", "same-second"
"""The two scenarios' Node name suffixes: a Node is never made again under a name just freed."""


def h100_node(case: str) -> str:
    return f"classes-h100-{case}"


def a100_node(case: str) -> str:
    return f"classes-a100-{case}"


H100_CLASS = "h100-only.gfd-test.example"
"""Named after ``gpu.nvidia.com`` in order: the newer class is not the lower name."""
H100_CEL = (f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'gpu' && "
            f"device.attributes['{DRIVER}'].productName == '{H100}'")


def _created(obj: JSON) -> str:
    return str(obj["metadata"]["creationTimestamp"])


def _two_classes(truths: Truths, *, same_second: bool) -> None:
    """The chart's classes and ``H100_CLASS`` (H100s only, naming ``nvidia.com/gpu`` too):
    ``gpu.nvidia.com`` made first and a second older, or both of one second
    (creationTimestamp has whole seconds: made again until the stamps are as asked)."""
    chart = chart_classes()
    truths.device_classes({MIG_CLASS: chart[MIG_CLASS]})
    h100 = device_class(H100_CLASS, H100_CEL, extended=GPU)
    older = truths.plane.create(chart[GPU_CLASS])
    case = SAME_SECOND if same_second else NEWER
    truths.node(h100_node(case), TWO_CLASSES, machine("hgx-h100", 2), dra=True)
    truths.node(a100_node(case), TWO_CLASSES, machine("mixed-a100-a10", 2), dra=True)
    deadline = time.monotonic() + 30
    while True:
        newer = truths.plane.create(h100)
        if (_created(newer) == _created(older)) is same_second:
            break
        assert time.monotonic() < deadline, (_created(older), _created(newer))
        truths.plane.delete(f"{CLASSES}/{H100_CLASS}")
        if same_second:
            truths.plane.delete(f"{CLASSES}/{GPU_CLASS}")
            older = truths.plane.create(chart[GPU_CLASS])
    truths.sync()


@pytest.fixture(scope="class")
def newer_class(truths: Truths) -> Iterator[None]:
    try:
        _two_classes(truths, same_second=False)
        yield
    finally:
        truths.end()


@pytest.fixture(scope="class")
def classes_of_one_second(truths: Truths) -> Iterator[None]:
    try:
        _two_classes(truths, same_second=True)
        yield
    finally:
        truths.end()


TWO_CLASS_FILTERS = ("--min-memory", "40000")
"""Both nodes' GPUs have 80 GB: the filters admit both, the class decides."""


class TestTheNewerOfTwoClassesServesTheResource:
    """Two DeviceClasses name ``nvidia.com/gpu``: the class created later is picked, and of
    two created at the same time the name sorted first
    (``staging/src/k8s.io/api/resource/v1/types.go``, ``DeviceClassSpec.ExtendedResourceName``;
    ``pkg/scheduler/framework/plugins/dynamicresources/extended/``). The newer here selects
    H100s only: the A100 node's GPUs serve no ``nvidia.com/gpu`` pod."""

    def test_pods_from_the_stanza_bind_on_the_newer_classes_devices_only(
            self, truths: Truths, newer_class: None) -> None:
        fits = fits_of(truths, TWO_CLASSES, *TWO_CLASS_FILTERS)
        outcome = probe_fits(truths, TWO_CLASSES, fits, rule=2,
                             what="nvidia.com/gpu pods, the newer class selecting H100s")
        assert set(outcome.bound.values()) == {h100_node(NEWER)}


class TestOfTwoClassesOfOneSecondTheLowerNameServes:
    __doc__ = TestTheNewerOfTwoClassesServesTheResource.__doc__

    def test_pods_from_the_stanza_bind_on_the_lower_names_devices(
            self, truths: Truths, classes_of_one_second: None) -> None:
        fits = fits_of(truths, TWO_CLASSES, *TWO_CLASS_FILTERS)
        outcome = probe_fits(truths, TWO_CLASSES, fits, rule=4,
                             what="nvidia.com/gpu pods, gpu.nvidia.com the lower name")
        assert dict(outcome.per_node()) == {h100_node(SAME_SECOND): 2, a100_node(SAME_SECOND): 2}


# --------------------------------------------------------------------------- 4. own selector


OWN_SELECTOR = "own-selector"
A10 = "NVIDIA A10"


@pytest.fixture(scope="class")
def own_selector(truths: Truths) -> Iterator[None]:
    """The cluster's ``gpu.nvidia.com`` admits A10s only; a node of 2 A100 80GB and an A10."""
    try:
        classes = chart_classes()
        classes[GPU_CLASS] = device_class(
            GPU_CLASS, DEVICE_CLASSES[GPU_CLASS],
            f"device.attributes['{DRIVER}'].productName == '{A10}'", extended=GPU)
        truths.device_classes(classes)
        truths.node(OWN_SELECTOR, OWN_SELECTOR, machine("mixed-a100-a10"), dra=True)
        truths.sync()
        yield
    finally:
        truths.end()


class TestTheClustersClassWithASelectorOfItsOwn:
    """A claim's device meets its class's selectors and its own
    (``staging/src/k8s.io/dynamic-resource-allocation/structured``, the allocator's
    ``isSelectable``): the class the API server holds counts, not the chart's copy. No A100
    is selectable (the chart's copy would say 2); the A10 is."""

    @pytest.mark.parametrize(("product", "rule"), [("A100", 0), ("A10", 1)])
    def test_claims_from_the_printed_template_bind_what_gfd_says(
            self, truths: Truths, own_selector: None, product: str, rule: int) -> None:
        fits = fits_of(truths, OWN_SELECTOR, "--dra", "--product", product)
        probe_fits(truths, OWN_SELECTOR, fits, rule=rule,
                   what=f"claims for {product} of a class admitting A10s only")


# --------------------------------------------------------------------------- 5. double quotes


QUOTED = "double-quoted"
QUOTED_CEL = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'


@pytest.fixture(scope="class")
def quoted(truths: Truths) -> Iterator[None]:
    """``gpu.nvidia.com`` as the chart's, its selector written with double-quoted strings; a
    node of 2 H100s."""
    try:
        classes = chart_classes()
        classes[GPU_CLASS] = device_class(GPU_CLASS, QUOTED_CEL, extended=GPU)
        truths.device_classes(classes)
        truths.node(QUOTED, QUOTED, machine("hgx-h100", 2), dra=True)
        truths.sync()
        yield
    finally:
        truths.end()


class TestADoubleQuotedClassSelector:
    """CEL's string literals take single or double quotes (cel-go, which
    ``staging/src/k8s.io/dynamic-resource-allocation/cel/compile.go`` compiles selectors
    with): the class selects both H100s, through its extended resource and through a claim."""

    @pytest.mark.parametrize("filters", [("--product", "H100"), ("--dra", "--product", "H100")],
                             ids=" ".join)
    def test_its_devices_count(self, truths: Truths, quoted: None,
                               filters: tuple[str, ...]) -> None:
        fits = fits_of(truths, QUOTED, *filters)
        probe_fits(truths, QUOTED, fits, rule=2, what=f"{' '.join(filters)} on a class "
                   "selector in double quotes")
        assert fits.get("cannotTell") == 0, f"gfd's fits: {fits}"


# --------------------------------------------------------------------------- 6. invalid pools


INVALID = "invalid-pool"
VALID_NODE = "pool-valid"


def _missing_set(slices: list[JSON]) -> list[JSON]:
    """A partition consumes a counter set that no slice of the pool publishes."""
    slices[1]["spec"]["devices"][1]["consumesCounters"][0]["counterSet"] = "gpu-9-counter-set"
    return slices


def _set_twice(slices: list[JSON]) -> list[JSON]:
    """The pool's counter set published again, in a slice of its own."""
    again = json.loads(json.dumps(slices[0]))
    again["metadata"]["name"] += "-again"
    slices.append(again)
    for rs in slices:
        rs["spec"]["pool"]["resourceSliceCount"] = len(slices)
    return slices


def _counter_lacking(slices: list[JSON]) -> list[JSON]:
    """A partition consumes a counter its counter set does not have."""
    consumed = slices[1]["spec"]["devices"][1]["consumesCounters"][0]["counters"]
    consumed["tensor-cores"] = {"value": "1"}
    return slices


INVALID_POOLS = {"pool-missing-set": _missing_set, "pool-set-twice": _set_twice,
                 "pool-counter-lacking": _counter_lacking}


@pytest.fixture(scope="class")
def invalid(truths: Truths) -> Iterator[JSON]:
    """One-H100 DynamicMIG nodes (the driver's counter-set slice and device slice): one
    valid, and one per way a pool's counters can be invalid; `gfd fleet --check`."""
    try:
        truths.device_classes(chart_classes())
        gates = {DYNAMIC_MIG: True}
        truths.node(VALID_NODE, INVALID, machine("h100-mig", 1), dra=True, gates=gates)
        for name, alter in INVALID_POOLS.items():
            truths.node(name, INVALID, machine("h100-mig", 1), dra=True, gates=gates,
                        alter=alter)
        truths.sync()
        yield gfd_fleet(truths, INVALID, "--check", codes=(0, 1))
    finally:
        truths.end()


class TestAnInvalidCounterPool:
    """The API server cannot refuse these (counter sets and devices may sit in different
    slices); the allocator finds the pool invalid (``GatherPools``,
    ``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/incubating/
    pools_incubating.go``) and skips it whole for every claim (``allocator_incubating.go``).
    The scheduler's refusal says "invalid resource pools were encountered" (on any node while
    some pool is invalid, the valid one's included: the count, not the words, is the proof).
    The valid pool beside them gives its GPU."""

    @pytest.mark.parametrize("node", sorted(INVALID_POOLS))
    def test_every_row_of_the_pool_says_free_0(self, invalid: JSON, node: str) -> None:
        free = {(r["resource"], r["migProfile"]): r["free"] for r in rows(invalid, node)}
        assert free and set(free.values()) == {0}, f"gfd's free on {node}'s rows: {free}"

    def test_check_names_each_invalid_pool_and_no_other(self, invalid: JSON) -> None:
        named = sorted(f["node"] for f in invalid.get("findings", [])
                       if f["check"] == "invalid-pool")
        assert named == sorted(INVALID_POOLS), [
            (f["node"], f["check"]) for f in invalid.get("findings", [])]

    @pytest.mark.parametrize("device_class", [GPU_CLASS, MIG_CLASS])
    @pytest.mark.parametrize("node", sorted(INVALID_POOLS))
    def test_claims_bind_nothing_there(self, truths: Truths, invalid: JSON, node: str,
                                       device_class: str) -> None:
        said = sum(r["free"] for r in rows(invalid, node) if r["resource"] == device_class)
        stem = label("invalid")
        probe(truths, lambda n: one_unit_pods(stem, node, n, device_class=device_class),
              said=said, rule=0, what=f"{device_class} claims on {node}",
              refusal="invalid resource pools were encountered")

    def test_the_valid_pool_beside_them_gives_its_gpu(self, truths: Truths,
                                                       invalid: JSON) -> None:
        stem = label("valid")
        probe(truths, lambda n: one_unit_pods(stem, VALID_NODE, n, device_class=GPU_CLASS),
              said=row(invalid, VALID_NODE, GPU_CLASS)["free"], rule=1,
              what="whole-GPU claims on the valid pool")


# --------------------------------------------------------------------------- 7. nominated


NOMINATED = "nominated"
PRIORITY = "gfd-test-nominated"
HELD = "held"
HELD_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods/{HELD}"


@pytest.fixture(scope="class")
def nominated(truths: Truths) -> Iterator[JSON]:
    """A 4-GPU device-plugin node; a pending pod of priority 1000 that never preempts
    (``preemptionPolicy: Never``), asking 2 GPUs, whose nodeSelector no node meets, nominated
    to the node through its status (held by a scheduling gate until then, so the scheduler
    first tries it nominated); read back after the scheduler has tried it."""
    try:
        truths.device_classes(chart_classes())
        truths.node(NOMINATED, NOMINATED, machine("hgx-h100", 4))
        truths.make({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": PRIORITY}, "value": 1000,
                     "preemptionPolicy": "Never"})
        pod = fleetbuild.pod(HELD, HELD, limits=[{GPU: 2}])
        pod["spec"].update({"nodeSelector": {"gfd-test.example/nowhere": "true"},
                            "priorityClassName": PRIORITY,
                            "schedulingGates": [{"name": "gfd-test.example/hold"}]})
        truths.plane.create(pod)
        truths.plane.patch(f"{HELD_PATH}/status", {"status": {"nominatedNodeName": NOMINATED}})
        truths.plane.patch(HELD_PATH, {"spec": {"schedulingGates": None}})
        tried = truths.fleet.settle(HELD, 1)
        assert not tried.bound, tried
        truths.sync()
        held = truths.plane.get(HELD_PATH)
        assert held and held["status"].get("nominatedNodeName") == NOMINATED, held
        yield gfd_fleet(truths, NOMINATED)
    finally:
        truths.end()


class TestANominatedPod:
    """Before filtering a node the scheduler adds the requests of the pods of equal or higher
    priority nominated to it (``RunFilterPluginsWithNominatedPods`` / ``addGENominatedPods``,
    ``pkg/scheduler/framework/runtime/framework.go``); a pod that may not preempt keeps its
    nomination (``PodEligibleToPreemptOthers``, ``pkg/scheduler/framework/plugins/
    defaultpreemption/default_preemption.go``: "not eligible due to preemptionPolicy=Never").
    4 free, 2 nominated: 2 one-GPU pods of priority 0 bind."""

    def test_the_nodes_row_says_two_nominated_and_two_free(self, nominated: JSON) -> None:
        r = row(nominated, NOMINATED, GPU)
        got = {k: r.get(k) for k in ("total", "allocated", "nominated", "free")}
        assert got == {"total": 4, "allocated": 0, "nominated": 2, "free": 2}, (
            f"gfd's row of {NOMINATED}: {got}")

    def test_the_kind_says_so_too(self, nominated: JSON) -> None:
        (kind,) = kind_rows(nominated, "device-plugin", GPU)
        assert (kind.get("nominated"), kind["free"]) == (2, 2), f"gfd's kind: {kind}"

    def test_two_lower_priority_pods_bind_beside_the_nomination(
            self, truths: Truths, nominated: JSON) -> None:
        stem = label("beside")
        probe(truths, lambda n: one_unit_pods(stem, NOMINATED, n, resource=GPU),
              said=row(nominated, NOMINATED, GPU)["free"], rule=2,
              what="one-GPU pods beside a nominated 2-GPU pod",
              refusal="Insufficient nvidia.com/gpu")
        held = truths.plane.get(HELD_PATH)
        assert held and held["status"].get("nominatedNodeName") == NOMINATED, held


# --------------------------------------------------------------------------- 8. tainted nodes


TAINTED = "tainted"
T_PLUGIN, T_DRA, T_DEDICATED = "tainted-plugin", "tainted-dra", "tainted-dedicated"
GPU_TAINT = (GPU, "present", "NoSchedule")


@pytest.fixture(scope="class")
def tainted(truths: Truths) -> Iterator[None]:
    """Three 2-H100 nodes tainted ``nvidia.com/gpu``: a device-plugin one (``NoSchedule``, as
    the GPU Operator and the clouds' GPU pools taint), a DRA one (``NoExecute``), and a
    device-plugin one also tainted ``dedicated=ml:NoSchedule``."""
    try:
        truths.device_classes(chart_classes())
        truths.node(T_PLUGIN, TAINTED, machine("hgx-h100", 2), taints=[GPU_TAINT])
        truths.node(T_DRA, TAINTED, machine("hgx-h100", 2), dra=True,
                    taints=[(GPU, "present", "NoExecute")])
        truths.node(T_DEDICATED, TAINTED, machine("hgx-h100", 2),
                    taints=[GPU_TAINT, ("dedicated", "ml", "NoSchedule")])
        truths.sync()
        yield
    finally:
        truths.end()


class TestTheTaintedNodesStanzaBindsAsPrinted:
    """A pod tolerates a taint only if its spec says so (``TaintToleration``,
    ``pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go``; the
    ``ExtendedResourceToleration`` admission plugin that would add it is off by default, and a
    claim never gets it): the stanza gfd prints for nodes it counts as tolerable must carry
    ``{key, operator: Exists}`` for each tolerated key they carry. Each probe first proves the
    nodes' room with the tolerations added (a control), then binds the stanza as printed."""

    CASES = [
        # the plugin node's 2 and the DRA node's 2 (nvidia.com/gpu through gpu.nvidia.com);
        # the dedicated node is left out, and its taint stays untolerated
        (("--product", "H100"), (GPU,), {T_PLUGIN: 2, T_DRA: 2}),
        (("--product", "H100", "--tolerate", "dedicated"), (GPU, "dedicated"),
         {T_PLUGIN: 2, T_DRA: 2, T_DEDICATED: 2}),
        (("--product", "H100", "--dra"), (GPU,), {T_DRA: 2}),
    ]

    @pytest.mark.parametrize(("filters", "keys", "room"), CASES,
                             ids=[" ".join(c[0]) for c in CASES])
    def test_pods_from_the_printed_stanza_bind(
            self, truths: Truths, tainted: None, filters: tuple[str, ...],
            keys: tuple[str, ...], room: dict[str, int]) -> None:
        fits = fits_of(truths, TAINTED, *filters)
        rule = sum(room.values())
        stem = label("tolerating")
        control = probe(truths, lambda n: stanza_pods(fits, n, stem, TAINTED, tolerate=keys),
                        said=rule, rule=rule, what="the control: the stanza with "
                        f"tolerations of {keys} added")
        assert dict(control.per_node()) == room
        probe_fits(truths, TAINTED, fits, rule=rule, what=f"{' '.join(filters)}: the stanza "
                   "as printed")

    def test_the_label_forms_fragment_names_each_tolerated_key(
            self, truths: Truths, tainted: None) -> None:
        selector = fits_of(truths, TAINTED, "--product", "H100", "--tolerate",
                           "dedicated")["selector"]
        assert sorted(t["key"] for t in selector.get("tolerations", [])) == [
            "dedicated", GPU], f"gfd's pod fragment: {selector}"


# --------------------------------------------------------------------------- 9. cordoned


CORDONED = "cordoned"
C_PLUGIN, C_DRA = "cordoned-plugin", "cordoned-dra"


@pytest.fixture(scope="class")
def cordoned(truths: Truths) -> Iterator[JSON]:
    """An 8-GPU device-plugin node and a 2-H100 DRA node, both cordoned."""
    try:
        truths.device_classes(chart_classes())
        truths.node(C_PLUGIN, CORDONED, machine("hgx-h100"), unschedulable=True)
        truths.node(C_DRA, CORDONED, machine("hgx-h100", 2), dra=True, unschedulable=True)
        truths.sync()
        yield gfd_fleet(truths, CORDONED)
    finally:
        truths.end()


class TestACordonedNode:
    """``NodeUnschedulable``
    (``pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go``) rejects a
    cordoned node for a pod that does not tolerate ``node.kubernetes.io/unschedulable``; a GPU
    pod tolerates ``nvidia.com/gpu`` alone: nothing binds, device plugin or DRA."""

    CASES = {C_PLUGIN: (GPU, {"resource": GPU}), C_DRA: (GPU_CLASS, {"device_class": GPU_CLASS})}
    """node -> its row's resource, and what a one-unit pod there asks."""

    @pytest.mark.parametrize("node", sorted(CASES))
    def test_its_row_says_free_0(self, cordoned: JSON, node: str) -> None:
        r = row(cordoned, node, self.CASES[node][0])
        assert (r["state"], r["free"]) == ("cordoned", 0), f"gfd's row of {node}: {r}"

    @pytest.mark.parametrize("node", sorted(CASES))
    def test_one_unit_pods_bind_nothing_there(self, truths: Truths, cordoned: JSON,
                                              node: str) -> None:
        resource, asks = self.CASES[node]
        stem = label("cordon")
        probe(truths, lambda n: one_unit_pods(stem, node, n, **asks),
              said=row(cordoned, node, resource)["free"], rule=0,
              what=f"one-unit pods on the cordoned {node}", refusal="unschedulable")
