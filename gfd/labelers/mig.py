"""MIG labels: ``mig.capable``, ``mig.strategy``, the single/mixed resource labels with their
attributes, and the extended ``mig.enabled.count`` / ``mig.pending``."""

from __future__ import annotations

from gfd.facts.gpus import counted
from gfd.facts.mig import layout_unknown, mode_unknown, profile_name
from gfd.facts.naming import product_value
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.gpu import COUNT, MEMORY, PRODUCT
from gfd.labelers.options import LabelOptions
from gfd.labelers.resource import (
    GPU_RESOURCE,
    MIG_COUNT_SOURCE,
    count_label,
    per_replica,
    sharing_labels,
)
from gfd.snapshot import Gpu, MigDevice, Snapshot

ATTR_SOURCE = "nvmlDeviceGetAttributes (MIG device)"

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="mig.capable", value="`true` / `false`", example="true",
             source="nvmlDeviceGetMigMode", when="GPUs present", set="compat"),
    LabelDoc(key="mig.strategy", value="`single` / `mixed`", example="mixed",
             source="--mig-strategy", when="GPUs present and strategy is not none",
             set="compat", managers=("device-plugin",)),
    PRODUCT, COUNT, MEMORY,
    *(LabelDoc(key=f"<R>.{a}", value="integer", example=e,
               source="nvmlDeviceGetAttributes on the MIG device",
               when="MIG devices under single (R = gpu) or mixed (R = mig-<profile>)",
               set="compat", managers=("device-plugin",))
      for a, e in (("multiprocessors", "14"), ("slices.gi", "1"), ("slices.ci", "1"),
                   ("engines.copy", "1"), ("engines.decoder", "0"), ("engines.encoder", "0"),
                   ("engines.jpeg", "0"), ("engines.ofa", "0"))),
    LabelDoc(key="mig.enabled.count", value="integer", example="4",
             source="nvmlDeviceGetMigMode", when="MIG-capable GPUs present", set="extended"),
    LabelDoc(key="mig.pending", value="`true`", example="true",
             source="nvmlDeviceGetMigMode (pending)",
             when="a MIG mode change awaits a GPU reset", set="extended"),
)


def mig_capable(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    gpus = counted(snapshot)
    capable = any(g.mig_capable for g in gpus if not g.unknown("mig_mode"))
    unknown = mode_unknown(gpus)
    if unknown and not capable:  # "false" would be computed from a failed answer
        return Result(warnings=(f"mig.capable left out: the MIG mode of GPU(s) "
                                f"{', '.join(map(str, unknown))} is unknown",))
    return Result({key("mig.capable"): Label(
        value="true" if capable else "false", source="nvmlDeviceGetMigMode",
        rules=("true when any GPU supports MIG, whether or not it is enabled",))})


def _attribute_labels(resource: str, mig: MigDevice) -> dict[str, Label]:
    values = {
        "memory": mig.memory_mib,
        "multiprocessors": mig.multiprocessors,
        "slices.gi": mig.gi_slices,
        "slices.ci": mig.ci_slices,
        "engines.copy": mig.copy_engines,
        "engines.decoder": mig.decoders,
        "engines.encoder": mig.encoders,
        "engines.jpeg": mig.jpegs,
        "engines.ofa": mig.ofas,
    }
    return {f"{resource}.{name}": Label(value=str(v), source=ATTR_SOURCE)
            for name, v in values.items()}


def _mig_devices(snapshot: Snapshot) -> list[tuple[Gpu, MigDevice, str, tuple[str, ...]]]:
    out = []
    for gpu in sorted(counted(snapshot), key=lambda g: g.index):
        if gpu.error is None and gpu.mig_enabled:
            for mig in sorted(gpu.mig_devices, key=lambda m: m.index):
                named = profile_name(mig, gpu)
                assert named is not None, "callers check layout_unknown() first"
                out.append((gpu, mig, *named))
    return out


def mig_resources(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    strategy = options.mig_strategy
    if strategy == "none":
        return Result()
    labels = {key("mig.strategy"): Label(value=strategy, source="--mig-strategy")}
    why = layout_unknown(snapshot)
    if why:
        return Result(labels, (f"MIG resource labels left out: {why}",))
    gpus = [g for g in counted(snapshot) if g.error is None]
    if strategy == "single":
        return _single(gpus, snapshot, options, labels)
    return Result(labels | _mixed(snapshot, options))


def _single(gpus: list[Gpu], snapshot: Snapshot, options: LabelOptions,
            labels: dict[str, Label]) -> Result:
    enabled = sorted((g for g in gpus if g.mig_enabled), key=lambda g: g.index)
    if not enabled:
        return Result(labels)
    devices = _mig_devices(snapshot)
    reason = ""
    if any(not g.mig_devices for g in enabled):
        reason = "a MIG-enabled GPU has no MIG devices"
    elif len(enabled) != len(gpus):
        reason = "MIG-enabled and MIG-disabled GPUs are both present"
    elif len({name for _, _, name, _ in devices}) > 1:
        reason = "MIG devices of more than one profile are present"
    if reason:
        value, rules = product_value(enabled[0].name, "MIG-INVALID")
        src = "--mig-strategy=single layout check"
        invalid = {
            f"{GPU_RESOURCE}.product": Label(value=value, source=src, raw=enabled[0].name,
                                             rules=(*rules, f"invalid layout: {reason}")),
            f"{GPU_RESOURCE}.count": Label(value="0", source=src),
            f"{GPU_RESOURCE}.replicas": Label(value="0", source=src),
            f"{GPU_RESOURCE}.sharing-strategy": Label(value="", source=src),
            f"{GPU_RESOURCE}.memory": Label(value="0", source=src),
        }
        warning = f"invalid configuration detected for mig-strategy=single: {reason}"
        return Result(labels | invalid, (warning,))
    parent, first, name, rules = devices[0]
    labels |= sharing_labels(GPU_RESOURCE, parent.name, ("MIG", name), options,
                             count=len(devices), source="nvmlDeviceGetName (parent GPU)")
    labels[f"{GPU_RESOURCE}.count"] = count_label(
        len(devices), source=MIG_COUNT_SOURCE,
        raw=", ".join(f"{gpu.index}:{mig.index}" for gpu, mig, _, _ in devices),
        rules=("--mig-strategy single: the MIG devices of every MIG-enabled GPU (one profile, "
               f"{name}; GPU:slot listed)",))
    labels |= _attribute_labels(GPU_RESOURCE, first)
    labels |= per_replica(GPU_RESOURCE, first.memory_mib, options)
    return Result(labels)


def _mixed(snapshot: Snapshot, options: LabelOptions) -> dict[str, Label]:
    groups: dict[str, list[tuple[Gpu, MigDevice]]] = {}
    for parent, mig, name, _ in _mig_devices(snapshot):
        groups.setdefault(name, []).append((parent, mig))
    labels: dict[str, Label] = {}
    for name in sorted(groups):
        members = groups[name]
        parent, first = members[0]
        resource = f"nvidia.com/mig-{name}"
        labels |= sharing_labels(resource, parent.name, ("MIG", name), options,
                                 count=len(members), source="nvmlDeviceGetName (parent GPU)")
        labels[f"{resource}.count"] = count_label(
            len(members), source=MIG_COUNT_SOURCE,
            raw=", ".join(f"{gpu.index}:{mig.index}" for gpu, mig in members),
            rules=(f"MIG devices of profile {name} on healthy MIG-enabled GPUs (GPU:slot "
                   "listed)",))
        labels |= _attribute_labels(resource, first)
        labels |= per_replica(resource, first.memory_mib, options)
    return labels


def mig_extended(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    gpus = [g for g in counted(snapshot) if not g.unknown("mig_mode")]
    if not any(g.mig_capable for g in gpus):
        return Result()
    src = "nvmlDeviceGetMigMode"
    labels: dict[str, Label] = {}
    if not mode_unknown(counted(snapshot)):  # a count over unknown modes would be a guess
        labels[key("mig.enabled.count")] = Label(
            value=str(sum(1 for g in gpus if g.mig_enabled)), source=src,
            rules=("GPUs whose current MIG mode is enabled",))
    pending = [g.index for g in gpus
               if g.mig_pending_enabled is not None and g.mig_pending_enabled != g.mig_enabled]
    if pending:
        labels[key("mig.pending")] = Label(
            value="true", source=src, raw=f"GPUs {pending}",
            rules=("pending MIG mode differs from current: needs a GPU reset",))
    return Result(labels)
