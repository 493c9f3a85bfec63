"""Per-device facts for NFD's NodeFeatureRules: a pure projection of the snapshot into a
NodeFeature's ``spec.features`` (``docs/features.md``).

Labels describe the node; features describe each GPU and MIG device, one instance each, so
a NodeFeatureRule can match "any GPU with at least 80 GiB" or "a Hopper GPU" on a mixed
node, and per-GPU UUIDs fit (they never fit a 63-character label value). Every value is a
string, as NFD's API has it. A fact gfd does not know is left out of its instance, never
guessed.

Typed: ``node_features()`` gives a frozen :class:`Features` (one record per GPU, per MIG
device, and the driver's), which the loop computes with the labels in one projection
(``gfd.projection``) and the NodeFeature sink writes as NFD's ``spec.features``
(``Features.to_api()``). ``flatten()`` names each element ``feature[instance].element`` for
``gfd diff`` and ``gfd features --format text``.

``instances``: ``nvidia.gpu`` (one per GPU that answered: ``index``, ``uuid``, ``product``
in its label form, ``name`` as NVML gives it, ``memory`` in MiB, ``family``, ``compute``
as ``major.minor``, ``brand``, ``mig``: ``enabled`` / ``disabled`` / ``unsupported``) and
``nvidia.mig`` (one per MIG device of a MIG-enabled GPU: ``uuid``, ``parent`` (the GPU's
index), ``profile``, ``memory`` in MiB, ``multiprocessors``). ``attributes``:
``nvidia.driver`` (``version``, ``cuda`` as ``major.minor``, decoded by the back end's
rule as the ``cuda.runtime-version.*`` labels are: GFD's Tegra rule on a Tegra).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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


def _strings(**values: str | int | None) -> dict[str, str]:
    """The elements NFD gets: each known value as a string; an unknown one left out."""
    return {k: str(v) for k, v in values.items() if v is not None and v != ""}


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuFeature:
    """One ``nvidia.gpu`` instance: a GPU that answered NVML (None: not known)."""

    index: int
    uuid: str
    product: str
    name: str
    memory: int | None = None
    """MiB."""
    family: str | None = None
    compute: str | None = None
    """``major.minor``."""
    brand: str | None = None
    mig: str | None = None
    """``enabled``, ``disabled`` or ``unsupported``."""

    def elements(self) -> dict[str, str]:
        return _strings(index=self.index, uuid=self.uuid, product=self.product, name=self.name,
                        memory=self.memory, family=self.family, compute=self.compute,
                        brand=self.brand, mig=self.mig)


@dataclass(frozen=True, slots=True, kw_only=True)
class MigFeature:
    """One ``nvidia.mig`` instance: a MIG device of a MIG-enabled GPU (None: not known)."""

    uuid: str
    parent: int
    """The index of its GPU."""
    profile: str | None = None
    memory: int | None = None
    """MiB."""
    multiprocessors: int | None = None

    def elements(self) -> dict[str, str]:
        return _strings(uuid=self.uuid, parent=self.parent, profile=self.profile,
                        memory=self.memory, multiprocessors=self.multiprocessors)


@dataclass(frozen=True, slots=True, kw_only=True)
class DriverFeature:
    """The ``nvidia.driver`` attributes (None: not known)."""

    version: str | None = None
    cuda: str | None = None
    """``major.minor``, by the back end's rule (as the ``cuda.runtime-version`` labels)."""

    def elements(self) -> dict[str, str]:
        return _strings(version=self.version, cuda=self.cuda)


@dataclass(frozen=True, slots=True, kw_only=True)
class Features:
    """gfd's part of a NodeFeature's ``spec.features`` for one snapshot."""

    gpus: tuple[GpuFeature, ...] = ()
    migs: tuple[MigFeature, ...] = ()
    driver: DriverFeature = DriverFeature()

    def to_api(self) -> dict[str, Any]:
        """NFD's ``spec.features`` form (the three kinds, an absent feature left out)."""
        instances: dict[str, Any] = {}
        if self.gpus:
            instances[GPU] = {"elements": [{"attributes": g.elements()} for g in self.gpus]}
        if self.migs:
            instances[MIG] = {"elements": [{"attributes": m.elements()} for m in self.migs]}
        attributes: dict[str, Any] = {}
        if driver := self.driver.elements():
            attributes[DRIVER] = {"elements": driver}
        return {"attributes": attributes, "flags": {}, "instances": instances}

    def flat(self) -> dict[str, str]:
        """Every element by its flat name (``flatten``)."""
        return flatten(self.to_api())


def _instance_key(attributes: Mapping[str, Any], position: int, seen: set[str]) -> str:
    """An instance's name in a flat key: its ``index`` (a GPU), else its ``uuid`` (a MIG
    device); ``#<position>`` without either, or when an earlier instance has the same."""
    key = str(attributes.get("index") or attributes.get("uuid") or "")
    if not key or key in seen:
        key = f"#{position}"
    seen.add(key)
    return key


def flatten(features: Any) -> dict[str, str]:
    """The ``nvidia.*`` features of a ``spec.features`` (as gfd writes it, or as an object
    holds it, whoever edited it) as ``name -> value``: ``nvidia.driver.cuda``,
    ``nvidia.gpu[0].memory``, ``nvidia.mig[MIG-...].profile`` (``#<position>`` for an
    instance with neither); a flag's element has the value ``""``. What is not in NFD's
    form is skipped (pure)."""
    out: dict[str, str] = {}
    kinds = features if isinstance(features, Mapping) else {}
    for kind in ("attributes", "flags", "instances"):
        named = kinds.get(kind)
        if not isinstance(named, Mapping):
            continue
        for name, value in sorted(named.items()):
            if not str(name).startswith("nvidia."):
                continue
            elements = value.get("elements") if isinstance(value, Mapping) else None
            if kind == "instances" and isinstance(elements, list):
                seen: set[str] = set()
                for position, element in enumerate(elements):
                    attrs = element.get("attributes") if isinstance(element, Mapping) else None
                    if not isinstance(attrs, Mapping):
                        continue
                    where = f"{name}[{_instance_key(attrs, position, seen)}]"
                    out |= {f"{where}.{k}": str(v) for k, v in sorted(attrs.items())}
            elif isinstance(elements, Mapping):
                out |= {f"{name}.{k}": "" if kind == "flags" else str(v)
                        for k, v in sorted(elements.items())}
    return out


def _gpu(gpu: Gpu) -> GpuFeature:
    cc = gpu.compute_capability
    known_cc = cc is not None and cc[0] > 0 and not gpu.unknown("compute_capability")
    mig = None
    if not gpu.unknown("mig_mode"):
        mig = ("enabled" if gpu.mig_enabled else "disabled") if gpu.mig_capable \
            else "unsupported"
    return GpuFeature(
        index=gpu.index, uuid=gpu.uuid, product=product_value(gpu.name)[0], name=gpu.name,
        memory=gpu.memory_mib if gpu.memory_mib and not gpu.unknown("memory") else None,
        family=family(*cc) if known_cc and cc is not None else None,
        compute=f"{cc[0]}.{cc[1]}" if known_cc and cc is not None else None,
        brand=gpu.brand if gpu.brand and not gpu.unknown("brand") else None, mig=mig)


def _migs(gpu: Gpu) -> list[MigFeature]:
    if not gpu.mig_enabled or gpu.unknown("mig_devices"):
        return []
    out = []
    for mig in sorted(gpu.mig_devices, key=lambda m: m.index):
        named = profile_name(mig, gpu)
        out.append(MigFeature(uuid=mig.uuid, parent=gpu.index,
                              profile=named[0] if named else None,
                              memory=mig.memory_mib or None,
                              multiprocessors=mig.multiprocessors or None))
    return out


def node_features(snapshot: Snapshot) -> Features:
    """gfd's features for this snapshot (pure, GPUs by index)."""
    if not snapshot.nvml_available:
        return Features()
    gpus = sorted(healthy(snapshot), key=lambda g: g.index)
    cuda = snapshot.cuda_driver_version
    return Features(
        gpus=tuple(_gpu(g) for g in gpus),
        migs=tuple(m for g in gpus for m in _migs(g)),
        driver=DriverFeature(
            version=snapshot.driver_version or None,
            cuda=cuda_text(cuda, backend=snapshot.backend) if cuda else None))
