"""DRA devices as the scheduler's allocator sees them (``k8s.io/dynamic-resource-allocation/
structured``, the ``incubating`` allocator of Kubernetes 1.36):

- only the newest generation of each pool counts, and only a complete pool (every
  ``resourceSliceCount`` slice of that generation there) and a valid one is allocated from
  (``allocator_*.go``: ``if pool.IsIncomplete || pool.IsInvalid { continue }``); a pool is
  invalid when a device name repeats, or (partitionable devices) when a counter set is
  published twice, a device consumes a counter set no slice of the pool publishes, or a
  counter its set lacks (``pools_incubating.go``: ``validateDeviceNames``,
  ``getAndValidateCounterSets``, ``validateDeviceCounterConsumption``);
- a slice that publishes counter sets is a counter-set slice: its devices are not the pool's;
- a claim's allocation holds its devices, ``adminAccess`` results none, and results with a
  ``shareID`` a share of a device's capacity (``DRAConsumableCapacity``: a device with
  ``allowMultipleAllocations`` takes further shares while each capacity has room for one
  more, ``consumable_capacity.go``; its counters are taken once, by the first share);
- a device is allocatable only while every counter it consumes has enough left after the
  allocated devices' consumption (``DRAPartitionableDevices``; a counter of the pool they
  already over-consume refuses every counter-consuming device: ``checkAvailableCounters``
  compares them all), and not while it carries a
  ``NoSchedule``/``NoExecute`` taint an ordinary claim does not tolerate, or binding
  conditions."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gfd.fleet.model import Claim, Device, Slice

DeviceKey = tuple[str, str, str]
"""(driver, pool, device): how an allocation names a device."""
UNBOUNDED = 1 << 30
"""The shares a device that allows multiple allocations and has no capacity can give (the
allocator sets no limit): counted as this many, which pod slots cap."""


@dataclass(slots=True)
class Pool:
    driver: str
    name: str
    generation: int
    expected: int
    """``resourceSliceCount`` of that generation."""
    slices: int = 0
    devices: list[Device] = field(default_factory=list)
    counters: dict[str, dict[str, int]] = field(default_factory=dict)
    duplicate_sets: list[str] = field(default_factory=list)
    node: str = ""
    """The node its slices are for ("" for a pool of no one node)."""

    @property
    def complete(self) -> bool:
        return self.slices == self.expected

    @property
    def invalid(self) -> str:
        """Why the allocator skips the pool as invalid ("" when it does not)."""
        names: set[str] = set()
        for device in self.devices:
            if device.name in names:
                return f"duplicate device name {device.name}"
            names.add(device.name)
        if self.duplicate_sets:
            return f"duplicate counter set name {self.duplicate_sets[0]}"
        for device in self.devices:
            for counter_set, counters in device.consumes:
                published = self.counters.get(counter_set)
                if published is None:
                    return f"counter set {counter_set} not found"
                for counter in counters:
                    if counter not in published:
                        return f"counter {counter} not found in counter set {counter_set}"
        return ""

    @property
    def usable(self) -> bool:
        return self.complete and not self.invalid


def gather(slices: Iterable[Slice]) -> dict[tuple[str, str], Pool]:
    """(driver, pool) -> the pool's newest generation, its devices and counter sets."""
    pools: dict[tuple[str, str], Pool] = {}
    for s in slices:
        key = (s.driver, s.pool)
        pool = pools.get(key)
        if pool is None or s.generation > pool.generation:
            pool = pools[key] = Pool(s.driver, s.pool, s.generation, s.count,
                                     node=s.node or s.pool)
        elif s.generation < pool.generation:
            continue
        pool.slices += 1
        if s.counters:  # a counter-set slice: its devices are not the pool's
            for name, counters in s.counters:
                if name in pool.counters:
                    pool.duplicate_sets.append(name)
                pool.counters[name] = dict(counters)
            continue
        pool.devices.extend(s.devices)
    return pools


def by_node(pools: Iterable[Pool]) -> dict[str, list[Pool]]:
    """The pools of each node (a node may have several pools, of one driver or more)."""
    out: dict[str, list[Pool]] = {}
    for pool in sorted(pools, key=lambda p: (p.driver, p.name)):
        out.setdefault(pool.node, []).append(pool)
    return out


@dataclass(slots=True)
class Held:
    """What claims' allocations hold: whole devices, and shares of shared ones."""

    devices: dict[DeviceKey, str] = field(default_factory=dict)
    """Each device an exclusive allocation holds -> the claim (``namespace/name``)."""
    shares: dict[DeviceKey, dict[str, int]] = field(default_factory=dict)
    """Each shared device -> the capacity its shares consume."""
    sharers: dict[DeviceKey, list[str]] = field(default_factory=dict)
    """Each shared device -> the claims holding a share."""

    def __contains__(self, key: object) -> bool:
        return key in self.devices or key in self.shares


def allocated(claims: Iterable[Claim]) -> Held:
    """What every claim's allocation holds."""
    held = Held()
    for claim in claims:
        who = f"{claim.namespace}/{claim.name}"
        for key in claim.allocated:
            held.devices[key] = who
        for key, consumed in claim.shares:
            into = held.shares.setdefault(key, {})
            for name, amount in consumed.items():
                into[name] = into.get(name, 0) + amount
            held.sharers.setdefault(key, []).append(who)
    return held


def key(device: Device) -> DeviceKey:
    return (device.driver, device.pool, device.name)


def _left(pool: Pool, held: Held) -> dict[str, dict[str, int]]:
    """What each counter of the pool has left after the allocated devices' consumption (a
    shared device's counters once, however many shares)."""
    left = {name: dict(counters) for name, counters in pool.counters.items()}
    for device in pool.devices:
        if key(device) in held:
            _take(left, device)
    return left


def _fits(left: dict[str, dict[str, int]], device: Device) -> bool:
    return all(left.get(s, {}).get(c, 0) >= amount
               for s, counters in device.consumes for c, amount in counters.items())


def _take(left: dict[str, dict[str, int]], device: Device) -> None:
    for s, counters in device.consumes:
        for c, amount in counters.items():
            left.setdefault(s, {})[c] = left.get(s, {}).get(c, 0) - amount


def shares_left(device: Device, consumed: dict[str, int]) -> int:
    """How many more one-share claims that ask no capacity a device that allows multiple
    allocations takes: each share consumes each capacity's default (or all of it)."""
    counts = []
    for name, total in device.capacity.items():
        per = device.share.get(name, total)
        room = total - consumed.get(name, 0)
        if per <= 0:
            continue
        counts.append(max(0, room // per))
    return min(counts) if counts else UNBOUNDED


def usable_device(device: Device) -> bool:
    """Not kept from an ordinary claim by a taint or binding conditions."""
    return not device.tainted and not device.bound_late


def free_count(pool: Pool, held: Held, wanted: Callable[[Device], bool]) -> int:
    """How many one-device claims (one-share claims of shared devices) for the devices
    ``wanted`` accepts can still be allocated, one after the other: devices neither allocated
    nor tainted, each within what the counters have left after the allocated devices and the
    ones counted before it. 0 for a pool the allocator skips."""
    if not pool.usable:
        return 0
    left = _left(pool, held)
    # checkAvailableCounters compares every counter of the pool: one the allocated devices
    # already over-consume (its counters shrank under the claims) refuses every device that
    # consumes counters
    blocked = any(v < 0 for counters in left.values() for v in counters.values())
    count = 0
    for device in pool.devices:
        k = key(device)
        if not wanted(device) or k in held.devices or not usable_device(device):
            continue
        if blocked and device.consumes and k not in held.shares:
            continue
        if device.allow_multiple:
            more = shares_left(device, held.shares.get(k, {}))
            if more and (k in held.shares or _fits(left, device)):
                if k not in held.shares:
                    _take(left, device)
                count += more
            continue
        if k in held.shares:
            continue
        if _fits(left, device):
            _take(left, device)
            count += 1
    return count


def counters_left(pool: Pool, held: Held) -> dict[str, dict[str, int]]:
    """What each counter of the pool has left after the allocated devices' consumption (a
    copy the caller may take from)."""
    return _left(pool, held)


def counters_fit(left: dict[str, dict[str, int]], device: Device) -> bool:
    """Every counter the device consumes has enough left."""
    return _fits(left, device)


def take_counters(left: dict[str, dict[str, int]], device: Device, sign: int = 1) -> None:
    """Take what the device consumes from ``left`` (give it back with ``sign=-1``)."""
    for s, counters in device.consumes:
        for c, amount in counters.items():
            left.setdefault(s, {})[c] = left.get(s, {}).get(c, 0) - sign * amount
