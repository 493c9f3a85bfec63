"""Built-in simulated machines (``--simulate NAME``): realistic snapshots for demos and tests.

Each simulation is a complete snapshot (host facts included) and, for machines that
are normally shared, the sharing config their device plugin would use.

nvmlDeviceGetAddressingMode: the machines on driver 580 answer (``HMM`` on x86 H100s with
the open kernel modules, ``ATS`` on Grace-based GB200); those on 550/560 predate the call,
so the fact is absent there. The A100, H100 and GB200 machines carry their full MIG profile
tables with placements (``nvidia-smi mig -lgipp``), what the DRA driver's DynamicMIG gate
reads.

Each machine's PCI bus (``Snapshot.pci``, what the driver's PassthroughSupport gate reads)
holds its GPUs with their PCI device ids, the names the PCI IDs database gives them, and the
64-bit BAR apertures of each board (BAR1 plus the 32 MiB BAR3, rounded up to a power of two
as go-nvlib does); every GPU bound to ``nvidia`` but on ``mixed-a100-a10``, whose fourth
GPU, a second A10, is bound to ``vfio-pci`` for a virtual machine: NVML cannot see it, so it
has no labels, only a passthrough device.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from types import MappingProxyType

from gfd.errors import ConfigError, show
from gfd.sharing import SharedResource, Sharing
from gfd.snapshot import (
    Fabric,
    GiProfile,
    Gpu,
    MigDevice,
    PciBus,
    PciGpu,
    Placement,
    Snapshot,
    Vgpu,
)


@dataclass(frozen=True, slots=True)
class Simulation:
    snapshot: Snapshot
    sharing: Sharing | None = None
    """The sharing config of the simulated node, used when no --config-file is given."""


@dataclass(frozen=True, slots=True)
class _Profile:
    """One MIG profile's attributes (GI attributes, CI multiprocessors)."""

    name: str
    memory_mib: int
    sms: int
    gi: int
    ci: int
    copy: int
    dec: int
    enc: int = 0
    jpeg: int = 0
    ofa: int = 0
    profile_id: int = 0
    """The GPU instance profile id (NVML_GPU_INSTANCE_PROFILE_*)."""
    size: int = 1
    """The placement size in memory slices."""


# A100-SXM4-40GB (40960 MiB). Values as NVML reports them on a DGX A100.
_A100_40 = {
    "1g.5gb": _Profile("MIG 1g.5gb", 4864, 14, 1, 1, copy=1, dec=0, profile_id=19),
    "2g.10gb": _Profile("MIG 2g.10gb", 9856, 28, 2, 2, copy=2, dec=1, profile_id=14, size=2),
    "3g.20gb": _Profile("MIG 3g.20gb", 20096, 42, 3, 3, copy=3, dec=2, profile_id=9, size=4),
    "4g.20gb": _Profile("MIG 4g.20gb", 20096, 56, 4, 4, copy=4, dec=2, profile_id=5, size=4),
    "7g.40gb": _Profile("MIG 7g.40gb", 40192, 98, 7, 7, copy=7, dec=5, jpeg=1, ofa=1,
                        profile_id=0, size=8),
}
# H100 80GB HBM3 (81559 MiB).
_H100_80 = {
    "1g.10gb": _Profile("MIG 1g.10gb", 9856, 16, 1, 1, copy=1, dec=1, jpeg=1, profile_id=19),
    "1g.10gb+me": _Profile("MIG 1g.10gb+me", 9856, 16, 1, 1, copy=1, dec=1, jpeg=1, ofa=1,
                           profile_id=20),
    "1g.20gb": _Profile("MIG 1g.20gb", 19968, 26, 1, 1, copy=1, dec=1, jpeg=1, profile_id=15,
                        size=2),
    "3g.40gb": _Profile("MIG 3g.40gb", 40192, 60, 3, 3, copy=3, dec=3, jpeg=3, profile_id=9,
                        size=4),
    "7g.80gb": _Profile("MIG 7g.80gb", 80384, 132, 7, 7, copy=8, dec=7, jpeg=7, ofa=1,
                        profile_id=0, size=8),
}



def _gi_table(rows: list[tuple[int, str, int, tuple[int, ...]]],
              table: dict[str, _Profile]) -> tuple[GiProfile, ...]:
    """Every GPU instance profile of a model with its possible placements (what
    ``nvidia-smi mig -lgip`` / ``-lgipp`` list): (NVML profile index, name, placement size,
    placement starts), the figures from the model's table."""
    out = []
    for index, name, size, starts in rows:
        p = table[name]
        out.append(GiProfile(
            index=index, id=p.profile_id, name=p.name, slices=p.gi, memory_mib=p.memory_mib,
            multiprocessors=p.sms, copy_engines=p.copy, decoders=p.dec, encoders=p.enc,
            jpegs=p.jpeg, ofas=p.ofa,
            placements=tuple(Placement(start=s, size=size) for s in starts)))
    return tuple(out)


# The profiles no simulated layout uses, for the full tables.
_A100_40_MORE = {
    "1g.5gb+me": _Profile("MIG 1g.5gb+me", 4864, 14, 1, 1, copy=1, dec=1, jpeg=1, ofa=1,
                          profile_id=20),
    "1g.10gb": _Profile("MIG 1g.10gb", 9856, 14, 1, 1, copy=1, dec=1, profile_id=15, size=2),
}
_H100_80_MORE = {
    "2g.20gb": _Profile("MIG 2g.20gb", 19968, 32, 2, 2, copy=2, dec=2, jpeg=2, profile_id=14,
                        size=2),
    "4g.40gb": _Profile("MIG 4g.40gb", 40192, 64, 4, 4, copy=4, dec=4, jpeg=4, profile_id=5,
                        size=4),
}
# GB200 (190464 MiB): the profiles of the MIG user guide's GB200 table
# (docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html: 1g.23gb x7,
# 1g.23gb+me, 1g.47gb x4, 2g.47gb x3, 3g.93gb x2, 4g.93gb, 7g.186gb; one NVDEC and one JPEG
# per slice, the OFA on +me and 7g, 8 copy engines on 7g, as on Hopper). Memory, SMs and
# placements as NVIDIA's nvml-mock gives them for GB200 (k8s-test-infra,
# deployments/nvml-mock, its MIG golden table): 18 SMs a slice, 23808 MiB an eighth.
_GB200 = {
    "1g.23gb": _Profile("MIG 1g.23gb", 23808, 18, 1, 1, copy=1, dec=1, jpeg=1,
                        profile_id=19),
    "1g.23gb+me": _Profile("MIG 1g.23gb+me", 23808, 18, 1, 1, copy=1, dec=1, jpeg=1, ofa=1,
                           profile_id=20),
    "1g.47gb": _Profile("MIG 1g.47gb", 47616, 18, 1, 1, copy=1, dec=1, jpeg=1, profile_id=15,
                        size=2),
    "2g.47gb": _Profile("MIG 2g.47gb", 47616, 36, 2, 2, copy=2, dec=2, jpeg=2, profile_id=14,
                        size=2),
    "3g.93gb": _Profile("MIG 3g.93gb", 95232, 54, 3, 3, copy=3, dec=3, jpeg=3, profile_id=9,
                        size=4),
    "4g.93gb": _Profile("MIG 4g.93gb", 95232, 72, 4, 4, copy=4, dec=4, jpeg=4, profile_id=5,
                        size=4),
    "7g.186gb": _Profile("MIG 7g.186gb", 190464, 126, 7, 7, copy=8, dec=7, jpeg=7, ofa=1,
                         profile_id=0, size=8),
}
_SEVEN = (0, 1, 2, 3, 4, 5, 6)
_A100_40_GI = _gi_table([
    (0, "1g.5gb", 1, _SEVEN), (1, "2g.10gb", 2, (0, 2, 4)), (2, "3g.20gb", 4, (0, 4)),
    (3, "4g.20gb", 4, (0,)), (4, "7g.40gb", 8, (0,)), (7, "1g.5gb+me", 1, _SEVEN),
    (9, "1g.10gb", 2, (0, 2, 4, 6)),
], {**_A100_40, **_A100_40_MORE})
_H100_80_GI = _gi_table([
    (0, "1g.10gb", 1, _SEVEN), (1, "2g.20gb", 2, (0, 2, 4)), (2, "3g.40gb", 4, (0, 4)),
    (3, "4g.40gb", 4, (0,)), (4, "7g.80gb", 8, (0,)), (7, "1g.10gb+me", 1, _SEVEN),
    (9, "1g.20gb", 2, (0, 2, 4, 6)),
], {**_H100_80, **_H100_80_MORE})

_GB200_GI = _gi_table([
    (0, "1g.23gb", 1, _SEVEN), (1, "2g.47gb", 2, (0, 2, 4)), (2, "3g.93gb", 4, (0, 4)),
    (3, "4g.93gb", 4, (0,)), (4, "7g.186gb", 8, (0,)), (7, "1g.23gb+me", 1, _SEVEN),
    (9, "1g.47gb", 2, (0, 2, 4, 6)),
], _GB200)

_H100_NAME = "NVIDIA H100 80GB HBM3"
_H100_BYTES = 85520809984  # 81559 MiB
_A100_NAME = "NVIDIA A100-SXM4-40GB"
_A100_BYTES = 42949672960  # 40960 MiB

# nvmlDeviceGetPowerManagementLimitConstraints, mW (nvidia-smi -q's Min/Max Power Limit).
_H100_SXM_POWER = (200000, 700000)
_A100_SXM_POWER = (100000, 400000)
_A100_PCIE_POWER = (150000, 300000)
_A10_POWER = (100000, 150000)
_T4_POWER = (60000, 70000)
_GB200_POWER = (200000, 1200000)


def _bus(i: int) -> str:
    return f"00000000:{0x18 + 0x10 * i:02X}:00.0"


# Each board's PCI device id, its name in the PCI IDs database (10de section) and the total
# of its 64-bit BARs as go-nvlib rounds it: BAR1 + 32 MiB, to the next power of two.
_BOARDS: dict[str, tuple[int, str, int]] = {
    _H100_NAME: (0x2330, "GH100 [H100 SXM5 80GB]", 256 * 2**30),  # BAR1 128 GiB
    _A100_NAME: (0x20B0, "GA100 [A100 SXM4 40GB]", 128 * 2**30),  # BAR1 64 GiB
    "NVIDIA A100 80GB PCIe": (0x20B5, "GA100 [A100 PCIe 80GB]", 256 * 2**30),  # 128 GiB
    "NVIDIA A10": (0x2236, "GA102GL [A10]", 64 * 2**30),  # BAR1 32 GiB
    "Tesla T4": (0x1EB8, "TU104GL [Tesla T4]", 512 * 2**20),  # BAR1 256 MiB
    "NVIDIA GeForce RTX 3060 Laptop GPU": (
        0x2520, "GA106M [GeForce RTX 3060 Mobile / Max-Q]", 512 * 2**20),  # BAR1 256 MiB
    "NVIDIA GB200": (0x2941, "GB100 [HGX GB200]", 2**40),  # BAR1 512 GiB (nvml-mock's)
}


def _pci_gpu(gpu: Gpu, *, driver: str = "nvidia") -> PciGpu:
    device, name, memory = _BOARDS[gpu.name]
    domain, _, rest = gpu.pci_bus_id.lower().partition(":")
    return PciGpu(address=f"{domain[-4:]}:{rest}", device_id=device, name=name, driver=driver,
                  numa_node=gpu.numa_node if gpu.numa_node is not None else -1,
                  iommu_group=0x20 + gpu.index, addressable_memory=memory,
                  pcie_root=gpu.pcie_root)


def _pci_bus(gpus: tuple[Gpu, ...], *vfio: Gpu) -> PciBus:
    """The PCI bus of these GPUs (bound to nvidia) and those bound to vfio-pci, IOMMU on."""
    found = [_pci_gpu(g) for g in gpus] + [_pci_gpu(g, driver="vfio-pci") for g in vfio]
    return PciBus(gpus=tuple(sorted(found, key=lambda p: p.address)), iommufd=True,
                  iommu_groups=True)


def _uuid(prefix: str, i: int, j: int | None = None) -> str:
    tail = f"{i:04x}" if j is None else f"{i:02x}{j:02x}"
    return f"{prefix}-5a1b7c3d-0000-4000-8000-00000000{tail}"


def _placements(profiles: list[_Profile]) -> list[int]:
    """Each GPU instance's placement start: largest first, at the lowest free start that is a
    multiple of its size (as NVML's placements are; 7 slices of 8 take one 1-slice each)."""
    used: set[int] = set()
    starts = [0] * len(profiles)
    for i in sorted(range(len(profiles)), key=lambda i: -profiles[i].size):
        size = profiles[i].size
        start = next(s for s in range(0, 8, size)
                     if not used & set(range(s, s + size)) and s + size <= (8 if size > 1 else 7))
        used |= set(range(start, start + size))
        starts[i] = start
    return starts


def _migs(gpu: int, names: list[str], table: dict[str, _Profile]) -> tuple[MigDevice, ...]:
    out = []
    starts = _placements([table[key] for key in names])
    for slot, key in enumerate(names):
        p = table[key]
        out.append(MigDevice(
            index=slot, uuid=_uuid("MIG", gpu, slot), gpu_instance_id=slot + 1,
            compute_instance_id=0, profile_name=p.name, memory_mib=p.memory_mib,
            multiprocessors=p.sms, gi_slices=p.gi, ci_slices=p.ci, copy_engines=p.copy,
            decoders=p.dec, encoders=p.enc, jpegs=p.jpeg, ofas=p.ofa,
            gi_profile_id=p.profile_id, placement_start=starts[slot], placement_size=p.size,
        ))
    return tuple(out)


def _gpu(i: int, name: str, memory: int, cc: tuple[int, int], arch: str, brand: str,
         **kw: object) -> Gpu:
    base: dict[str, object] = dict(
        index=i, uuid=_uuid("GPU", i), minor=i, name=name, memory_total_bytes=memory,
        compute_capability=cc, architecture=arch, brand=brand, pci_bus_id=_bus(i),
        pci_class="0x030200", compute_mode="default", mig_pending_enabled=None,
        numa_node=i // 4, pcie_root=f"pci0000:{0x10 + 0x20 * (i // 2):02x}",
        mig_profiles=(),
    )
    base.update(kw)
    return Gpu(**base)  # type: ignore[arg-type]


def _hgx_h100() -> Simulation:
    gpus = tuple(
        _gpu(i, _H100_NAME, _H100_BYTES, (9, 0), "hopper", "nvidia", mig_capable=True,
             mig_enabled=False, mig_pending_enabled=False, nvlink_active=True,
             timeslice="default", power_limits_mw=_H100_SXM_POWER, addressing_mode="HMM",
             mig_profiles=_H100_80_GI)
        for i in range(8)
    )
    return Simulation(Snapshot(driver_version="580.159.04", cuda_driver_version=13000,
                               machine_type="DGX H100\n", vgpu=Vgpu(present=False), gpus=gpus))


def _t4_time_sliced() -> Simulation:
    gpus = tuple(
        _gpu(i, "Tesla T4", 16106127360, (7, 5), "turing", "tesla", nvlink_active=None,
             timeslice="default", power_limits_mw=_T4_POWER)
        for i in range(4)
    )
    snap = Snapshot(driver_version="550.54.15", cuda_driver_version=12040,
                    machine_type="g4dn.12xlarge\n", vgpu=Vgpu(present=False), gpus=gpus)
    sharing = Sharing(strategy="time-slicing",
                      resources=(SharedResource(name="nvidia.com/gpu", replicas=4),),
                      source="simulation t4-time-sliced: sharing.timeSlicing")
    return Simulation(snap, sharing)


def _mixed_a100_a10() -> Simulation:
    a100 = tuple(
        _gpu(i, "NVIDIA A100 80GB PCIe", 85899345920, (8, 0), "ampere", "nvidia",
             mig_capable=True, mig_enabled=False, mig_pending_enabled=False,
             nvlink_active=False, power_limits_mw=_A100_PCIE_POWER)
        for i in range(2)
    )
    a10 = _gpu(2, "NVIDIA A10", 24146608128, (8, 6), "ampere", "nvidia", nvlink_active=None,
               power_limits_mw=_A10_POWER)
    # the fourth slot: an A10 handed to a virtual machine (bound to vfio-pci, no NVML GPU)
    passed = _gpu(3, "NVIDIA A10", 24146608128, (8, 6), "ampere", "nvidia")
    return Simulation(Snapshot(driver_version="550.54.15", cuda_driver_version=12040,
                               machine_type="PowerEdge R750xa\n", vgpu=Vgpu(present=False),
                               gpus=(*a100, a10), pci=_pci_bus((*a100, a10), passed)))


def _geforce_laptop() -> Simulation:
    # a laptop GPU's power limit is the notebook's to set: NVML does not support the query
    gpu = _gpu(0, "NVIDIA GeForce RTX 3060 Laptop GPU", 6442450944, (8, 6), "ampere",
               "geforce", pci_class="0x030000", nvlink_active=None)
    return Simulation(Snapshot(driver_version="560.35.03", cuda_driver_version=12060,
                               machine_type="Legion 5 15ACH6H\n", vgpu=Vgpu(present=False),
                               gpus=(gpu,)))


def _no_gpu() -> Simulation:
    return Simulation(Snapshot(driver_version="550.54.15", cuda_driver_version=12040,
                               machine_type="PowerEdge R650\n", vgpu=Vgpu(present=False)))


def _dgx_a100(layouts: list[list[str] | None]) -> Snapshot:
    gpus = []
    for i, layout in enumerate(layouts):
        gpus.append(_gpu(
            i, _A100_NAME, _A100_BYTES, (8, 0), "ampere", "nvidia", mig_capable=True,
            mig_enabled=layout is not None, mig_pending_enabled=layout is not None,
            nvlink_active=True, power_limits_mw=_A100_SXM_POWER,
            mig_devices=_migs(i, layout, _A100_40) if layout else (), mig_profiles=_A100_40_GI,
        ))
    return Snapshot(driver_version="550.54.15", cuda_driver_version=12040,
                    machine_type="DGXA100 920-23687-2530-000\n", vgpu=Vgpu(present=False),
                    gpus=tuple(gpus))


def _dgx_a100_mig_mixed() -> Simulation:
    # 13 MIG devices over four GPUs, the other four GPUs whole.
    layouts: list[list[str] | None] = [
        ["1g.5gb"] * 7,
        ["3g.20gb", "2g.10gb", "1g.5gb"],
        ["3g.20gb", "3g.20gb"],
        ["7g.40gb"],
        None, None, None, None,
    ]
    return Simulation(_dgx_a100(layouts))


def _dgx_a100_mig_single() -> Simulation:
    return Simulation(_dgx_a100([["1g.5gb"] * 7 for _ in range(8)]))


def _h100_mig() -> Simulation:
    sim = _hgx_h100().snapshot
    layouts = [["1g.10gb+me", "1g.20gb", "3g.40gb"], ["7g.80gb"]]
    gpus = []
    for gpu in sim.gpus[:2]:
        migs = _migs(gpu.index, layouts[gpu.index], _H100_80)
        gpus.append(replace(gpu, mig_enabled=True, mig_pending_enabled=True, mig_devices=migs))
    return Simulation(Snapshot(driver_version="580.159.04", cuda_driver_version=13000,
                               machine_type="PowerEdge XE9640\n", vgpu=Vgpu(present=False),
                               gpus=tuple(gpus)))


def _gb200_nvl() -> Simulation:
    fabric = Fabric(state="completed", status_ok=True,
                    cluster_uuid="7b968a6d-c8aa-45e1-9e07-e1e51be99c31", clique_id=1)
    gpus = tuple(
        _gpu(i, "NVIDIA GB200", 199715979264, (10, 0), "blackwell", "nvidia",
             mig_capable=True, mig_enabled=False, mig_pending_enabled=False,
             nvlink_active=True, fabric=fabric, power_limits_mw=_GB200_POWER,
             addressing_mode="ATS", mig_profiles=_GB200_GI)
        for i in range(4)
    )
    return Simulation(Snapshot(driver_version="580.159.04", cuda_driver_version=13000,
                               machine_type="GB200 NVL72\n", vgpu=Vgpu(present=False),
                               gpus=gpus))


SIMULATIONS: MappingProxyType[str, Callable[[], Simulation]] = MappingProxyType({
    "dgx-a100-mig-mixed": _dgx_a100_mig_mixed,
    "dgx-a100-mig-single": _dgx_a100_mig_single,
    "gb200-nvl": _gb200_nvl,
    "geforce-laptop": _geforce_laptop,
    "h100-mig": _h100_mig,
    "hgx-h100": _hgx_h100,
    "mixed-a100-a10": _mixed_a100_a10,
    "no-gpu": _no_gpu,
    "t4-time-sliced": _t4_time_sliced,
})


def simulate(name: str) -> Simulation:
    """The named simulated machine; an unknown name is a ConfigError listing the names."""
    try:
        build = SIMULATIONS[name]
    except KeyError:
        raise ConfigError(
            f"unknown simulated machine {show(name)}: choose one of "
            f"{', '.join(sorted(SIMULATIONS))}"
        ) from None
    sim = build()
    snap = sim.snapshot
    pci = snap.pci if snap.pci is not None else _pci_bus(snap.gpus)
    return Simulation(replace(snap, source=f"simulate:{name}", pci=pci), sim.sharing)
