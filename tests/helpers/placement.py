"""The truth about placement, from the device plugin's rules and the snapshot's devices (never
from gfd's labels or the selector's code): which units of each extended resource the device
plugin hands out on a node, what each unit is, and a faithful node-selector matcher.

Sources: kubernetes-sigs/dra-driver-nvidia-gpu's Helm chart (the DeviceClass that maps
``nvidia.com/gpu`` to its full GPUs); NVIDIA/k8s-device-plugin ``internal/rm/device_map.go``
(units per MIG strategy, replication, renaming), ``internal/rm/rm.go`` (defaults: ``gpu`` for
GPUs, ``gpu`` for MIG devices under single, ``mig-<profile>`` under mixed), ``api/config/v1``
(the MPS section wins over time-slicing; ``renameByDefault`` names ``<name>.shared``; devices
forced to all), ``cmd/mps-control-daemon/mps/daemon.go`` (an MPS client's pinned memory limit
is the GPU's memory / replicas), ``cmd/nvidia-device-plugin/main.go`` and
``internal/plugin/mps.go`` (MPS refuses mixed and MIG devices), and
../shared/reference/gfd-behaviour.md §3.3 (families).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import yaml

from gfd.configfile import parse_config
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.snapshot import ResourceManager, Snapshot


@dataclass(frozen=True, slots=True)
class Unit:
    """One unit of an extended resource the device plugin can hand a pod."""

    model: str
    """The NVML name of the GPU (the parent's for a MIG device)."""
    memory_mib: int
    """The memory the pod can use (a MIG device's; an MPS replica's pinned limit)."""
    compute: tuple[int, int]
    profile: str = ""
    """The MIG profile as the device plugin names resources (``1g.10gb.me``); "" for a GPU."""
    replicas: int = 1


def family(compute: tuple[int, int]) -> str:
    """gfd-behaviour.md §3.3."""
    major, minor = compute
    table = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 9: "hopper",
             10: "blackwell", 12: "blackwell", 13: "rubin"}
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ada-lovelace" if minor == 9 else "ampere"
    return table.get(major, "undefined")


def _profile(name: str) -> str:
    """``MIG 1g.10gb+me`` (NVML's profile name) -> ``1g.10gb.me`` (the resource's spelling)."""
    return name.removeprefix("MIG ").replace("+", ".")


SHARING: dict[str, dict[str, Any] | None] = {
    "none": None,
    "ts4": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
    "ts4-renamed": {"timeSlicing": {"renameByDefault": True,
                                    "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
    "ts2-fail": {"timeSlicing": {"failRequestsGreaterThanOne": True,
                                 "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}},
    "mps4": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
    "ts-mig": {"timeSlicing": {"resources": [
        {"name": "nvidia.com/mig-1g.5gb", "replicas": 2},
        {"name": "nvidia.com/mig-3g.40gb", "replicas": 3}]}},
}
"""Device-plugin sharing sections (as a ConfigMap holds them) the matrix deploys."""


def units(snapshot: Snapshot, strategy: str, sharing: dict[str, Any] | None,
          manager: str) -> dict[str, list[Unit]]:
    """Resource name -> its allocatable units on the node ({} where the device plugin refuses
    to start). Under the DRA driver, ``nvidia.com/gpu`` is the ``extendedResourceName`` of its
    ``gpu.nvidia.com`` DeviceClass (the chart's ``deviceclass-gpu.yaml`` on resource.k8s.io/v1):
    a pod requesting it gets one of the full GPUs the driver publishes (MIG-enabled ones are
    not, under the default gates)."""
    gpus = [g for g in snapshot.gpus if g.error is None and g.name not in (
        "DGX Display", "NVIDIA DGX Display")]
    if manager == "dra":
        full = [Unit(g.name, g.memory_total_bytes // 2**20, g.compute_capability)
                for g in gpus if not g.mig_enabled]
        return {"nvidia.com/gpu": full} if full else {}
    out: dict[str, list[Unit]] = {}
    enabled = [g for g in gpus if g.mig_enabled]
    if strategy == "single" and enabled:
        migs = [m for g in enabled for m in g.mig_devices]
        kinds = {(m.profile_name, m.memory_mib, m.multiprocessors) for m in migs}
        if len(enabled) != len(gpus) or any(not g.mig_devices for g in enabled) or len(kinds) > 1:
            return {}  # "invalid MIG configuration": the plugin does not start
    for g in gpus:
        whole = Unit(g.name, g.memory_total_bytes // 2**20, g.compute_capability)
        if not g.mig_enabled or strategy == "none":
            out.setdefault("nvidia.com/gpu", []).append(whole)
            continue
        for m in g.mig_devices:
            unit = Unit(g.name, m.memory_mib, g.compute_capability, _profile(m.profile_name))
            name = "nvidia.com/gpu" if strategy == "single" else f"nvidia.com/mig-{unit.profile}"
            out.setdefault(name, []).append(unit)
    if not sharing:
        return out
    mps = "mps" in sharing
    section = sharing["mps"] if mps else sharing["timeSlicing"]
    if mps and (strategy == "mixed" or any(u.profile for us in out.values() for u in us)):
        return {}  # MPS refuses mixed and MIG devices
    for entry in section["resources"]:
        name, replicas = entry["name"], entry["replicas"]
        found = out.pop(name, [])
        if not found:
            continue
        renamed = f"{name}.shared" if section.get("renameByDefault") else name
        gpu_bytes = {g.name: g.memory_total_bytes for g in gpus}
        out[renamed] = [
            replace(u, replicas=replicas,
                    memory_mib=(gpu_bytes[u.model] // replicas // 2**20) if mps else u.memory_mib)
            for u in found for _ in range(replicas)]
    return out


def fail_requests_greater_than_one(sharing: dict[str, Any] | None) -> bool:
    """Whether the plugin refuses a request for several replicas (MPS defaults it on)."""
    if not sharing:
        return False
    if "mps" in sharing:
        return bool(sharing["mps"].get("failRequestsGreaterThanOne", True))
    return bool(sharing["timeSlicing"].get("failRequestsGreaterThanOne", False))


def config_text(strategy: str, sharing: dict[str, Any] | None) -> str:
    """The ConfigMap both the device plugin and gfd read."""
    doc: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": strategy}}
    if sharing:
        doc["sharing"] = sharing
    return yaml.safe_dump(doc)


def node_labels(snapshot: Snapshot, strategy: str, sharing: dict[str, Any] | None,
                label_set: str, manager: str) -> dict[str, str]:
    """The labels a deployed gfd publishes with that ConfigMap (its config file parser, its
    pipeline); {} where gfd refuses the configuration (MPS with MIG enabled)."""
    config = parse_config(config_text(strategy, sharing), path="config.yaml")
    snap = replace(snapshot, resource_manager=ResourceManager(name=manager, evidence="test"))
    options = LabelOptions(mig_strategy=strategy, sharing=config.sharing, label_set=label_set)
    try:
        return compute_labels(snap, options).labels
    except Exception:
        return {}


def _variant_heterogeneous_hopper() -> Snapshot:
    """An H100 node with an L4 and an RTX 6000 Ada beside it (issue 25's example)."""
    h100 = simulate("hgx-h100").snapshot.gpus[:2]
    l4 = replace(h100[0], index=2, minor=2, name="NVIDIA L4", memory_total_bytes=24152899584,
                 compute_capability=(8, 9), architecture="ada", mig_capable=False,
                 uuid="GPU-5a1b7c3d-0000-4000-8000-000000000002")
    ada = replace(l4, index=3, minor=3, name="NVIDIA RTX 6000 Ada Generation",
                  memory_total_bytes=51527024640, uuid="GPU-5a1b7c3d-0000-4000-8000-000000000003")
    return replace(simulate("hgx-h100").snapshot, gpus=(*h100, l4, ada))


def _variant_two_a100s() -> Snapshot:
    """A100 40 GB and 80 GB side by side: every GPU has the words A100, not all 80GB."""
    base = simulate("mixed-a100-a10").snapshot
    a40 = replace(base.gpus[1], name="NVIDIA A100-PCIE-40GB", memory_total_bytes=42949672960)
    return replace(base, gpus=(base.gpus[0], a40))



def machines() -> dict[str, Snapshot]:
    """Every simulated machine, plus heterogeneous variants."""
    out = {name: simulate(name).snapshot for name in sorted(SIMULATIONS)}
    out["hopper-l4-ada"] = _variant_heterogeneous_hopper()
    out["a100-40-and-80"] = _variant_two_a100s()
    return out


# ----------------------------------------------------------------------- the scheduler's rules


def _integer(text: str) -> int | None:
    return int(text) if re.fullmatch(r"-?[0-9]+", text) else None


def requirement_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    """One NodeSelectorRequirement, as the scheduler evaluates it (Gt/Lt: integers only)."""
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        have = _integer(labels.get(key, ""))
        want = int(values[0])
        if have is None:
            return False
        return have > want if op == "Gt" else have < want
    raise AssertionError(op)


def admits(spec: dict[str, Any], labels: dict[str, str]) -> bool:
    """nodeSelector: every pair equal; required node affinity: any term whose expressions all
    match (terms OR-ed, expressions AND-ed); both when both are given."""
    ok = all(labels.get(k) == v for k, v in spec.get("nodeSelector", {}).items())
    affinity = spec.get("affinity", {}).get("nodeAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if affinity:
        ok = ok and any(all(requirement_matches(e, labels) for e in t["matchExpressions"])
                        for t in affinity["nodeSelectorTerms"])
    return ok
