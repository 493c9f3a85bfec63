"""Full-GPU resource labels: ``gpu.product``, ``gpu.count``, ``gpu.memory`` of the primary model
(with its ``.replicas``, ``.sharing-strategy`` from resource.py and ``gpu.family`` from
family.py).

On the vfio back end the model is the PCI IDs database's device name and the memory the
64-bit BAR total (go-nvlib's value); gfd writes that memory in MiB like every other
``gpu.memory``, where GFD writes it in bytes (docs/gfd-compatibility.md, "Back ends").
"""

from __future__ import annotations

from gfd.errors import show
from gfd.facts.gpus import PRIMARY_RULE, ModelGroup, model_groups
from gfd.facts.mig import layout_unknown
from gfd.facts.naming import sanitise
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.family import capability_labels
from gfd.labelers.options import LabelOptions
from gfd.labelers.resource import (
    GPU_COUNT_SOURCES,
    GPU_RESOURCE,
    count_label,
    per_replica,
    sharing_labels,
)
from gfd.snapshot import Snapshot

# <R>.product, .count and .memory are computed here for full GPUs and in mig.py for MIG
# devices (mig.py lists these same entries).
PRODUCT = LabelDoc(
    key="<R>.product",
    value="sanitised model, `-MIG-<profile>` for MIG, `-SHARED` when shared and not renamed, "
          "`-MIG-INVALID` for an invalid single layout; at most 63 characters",
    example="NVIDIA-H100-80GB-HBM3",
    source="nvmlDeviceGetName; vfio: the PCI IDs database's device name",
    when="GPUs present (MIG: per profile)", set="compat",
    dra="the primary model's name: never `-SHARED` or `-MIG-...` (`gpu` only)")
COUNT = LabelDoc(key="<R>.count", value="integer", example="8",
                 source="nvmlDeviceGetCount and nvmlDeviceGetName (MIG: "
                        "nvmlDeviceGetMigDeviceHandleByIndex and the device's profile)",
                 when="GPUs present", set="compat",
                 dra="GPUs of the primary model, MIG-enabled ones included (`gpu` only)")
MEMORY = LabelDoc(key="<R>.memory", value="MiB", example="81559",
                  source="nvmlDeviceGetMemoryInfo (MIG: memorySizeMB; vfio: 64-bit BAR "
                         "total, rounded up to a power of two)",
                  when="memory known", set="compat",
                  dra="the primary model's full-GPU memory (`gpu` only)")

LABELS: tuple[LabelDoc, ...] = (PRODUCT, COUNT, MEMORY)


SINGLE_OVERRIDES = frozenset(f"{GPU_RESOURCE}.{s}" for s in (
    "product", "count", "replicas", "sharing-strategy", "memory", "memory.per-replica"))
"""The full-GPU keys that ``--mig-strategy single`` replaces with MIG values."""


def full_gpus(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    groups = model_groups(snapshot)
    if not groups:
        return Result()
    primary = groups[0]
    warnings: tuple[str, ...] = ()
    if len(groups) > 1:
        names = ", ".join(f"{g.name} x{len(g.gpus)}" for g in groups)
        warnings = (f"several GPU models on this node ({names}); gpu.* labels describe "
                    f"{show(primary.name)} ({PRIMARY_RULE})",)
    if not sanitise(primary.name):
        indices = ", ".join(str(g.index) for g in primary.gpus)
        warnings += (f"GPU {indices}: NVML gave the name {show(primary.name)}, with nothing "
                     "labelable in it; gpu.count and the other labels are published, "
                     "gpu.product without the model",)
    # Under single with MIG on, the MIG pass owns gpu.memory (and may mark it INVALID):
    # a per-replica figure from the full GPUs would contradict it.
    mig_single = options.mig_strategy == "single" and any(
        g.mig_enabled for grp in groups for g in grp.gpus)
    labels = group_labels(primary, options, several=len(groups) > 1,
                          per_replica_ok=not mig_single, backend=snapshot.backend)
    if options.mig_strategy == "single" and layout_unknown(snapshot):
        # the MIG pass would replace these if MIG is on, and cannot tell: neither value is sure
        labels = {k: v for k, v in labels.items() if k not in SINGLE_OVERRIDES}
    return Result(labels, warnings)


def group_labels(group: ModelGroup, options: LabelOptions, *, several: bool,
                 per_replica_ok: bool = True, backend: str = "nvml") -> dict[str, Label]:
    """GFD's full-GPU labels for one model (docs/gfd-compatibility.md, "Label catalogue"
    and "MIG strategies"); ``backend`` is the snapshot's."""
    # MIG-enabled GPUs get sharing disabled (replicas 0); MIG-disabled GPUs of the same
    # model come later in GFD's merge and win, so any MIG-disabled GPU turns sharing on.
    known = [g for g in group.gpus if not g.unknown("mig_mode")]
    sharing_enabled = any(not g.mig_enabled for g in known)
    sharing_unknown = not sharing_enabled and len(known) < len(group.gpus)
    vfio = backend == "vfio"
    name_source = "PCI IDs database (vfio)" if vfio else "nvmlDeviceGetName"
    source = name_source + (f"; {PRIMARY_RULE}" if several else "")
    labels = sharing_labels(GPU_RESOURCE, group.name, (), options, count=len(group.gpus),
                            sharing_enabled=sharing_enabled, source=source)
    labels[f"{GPU_RESOURCE}.count"] = count_label(
        len(group.gpus), source=GPU_COUNT_SOURCES.get(backend, GPU_COUNT_SOURCES["nvml"]),
        raw=f"GPUs {', '.join(str(g.index) for g in group.gpus)}: {group.name}",
        rules=("the GPUs that answered without a fatal error, by model name (the others "
               "are counted in gpu.unhealthy)", *((PRIMARY_RULE,) if several else ())))
    if sharing_unknown:  # whether sharing applies depends on a MIG mode NVML did not give
        dropped = {f"{GPU_RESOURCE}.replicas", f"{GPU_RESOURCE}.sharing-strategy"}
        if options.sharing.replicas(GPU_RESOURCE) > 1:
            dropped.add(f"{GPU_RESOURCE}.product")  # its -SHARED suffix depends on it too
        labels = {k: v for k, v in labels.items() if k not in dropped}
    # every GPU of a model has the same memory and capability: the first that answered
    gpu = next((g for g in group.gpus if g.memory_total_bytes), group.first)
    memory = gpu.memory_mib
    if memory:
        labels[key("gpu.memory")] = Label(
            value=str(memory),
            source="sysfs resource: 64-bit BARs (vfio)" if vfio else "nvmlDeviceGetMemoryInfo",
            raw=f"{gpu.memory_total_bytes} bytes",
            rules=(("64-bit BAR sizes summed, rounded up to a power of two (go-nvlib)",
                    "bytes // 2^20 (MiB; GFD writes the bytes)") if vfio
                   else ("bytes // 2^20 (MiB)",)))
        if sharing_enabled and per_replica_ok:
            labels |= per_replica(GPU_RESOURCE, memory, options)
    answered = next((g for g in group.gpus if g.compute_capability is not None), group.first)
    return labels | capability_labels(answered, backend=backend)
