"""Which GPUs count, how they group by model, the deterministic primary model, and the
node's model inventory: ``gpu.present`` (DRA nodes), ``gpu.heterogeneous``,
``gpu.product.<model>``, ``gpu.memory.min``."""

from __future__ import annotations

from dataclasses import dataclass

from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.naming import sanitise, short_name
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Gpu, Snapshot

# go-nvlib's default enumeration skips these (a DGX's display adapter is not a compute GPU).
DISPLAY_ONLY = frozenset({"DGX Display", "NVIDIA DGX Display"})


@dataclass(frozen=True, slots=True)
class ModelGroup:
    """The healthy GPUs of one model (exact NVML name), ordered by index."""

    name: str
    gpus: tuple[Gpu, ...]

    @property
    def first(self) -> Gpu:
        return self.gpus[0]

    @property
    def memory_mib(self) -> int:
        return max((g.memory_mib or 0) for g in self.gpus)


def counted(snapshot: Snapshot) -> tuple[Gpu, ...]:
    """Every GPU gfd counts, healthy or not (display-only adapters excluded)."""
    return tuple(g for g in snapshot.gpus if g.name not in DISPLAY_ONLY or g.error)


def healthy(snapshot: Snapshot) -> tuple[Gpu, ...]:
    """Counted GPUs that answered NVML without a fatal error."""
    return tuple(g for g in counted(snapshot) if g.error is None)


def unhealthy(snapshot: Snapshot) -> tuple[Gpu, ...]:
    return tuple(g for g in counted(snapshot) if g.error is not None)


def has_gpus(snapshot: Snapshot) -> bool:
    """GFD writes node-level GPU labels only when NVML works and at least one GPU exists."""
    return snapshot.nvml_available and bool(counted(snapshot))


def model_groups(snapshot: Snapshot) -> tuple[ModelGroup, ...]:
    """Healthy GPUs grouped by model, primary model first.

    The primary model is the one with the most GPUs, then the most memory, then the
    name in alphabetical order: a fixed rule, so labels never flap on mixed nodes
    (GFD picks at random each cycle).
    """
    by_name: dict[str, list[Gpu]] = {}
    for gpu in sorted(healthy(snapshot), key=lambda g: g.index):
        by_name.setdefault(gpu.name, []).append(gpu)
    groups = [ModelGroup(name, tuple(gpus)) for name, gpus in by_name.items()]
    groups.sort(key=lambda grp: (-len(grp.gpus), -grp.memory_mib, grp.name))
    return tuple(groups)


PRIMARY_RULE = "primary model: most GPUs, then most memory, then name"


_PRODUCT_KEY = "gpu.product."

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="gpu.present", value="`true`", example="true",
             source="device enumeration",
             when="GPUs present, under `--resource-manager dra` only (in both label sets: not "
                  "GFD's label; on device-plugin nodes the GPU Operator's NFD rule writes it)",
             set="compat", managers=("dra",)),
    LabelDoc(key="gpu.heterogeneous", value="`true` / `false`", example="false",
             source="nvmlDeviceGetName", when="GPUs present", set="extended"),
    LabelDoc(key="gpu.product.<model>", value="GPU count of that model", example="8",
             source="nvmlDeviceGetName", when="one per model present", set="extended"),
    LabelDoc(key="gpu.memory.min", value="MiB", example="22731",
             source="nvmlDeviceGetMemoryInfo", when="GPUs present", set="extended"),
)


def present(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    """``gpu.present=true``: the node has GPUs (the pipeline runs this only when it does, and
    publishes it only where its doc's resource managers say: under ``dra``)."""
    return Result({key("gpu.present"): Label(
        value="true", source="device enumeration",
        raw=f"{len(counted(snapshot))} GPU(s)",
        rules=("true when the GPU back end works and finds at least one GPU",))})


def models(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    """Every model on the node with its GPU count, whether there is more than one, and the
    smallest GPU memory: what a workload can rely on whichever GPU it gets."""
    labels: dict[str, Label] = {}
    groups = model_groups(snapshot)
    if groups:
        labels[key("gpu.heterogeneous")] = Label(
            value="true" if len(groups) > 1 else "false", source="nvmlDeviceGetName",
            rules=("true when healthy GPUs of more than one model are present",))
    for group in groups:
        model = sanitise(group.name).rstrip("-._")
        if not model:  # a name with nothing labelable: no key to write (gpu.product says so)
            continue
        name = short_name(model, 63 - len(_PRODUCT_KEY))
        labels[key(_PRODUCT_KEY + name)] = Label(
            value=str(len(group.gpus)), source="nvmlDeviceGetName", raw=group.name,
            rules=("sanitise; key name part kept within 63 characters (stable hash)",))
    memories = [g.memory_mib for g in healthy(snapshot) if g.memory_mib]
    if memories and not any(g.unknown("memory") for g in healthy(snapshot)):
        labels[key("gpu.memory.min")] = Label(
            value=str(min(memories)), source="nvmlDeviceGetMemoryInfo",
            rules=("smallest full-GPU memory on the node, MiB",))
    return Result(labels)
