"""The fleet as plain values: each API object reduced, as it is read, to what the counting
needs (a Node's labels, allocatable GPU resources and state; a Pod's node, GPU requests and
placement; a ResourceSlice's devices and counters; a ResourceClaim's allocated devices), so
memory grows with the GPU facts, never with the objects' full specs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gfd.fleet.quantity import parse_quantity
from gfd.fleet.requests import pod_requests

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
"""Extended resources of NVIDIA's device plugin (``nvidia.com/gpu``, ``nvidia.com/gpu.shared``,
``nvidia.com/mig-<profile>`` and ``.shared``)."""
LABEL_PREFIX = "nvidia.com/"
NO_SCHEDULE = ("NoSchedule", "NoExecute")
FIELD = "\x00field:"
"""A node-selector requirement on a field (``matchFields``: ``metadata.name``, as the
DaemonSet controller pins its pods) is kept with its key behind this prefix, which no label
key can carry."""
ENDED = ("Succeeded", "Failed")


def gpu_resource(name: str) -> bool:
    return name.startswith(GPU_RESOURCE_PREFIXES)


class Version(str):
    """A device attribute of type ``version`` (a semantic version): CEL compares it with
    ``compareTo(semver(...))`` and never as a string, so its type is kept beside its text."""

    __slots__ = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""

    def __str__(self) -> str:
        return f"{self.key}{'=' + self.value if self.value else ''}:{self.effect}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    name: str
    labels: dict[str, str]
    """All of them: a pod's node affinity may select on any label."""
    allocatable: dict[str, int]
    """The device plugin's resources the node can give (allocatable), by name."""
    capacity: dict[str, int]
    """The same resources' capacity (unhealthy devices count here, not in allocatable)."""
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Pod:
    namespace: str
    name: str
    node: str
    """``spec.nodeName``; "" while unscheduled."""
    requests: dict[str, int]
    """The scheduler's request for each GPU resource (``requests.pod_requests``), less what
    a DRA DeviceClass's ``extendedResourceName`` turned into a claim."""
    claims: tuple[str, ...] = ()
    """Names of the ResourceClaims it uses (in its namespace)."""
    node_selector: dict[str, str] | None = None
    affinity: tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] | None = None
    """Required node affinity: OR-ed terms of AND-ed (key, operator, values)."""
    tolerations: tuple[tuple[str, str, str, str], ...] = ()
    """(key, operator, value, effect)."""
    agent: bool = False
    """A gfd or GFD pod (it keeps this node's labels)."""
    agent_ready: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Device:
    """One device of a ResourceSlice."""

    driver: str
    pool: str
    name: str
    node: str
    attributes: dict[str, str | int | bool | Version]
    """Attribute name -> value: unqualified in the driver's own domain, ``domain/name`` in any
    other (``resource.kubernetes.io/pciBusID``), as a slice may spell them."""
    capacity: dict[str, int]
    """Capacity name (the attributes' naming) -> value in base units (bytes), rounded up."""
    allow_multiple: bool = False
    """``allowMultipleAllocations``: several claims may share the device, up to its
    capacity (``DRAConsumableCapacity``)."""
    consumes: tuple[tuple[str, dict[str, int]], ...] = ()
    """(counter set, counter -> amount)."""
    tainted: bool = False
    """A NoSchedule or NoExecute taint: no ordinary claim gets it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Slice:
    driver: str
    pool: str
    generation: int
    count: int
    """``resourceSliceCount``: slices in this generation of the pool."""
    node: str
    devices: tuple[Device, ...]
    counters: tuple[tuple[str, dict[str, int]], ...] = ()
    """Shared counter sets: (name, counter -> amount)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One request of an unallocated claim: what a pending pod waits for."""

    device_class: str
    count: int
    selectors: tuple[str, ...] = ()
    """CEL expressions."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    namespace: str
    name: str
    allocated: tuple[tuple[str, str, str], ...] = ()
    """(driver, pool, device) of each result that makes its device unavailable (not
    ``adminAccess``)."""
    node: str = ""
    """The node its allocation is for ("" when unallocated, or not node-local)."""
    requests: tuple[Request, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    """CEL expressions a device of the class meets."""
    extended_resource: str = ""
    """``spec.extendedResourceName``: a pod requesting it on a node without it allocatable
    gets devices of this class through a claim the scheduler makes (``DRAExtendedResource``)."""


@dataclass(slots=True)
class Fleet:
    nodes: dict[str, Node]
    pods: list[Pod]
    slices: list[Slice]
    claims: dict[tuple[str, str], Claim]
    incomplete: list[str]
    """One line per LIST that was refused or failed: the counts lack it."""
    source: str = ""
    selected: bool = False
    """Nodes were chosen by a label selector: devices of other nodes are left out."""
    classes: dict[str, DeviceClass] = field(default_factory=dict)


# --------------------------------------------------------------------------- reductions


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _gpu_quantities(values: Any) -> dict[str, int]:
    out = {}
    for name, text in _dict(values).items():
        if gpu_resource(str(name)):
            amount = parse_quantity(str(text))
            if amount is not None:
                out[str(name)] = int(amount)
    return out


def node_of(obj: dict[str, Any]) -> Node:
    meta, spec, status = _dict(obj.get("metadata")), _dict(obj.get("spec")), \
        _dict(obj.get("status"))
    labels = {str(k): str(v) for k, v in _dict(meta.get("labels")).items()}
    ready = any(_dict(c).get("type") == "Ready" and _dict(c).get("status") == "True"
                for c in _list(status.get("conditions")))
    taints = tuple(Taint(key=str(_dict(t).get("key", "")), value=str(_dict(t).get("value") or ""),
                         effect=str(_dict(t).get("effect", "")))
                   for t in _list(spec.get("taints")))
    return Node(name=str(meta.get("name", "")), labels=labels,
                allocatable=_gpu_quantities(status.get("allocatable")),
                capacity=_gpu_quantities(status.get("capacity")),
                unschedulable=bool(spec.get("unschedulable")), ready=ready, taints=taints)


def _terms(affinity: Any) -> tuple[tuple[tuple[str, str, tuple[str, ...]], ...], ...] | None:
    required = _dict(_dict(_dict(affinity).get("nodeAffinity")).get(
        "requiredDuringSchedulingIgnoredDuringExecution"))
    if not required:
        return None
    return tuple(
        tuple((str(_dict(e).get("key", "")), str(_dict(e).get("operator", "")),
               tuple(str(v) for v in _list(_dict(e).get("values"))))
              for e in _list(_dict(term).get("matchExpressions")))
        + tuple((FIELD + str(_dict(e).get("key", "")), str(_dict(e).get("operator", "")),
                 tuple(str(v) for v in _list(_dict(e).get("values"))))
                for e in _list(_dict(term).get("matchFields")))
        for term in _list(required.get("nodeSelectorTerms")))


AGENT_NAMES = ("gfd", "gpu-feature-discovery")
"""``app.kubernetes.io/name`` (or ``app``) of the pods that keep a node's GPU labels: gfd's
manifests and chart, and NVIDIA's GFD (its Helm chart, the GPU Operator's DaemonSet)."""


def _is_agent(meta: dict[str, Any], spec: dict[str, Any]) -> bool:
    labels = _dict(meta.get("labels"))
    if any(labels.get(k) in AGENT_NAMES for k in ("app.kubernetes.io/name", "app")):
        return True
    for container in _list(spec.get("containers")):
        image = str(_dict(container).get("image", "")).rsplit("/", 1)[-1].split(":")[0]
        if image in AGENT_NAMES:
            return True
    return False


def pod_of(obj: dict[str, Any]) -> Pod | None:
    """The pod as the scheduler counts it; None for one that ended (it holds nothing) or
    that neither asks for GPUs nor keeps a node's labels."""
    meta, spec, status = _dict(obj.get("metadata")), _dict(obj.get("spec")), \
        _dict(obj.get("status"))
    if status.get("phase") in ENDED:
        return None
    # requests that a DeviceClass's extendedResourceName turned into a DRA claim: counted
    # once, through that claim (status.extendedResourceClaimStatus)
    extended = _dict(status.get("extendedResourceClaimStatus"))
    to_dra = {(str(_dict(m).get("containerName", "")), str(_dict(m).get("resourceName", "")))
              for m in _list(extended.get("requestMappings"))}
    requests = pod_requests(spec, skip=to_dra, keep=gpu_resource)
    claims = [str(_dict(s).get("resourceClaimName") or "")
              for s in _list(status.get("resourceClaimStatuses"))]
    if extended.get("resourceClaimName"):
        claims.append(str(extended["resourceClaimName"]))
    for ref in _list(spec.get("resourceClaims")):
        if _dict(ref).get("resourceClaimName"):
            claims.append(str(_dict(ref)["resourceClaimName"]))
    agent = _is_agent(meta, spec)
    if not requests and not claims and not agent:
        return None
    ready = any(_dict(c).get("type") == "Ready" and _dict(c).get("status") == "True"
                for c in _list(status.get("conditions")))
    selector = spec.get("nodeSelector")
    return Pod(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
        node=str(spec.get("nodeName") or ""), requests=requests,
        claims=tuple(sorted(set(filter(None, claims)))),
        node_selector={str(k): str(v) for k, v in selector.items()}
        if isinstance(selector, dict) else None,
        affinity=_terms(spec.get("affinity")),
        tolerations=tuple((str(_dict(t).get("key") or ""), str(_dict(t).get("operator") or ""),
                           str(_dict(t).get("value") or ""), str(_dict(t).get("effect") or ""))
                          for t in _list(spec.get("tolerations"))),
        agent=agent, agent_ready=ready)


def _attribute(value: Any) -> str | int | bool | Version | None:
    for kind in ("string", "version", "int", "bool"):
        if kind in _dict(value):
            found = _dict(value)[kind]
            if kind == "version":
                return Version(str(found))
            return found if isinstance(found, (str, int, bool)) else str(found)
    return None


def _counters(value: Any) -> dict[str, int]:
    out = {}
    for name, counter in _dict(value).items():
        amount = parse_quantity(str(_dict(counter).get("value", "")))
        if amount is not None:
            out[str(name)] = int(amount)
    return out


def slice_of(obj: dict[str, Any]) -> Slice:
    spec = _dict(obj.get("spec"))
    pool = _dict(spec.get("pool"))
    driver, pool_name = str(spec.get("driver", "")), str(pool.get("name", ""))
    node = str(spec.get("nodeName") or "")
    devices = []
    for d in _list(spec.get("devices")):
        d = _dict(d)
        attrs: dict[str, str | int | bool | Version] = {}
        for name, value in _dict(d.get("attributes")).items():
            found = _attribute(value)
            if found is not None:
                attrs[str(name).removeprefix(f"{driver}/")] = found
        capacity = {}
        for name, value in _dict(d.get("capacity")).items():
            amount = parse_quantity(str(_dict(value).get("value", "")))
            if amount is not None:
                capacity[str(name).removeprefix(f"{driver}/")] = int(amount)
        consumes = tuple((str(_dict(c).get("counterSet", "")), _counters(_dict(c).get("counters")))
                         for c in _list(d.get("consumesCounters")))
        tainted = any(_dict(t).get("effect") in NO_SCHEDULE for t in _list(d.get("taints")))
        devices.append(Device(driver=driver, pool=pool_name, name=str(d.get("name", "")),
                              node=node, attributes=attrs, capacity=capacity, consumes=consumes,
                              tainted=tainted,
                              allow_multiple=d.get("allowMultipleAllocations") is True))
    counters = tuple((str(_dict(c).get("name", "")), _counters(_dict(c).get("counters")))
                     for c in _list(spec.get("sharedCounters")))
    return Slice(driver=driver, pool=pool_name, generation=int(pool.get("generation") or 0),
                 count=int(pool.get("resourceSliceCount") or 1), node=node,
                 devices=tuple(devices), counters=counters)


def _node_of_allocation(allocation: dict[str, Any]) -> str:
    """The node an allocation is for: its nodeSelector's ``metadata.name`` field (or
    ``kubernetes.io/hostname`` label) requirement, as the scheduler writes it."""
    for term in _list(_dict(allocation.get("nodeSelector")).get("nodeSelectorTerms")):
        for match in _list(_dict(term).get("matchFields")):
            if _dict(match).get("key") == "metadata.name" and _dict(match).get("values"):
                return str(_dict(match)["values"][0])
        for expr in _list(_dict(term).get("matchExpressions")):
            if _dict(expr).get("key") == "kubernetes.io/hostname" and _dict(expr).get("values"):
                return str(_dict(expr)["values"][0])
    return ""


def claim_of(obj: dict[str, Any]) -> Claim:
    meta, spec, status = _dict(obj.get("metadata")), _dict(obj.get("spec")), \
        _dict(obj.get("status"))
    allocation = _dict(status.get("allocation"))
    results = _list(_dict(allocation.get("devices")).get("results"))
    allocated = tuple((str(_dict(r).get("driver", "")), str(_dict(r).get("pool", "")),
                       str(_dict(r).get("device", "")))
                      for r in results if not _dict(r).get("adminAccess"))
    requests = []
    if not allocation:
        for r in _list(_dict(spec.get("devices")).get("requests")):
            exactly = _dict(_dict(r).get("exactly"))
            if not exactly.get("deviceClassName"):
                continue
            mode = exactly.get("allocationMode", "ExactCount")
            requests.append(Request(
                device_class=str(exactly["deviceClassName"]),
                count=int(exactly.get("count") or 1) if mode == "ExactCount" else 0,
                selectors=tuple(str(_dict(_dict(s).get("cel")).get("expression", ""))
                                for s in _list(exactly.get("selectors")))))
    return Claim(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")),
                 allocated=allocated, node=_node_of_allocation(allocation),
                 requests=tuple(requests))


def device_class_of(obj: dict[str, Any]) -> DeviceClass:
    meta, spec = _dict(obj.get("metadata")), _dict(obj.get("spec"))
    return DeviceClass(
        name=str(meta.get("name", "")),
        selectors=tuple(str(_dict(_dict(s).get("cel")).get("expression", ""))
                        for s in _list(spec.get("selectors"))),
        extended_resource=str(spec.get("extendedResourceName") or ""))
