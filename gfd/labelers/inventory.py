"""The node's model inventory: ``gpu.present`` (DRA nodes), ``gpu.heterogeneous``,
``gpu.product.<model>``, ``gpu.memory.min`` (which GPUs count and how they group by model
are facts: ``gfd.facts.gpus``)."""

from __future__ import annotations

from gfd.facts.gpus import counted, healthy, model_groups
from gfd.facts.naming import sanitise, short_name
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

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
