"""DRA devices as the scheduler's allocator sees them: the newest generation of each pool
(``GatherPools``, ``staging/src/k8s.io/dynamic-resource-allocation/structured``), the devices
claims' allocations hold, what the shared counters leave (``DRAPartitionableDevices``: a
device is allocatable only while every counter it consumes has enough left after the
allocated devices' consumption), and device taints (``NoSchedule``/``NoExecute``: no
ordinary claim gets the device)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gfd.fleet.model import Claim, Device, Slice

DeviceKey = tuple[str, str, str]
"""(driver, pool, device): how an allocation names a device."""


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

    @property
    def complete(self) -> bool:
        return self.slices == self.expected

    @property
    def invalid(self) -> bool:
        """A device name published twice (``poolIsInvalid``)."""
        names = [d.name for d in self.devices]
        return len(names) != len(set(names))


def gather(slices: Iterable[Slice]) -> dict[tuple[str, str], Pool]:
    """(driver, pool) -> the pool's newest generation, its devices and counter sets."""
    pools: dict[tuple[str, str], Pool] = {}
    for s in slices:
        key = (s.driver, s.pool)
        pool = pools.get(key)
        if pool is None or s.generation > pool.generation:
            pool = pools[key] = Pool(s.driver, s.pool, s.generation, s.count)
        elif s.generation < pool.generation:
            continue
        pool.slices += 1
        pool.devices.extend(s.devices)
        for name, counters in s.counters:
            pool.counters[name] = dict(counters)
    return pools


def allocated(claims: Iterable[Claim]) -> dict[DeviceKey, str]:
    """Each device an allocation holds -> the claim (``namespace/name``) holding it."""
    out: dict[DeviceKey, str] = {}
    for claim in claims:
        for key in claim.allocated:
            out[key] = f"{claim.namespace}/{claim.name}"
    return out


def key(device: Device) -> DeviceKey:
    return (device.driver, device.pool, device.name)


def _left(pool: Pool, held: dict[DeviceKey, str]) -> dict[str, dict[str, int]]:
    """What each counter of the pool has left after the allocated devices' consumption."""
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


def free_count(pool: Pool, held: dict[DeviceKey, str],
               wanted: Callable[[Device], bool]) -> int:
    """How many of the pool's devices that ``wanted`` accepts one-device claims can still get,
    one after the other: neither allocated nor tainted, and each within what the counters have
    left after the allocated devices and the ones counted before it."""
    if not pool.complete or pool.invalid:
        return 0  # the allocator skips the pool (allocator_stable.go: IsIncomplete, IsInvalid)
    left = _left(pool, held)
    count = 0
    for device in pool.devices:
        if not wanted(device) or key(device) in held or device.tainted:
            continue
        if _fits(left, device):
            _take(left, device)
            count += 1
    return count
