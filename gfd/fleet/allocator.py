"""Whether a pod's unallocated ResourceClaims can all be allocated on one node, as the
scheduler's DRA allocator decides it (``k8s.io/dynamic-resource-allocation/structured``,
``allocator_incubating.go``: ``Allocate``, ``allocateOne``, ``allocateDevice``), and what stands
in the way of each request there.

- The node's pools are searched in order, each pool's devices in order; an incomplete or
  invalid pool is skipped (``if pool.IsIncomplete || pool.IsInvalid { continue }``).
- The claims are allocated together, request by request, each request's devices one after
  the other with backtracking: a device taken for one request is not free for another (of
  this claim or another claim of the pod), and every counter a device consumes must have
  enough left after the allocated devices and the ones taken before it
  (``checkAvailableCounters``).
- A device is selectable for a request when every selector of the request's DeviceClass and of
  the request holds for it (``isSelectable``), it has no binding conditions, and it carries no
  ``NoSchedule``/``NoExecute`` taint the request does not tolerate
  (``taintPreventsAllocation``); it is usable when no allocation holds it (``adminAccess``
  requests excepted: ``deviceInUse``).
- ``ExactCount`` takes ``count`` devices; ``All`` every selectable device of the node, each of
  which must be usable, and at least one (an incomplete or invalid pool makes that an error);
  ``firstAvailable`` the first subrequest that lets the rest be allocated.
- When allocation fails and a pool of the node is invalid, the scheduler says "invalid
  resource pools were encountered" instead of "cannot allocate all claims".

A selector that cannot be decided (``cel.Evaluator`` answers None) and claims with
``constraints`` are never guessed: the answer is then None ("cannot tell") unless the claims
fail even with every undecided device allowed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gfd.fleet import pools
from gfd.fleet.count import Index
from gfd.fleet.model import NO_SCHEDULE, Claim, Device, DeviceClass, Request
from gfd.fleet.placement import tolerates
from gfd.fleet.pools import DeviceKey, Held, Pool

STEPS = 200_000
"""Devices tried at most before the search gives up and answers "cannot tell" (the
scheduler's own search has a timeout; GPU claims need a few hundred)."""
EXTENDED = "<extended-resources>"
"""The name of the claim the scheduler makes in memory for a pod's extended resources that a
DeviceClass serves (``specialClaimInMemName``)."""


class _TooLong(Exception):
    pass


@dataclass(frozen=True, slots=True, kw_only=True)
class Allocation:
    """The answer for one node."""

    allocated: bool | None
    """None: cannot tell (an undecided selector, constraints, a search too long)."""
    invalid: str = ""
    """Why a pool of the node is invalid, when allocation failed and one is: the scheduler's
    reason is then "invalid resource pools were encountered"."""
    why_not_told: str = ""
    devices: tuple[tuple[str, DeviceKey], ...] = ()
    """(claim ``namespace/name``, device) of the allocation found."""


def node_pools(ix: Index, node: str) -> list[Pool]:
    """The pools of every driver for the node, by driver and name."""
    return sorted((p for p in ix.gathered.values() if p.node == node),
                  key=lambda p: (p.driver, p.name))


def tolerated(request: Request, device: Device) -> bool:
    """Every ``NoSchedule``/``NoExecute`` taint of the device is tolerated by the request."""
    return all(any(tolerates(t, taint) for t in request.tolerations)
               for taint in device.taints if taint.effect in NO_SCHEDULE)


def selects(ix: Index, device_class: DeviceClass | None, request: Request,
            device: Device) -> bool | None:
    """The class's and the request's selectors hold for the device (None: cannot tell)."""
    if device_class is None:
        return False
    verdict = ix.classes.judge(device_class, device)
    if verdict is False:
        return False
    for expression in request.selectors:
        answer = ix.classes.evaluator.matches(expression, device)
        if answer is False:
            return False
        if answer is None:
            verdict = None
    return verdict


@dataclass(slots=True)
class _Search:
    ix: Index
    here: list[Pool]
    loose: bool
    """Undecided devices count as selectable."""
    held: Held
    taken: dict[DeviceKey, str] = field(default_factory=dict)
    left: dict[tuple[str, str], dict[str, dict[str, int]]] = field(default_factory=dict)
    steps: int = 0
    solution: dict[DeviceKey, str] = field(default_factory=dict)
    """The devices taken when every request was met, and for which claim."""

    def __post_init__(self) -> None:
        for pool in self.here:
            self.left[(pool.driver, pool.name)] = pools.counters_left(pool, self.held)

    def candidates(self, request: Request) -> list[tuple[Pool, Device]]:
        device_class = self.ix.classes.by_name.get(request.device_class)
        out = []
        for pool in self.here:
            if not pool.usable:
                continue
            for device in pool.devices:
                if device.bound_late or not tolerated(request, device):
                    continue
                verdict = selects(self.ix, device_class, request, device)
                if verdict or (verdict is None and self.loose):
                    out.append((pool, device))
        return out

    def usable(self, pool: Pool, device: Device, request: Request) -> bool:
        self.steps += 1
        if self.steps > STEPS:
            raise _TooLong
        key = pools.key(device)
        if key in self.taken:
            return False
        if not request.admin and key in self.held:
            if not (device.allow_multiple and key not in self.held.devices
                    and pools.shares_left(device, self.held.shares.get(key, {})) > 0):
                return False
        if device.consumes and not (device.allow_multiple and key in self.held.shares):
            return pools.counters_fit(self.left[(pool.driver, pool.name)], device)
        return True

    def take(self, pool: Pool, device: Device, who: str, sign: int = 1) -> None:
        key = pools.key(device)
        if sign > 0:
            self.taken[key] = who
        else:
            del self.taken[key]
        if device.consumes and not (device.allow_multiple and key in self.held.shares):
            pools.take_counters(self.left[(pool.driver, pool.name)], device, sign)

    def requests(self, claims: Sequence[Claim]) -> list[tuple[str, Request]]:
        return [(f"{c.namespace}/{c.name}", r) for c in claims for r in c.requests]

    def place(self, todo: list[tuple[str, Request]], at: int) -> bool:
        if at == len(todo):
            self.solution = dict(self.taken)
            return True
        who, request = todo[at]
        if request.alternatives:
            return any(self.place([*todo[:at], (who, alt), *todo[at + 1:]], at)
                       for alt in request.alternatives)
        found = self.candidates(request)
        if request.mode == "All":
            if not found or any(not p.usable for p in self.here):
                return False
            if not all(self.usable(p, d, request) for p, d in found):
                return False
            return self._with(found, who, request, lambda: self.place(todo, at + 1))
        return self._pick(found, 0, request.count, who, request,
                          lambda: self.place(todo, at + 1))

    def _with(self, picked: list[tuple[Pool, Device]], who: str, request: Request,
              then: Callable[[], bool]) -> bool:
        done: list[tuple[Pool, Device]] = []
        try:
            for pool, device in picked:
                if not request.admin:
                    self.take(pool, device, who)
                    done.append((pool, device))
            return then()
        finally:
            for pool, device in done:
                self.take(pool, device, who, -1)

    def _pick(self, found: list[tuple[Pool, Device]], start: int, wanted: int, who: str,
              request: Request, then: Callable[[], bool]) -> bool:
        if wanted == 0:
            return then()
        for i in range(start, len(found)):
            if len(found) - i < wanted:
                return False
            pool, device = found[i]
            if not self.usable(pool, device, request):
                continue
            if request.admin:
                self.taken[pools.key(device)] = who
                try:
                    if self._pick(found, i + 1, wanted - 1, who, request, then):
                        return True
                finally:
                    del self.taken[pools.key(device)]
                continue
            self.take(pool, device, who)
            try:
                if self._pick(found, i + 1, wanted - 1, who, request, then):
                    return True
            finally:
                self.take(pool, device, who, -1)
        return False


def _search(ix: Index, here: list[Pool], claims: Sequence[Claim],
            loose: bool) -> tuple[bool, tuple[tuple[str, DeviceKey], ...]]:
    search = _Search(ix=ix, here=here, loose=loose, held=ix.held)
    found = search.place(search.requests(claims), 0)
    return found, tuple(sorted((who, key) for key, who in search.solution.items()))


def allocate(ix: Index, node: str, claims: Sequence[Claim], *,
             here: list[Pool] | None = None) -> Allocation:
    """Whether ``claims`` (unallocated, with their requests) can all be allocated on the node
    now, beside what every claim's allocation already holds (``here``: the node's pools, when
    the caller has them)."""
    here = node_pools(ix, node) if here is None else here
    invalid = next((p.invalid for p in here if p.invalid), "")
    if any(c.constraints for c in claims):
        try:
            found, _ = _search(ix, here, claims, loose=True)
        except _TooLong:
            found = True
        if not found:
            return Allocation(allocated=False, invalid=invalid)
        return Allocation(allocated=None, why_not_told="a claim has constraints "
                          "(matchAttribute, distinctAttribute), not evaluated here")
    try:
        found, devices = _search(ix, here, claims, loose=False)
        if found:
            return Allocation(allocated=True, devices=devices)
        loose, _ = _search(ix, here, claims, loose=True)
    except _TooLong:
        return Allocation(allocated=None, why_not_told=f"more than {STEPS} devices tried")
    if loose:
        return Allocation(allocated=None, why_not_told="a selector could not be decided here "
                          "for some device")
    return Allocation(allocated=False, invalid=invalid)
