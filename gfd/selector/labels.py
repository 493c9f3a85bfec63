"""``Filters`` rendered over gfd's node labels: the node-selector terms that admit a node only
when every unit of the requested resource the device plugin can hand the pod there meets the
filters, the resource to request, and the nodeSelector / node-affinity stanza.

The device plugin's units of ``nvidia.com/gpu``: every full GPU under ``--mig-strategy none``
(MIG-enabled ones included), the MIG-disabled ones under ``mixed``, the MIG devices (all of
one kind) or else the full GPUs under ``single``; ``nvidia.com/mig-<profile>`` under ``mixed``.
Sharing replicates every unit of a resource (``<name>.shared`` when renamed), and MPS caps a
replica's memory at the GPU's memory divided by its replicas. gfd's ``gpu.product``,
``gpu.memory``, ``gpu.family`` and ``gpu.compute.*`` describe one model (the primary), so
terms that rely on them also require ``gpu.heterogeneous=false``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gfd.errors import ConfigError
from gfd.facts.naming import short_name
from gfd.selector.filters import Filters

P = "nvidia.com/"
PRODUCT_KEY = "gpu.product."

Requirement = tuple[str, str, tuple[str, ...]]
Term = list[Requirement]

MISSED = (
    "a node with GPUs of several models when a filter needs the model (--product, --family, "
    "--min-compute, or --min-memory under MPS or with --mig-profile): gfd's gpu.product, "
    "gpu.memory, gpu.family and gpu.compute.* describe the primary model only",
    "MIG devices under --mig-strategy single when --mig-profile is given: they are requested "
    "as nvidia.com/gpu, not nvidia.com/mig-<profile> (select them without --mig-profile)",
    "--shared/--dedicated where every GPU of the primary model has MIG enabled under "
    "--mig-strategy none or mixed: gpu.replicas is 0 there and does not say whether the "
    "device plugin replicates",
    "a node whose GPU model gfd's list names differently from NVML (a warning says when a "
    "--product value matches no known model)",
    "a node where MPS is configured and a GPU has MIG enabled: gfd, like GFD, publishes no "
    "labels there (MPS does not share MIG-enabled GPUs)",
    "shared units when --count is above 1: the request is narrowed to dedicated units, since "
    "several replicas may be one GPU and failRequestsGreaterThanOne (no label shows it) "
    "refuses them",
    "--dedicated on a node whose GPUs the DRA driver hands out (its DeviceClass maps "
    "nvidia.com/gpu to a whole device): gfd publishes no gpu.replicas there; claim with --dra",
    "--renamed and not: one pod requests one resource name (nvidia.com/gpu, or "
    "nvidia.com/gpu.shared where the device plugin renames shared resources)",
)
"""Where the labels cannot tell, so a good node is left out (docs/selector.md)."""

COMPAT_REFUSAL = (
    "--label-set compat: GFD's labels describe one GPU model per node (gpu.product, "
    "gpu.memory, gpu.family name the primary model), so a node with several models could hand "
    "this pod another one; use gfd's default extended labels (gpu.heterogeneous, "
    "gpu.product.<model>, gpu.memory.min), or filter only by --shared/--dedicated and "
    "--mig-profile")


def _gt(key: str, at_least: int) -> Requirement:
    return (P + key, "Gt", (str(at_least - 1),))


def _in(key: str, *values: str) -> Requirement:
    return (P + key, "In", values)


ONE_MODEL = _in("gpu.heterogeneous", "false")


def _compute(f: Filters) -> list[Term]:
    if f.min_compute is None:
        return [[]]
    major, minor = f.min_compute
    if minor == 0:
        return [[_gt("gpu.compute.major", major)]]
    return [[_gt("gpu.compute.major", major + 1)],
            [_in("gpu.compute.major", str(major)), _gt("gpu.compute.minor", minor)]]


def _products(f: Filters) -> list[Term]:
    if f.product is None:
        return [[]]
    return [[(P + PRODUCT_KEY + short_name(m, 63 - len(PRODUCT_KEY)), "Exists", ())]
            for m in f.product.values]


def _memory(f: Filters, resource: str) -> list[Term]:
    if f.min_memory is None:
        return [[]]
    if f.mig_profile:
        return [[_gt(f"{resource}.memory", f.min_memory)]]
    whole = [(P + "gpu.sharing-strategy", "NotIn", ("mps",)),
             _gt("gpu.memory", f.min_memory), _gt("gpu.memory.min", f.min_memory)]
    if f.shared is False:
        return [whole]
    return [whole, [_in("gpu.sharing-strategy", "mps"),
                    _gt("gpu.memory.per-replica", f.min_memory), ONE_MODEL]]


def terms(f: Filters, label_set: str = "extended") -> list[Term]:
    """OR-ed terms of AND-ed requirements (node affinity's shape) over gfd's labels of
    ``--resource-manager device-plugin``, for a pod that requests ``f.resource``."""
    compat = label_set == "compat"
    if compat and (f.product or f.min_memory is not None or f.family or f.min_compute):
        raise ConfigError(COMPAT_REFUSAL)
    resource = f"mig-{f.mig_profile}" if f.mig_profile else "gpu"
    base: Term = []
    if f.mig_profile:
        base.append(_gt(f"{resource}.count", 1))
    if f.shared is True:
        base.append(_gt(f"{resource}.replicas", 2))
    elif f.shared is False:
        base.append(_in(f"{resource}.replicas", "1"))
    model: Term = []
    if f.family:
        model.append(_in("gpu.family", f.family))
    if not compat and (f.product or f.family or f.min_compute
                       or (f.mig_profile and f.min_memory is not None)):
        model.append(ONE_MODEL)
    out = []
    for p in _products(f):
        for m in _memory(f, resource):
            for c in _compute(f):
                term = base + p + model + m + c
                out.append(list(dict.fromkeys(term)))
    return out


def limits(f: Filters) -> dict[str, int]:
    """The container's ``resources.limits``: the resource the terms were written for."""
    return {f.resource: f.count}


GPU_TAINT = "nvidia.com/gpu"
"""The taint key GPU nodes commonly carry (the GPU Operator's docs, EKS, AKS and GKE GPU node
pools). A pod tolerates it only if its spec says so: the ``ExtendedResourceToleration``
admission plugin that would add it is off by default, and never applies to a DRA claim."""


def tolerations(keys: Sequence[str]) -> list[dict[str, str]]:
    """Tolerations of every effect of each taint key."""
    return [{"key": k, "operator": "Exists"} for k in dict.fromkeys(keys)]


def stanza(f: Filters, *, form: str = "auto", label_set: str = "extended",
           tolerate: Sequence[str] = (GPU_TAINT,)) -> dict[str, Any]:
    """A pod-spec fragment: ``nodeSelector`` when every requirement is one exact value (and
    ``form`` allows), else ``affinity``; the tolerations of the taint keys ``tolerate``; and a
    container that requests the resource."""
    found = terms(f, label_set)
    simple = len(found) == 1 and all(op == "In" and len(v) == 1 for _, op, v in found[0])
    if form == "nodeSelector" and not simple:
        raise ConfigError("these constraints need node affinity (a range, a choice of values "
                          "or several terms); a nodeSelector only matches exact values: use "
                          "--form affinity")
    if simple and form != "affinity" and found[0]:
        placement: dict[str, Any] = {"nodeSelector": {k: v[0] for k, _, v in found[0]}}
    else:
        placement = {"affinity": affinity(found)}
    return {**placement, **({"tolerations": tolerations(tolerate)} if tolerate else {}),
            "containers": [{"name": "gpu", "resources": {"limits": limits(f)}}]}


def affinity(found: list[Term]) -> dict[str, Any]:
    """Required node affinity: terms OR-ed, each term's expressions AND-ed."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": k, "operator": op, **({"values": list(v)} if v else {})}
                                  for k, op, v in term]}
            for term in found]}}}
