"""DRA devices as the scheduler's allocator sees them
(``staging/src/k8s.io/dynamic-resource-allocation/structured/internal/stable``):
``GatherPools`` keeps the newest generation of each (driver, pool) and drops older slices;
a device is in use while a claim's allocation names it; ``allocateDevice`` refuses a device
with a ``NoSchedule``/``NoExecute`` taint an ordinary claim does not tolerate, and
``checkAvailableCounters`` a device whose consumption would take any counter of its pool
below zero after the allocated devices' consumption. So under the driver's ``DynamicMIG``
a whole GPU allocated leaves none of its partitions, and a partition leaves the whole GPU
unavailable.

The slices are the driver's (``gfd.devices.resource_slices`` of ``h100-mig`` and
``gb200-nvl``); the expected counts come from that rule, applied here to the slices' own
counter sets one claim after the other in slice order (``simulated_free``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from helpers import fleetobjects as fo

from gfd.devices import resource_slices
from gfd.fleet import pools
from gfd.fleet.model import Claim, Device, Slice, claim_of, slice_of
from gfd.readers.simulate import simulate

DRIVER = "gpu.nvidia.com"
DYNAMIC = {"DynamicMIG": True}
Raw = dict[str, Any]


def device(name: str, pool: str = "n", driver: str = DRIVER) -> Device:
    return Device(driver=driver, pool=pool, name=name, node=pool, attributes={"type": "gpu"},
                  capacity={})


def make_slice(pool: str, generation: int, names: list[str], *, count: int = 1,
               driver: str = DRIVER) -> Slice:
    return Slice(driver=driver, pool=pool, generation=generation, count=count, node=pool,
                 devices=tuple(device(n, pool, driver) for n in names))


def names(pool: pools.Pool) -> list[str]:
    return [d.name for d in pool.devices]


# ---------------------------------------------------------------------------- generations


@pytest.mark.parametrize("order", ["old first", "new first"])
def test_only_the_newest_generation_of_a_pool_counts(order: str) -> None:
    old = [make_slice("n", 1, ["gpu-0", "gpu-1"]), make_slice("n", 1, ["gpu-2"], count=2)]
    new = [make_slice("n", 2, ["gpu-0"], count=2), make_slice("n", 2, ["gpu-3"], count=2)]
    gathered = pools.gather(old + new if order == "old first" else new + old)
    assert list(gathered) == [(DRIVER, "n")]
    pool = gathered[(DRIVER, "n")]
    assert (pool.generation, pool.expected, pool.slices) == (2, 2, 2)
    assert sorted(names(pool)) == ["gpu-0", "gpu-3"]
    assert pool.complete


def test_a_generation_missing_slices_is_incomplete() -> None:
    gathered = pools.gather([make_slice("n", 3, ["gpu-0"], count=2)])
    assert not gathered[(DRIVER, "n")].complete


def test_pools_are_told_apart_by_driver_and_name() -> None:
    gathered = pools.gather([make_slice("a", 1, ["gpu-0"]), make_slice("b", 1, ["gpu-0"]),
                             make_slice("a", 1, ["dev-0"], driver="nic.example.com")])
    assert set(gathered) == {(DRIVER, "a"), (DRIVER, "b"), ("nic.example.com", "a")}


def test_counter_sets_come_from_the_newest_generation() -> None:
    older = Slice(driver=DRIVER, pool="n", generation=1, count=1, node="n", devices=(),
                  counters=(("gpu-0-counter-set", {"memory": 10}),))
    newer = Slice(driver=DRIVER, pool="n", generation=2, count=1, node="n", devices=(),
                  counters=(("gpu-0-counter-set", {"memory": 20}),))
    assert pools.gather([newer, older])[(DRIVER, "n")].counters == {
        "gpu-0-counter-set": {"memory": 20}}


# ---------------------------------------------------------------------------- allocations


def test_each_allocated_device_is_held_by_its_claim() -> None:
    claims = [Claim(namespace="ml", name="a", allocated=((DRIVER, "n", "gpu-0"),)),
              Claim(namespace="ml", name="b", allocated=((DRIVER, "n", "gpu-1"),
                                                         (DRIVER, "m", "gpu-0"))),
              Claim(namespace="ml", name="pending")]
    held = pools.allocated(claims)
    assert held.devices == {(DRIVER, "n", "gpu-0"): "ml/a", (DRIVER, "n", "gpu-1"): "ml/b",
                            (DRIVER, "m", "gpu-0"): "ml/b"}
    assert held.shares == {}


def test_an_allocated_device_is_not_free() -> None:
    pool = pools.gather([make_slice("n", 1, ["gpu-0", "gpu-1", "gpu-2"])])[(DRIVER, "n")]
    held = pools.Held(devices={(DRIVER, "n", "gpu-1"): "ml/a"})
    assert pools.free_count(pool, held, lambda d: True) == 2
    assert pools.free_count(pool, pools.Held(), lambda d: True) == 3


def test_only_wanted_devices_are_counted() -> None:
    pool = pools.gather([make_slice("n", 1, ["gpu-0", "gpu-1", "gpu-2"])])[(DRIVER, "n")]
    assert pools.free_count(pool, pools.Held(), lambda d: d.name != "gpu-0") == 2


# ------------------------------------------------------------------------------- counters


def _bytes(text: str) -> int:
    for suffix, factor in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if text.endswith(suffix):
            return int(text[: -len(suffix)]) * factor
    return int(text)


def simulated_free(raw_slices: list[Raw], held: set[str],
                   wanted: Callable[[Raw], bool]) -> int:
    """One-device claims one after the other, each taking the first device in slice order
    that is not held or taken, not tainted NoSchedule/NoExecute, and whose consumption keeps
    every counter of the pool at or above zero (allocateDevice, checkAvailableCounters)."""
    left: dict[str, dict[str, int]] = {}
    devices: list[Raw] = []
    for obj in raw_slices:
        for c in obj["spec"].get("sharedCounters", []):
            left[c["name"]] = {k: _bytes(v["value"]) for k, v in c["counters"].items()}
        devices += obj["spec"].get("devices", [])

    def consume(d: Raw) -> None:
        for use in d.get("consumesCounters", []):
            for k, v in use["counters"].items():
                left[use["counterSet"]][k] -= _bytes(v["value"])

    for d in devices:
        if d["name"] in held:
            consume(d)
    taken = 0
    for d in devices:
        if d["name"] in held or not wanted(d) or any(
                t["effect"] in ("NoSchedule", "NoExecute") for t in d.get("taints", [])):
            continue
        consume(d)
        if all(v >= 0 for counters in left.values() for v in counters.values()):
            taken += 1
        else:  # roll back: this device does not fit
            for use in d.get("consumesCounters", []):
                for k, v in use["counters"].items():
                    left[use["counterSet"]][k] += _bytes(v["value"])
    return taken


def on_gpu(index: int) -> Callable[[Raw], bool]:
    """Devices that take from GPU ``index``'s counter set (it and its partitions)."""
    return lambda d: any(c["counterSet"] == f"gpu-{index}-counter-set"
                         for c in d.get("consumesCounters", []))


def whole(d: Raw) -> bool:
    return bool(d["attributes"]["type"]["string"] == "gpu")


def partition(d: Raw) -> bool:
    return bool(d["attributes"]["type"]["string"] == "mig")


def profile(name: str) -> Callable[[Raw], bool]:
    return lambda d: d["attributes"].get("profile", {}).get("string") == name


def both(*tests: Callable[[Raw], bool]) -> Callable[[Raw], bool]:
    return lambda d: all(t(d) for t in tests)


def dynamic_slices(machine: str) -> list[Raw]:
    return resource_slices(simulate(machine).snapshot, node="n", gates=DYNAMIC)


def free(raw_slices: list[Raw], held: set[str], wanted: Callable[[Raw], bool]) -> int:
    """What gfd counts: its reductions, its pool, its free_count."""
    gathered = pools.gather([slice_of(s) for s in raw_slices])
    (pool,) = gathered.values()
    raw = {d["name"]: d for s in raw_slices for d in s["spec"].get("devices", [])}
    claims = [Claim(namespace="ml", name=f"c{i}", allocated=((DRIVER, "n", name),))
              for i, name in enumerate(sorted(held))]
    return pools.free_count(pool, pools.allocated(claims), lambda d: wanted(raw[d.name]))


def _devices(raw: list[Raw]) -> list[Raw]:
    return [d for s in raw for d in s["spec"].get("devices", [])]


def _profile_of(d: Raw) -> str:
    return str(d["attributes"].get("profile", {}).get("string", ""))


def smallest(raw: list[Raw], size: str) -> str:
    """The profile of ``size`` compute slices (``1g``) with the least memory, without media
    extensions: ``1g.10gb`` on an H100, ``1g.23gb`` on a GB200."""
    found = {_profile_of(d) for d in _devices(raw) if _profile_of(d).startswith(size + ".")
             and "+" not in _profile_of(d)}
    return min(found, key=lambda p: int(p.split(".")[1].removesuffix("gb")))


def sized(size: str) -> Callable[[list[Raw]], Callable[[Raw], bool]]:
    """Partitions of the smallest ``size`` profile (chosen for the machine's slices)."""
    def of(raw: list[Raw]) -> Callable[[Raw], bool]:
        wanted = smallest(raw, size)
        return lambda d: _profile_of(d) == wanted
    return of


def first_on_gpu0(size: str) -> Callable[[list[Raw]], set[str]]:
    """The first partition of the smallest ``size`` profile on GPU 0, in slice order."""
    def pick(raw: list[Raw]) -> set[str]:
        p = smallest(raw, size)
        return {next(d["name"] for d in _devices(raw) if _profile_of(d) == p and on_gpu(0)(d))}
    return pick


def gpu0(raw: list[Raw]) -> set[str]:
    return {"gpu-0"}


def nothing(raw: list[Raw]) -> set[str]:
    return set()


def anything(raw: list[Raw]) -> Callable[[Raw], bool]:
    return lambda d: True


HeldOf = Callable[[list[Raw]], set[str]]
WantedOf = Callable[[list[Raw]], Callable[[Raw], bool]]

SCENARIOS: list[tuple[HeldOf, Callable[[Raw], bool], WantedOf, int, str]] = [
    # (held, on which devices, of which profile, the rule's count on h100-mig, what it shows)
    (nothing, whole, anything, 2, "nothing allocated: every whole GPU is free"),
    (gpu0, both(on_gpu(0), partition), anything, 0,
     "a whole GPU allocated leaves none of its partitions free"),
    (gpu0, both(on_gpu(1), whole), anything, 1, "the other GPU stays free"),
    (first_on_gpu0("1g"), both(on_gpu(0), whole), anything, 0,
     "a partition leaves its whole GPU unavailable"),
    (first_on_gpu0("1g"), on_gpu(0), sized("1g"), 6,
     "a partition leaves the others of its profile that fit the counters"),
    (first_on_gpu0("7g"), both(on_gpu(0), partition), anything, 0,
     "the largest partition takes every memory slice of its GPU"),
    (first_on_gpu0("3g"), on_gpu(0), sized("3g"), 1,
     "a half of the GPU leaves the other half"),
    (first_on_gpu0("3g"), on_gpu(0), sized("4g"), 0,
     "a 4g placement over the held memory slices does not fit"),
    (first_on_gpu0("1g"), on_gpu(1), sized("1g"), 7,
     "a partition on one GPU takes nothing from another"),
]


@pytest.mark.parametrize("machine", ["h100-mig", "gb200-nvl"])
@pytest.mark.parametrize("held_of, where, which, expected",
                         [(h, w, p, e) for h, w, p, e, _ in SCENARIOS],
                         ids=[why for *_, why in SCENARIOS])
def test_partitions_and_their_gpu_exclude_each_other(
        machine: str, held_of: HeldOf, where: Callable[[Raw], bool], which: WantedOf,
        expected: int) -> None:
    raw = dynamic_slices(machine)
    held = held_of(raw)
    assert held <= {d["name"] for d in _devices(raw)}
    wanted = both(where, which(raw))
    truth = simulated_free(raw, held, wanted)
    if machine == "h100-mig":  # the worked example: the rule's counts, by hand
        assert truth == expected
    assert free(raw, held, wanted) == truth


def test_tainted_devices_are_not_free() -> None:
    raw = resource_slices(simulate("hgx-h100").snapshot, node="n")
    devices = raw[0]["spec"]["devices"]
    devices[1]["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
    devices[4]["taints"] = [{"key": "maintenance", "effect": "NoExecute"}]
    devices[6]["taints"] = [{"key": "note", "effect": "None"}]
    assert simulated_free(raw, set(), whole) == len(devices) - 2
    assert free(raw, set(), whole) == len(devices) - 2


def test_a_tainted_partition_does_not_hold_its_gpu() -> None:
    """A taint keeps a device from new claims; it consumes nothing until allocated."""
    raw = dynamic_slices("h100-mig")
    for s in raw:
        for d in s["spec"].get("devices", []):
            if partition(d) and on_gpu(0)(d):
                d["taints"] = [{"key": "k", "effect": "NoSchedule"}]
    assert free(raw, set(), both(on_gpu(0), partition)) == 0
    assert free(raw, set(), both(on_gpu(0), whole)) == 1


def test_devices_without_counters_are_limited_by_nothing_but_allocation() -> None:
    raw = resource_slices(simulate("gb200-nvl").snapshot, node="n")
    assert free(raw, {"gpu-0"}, whole) == simulated_free(raw, {"gpu-0"}, whole) == 3


# -------------------------------------------------------------------------- invalid pools
# pools_incubating.go (k8s.io/dynamic-resource-allocation structured/internal/incubating),
# buildPool: the device slices' names must be unique (validateDeviceNames); a slice with
# sharedCounters is a counter-set slice, whose devices are not the pool's; counter set names
# must be unique over the pool (getAndValidateCounterSets); each consumed counter set must be
# published and hold each consumed counter (validateDeviceCounterConsumption). The first
# failure, in that order, is the pool's InvalidReason; an invalid pool is skipped whole.

SET0 = {"gpu-0-counter-set": {"memory": "80Gi", "multiprocessors": "132"}}


def raw_pool(*raw: Raw) -> pools.Pool:
    (pool,) = pools.gather([slice_of(s) for s in raw]).values()
    return pool


def mig(name: str, counter_set: str = "gpu-0-counter-set", **counters: str) -> Raw:
    return fo.device(name, kind="mig", consumes=[(counter_set, counters or {"memory": "10Gi"})])


INVALID_POOLS: list[tuple[str, list[Raw], str]] = [
    ("a device name twice over two slices",
     [fo.gpu_slice("n", fo.h100s("n", 2), count=2, name="a"),
      fo.gpu_slice("n", fo.h100s("n", 1), count=2, name="b")],
     "duplicate device name gpu-0"),
    ("a counter set published by two slices",
     [fo.counter_slice("n", SET0, count=3, name="c1"),
      fo.counter_slice("n", SET0, count=3, name="c2"), fo.gpu_slice("n", [mig("m")], count=3)],
     "duplicate counter set name gpu-0-counter-set"),
    ("a device consuming a counter set no slice publishes",
     [fo.counter_slice("n", SET0, count=2), fo.gpu_slice("n", [mig("m", "gpu-1-counter-set")],
                                                         count=2)],
     "counter set gpu-1-counter-set not found"),
    ("a device consuming a counter its set lacks",
     [fo.counter_slice("n", SET0, count=2), fo.gpu_slice("n", [mig("m", decoders="1")],
                                                         count=2)],
     "counter decoders not found in counter set gpu-0-counter-set"),
    ("device names are checked before counter sets",
     [fo.counter_slice("n", SET0, count=4, name="c1"), fo.counter_slice("n", SET0, count=4,
                                                                        name="c2"),
      fo.gpu_slice("n", [mig("m")], count=4, name="a"),
      fo.gpu_slice("n", [mig("m")], count=4, name="b")],
     "duplicate device name m"),
]


@pytest.mark.parametrize("raw, reason", [(r, why) for _, r, why in INVALID_POOLS],
                         ids=[n for n, _, _ in INVALID_POOLS])
def test_an_invalid_pool_is_skipped_for_the_allocators_reason(raw: list[Raw], reason: str
                                                              ) -> None:
    """The reason is the allocator's InvalidReason, word for word; nothing of the pool is
    free, a whole GPU beside the culprit included."""
    pool = raw_pool(*raw)
    assert pool.complete and pool.invalid == reason and not pool.usable
    assert pools.free_count(pool, pools.Held(), lambda d: True) == 0


def test_a_counter_set_slices_devices_are_not_the_pools() -> None:
    """buildPool sorts a slice with sharedCounters among the counter-set slices: its devices
    are neither allocated nor checked for duplicate names."""
    pool = raw_pool(fo.counter_slice("n", SET0, count=2, devices=[fo.device("gpu-0")]),
                    fo.gpu_slice("n", [fo.device("gpu-0"), mig("m")], count=2))
    assert [d.name for d in pool.devices] == ["gpu-0", "m"]
    assert pool.usable and pool.counters == {"gpu-0-counter-set": {
        "memory": 80 * 2**30, "multiprocessors": 132}}
    assert pools.free_count(pool, pools.Held(), lambda d: True) == 2


def test_a_pool_missing_a_slice_is_incomplete_and_nothing_of_it_is_free() -> None:
    """GatherPools: complete only when len(slices) == resourceSliceCount of the generation."""
    pool = raw_pool(fo.counter_slice("n", SET0, count=3), fo.gpu_slice("n", [mig("m")],
                                                                       count=3))
    assert (pool.slices, pool.expected, pool.complete, pool.invalid) == (2, 3, False, "")
    assert pools.free_count(pool, pools.Held(), lambda d: True) == 0


def test_an_over_consumed_counter_set_blocks_every_counter_consuming_device_of_the_pool(
        ) -> None:
    """gpu-0 and its partition both allocated (the counters changed under the claims, a new
    generation published smaller sets) leave gpu-0's memory at -10Gi; gpu-1, which takes only
    from its own set, is then refused too: availableCounter.Cmp(consumedCounter) < 0 with
    nothing consumed from gpu-0's set."""
    sets = {"gpu-0-counter-set": {"memory": "80Gi"}, "gpu-1-counter-set": {"memory": "80Gi"}}
    pool = raw_pool(fo.counter_slice("n", sets, count=2), fo.gpu_slice("n", [
        fo.device("gpu-0", consumes=[("gpu-0-counter-set", {"memory": "80Gi"})]),
        mig("gpu-0-mig"),
        fo.device("gpu-1", consumes=[("gpu-1-counter-set", {"memory": "80Gi"})]),
        fo.device("gpu-2")], count=2))
    held = pools.allocated([Claim(namespace="ml", name="a", allocated=(
        (DRIVER, "n", "gpu-0"), (DRIVER, "n", "gpu-0-mig")))])
    # gpu-2 consumes no counter (checkAvailableCounters is not called for it); gpu-1 is refused
    assert pools.free_count(pool, held, lambda d: True) == 1


# ------------------------------------------------------------------------- shared devices
# consumable_capacity.go (structured/internal/incubating): a share that asks no capacity
# consumes each capacity's requestPolicy.default, or the whole value without a policy
# (fillEmptyRequest), and fits while consumed + that <= value for every capacity
# (CmpRequestOverCapacity). allocator_incubating.go allocateDevice: a device that allows
# multiple allocations is never "in use"; its counters are checked only while no capacity of
# it is in use yet (skipCounterCheck := allowMultipleAllocations && deviceCapacityInUse).
# The scheduler's allocated state: results with a shareID are shares (AllocatedSharedDeviceIDs,
# their consumedCapacity aggregated), the others whole devices.

GI = 2**30


def shared(name: str = "s", *, consumes: list[tuple[str, dict[str, str]]] | None = None,
           **capacity: Raw) -> Raw:
    return fo.device(name, multiple=True, consumes=consumes,
                     capacity=capacity or {"memory": {"value": "80Gi",
                                                      "requestPolicy": {"default": "10Gi"}}})


def shares_held(*consumed: dict[str, str]) -> pools.Held:
    return pools.allocated([claim_of(fo.claim(f"c{i}", node_name="n", shares=(("s", c),)))
                            for i, c in enumerate(consumed)])


SHARES: list[tuple[str, Raw, tuple[dict[str, str], ...], int]] = [
    ("each share takes the policy's default: 80Gi / 10Gi", shared(), (), 8),
    ("shares held consume their consumedCapacity", shared(), ({"memory": "10Gi"},
                                                             {"memory": "20Gi"}), 5),
    ("no room for the default: no more share", shared(), ({"memory": "75Gi"},), 0),
    ("without a policy a share takes the whole value", shared(memory={"value": "80Gi"}), (), 1),
    ("without a policy, once shared, nothing is left", shared(memory={"value": "80Gi"}),
     ({"memory": "80Gi"},), 0),
    ("every capacity must have room: the scarcest decides",
     shared(memory={"value": "80Gi", "requestPolicy": {"default": "10Gi"}},
            cores={"value": "100", "requestPolicy": {"default": "25"}}), (), 4),
]


@pytest.mark.parametrize("device, held, expected", [(d, h, e) for _, d, h, e in SHARES],
                         ids=[n for n, *_ in SHARES])
def test_a_shared_device_gives_one_share_claims_while_each_capacity_has_room(
        device: Raw, held: tuple[dict[str, str], ...], expected: int) -> None:
    pool = raw_pool(fo.gpu_slice("n", [device]))
    assert pools.free_count(pool, shares_held(*held), lambda d: True) == expected


def test_a_result_with_a_share_id_consumes_capacity_not_the_device() -> None:
    c = claim_of(fo.claim("c", node_name="n", devices=("gpu-0",),
                          shares=(("s", {"memory": "10Gi"}),)))
    assert c.allocated == ((DRIVER, "n", "gpu-0"),)
    assert c.shares == (((DRIVER, "n", "s"), {"memory": 10 * GI}),)
    held = pools.allocated([c])
    assert (DRIVER, "n", "s") not in held.devices
    assert held.shares == {(DRIVER, "n", "s"): {"memory": 10 * GI}}


def test_a_shared_device_takes_its_counters_with_its_first_share_only() -> None:
    """The set has 40Gi; the shared device consumes 30Gi, a partition 10Gi, a whole GPU 40Gi.
    With one share held, the shared device's counters are taken once: more shares need no
    counter check, the 10Gi partition fits, the whole GPU does not."""
    sets = {"gpu-0-counter-set": {"memory": "40Gi"}}
    take = [("gpu-0-counter-set", {"memory": "30Gi"})]
    pool = raw_pool(fo.counter_slice("n", sets, count=2), fo.gpu_slice("n", [
        shared(consumes=take), mig("small"),
        fo.device("whole", consumes=[("gpu-0-counter-set", {"memory": "40Gi"})])], count=2))
    held = shares_held({"memory": "10Gi"})
    assert pools.free_count(pool, held, lambda d: d.name == "s") == 7
    assert pools.free_count(pool, held, lambda d: d.name == "small") == 1
    assert pools.free_count(pool, held, lambda d: d.name == "whole") == 0
    assert pools.free_count(pool, pools.Held(), lambda d: d.name == "whole") == 1


def test_counters_left_are_a_copy_taken_from_and_given_back() -> None:
    raw = dynamic_slices("h100-mig")
    (pool,) = pools.gather(slice_of(s) for s in raw).values()
    whole = next(d for d in pool.devices if not d.attributes.get("profile"))
    left = pools.counters_left(pool, pools.Held())
    before = {k: dict(v) for k, v in left.items()}
    assert pools.counters_fit(left, whole)
    pools.take_counters(left, whole)
    assert not pools.counters_fit(left, whole)
    assert pools.counters_left(pool, pools.Held()) == before
    pools.take_counters(left, whole, -1)
    assert left == before
