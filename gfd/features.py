"""Per-device facts for NFD's NodeFeatureRules: a pure projection of the snapshot into a
NodeFeature's ``spec.features`` (``docs/features.md``).

Labels describe the node; features describe each GPU and MIG device, one instance each, so
a NodeFeatureRule can match "any GPU with at least 80 GiB" or "a Hopper GPU" on a mixed
node, and per-GPU UUIDs fit (they never fit a 63-character label value). Every value is a
string, as NFD's API has it. A fact gfd does not know is left out of its instance, never
guessed.

``instances``: ``nvidia.gpu`` (one per GPU that answered: ``index``, ``uuid``, ``product``
in its label form, ``name`` as NVML gives it, ``memory`` in MiB, ``family``, ``compute``
as ``major.minor``, ``brand``, ``mig``: ``enabled`` / ``disabled`` / ``unsupported``) and
``nvidia.mig`` (one per MIG device of a MIG-enabled GPU: ``uuid``, ``parent`` (the GPU's
index), ``profile``, ``memory`` in MiB, ``multiprocessors``). ``attributes``:
``nvidia.driver`` (``version``, ``cuda`` as ``major.minor``, decoded by the back end's
rule as the ``cuda.runtime-version.*`` labels are: GFD's Tegra rule on a Tegra).
"""

from __future__ import annotations

from typing import Any

from gfd.facts.cuda import cuda_text
from gfd.facts.family import family
from gfd.facts.gpus import healthy
from gfd.facts.mig import profile_name
from gfd.facts.naming import product_value
from gfd.snapshot import Gpu, Snapshot

GPU = "nvidia.gpu"
MIG = "nvidia.mig"
DRIVER = "nvidia.driver"

FEATURES: tuple[tuple[str, str, str], ...] = (
    (GPU, "index", "the GPU's NVML index, e.g. `0`"),
    (GPU, "uuid", "NVML's UUID, e.g. `GPU-5f2d...`"),
    (GPU, "product", "the model in `gpu.product`'s form (sanitised, no suffix), "
                     "e.g. `NVIDIA-H100-80GB-HBM3`"),
    (GPU, "name", "the model as NVML names it, e.g. `NVIDIA H100 80GB HBM3`"),
    (GPU, "memory", "total memory in MiB, e.g. `81559` (as `gpu.memory`)"),
    (GPU, "family", "architecture by GFD's table, e.g. `hopper` (as `gpu.family`)"),
    (GPU, "compute", "compute capability `major.minor`, e.g. `9.0`"),
    (GPU, "brand", "nvmlDeviceGetBrand, lowercase, e.g. `nvidia`, `tesla`, `geforce`"),
    (GPU, "mig", "`enabled`, `disabled` (MIG-capable) or `unsupported`"),
    (MIG, "uuid", "the MIG device's UUID, e.g. `MIG-1a2b...`"),
    (MIG, "parent", "the index of its GPU (`index` of an `nvidia.gpu` instance)"),
    (MIG, "profile", "the profile as the device plugin names it, e.g. `1g.10gb`"),
    (MIG, "memory", "memory in MiB, e.g. `9856`"),
    (MIG, "multiprocessors", "streaming multiprocessors, e.g. `14`"),
    (DRIVER, "version", "nvmlSystemGetDriverVersion, e.g. `550.54.15`"),
    (DRIVER, "cuda", "the CUDA version the driver supports, `major.minor`, e.g. `12.4`"),
)
"""Every feature element gfd writes: (feature, element, meaning), for the docs."""


def _gpu(gpu: Gpu) -> dict[str, str]:
    attrs = {"index": str(gpu.index), "uuid": gpu.uuid,
             "product": product_value(gpu.name)[0], "name": gpu.name}
    if gpu.memory_mib and not gpu.unknown("memory"):
        attrs["memory"] = str(gpu.memory_mib)
    cc = gpu.compute_capability
    if cc is not None and cc[0] > 0 and not gpu.unknown("compute_capability"):
        attrs["family"] = family(*cc)
        attrs["compute"] = f"{cc[0]}.{cc[1]}"
    if gpu.brand and not gpu.unknown("brand"):
        attrs["brand"] = gpu.brand
    if not gpu.unknown("mig_mode"):
        attrs["mig"] = ("enabled" if gpu.mig_enabled else "disabled") if gpu.mig_capable \
            else "unsupported"
    return {k: v for k, v in attrs.items() if v}


def _migs(gpu: Gpu) -> list[dict[str, str]]:
    if not gpu.mig_enabled or gpu.unknown("mig_devices"):
        return []
    out = []
    for mig in sorted(gpu.mig_devices, key=lambda m: m.index):
        named = profile_name(mig, gpu)
        attrs = {"uuid": mig.uuid, "parent": str(gpu.index),
                 "profile": named[0] if named else "",
                 "memory": str(mig.memory_mib) if mig.memory_mib else "",
                 "multiprocessors": str(mig.multiprocessors) if mig.multiprocessors else ""}
        out.append({k: v for k, v in attrs.items() if v})
    return out


def node_features(snapshot: Snapshot) -> dict[str, Any]:
    """The ``spec.features`` of gfd's NodeFeature for this snapshot (pure, sorted)."""
    gpus = sorted(healthy(snapshot), key=lambda g: g.index) if snapshot.nvml_available else []
    instances: dict[str, Any] = {}
    if gpus:
        instances[GPU] = {"elements": [{"attributes": _gpu(g)} for g in gpus]}
        migs = [m for g in gpus for m in _migs(g)]
        if migs:
            instances[MIG] = {"elements": [{"attributes": m} for m in migs]}
    attributes: dict[str, Any] = {}
    driver: dict[str, str] = {}
    if snapshot.nvml_available and snapshot.driver_version:
        driver["version"] = snapshot.driver_version
    if snapshot.nvml_available and snapshot.cuda_driver_version:
        driver["cuda"] = cuda_text(snapshot.cuda_driver_version, backend=snapshot.backend)
    if driver:
        attributes[DRIVER] = {"elements": driver}
    return {"attributes": attributes, "flags": {}, "instances": instances}
