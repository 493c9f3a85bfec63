"""Hand-built snapshots and option sets for the labeler tests (no NVML, no files)."""

from __future__ import annotations

from typing import Any

from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import Labelling, compute_labels
from gfd.sharing import SharedResource, Sharing
from gfd.snapshot import Degraded, Fabric, Gpu, MigDevice, Snapshot, Vgpu

P = "nvidia.com/"

A100_40 = "NVIDIA A100-SXM4-40GB"
A100_40_BYTES = 42949672960  # 40960 MiB
A100_80 = "NVIDIA A100 80GB PCIe"
A100_80_BYTES = 85899345920  # 81920 MiB
A10 = "NVIDIA A10"
A10_BYTES = 23836033024  # 22731 MiB (22731.81... floored)
H100 = "NVIDIA H100 80GB HBM3"
H100_BYTES = 85520809984  # 81559 MiB

CLUSTER = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"


def gpu(index: int = 0, name: str = A100_40, memory: int | None = A100_40_BYTES,
        cc: tuple[int, int] | None = (8, 0), *, pci_class: str | None = "0x030200",
        **kw: Any) -> Gpu:
    return Gpu(index=index, uuid=f"GPU-{index:08d}", name=name, memory_total_bytes=memory,
               compute_capability=cc, pci_bus_id=f"00000000:{0x18 + index:02X}:00.0",
               pci_class=pci_class, **kw)


def unknown(fact: str, *, held: bool = False) -> tuple[Degraded, ...]:
    """A GPU's ``degraded`` field: ``fact`` NVML could not give (UNKNOWN), held or unknown."""
    return (Degraded(fact=fact, call="nvmlX", error="Unknown Error", held=held),)


def mig_gpu(index: int = 0, devices: tuple[MigDevice, ...] = (), name: str = A100_40,
            memory: int | None = A100_40_BYTES, cc: tuple[int, int] = (8, 0),
            **kw: Any) -> Gpu:
    """A MIG-capable GPU with MIG currently enabled and the given MIG devices."""
    kw.setdefault("mig_capable", True)
    kw.setdefault("mig_enabled", True)
    return gpu(index, name, memory, cc, mig_devices=devices, **kw)


def mig(index: int = 0, profile: str = "MIG 1g.5gb", memory: int = 4864, sms: int = 14,
        gi: int = 1, ci: int = 1, copy: int = 1, dec: int = 0, enc: int = 0, jpeg: int = 0,
        ofa: int = 0) -> MigDevice:
    return MigDevice(index=index, uuid=f"MIG-{index:04d}", gpu_instance_id=index + 1,
                     compute_instance_id=0, profile_name=profile, memory_mib=memory,
                     multiprocessors=sms, gi_slices=gi, ci_slices=ci, copy_engines=copy,
                     decoders=dec, encoders=enc, jpegs=jpeg, ofas=ofa)


def migs(n: int, **kw: Any) -> tuple[MigDevice, ...]:
    return tuple(mig(i, **kw) for i in range(n))


# The A100-40GB profiles used in the tests (memory, SMs, slices as NVML reports them).
A100_1G5 = dict(profile="MIG 1g.5gb", memory=4864, sms=14, gi=1, ci=1, copy=1, dec=0)
A100_2G10 = dict(profile="MIG 2g.10gb", memory=9856, sms=28, gi=2, ci=2, copy=2, dec=1)
A100_3G20 = dict(profile="MIG 3g.20gb", memory=20096, sms=42, gi=3, ci=3, copy=3, dec=2)


def snapshot(*gpus: Gpu, driver: str | None = "550.54.15", cuda: int | None = 12040,
             machine: str | None = "DGX-A100\n", vgpu: Vgpu | None = None,
             **kw: Any) -> Snapshot:
    return Snapshot(driver_version=driver, cuda_driver_version=cuda, machine_type=machine,
                    vgpu=Vgpu(present=False) if vgpu is None else vgpu, gpus=gpus, **kw)


def fabric(state: str = "completed", ok: bool = True, cluster: str = CLUSTER,
           clique: int = 1) -> Fabric:
    return Fabric(state=state, status_ok=ok, cluster_uuid=cluster, clique_id=clique)


def time_slicing(replicas: int = 4, resource: str = "nvidia.com/gpu",
                 rename: bool = False) -> Sharing:
    return Sharing(strategy="time-slicing", rename_by_default=rename,
                   resources=(SharedResource(name=resource, replicas=replicas),))


def mps(replicas: int = 4, resource: str = "nvidia.com/gpu", rename: bool = False) -> Sharing:
    return Sharing(strategy="mps", rename_by_default=rename,
                   resources=(SharedResource(name=resource, replicas=replicas),))


def options(strategy: str = "none", sharing: Sharing | None = None, label_set: str = "compat",
            timestamp: int | None = None, **kw: Any) -> LabelOptions:
    return LabelOptions(mig_strategy=strategy, sharing=sharing or Sharing(),
                        label_set=label_set, timestamp=timestamp, **kw)


def labelling(snap: Snapshot, **kw: Any) -> Labelling:
    return compute_labels(snap, options(**kw))


def labels(snap: Snapshot, **kw: Any) -> dict[str, str]:
    """The published labels with the ``nvidia.com/`` prefix stripped from the keys."""
    out = {}
    for k, v in labelling(snap, **kw).labels.items():
        out[k.removeprefix(P)] = v
    return out


# --- expected label blocks, written from the rules --------------------------------------

CUDA_550_12040 = {
    "cuda.driver-version.full": "550.54.15",
    "cuda.driver-version.major": "550",
    "cuda.driver-version.minor": "54",
    "cuda.driver-version.revision": "15",
    "cuda.driver.major": "550",
    "cuda.driver.minor": "54",
    "cuda.driver.rev": "15",
    "cuda.runtime-version.full": "12.4",
    "cuda.runtime-version.major": "12",
    "cuda.runtime-version.minor": "4",
    "cuda.runtime.major": "12",
    "cuda.runtime.minor": "4",
}

EXTENDED_KEYS = (
    "gpu.heterogeneous", "gpu.memory.min", "gpu.accelerator", "gpu.compute-mode",
    "gpu.nvlink", "mig.enabled.count", "mig.pending", "gpu.unhealthy", "gpu.timeslice",
    "gpu.power.limit.min", "gpu.power.limit.max",
)


def is_extended_key(k: str) -> bool:
    """Keys of gfd's extended set (not GFD's labels; left out by --label-set compat), prefix
    stripped."""
    return (k in EXTENDED_KEYS or k.startswith(("gpu.product.", "gpu.devices."))
            or k.endswith(".memory.per-replica"))
