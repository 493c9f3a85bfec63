"""The fleet as plain values: each API object reduced, as it is read, to what the counting
needs (a Node's labels, allocatable resources and state; a Pod's node, requests and
placement; a ResourceSlice's devices and counters; a ResourceClaim's allocated devices and
what it asks; a DeviceClass's selectors), so memory grows with the GPU facts, never with the
objects' full specs. A pod that asks for no GPU and holds no claim is kept only as the pod slot
and the CPU, memory and storage it takes on its node (``Usage``).

A field of the wrong type (a ``status`` that is a list, a ``generation`` that is no integer)
makes the whole object ``Malformed``: the reader skips it and names it, never guesses."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from gfd.fleet.quantity import QuantityError, read_quantity, scheduler_value
from gfd.fleet.requests import RequestError, pod_requests

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
PODS = "pods"
"""The allocatable resource that is the node's pod slots (``NodeResourcesFit``: "Too many
pods")."""
INT64 = 2**63 - 1


def gpu_resource(name: str) -> bool:
    return name.startswith(GPU_RESOURCE_PREFIXES)


_DECIMAL = re.compile(r"-?[0-9]{1,19}")


def int64(text: str | None) -> int | None:
    """A label's value as an integer, as Kubernetes reads one (``strconv.ParseInt(v, 10,
    64)``: ASCII digits, an optional minus, within an int64); None when it is not one."""
    if text is None or not _DECIMAL.fullmatch(text):
        return None
    value = int(text)
    return value if -INT64 - 1 <= value <= INT64 else None


def count_label(text: str | None) -> int | None:
    """A count gfd or GFD writes in a label (``gpu.count``, ``gpu.replicas``): an int64 of
    0 or more; None otherwise."""
    value = int64(text)
    return value if value is not None and value >= 0 else None


class Version(str):
    """A device attribute of type ``version`` (a semantic version): CEL compares it with
    ``compareTo(semver(...))`` and never as a string, so its type is kept beside its text."""

    __slots__ = ()


class Malformed(Exception):
    """A field of an API object that is not of its type: the object is skipped."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


# --------------------------------------------------------------------------- typed reads


def _show(value: Any) -> str:
    """A value in a skip line: short, and never the walk of a nested one."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):  # escaped: a line break in a value never splits the line
        shown = json.dumps(value[:40] + ("..." if len(value) > 40 else ""))
        return shown
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def obj(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """``parent[key]`` as an object ({} when absent or null)."""
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise Malformed(f"{where}{key}", f"not an object ({_show(value)})")
    return value


def arr(parent: dict[str, Any], key: str, where: str) -> list[Any]:
    """``parent[key]`` as a list ([] when absent or null)."""
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise Malformed(f"{where}{key}", f"not a list ({_show(value)})")
    return value


def objs(parent: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """``parent[key]`` as a list of objects."""
    out = []
    for i, item in enumerate(arr(parent, key, where)):
        if not isinstance(item, dict):
            raise Malformed(f"{where}{key}[{i}]", f"not an object ({_show(item)})")
        out.append(item)
    return out


def text(parent: dict[str, Any], key: str, where: str, default: str = "") -> str:
    """``parent[key]`` as a string (``default`` when absent or null)."""
    value = parent.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise Malformed(f"{where}{key}", f"not a string ({_show(value)})")
    return value


def integer(parent: dict[str, Any], key: str, where: str, default: int = 0) -> int:
    """``parent[key]`` as an int64 (``default`` when absent or null)."""
    value = parent.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and math.isfinite(value) and value == int(value) \
                and abs(value) <= INT64:
            return int(value)
        raise Malformed(f"{where}{key}", f"not an integer ({_show(value)})")
    if abs(value) > INT64:
        raise Malformed(f"{where}{key}", "beyond an int64")
    return value


def flag(parent: dict[str, Any], key: str, where: str) -> bool:
    value = parent.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise Malformed(f"{where}{key}", f"not true or false ({_show(value)})")
    return value


def strings(parent: dict[str, Any], key: str, where: str) -> dict[str, str]:
    """``parent[key]`` as a map of strings (labels, a nodeSelector)."""
    out = {}
    for k, v in obj(parent, key, where).items():
        if not isinstance(v, str):
            raise Malformed(f"{where}{key}.{k}", f"not a string ({_show(v)})")
        out[str(k)] = v
    return out


def string_list(parent: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    out = []
    for i, v in enumerate(arr(parent, key, where)):
        if not isinstance(v, str):
            raise Malformed(f"{where}{key}[{i}]", f"not a string ({_show(v)})")
        out.append(v)
    return tuple(out)


def quantity_text(value: Any, where: str) -> str:
    """A quantity as JSON carries it: a string, or a number ``kubectl`` may leave as one."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise Malformed(where, f"not a quantity ({_show(value)})")


def ident(kind: str, raw: Any, index: int | None = None) -> str:
    """How a skipped object is named: ``Pod ns/name``, ``Node name``, or ``Pod #3``."""
    meta = raw.get("metadata") if isinstance(raw, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    name, namespace = meta.get("name"), meta.get("namespace")
    if isinstance(name, str) and name:
        return f"{kind} {namespace}/{name}" if isinstance(namespace, str) and namespace \
            else f"{kind} {name}"
    return f"{kind} #{index}" if index is not None else kind


# --------------------------------------------------------------------------- the values


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
    """Every allocatable resource as the scheduler holds it (CPU in thousandths, the rest in
    whole units; ``pods`` is the node's pod slots)."""
    capacity: dict[str, int]
    """The device plugin's resources' capacity (unhealthy devices count here, not in
    allocatable)."""
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[Taint, ...] = ()
    unreadable: tuple[tuple[str, str, str], ...] = ()
    """(resource, its text, why): allocatable or capacity values the scheduler cannot hold
    (beyond an int64), left out of the counts and reported."""

    @property
    def slots(self) -> int:
        """Pod slots: allocatable ``pods`` (none at all without it: the scheduler fits no pod
        on such a node)."""
        return self.allocatable.get(PODS, 0)


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """What a bound pod that asks for no GPU takes on its node: a pod slot, and its requests
    (CPU in thousandths, memory and storage in bytes)."""

    node: str
    requests: dict[str, int]


@dataclass(slots=True)
class Load:
    """What bound, unfinished pods take on one node: slots and summed requests."""

    pods: int = 0
    requests: dict[str, int] = field(default_factory=dict)

    def add(self, requests: dict[str, int], sign: int = 1) -> None:
        self.pods += sign
        for name, amount in requests.items():
            self.requests[name] = self.requests.get(name, 0) + sign * amount


@dataclass(frozen=True, slots=True, kw_only=True)
class Pod:
    namespace: str
    name: str
    node: str
    """``spec.nodeName``; "" while unscheduled."""
    requests: dict[str, int]
    """The scheduler's request for each GPU resource (``requests.pod_requests``), less what
    a DRA DeviceClass's ``extendedResourceName`` turned into a claim."""
    usage: dict[str, int] = field(default_factory=dict)
    """Its other requests (CPU in thousandths, memory, storage, other extended resources)."""
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
    uid: str = ""
    priority: int = 0
    """``spec.priority``: a nominated pod holds its requests against pods of no higher one."""
    nominated: str = ""
    """``status.nominatedNodeName`` of an unscheduled pod (preemption chose that node)."""
    gated: bool = False
    """``spec.schedulingGates``: the scheduler does not try it yet."""
    extended_to_dra: bool = False
    """Some request is one a DeviceClass's ``extendedResourceName`` already serves through a
    claim (``status.extendedResourceClaimStatus``)."""
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339, UTC): how long a pending pod has waited."""


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
    share: dict[str, int] = field(default_factory=dict)
    """What one share takes of each capacity when the claim asks for none: the capacity's
    ``requestPolicy.default``, or all of it (``consumable_capacity.go``,
    ``fillEmptyRequest``)."""
    consumes: tuple[tuple[str, dict[str, int]], ...] = ()
    """(counter set, counter -> amount)."""
    tainted: bool = False
    """A NoSchedule or NoExecute taint: no ordinary claim gets it."""
    taints: tuple[Taint, ...] = ()
    """Its taints (a request's tolerations may tolerate them: ``allocator``)."""
    bound_late: bool = False
    """``bindingConditions``: allocated only once a controller says so."""


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
    name: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One request of an unallocated claim: what a pending pod waits for."""

    device_class: str
    count: int
    """Devices wanted (``ExactCount``); 0 for ``All``."""
    selectors: tuple[str, ...] = ()
    """CEL expressions."""
    mode: str = "ExactCount"
    """``ExactCount`` or ``All`` (every matching device of the node it lands on)."""
    name: str = ""
    alternatives: tuple[Request, ...] = ()
    """``firstAvailable``: subrequests in order; the first that can be met is allocated."""
    admin: bool = False
    tolerations: tuple[tuple[str, str, str, str], ...] = ()
    """Device taints it tolerates: (key, operator, value, effect), as a pod's tolerations."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Claim:
    namespace: str
    name: str
    allocated: tuple[tuple[str, str, str], ...] = ()
    """(driver, pool, device) of each result that makes its device unavailable (neither
    ``adminAccess`` nor a share)."""
    node: str = ""
    """The node its allocation is for ("" when unallocated, or not node-local)."""
    requests: tuple[Request, ...] = ()
    shares: tuple[tuple[tuple[str, str, str], dict[str, int]], ...] = ()
    """(device, consumed capacity) of each result with a ``shareID``: a share of a device
    that allows multiple allocations."""
    uid: str = ""
    reserved: tuple[str, ...] = ()
    """``status.reservedFor``: the pods (uid, else name) using it."""
    constraints: int = 0
    """``spec.devices.constraints`` (matchAttribute, distinctAttribute): not evaluated here."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    """CEL expressions a device of the class meets."""
    extended_resource: str = ""
    """``spec.extendedResourceName``: a pod requesting it on a node without it allocatable
    gets devices of this class through a claim the scheduler makes (``DRAExtendedResource``)."""
    created: str = ""
    """``metadata.creationTimestamp`` (RFC 3339, UTC): of two classes naming one extended
    resource the scheduler takes the newer (``extended/`` DeviceClassMapping)."""


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
    classes_read: bool = False
    """DeviceClasses were read (until then, and for a dump without any or a refused LIST,
    the driver chart's are assumed)."""
    load: dict[str, Load] = field(default_factory=dict)
    """Per node, what bound pods that ask for no GPU take (their ``Usage``)."""
    skipped: list[str] = field(default_factory=list)
    """One line per object left out as malformed: the counts lack it."""


# --------------------------------------------------------------------------- reductions


def _resources(values: dict[str, Any], where: str, *, keep_all: bool,
               unreadable: list[tuple[str, str, str]]) -> dict[str, int]:
    out = {}
    for name, value in values.items():
        name = str(name)
        if not keep_all and not gpu_resource(name):
            continue
        raw = quantity_text(value, f"{where}{name}")
        try:
            out[name] = scheduler_value(name, raw)
        except QuantityError as exc:
            unreadable.append((name, raw if len(raw) <= 40 else raw[:37] + "...", str(exc)))
    return out


def _ready(conditions: list[dict[str, Any]], where: str) -> bool:
    return any(text(c, "type", where) == "Ready" and text(c, "status", where) == "True"
               for c in conditions)


def node_of(raw: dict[str, Any]) -> Node:
    meta, spec, status = obj(raw, "metadata", ""), obj(raw, "spec", ""), obj(raw, "status", "")
    taints = tuple(Taint(key=text(t, "key", f"spec.taints[{i}]."),
                         value=text(t, "value", f"spec.taints[{i}]."),
                         effect=text(t, "effect", f"spec.taints[{i}]."))
                   for i, t in enumerate(objs(spec, "taints", "spec.")))
    unreadable: list[tuple[str, str, str]] = []
    allocatable = _resources(obj(status, "allocatable", "status."), "status.allocatable.",
                             keep_all=True, unreadable=unreadable)
    capacity = _resources(obj(status, "capacity", "status."), "status.capacity.",
                          keep_all=False, unreadable=unreadable)
    once: dict[str, tuple[str, str, str]] = {}
    for found in unreadable:  # a resource beyond an int64 in both is one finding
        once.setdefault(found[0], found)
    return Node(name=text(meta, "name", "metadata."), labels=strings(meta, "labels", "metadata."),
                allocatable=allocatable, capacity=capacity,
                unschedulable=flag(spec, "unschedulable", "spec."),
                ready=_ready(objs(status, "conditions", "status."), "status.conditions[]."),
                taints=taints, unreadable=tuple(once.values()))


def _requirements(term: dict[str, Any], key: str, where: str,
                  prefix: str = "") -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    out = []
    for i, e in enumerate(objs(term, key, where)):
        at = f"{where}{key}[{i}]."
        out.append((prefix + text(e, "key", at), text(e, "operator", at),
                    string_list(e, "values", at)))
    return tuple(out)


def _terms(affinity: dict[str, Any]) -> tuple[tuple[tuple[str, str, tuple[str, ...]], ...],
                                              ...] | None:
    where = "spec.affinity.nodeAffinity."
    required = obj(obj(affinity, "nodeAffinity", "spec.affinity."),
                   "requiredDuringSchedulingIgnoredDuringExecution", where)
    if not required:
        return None
    where += "requiredDuringSchedulingIgnoredDuringExecution."
    return tuple(
        _requirements(term, "matchExpressions", f"{where}nodeSelectorTerms[{i}].")
        + _requirements(term, "matchFields", f"{where}nodeSelectorTerms[{i}].", FIELD)
        for i, term in enumerate(objs(required, "nodeSelectorTerms", where)))


AGENT_NAMES = ("gfd", "gpu-feature-discovery")
"""``app.kubernetes.io/name`` (or ``app``) of the pods that keep a node's GPU labels: gfd's
manifests and chart, and NVIDIA's GFD (its Helm chart, the GPU Operator's DaemonSet)."""


NOT_AGENT = ("app.kubernetes.io/component", "fleet")
"""The label of ``gfd fleet --serve``'s pods (manifests/fleet/serve, the chart's
``fleet.serve``): gfd's image, and no node's labels kept."""


def _is_agent(meta: dict[str, Any], spec: dict[str, Any]) -> bool:
    labels = strings(meta, "labels", "metadata.")
    if labels.get(NOT_AGENT[0]) == NOT_AGENT[1]:
        return False
    if any(labels.get(k) in AGENT_NAMES for k in ("app.kubernetes.io/name", "app")):
        return True
    for i, container in enumerate(objs(spec, "containers", "spec.")):
        image = text(container, "image", f"spec.containers[{i}].")
        if image.rsplit("/", 1)[-1].split(":")[0] in AGENT_NAMES:
            return True
    return False


def _requests(spec: dict[str, Any], skip: set[tuple[str, str]]) -> dict[str, int]:
    """The pod's requests as the scheduler sums them; Malformed for a container or quantity
    that is not of its type."""
    try:
        return pod_requests(spec, skip=skip)
    except RequestError as exc:
        raise Malformed(exc.where, exc.problem) from None


def usage_of(raw: dict[str, Any]) -> Usage | None:
    """What a bound, unfinished pod takes on its node (None: unbound or ended)."""
    spec, status = obj(raw, "spec", ""), obj(raw, "status", "")
    node = text(spec, "nodeName", "spec.")
    if not node or text(status, "phase", "status.") in ENDED:
        return None
    requests = _requests(spec, set())
    return Usage(node=node, requests={k: v for k, v in requests.items() if not gpu_resource(k)})


def _tolerations(values: list[dict[str, Any]], where: str) -> tuple[tuple[str, str, str, str],
                                                                   ...]:
    return tuple((text(t, "key", f"{where}[{i}]."), text(t, "operator", f"{where}[{i}]."),
                  text(t, "value", f"{where}[{i}]."), text(t, "effect", f"{where}[{i}]."))
                 for i, t in enumerate(values))


def pod_of(raw: dict[str, Any], *, always: bool = False) -> Pod | None:
    """The pod as the scheduler counts it; None for one that ended (it holds nothing) or
    that neither asks for GPUs, holds claims, keeps a node's labels nor is nominated to a node
    (a bound one of those is a ``usage_of``). ``always``: the pod whatever it asks (the one
    ``gfd why`` explains)."""
    meta, spec, status = obj(raw, "metadata", ""), obj(raw, "spec", ""), obj(raw, "status", "")
    if text(status, "phase", "status.") in ENDED and not always:
        return None
    # requests that a DeviceClass's extendedResourceName turned into a DRA claim: counted
    # once, through that claim (status.extendedResourceClaimStatus)
    extended = obj(status, "extendedResourceClaimStatus", "status.")
    where = "status.extendedResourceClaimStatus."
    to_dra = {(text(m, "containerName", f"{where}requestMappings[]."),
               text(m, "resourceName", f"{where}requestMappings[]."))
              for m in objs(extended, "requestMappings", where)}
    everything = _requests(spec, to_dra)
    requests = {k: v for k, v in everything.items() if gpu_resource(k)}
    claims = [text(s, "resourceClaimName", "status.resourceClaimStatuses[].")
              for s in objs(status, "resourceClaimStatuses", "status.")]
    if text(extended, "resourceClaimName", where):
        claims.append(text(extended, "resourceClaimName", where))
    for ref in objs(spec, "resourceClaims", "spec."):
        claims.append(text(ref, "resourceClaimName", "spec.resourceClaims[]."))
    agent = _is_agent(meta, spec)
    nominated = text(status, "nominatedNodeName", "status.")
    node = text(spec, "nodeName", "spec.")
    if not requests and not claims and not agent and not (nominated and not node) \
            and not always:
        return None
    selector = spec.get("nodeSelector")
    tolerations = _tolerations(objs(spec, "tolerations", "spec."), "spec.tolerations")
    return Pod(
        namespace=text(meta, "namespace", "metadata."), name=text(meta, "name", "metadata."),
        uid=text(meta, "uid", "metadata."),
        node=node, requests=requests,
        usage={k: v for k, v in everything.items() if not gpu_resource(k)},
        claims=tuple(sorted(set(filter(None, claims)))),
        node_selector=strings(spec, "nodeSelector", "spec.") if selector is not None else None,
        affinity=_terms(obj(spec, "affinity", "spec.")),
        tolerations=tolerations, agent=agent,
        agent_ready=_ready(objs(status, "conditions", "status."), "status.conditions[]."),
        priority=integer(spec, "priority", "spec."), nominated=nominated if not node else "",
        gated=bool(arr(spec, "schedulingGates", "spec.")),
        extended_to_dra=bool(to_dra), created=text(meta, "creationTimestamp", "metadata."))


def _attribute(value: Any, where: str) -> str | int | bool | Version | None:
    if not isinstance(value, dict):
        raise Malformed(where, f"not an attribute ({_show(value)})")
    for kind in ("string", "version", "int", "bool"):
        if kind in value:
            found = value[kind]
            if kind == "version" and isinstance(found, str):
                return Version(found)
            if kind == "string" and isinstance(found, str):
                return found
            if kind == "bool" and isinstance(found, bool):
                return found
            if kind == "int":
                return integer(value, "int", f"{where}.")
            raise Malformed(f"{where}.{kind}", f"not a {kind} ({_show(found)})")
    return None


def _units(value: Any, where: str) -> int:
    """A quantity in base units, rounded up; Malformed when it is none."""
    raw = quantity_text(value, where)
    try:
        amount = read_quantity(raw)
    except QuantityError as exc:
        raise Malformed(where, f"{exc} ({_show(raw)})") from None
    units = -(-amount.numerator // amount.denominator)
    if units > INT64:
        raise Malformed(where, "beyond an int64")
    return units


def _amount(value: Any, where: str) -> int:
    """A capacity or counter (``{value: <quantity>}``) in base units, rounded up; Malformed
    when it is none."""
    if not isinstance(value, dict):
        raise Malformed(where, f"not an object ({_show(value)})")
    return _units(value.get("value", ""), f"{where}.value")


def _counters(value: dict[str, Any], where: str) -> dict[str, int]:
    return {str(name): _amount(counter, f"{where}.{name}") for name, counter in value.items()}


def _device(d: dict[str, Any], driver: str, pool: str, node: str, where: str) -> Device:
    attrs: dict[str, str | int | bool | Version] = {}
    for name, value in obj(d, "attributes", where).items():
        found = _attribute(value, f"{where}attributes.{name}")
        if found is not None:
            attrs[str(name).removeprefix(f"{driver}/")] = found
    capacity, share = {}, {}
    for name, value in obj(d, "capacity", where).items():
        short = str(name).removeprefix(f"{driver}/")
        capacity[short] = _amount(value, f"{where}capacity.{name}")
        policy = obj(value, "requestPolicy", f"{where}capacity.{name}.")
        default = policy.get("default")
        share[short] = _amount({"value": default}, f"{where}capacity.{name}.requestPolicy"
                               ".default") if default is not None else capacity[short]
    consumes = tuple((text(c, "counterSet", f"{where}consumesCounters[{i}]."),
                      _counters(obj(c, "counters", f"{where}consumesCounters[{i}]."),
                                f"{where}consumesCounters[{i}].counters"))
                     for i, c in enumerate(objs(d, "consumesCounters", where)))
    taints = tuple(Taint(key=text(t, "key", f"{where}taints[{i}]."),
                         value=text(t, "value", f"{where}taints[{i}]."),
                         effect=text(t, "effect", f"{where}taints[{i}]."))
                   for i, t in enumerate(objs(d, "taints", where)))
    tainted = any(t.effect in NO_SCHEDULE for t in taints)
    multiple = flag(d, "allowMultipleAllocations", where)
    return Device(driver=driver, pool=pool, name=text(d, "name", where), node=node,
                  attributes=attrs, capacity=capacity, consumes=consumes, tainted=tainted,
                  taints=taints,
                  allow_multiple=multiple, share=share if multiple else {},
                  bound_late=bool(arr(d, "bindingConditions", where)))


def slice_of(raw: dict[str, Any]) -> Slice:
    meta, spec = obj(raw, "metadata", ""), obj(raw, "spec", "")
    pool = obj(spec, "pool", "spec.")
    driver, pool_name = text(spec, "driver", "spec."), text(pool, "name", "spec.pool.")
    node = text(spec, "nodeName", "spec.")
    devices = tuple(_device(d, driver, pool_name, node, f"spec.devices[{i}].")
                    for i, d in enumerate(objs(spec, "devices", "spec.")))
    counters = tuple((text(c, "name", f"spec.sharedCounters[{i}]."),
                      _counters(obj(c, "counters", f"spec.sharedCounters[{i}]."),
                                f"spec.sharedCounters[{i}].counters"))
                     for i, c in enumerate(objs(spec, "sharedCounters", "spec.")))
    count = integer(pool, "resourceSliceCount", "spec.pool.", default=1)
    if count < 1:
        raise Malformed("spec.pool.resourceSliceCount", f"not a count ({count})")
    return Slice(driver=driver, pool=pool_name,
                 generation=integer(pool, "generation", "spec.pool."), count=count, node=node,
                 devices=devices, counters=counters, name=text(meta, "name", "metadata."))


def _node_of_allocation(allocation: dict[str, Any]) -> str:
    """The node an allocation is for: its nodeSelector's ``metadata.name`` field (or
    ``kubernetes.io/hostname`` label) requirement, as the scheduler writes it."""
    where = "status.allocation.nodeSelector."
    for i, term in enumerate(objs(obj(allocation, "nodeSelector", "status.allocation."),
                                  "nodeSelectorTerms", where)):
        at = f"{where}nodeSelectorTerms[{i}]."
        for key, values in ((k, v) for k, _, v in _requirements(term, "matchFields", at)):
            if key == "metadata.name" and values:
                return values[0]
        for key, values in ((k, v) for k, _, v in _requirements(term, "matchExpressions", at)):
            if key == "kubernetes.io/hostname" and values:
                return values[0]
    return ""


def _request(r: dict[str, Any], where: str, name: str) -> Request:
    mode = text(r, "allocationMode", where, "ExactCount")
    count = integer(r, "count", where, default=1) if mode == "ExactCount" else 0
    if count < 0:
        raise Malformed(f"{where}count", f"not a count ({count})")
    return Request(device_class=text(r, "deviceClassName", where), count=count, mode=mode,
                   name=name, admin=flag(r, "adminAccess", where),
                   tolerations=_tolerations(objs(r, "tolerations", where), f"{where}tolerations"),
                   selectors=tuple(text(obj(s, "cel", f"{where}selectors[{i}]."), "expression",
                                        f"{where}selectors[{i}].cel.")
                                   for i, s in enumerate(objs(r, "selectors", where))))


def claim_of(raw: dict[str, Any]) -> Claim:
    meta, spec, status = obj(raw, "metadata", ""), obj(raw, "spec", ""), obj(raw, "status", "")
    allocation = obj(status, "allocation", "status.")
    where = "status.allocation.devices."
    allocated, shares = [], []
    for i, r in enumerate(objs(obj(allocation, "devices", "status.allocation."), "results",
                               where)):
        at = f"{where}results[{i}]."
        device = (text(r, "driver", at), text(r, "pool", at), text(r, "device", at))
        if flag(r, "adminAccess", at):
            continue
        if r.get("shareID") is not None:
            # consumedCapacity: capacity name -> quantity (a map of quantities, not of
            # {value: ...} objects as capacities and counters are)
            consumed = obj(r, "consumedCapacity", at)
            shares.append((device, {str(name): _units(amount, f"{at}consumedCapacity.{name}")
                                    for name, amount in consumed.items()}))
        else:
            allocated.append(device)
    requests = []
    if not allocation:
        for i, r in enumerate(objs(obj(spec, "devices", "spec."), "requests", "spec.devices.")):
            at = f"spec.devices.requests[{i}]."
            name = text(r, "name", at)
            exactly = obj(r, "exactly", at)
            if exactly:
                requests.append(_request(exactly, f"{at}exactly.", name))
            alternatives = tuple(
                _request(s, f"{at}firstAvailable[{j}].", text(s, "name", f"{at}firstAvailable"
                                                                           f"[{j}]."))
                for j, s in enumerate(objs(r, "firstAvailable", at)))
            if alternatives:
                requests.append(Request(device_class="", count=0, name=name,
                                        mode="FirstAvailable", alternatives=alternatives))
    reserved = tuple(text(ref, "uid", "status.reservedFor[].") or
                     text(ref, "name", "status.reservedFor[].")
                     for ref in objs(status, "reservedFor", "status."))
    return Claim(namespace=text(meta, "namespace", "metadata."),
                 name=text(meta, "name", "metadata."), uid=text(meta, "uid", "metadata."),
                 allocated=tuple(allocated), shares=tuple(shares),
                 node=_node_of_allocation(allocation), requests=tuple(requests),
                 reserved=reserved,
                 constraints=len(arr(obj(spec, "devices", "spec."), "constraints",
                                     "spec.devices.")))


def device_class_of(raw: dict[str, Any]) -> DeviceClass:
    meta, spec = obj(raw, "metadata", ""), obj(raw, "spec", "")
    return DeviceClass(
        name=text(meta, "name", "metadata."),
        selectors=tuple(text(obj(s, "cel", f"spec.selectors[{i}]."), "expression",
                             f"spec.selectors[{i}].cel.")
                        for i, s in enumerate(objs(spec, "selectors", "spec."))),
        extended_resource=text(spec, "extendedResourceName", "spec."),
        created=text(meta, "creationTimestamp", "metadata."))
