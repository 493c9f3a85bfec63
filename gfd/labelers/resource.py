"""Resource labels shared by full GPUs and MIG devices: ``<R>.replicas``,
``<R>.sharing-strategy``, ``<R>.memory.per-replica`` (and ``<R>.product``/``.count`` values)."""

from __future__ import annotations

from gfd.facts.naming import product_value
from gfd.labelers.base import Label, LabelDoc
from gfd.labelers.options import LabelOptions

GPU_RESOURCE = "nvidia.com/gpu"

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="<R>.replicas", value="integer (0 for MIG-enabled full GPUs)", example="1",
             source="config: sharing", when="GPUs present", set="compat",
             managers=("device-plugin",)),
    LabelDoc(key="<R>.sharing-strategy",
             value="`none` / `time-slicing` / `mps` (empty when INVALID)", example="none",
             source="config: sharing", when="GPUs present", set="compat",
             managers=("device-plugin",)),
    LabelDoc(key="<R>.memory.per-replica", value="MiB (memory // replicas)", example="3840",
             source="<R>.memory and config: sharing", when="replicas > 1", set="extended",
             managers=("device-plugin",)),
)


def sharing_labels(
    resource: str,
    model: str,
    suffixes: tuple[str, ...],
    options: LabelOptions,
    *,
    count: int,
    sharing_enabled: bool = True,
    source: str,
) -> dict[str, Label]:
    """``<R>.product``, ``.count``, ``.replicas``, ``.sharing-strategy`` by GFD's rules.

    With sharing disabled (MIG-enabled full GPUs) replicas is 0 and there is no suffix.
    """
    sharing = options.sharing
    replicas = sharing.replicas(resource) if sharing_enabled else 0
    shared = replicas > 1
    strategy = sharing.strategy if shared else "none"
    extra = ("SHARED",) if shared and not sharing.rename_by_default else ()
    value, rules = product_value(model, *suffixes, *extra)
    cfg = sharing.source or "no sharing config"
    replicas_rule = (
        "sharing disabled for MIG-enabled GPUs: replicas 0"
        if not sharing_enabled
        else f"replicas of {resource!r} in the sharing config, 1 when absent"
    )
    return {
        f"{resource}.product": Label(value=value, source=source, raw=model, rules=rules),
        f"{resource}.count": Label(value=str(count), source=source),
        f"{resource}.replicas": Label(value=str(replicas), source=cfg, rules=(replicas_rule,)),
        f"{resource}.sharing-strategy": Label(
            value=strategy, source=cfg,
            rules=("the active strategy when replicas > 1, else 'none'",),
        ),
    }


GPU_COUNT_SOURCES = {
    "nvml": "nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex (each GPU), nvmlDeviceGetName "
            "(its model)",
    "vfio": "sysfs: the PCI devices bound to vfio-pci (each GPU), the PCI IDs database (its "
            "model)",
    "tegra": "cuDeviceGetCount, cuDeviceGetName (its model)",
}
"""Where a full-GPU count comes from, per back end (``gfd explain``)."""
MIG_COUNT_SOURCE = ("nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex "
                    "(each MIG device of each MIG-enabled GPU), nvmlDeviceGetGpuInstanceId and "
                    "nvmlDeviceGetComputeInstanceId (its profile)")
"""Where a MIG device count comes from."""
COUNT_RELATION = ("gpu.count counts GPUs, MIG-enabled ones included (GFD's meaning; MIG "
                  "devices under --mig-strategy single); gpu.devices.full counts the GPUs a "
                  "pod can get whole (healthy, MIG off) and gpu.devices.mig-<profile> the MIG "
                  "devices, whatever the strategy")
"""How the count labels relate (``gpu.count=8`` beside ``gpu.devices.full=4`` on a node
with four MIG-enabled GPUs)."""


def count_label(count: int, *, source: str, raw: str,
                rules: tuple[str, ...]) -> Label:
    """``<R>.count`` with its true sources and rules, and how it relates to the others."""
    return Label(value=str(count), source=source, raw=raw, rules=(*rules, COUNT_RELATION))


def per_replica(resource: str, memory_mib: int, options: LabelOptions) -> dict[str, Label]:
    """Extended ``<R>.memory.per-replica``: memory divided by replicas, when shared."""
    replicas = options.sharing.replicas(resource)
    if replicas <= 1 or memory_mib <= 0:
        return {}
    return {
        f"{resource}.memory.per-replica": Label(
            value=str(memory_mib // replicas),
            source=f"{resource}.memory / {resource}.replicas",
            raw=f"{memory_mib} MiB / {replicas}",
            rules=("integer division; sharers get no memory isolation",),
        )
    }
