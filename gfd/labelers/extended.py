"""gfd's extended labels (SPEC §2.2): ``gpu.heterogeneous``, ``gpu.product.<model>``,
``gpu.memory.min``, ``gpu.compute-mode``, ``gpu.nvlink``, ``gpu.unhealthy``,
``gpu.accelerator`` (and its operator-chosen mirror), ``gpu.timeslice``."""

from __future__ import annotations

from gfd.labelers.base import Label, Result, key
from gfd.labelers.inventory import PRIMARY_RULE, healthy, model_groups, unhealthy
from gfd.labelers.naming import accelerator_slug, sanitise, short_name
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

_PRODUCT_KEY = "gpu.product."


def extended(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    labels: dict[str, Label] = {}
    groups = model_groups(snapshot)
    gpus = healthy(snapshot)
    if groups:
        labels[key("gpu.heterogeneous")] = Label(
            value="true" if len(groups) > 1 else "false", source="nvmlDeviceGetName",
            rules=("true when healthy GPUs of more than one model are present",))
        for group in groups:
            model = sanitise(group.name).rstrip("-._")
            name = short_name(model, 63 - len(_PRODUCT_KEY))
            labels[key(_PRODUCT_KEY + name)] = Label(
                value=str(len(group.gpus)), source="nvmlDeviceGetName", raw=group.name,
                rules=("sanitise; key name part kept within 63 characters (stable hash)",))
        slug = accelerator_slug(groups[0].name)
        accel = Label(value=slug, source="nvmlDeviceGetName", raw=groups[0].name,
                      rules=(PRIMARY_RULE, "lowercase slug, 'nvidia-' prefix"))
        labels[key("gpu.accelerator")] = accel
    memories = [g.memory_mib for g in gpus if g.memory_mib]
    if memories:
        labels[key("gpu.memory.min")] = Label(
            value=str(min(memories)), source="nvmlDeviceGetMemoryInfo",
            rules=("smallest full-GPU memory on the node, MiB",))
    modes = {g.compute_mode for g in gpus}
    if len(modes) == 1 and None not in modes:
        labels[key("gpu.compute-mode")] = Label(
            value=str(next(iter(modes))), source="nvmlDeviceGetComputeMode",
            rules=("present when all GPUs agree",))
    if gpus:
        labels[key("gpu.nvlink")] = Label(
            value="true" if any(g.nvlink_active for g in gpus) else "false",
            source="nvmlDeviceGetNvLinkState", rules=("true when any link of any GPU is active",))
    policies = {g.timeslice for g in gpus}
    if len(policies) == 1 and None not in policies:
        labels[key("gpu.timeslice")] = Label(
            value=str(next(iter(policies))), source="nvidia-smi compute-policy --list",
            rules=("present when every GPU reports the same timeslice policy",))
    lost = unhealthy(snapshot)
    if lost:
        labels[key("gpu.unhealthy")] = Label(
            value=str(len(lost)), source="NVML per-GPU errors",
            raw="; ".join(f"GPU {g.index}: {g.error}" for g in lost),
            rules=("GPUs that answered a fatal error such as 'GPU is lost'",))
    return Result(labels)
