"""Named machines for the fake NVML: each function returns a fresh, editable Machine.

Figures are what NVML reports on real hardware (nvidia-smi shows the same):
H100 80GB HBM3 81559 MiB, A100-SXM4-40GB 40960 MiB, A100 80GB 81920 MiB,
A30 24576 MiB, Tesla T4 15360 MiB, A10 23028 MiB, GB200 189471 MiB. Addressing mode
(nvmlDeviceGetAddressingMode): H100 on x86 HMM, GB200 (Grace) ATS; the others answer
NOT_SUPPORTED. Power limit ranges
(nvidia-smi -q's Min/Max Power Limit): H100 SXM 200-700 W, A100 SXM4 100-400 W, A100 PCIe
150-300 W, A30 100-165 W, GB200 200-1200 W, T4 60-70 W, A10 100-150 W; a laptop's GeForce
does not support the query.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from .fakenvml import CI, GI, Fabric, GpuSpec, Machine, mig

MIB = 1024 * 1024


def h100(**overrides: Any) -> GpuSpec:
    spec: dict[str, Any] = dict(
        name="NVIDIA H100 80GB HBM3",
        memory_bytes=81559 * MIB,  # 85520809984
        compute=(9, 0),
        architecture="hopper",
        pci_device_id=0x233010DE,
        mig_supported=True,
        power_limits_mw=(200000, 700000),
        nvlinks=18,
        nvlinks_active=18,
        addressing_mode="HMM",  # x86 with the open kernel modules: HMM
    )
    spec.update(overrides)
    return GpuSpec(**spec)


def a100_40gb(**overrides: Any) -> GpuSpec:
    spec: dict[str, Any] = dict(
        name="NVIDIA A100-SXM4-40GB",
        memory_bytes=40960 * MIB,  # 42949672960
        compute=(8, 0),
        architecture="ampere",
        pci_device_id=0x20B010DE,
        mig_supported=True,
        power_limits_mw=(100000, 400000),
        nvlinks=12,
        nvlinks_active=12,
    )
    spec.update(overrides)
    return GpuSpec(**spec)


def a100_80gb_pcie(**overrides: Any) -> GpuSpec:
    spec: dict[str, Any] = dict(
        name="NVIDIA A100 80GB PCIe",
        memory_bytes=81920 * MIB,  # 85899345920
        compute=(8, 0),
        architecture="ampere",
        pci_device_id=0x20B510DE,
        mig_supported=True,
        power_limits_mw=(150000, 300000),
        nvlinks=12,  # NVLink bridge connectors, no bridge fitted
        nvlinks_active=0,
    )
    spec.update(overrides)
    return GpuSpec(**spec)


def a30(**overrides: Any) -> GpuSpec:
    spec: dict[str, Any] = dict(
        name="NVIDIA A30",
        memory_bytes=24576 * MIB,  # 25769803776
        compute=(8, 0),
        architecture="ampere",
        pci_device_id=0x20B710DE,
        mig_supported=True,
        power_limits_mw=(100000, 165000),
    )
    spec.update(overrides)
    return GpuSpec(**spec)


def gb200(**overrides: Any) -> GpuSpec:
    spec: dict[str, Any] = dict(
        name="NVIDIA GB200",
        memory_bytes=189471 * MIB,  # 198674743296
        compute=(10, 0),
        architecture="blackwell",
        pci_device_id=0x294110DE,
        mig_supported=True,
        power_limits_mw=(200000, 1200000),
        nvlinks=18,
        nvlinks_active=18,
        addressing_mode="ATS",  # Grace-Blackwell: coherent over NVLink-C2C, ATS
    )
    spec.update(overrides)
    return GpuSpec(**spec)


# ----------------------------------------------------------------------------- full GPUs


def hgx_h100() -> Machine:
    """8 x H100 SXM on NVSwitch: MIG capable but off, NVLink up, fabric registered
    without a multi-node cluster (state completed, cluster UUID all zeros)."""
    return Machine(
        driver="580.159.04",
        cuda=13000,
        gpus=[h100(fabric=Fabric()) for _ in range(8)],
        seed="hgx_h100",
    )


def t4x4() -> Machine:
    """4 x Tesla T4 (e.g. g4dn.12xlarge): no MIG, no NVLink."""
    return Machine(
        driver="550.54.15",
        cuda=12040,
        gpus=[
            GpuSpec(
                name="Tesla T4",
                memory_bytes=15360 * MIB,  # 16106127360
                compute=(7, 5),
                architecture="turing",
                brand="nvidia",  # current drivers report NVIDIA, not Tesla, for T4
                pci_bus_id=f"00000000:00:{0x1B + i:02X}.0",
                pci_device_id=0x1EB810DE,
                power_limits_mw=(60000, 70000),
            )
            for i in range(4)
        ],
        seed="t4x4",
    )


def a100_a10() -> Machine:
    """2 x A100 80GB PCIe (MIG capable, off) + 1 x A10 (no MIG): a mixed node."""
    return Machine(
        driver="550.54.15",
        cuda=12040,
        gpus=[
            a100_80gb_pcie(pci_bus_id="00000000:17:00.0"),
            a100_80gb_pcie(pci_bus_id="00000000:65:00.0"),
            GpuSpec(
                name="NVIDIA A10",
                memory_bytes=23028 * MIB,  # 24146608128
                compute=(8, 6),
                architecture="ampere",
                pci_bus_id="00000000:CA:00.0",
                pci_device_id=0x223610DE,
                power_limits_mw=(100000, 150000),
            ),
        ],
        seed="a100_a10",
    )


def geforce() -> Machine:
    """A laptop: one GeForce RTX 3060 Laptop GPU."""
    return Machine(
        driver="550.54.15",
        cuda=12040,
        gpus=[
            GpuSpec(
                name="NVIDIA GeForce RTX 3060 Laptop GPU",
                memory_bytes=6 * 1024 * MIB,  # 6442450944
                compute=(8, 6),
                architecture="ampere",
                brand="geforce",
                pci_bus_id="00000000:01:00.0",
                pci_device_id=0x252010DE,
            )
        ],
        seed="geforce",
    )


def no_gpu() -> Machine:
    """The driver is loaded but no GPU is visible."""
    return Machine(driver="550.54.15", cuda=12040, gpus=[], seed="no_gpu")


def driver_not_loaded() -> Machine:
    """nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED."""
    return Machine(init_error="DRIVER_NOT_LOADED", seed="driver_not_loaded")


def one_gpu_lost() -> Machine:
    """hgx_h100 where GPU 3 has fallen off the bus (every call: GPU_IS_LOST)."""
    machine = hgx_h100()
    machine.gpus[3].fault = "lost"
    machine.seed = "one_gpu_lost"
    return machine


# ----------------------------------------------------------------------------- MIG

_DGX_A100_BUSES = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")


def dgx_a100(layouts: list[list[GI] | None] | None = None) -> Machine:
    """8 x A100-SXM4-40GB as in GFD's worked examples; ``layouts[i]`` turns MIG on for
    GPU i with that layout ([] = MIG on, no devices; None = MIG off)."""
    layouts = layouts if layouts is not None else [None] * 8
    return Machine(
        driver="550.54.15",
        cuda=12040,
        gpus=[
            a100_40gb(
                pci_bus_id=f"00000000:{bus}:00.0",
                mig_enabled=layout is not None,
                mig_layout=layout or [],
            )
            for bus, layout in zip(_DGX_A100_BUSES, layouts, strict=True)
        ],
        seed="dgx_a100",
    )


def dgx_a100_layout() -> Machine:
    """GPU0 7 x 1g.5gb; GPU1 3g.20gb + 2g.10gb + 1g.5gb; GPU2 2 x 3g.20gb; GPU3 7g.40gb;
    GPU4 MIG on without devices; GPUs 5-7 MIG off."""
    machine = dgx_a100(
        [
            mig(*["1g.5gb"] * 7),
            mig("3g.20gb", "2g.10gb", "1g.5gb"),
            mig("3g.20gb", "3g.20gb"),
            mig("7g.40gb"),
            [],
            None,
            None,
            None,
        ]
    )
    machine.seed = "dgx_a100_layout"
    return machine


def dgx_a100_all_1g5gb() -> Machine:
    """Every GPU split into 7 x 1g.5gb (GFD's worked example)."""
    machine = dgx_a100([mig(*["1g.5gb"] * 7) for _ in range(8)])
    machine.seed = "dgx_a100_all_1g5gb"
    return machine


def mig_permission_denied() -> Machine:
    """dgx_a100_layout without NVIDIA_MIG_MONITOR_DEVICES: MIG enumeration is refused."""
    machine = dgx_a100_layout()
    for gpu in machine.gpus:
        gpu.mig_fault = "permission"
    machine.seed = "mig_permission_denied"
    return machine


def h100_mig() -> Machine:
    """One H100 with MIG on: 1g.10gb+me, 1g.20gb and 3g.40gb."""
    return Machine(
        driver="580.159.04",
        cuda=13000,
        gpus=[h100(mig_enabled=True, mig_layout=mig("1g.10gb+me", "1g.20gb", "3g.40gb"))],
        seed="h100_mig",
    )


def a30_mig() -> Machine:
    """One A30 with MIG on: 2g.12gb, 1g.6gb and 1g.6gb+me."""
    return Machine(
        driver="550.54.15",
        cuda=12040,
        gpus=[a30(mig_enabled=True, mig_layout=mig("2g.12gb", "1g.6gb", "1g.6gb+me"))],
        seed="a30_mig",
    )


def a100_compute_split() -> Machine:
    """One A100-SXM4-40GB: a 3g.20gb GPU instance holding a single 1c.3g.20gb compute
    instance, next to a plain 2g.10gb."""
    return Machine(
        driver="550.54.15",
        cuda=12040,
        gpus=[
            a100_40gb(
                mig_enabled=True,
                mig_layout=[GI("3g.20gb", cis=[CI(slices=1)]), GI("2g.10gb")],
            )
        ],
        seed="a100_compute_split",
    )


# ----------------------------------------------------------------------------- fabric

GB200_CLUSTER = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"


def gb200_clique() -> Machine:
    """A GB200 NVL compute tray: 4 GPUs in one NVLink domain (cluster UUID, clique 1)."""
    return Machine(
        driver="580.95.05",
        cuda=13000,
        gpus=[gb200(fabric=Fabric(cluster_uuid=GB200_CLUSTER, clique_id=1)) for _ in range(4)],
        seed="gb200_clique",
    )


def clique_conflict() -> Machine:
    """gb200_clique where GPUs 2 and 3 report clique 2: GFD leaves gpu.clique out."""
    machine = gb200_clique()
    for gpu in machine.gpus[2:]:
        assert gpu.fabric is not None
        gpu.fabric.clique_id = 2
    machine.seed = "clique_conflict"
    return machine


MACHINES: Mapping[str, Callable[[], Machine]] = MappingProxyType(
    {
        f.__name__: f
        for f in (
            hgx_h100,
            t4x4,
            a100_a10,
            geforce,
            no_gpu,
            driver_not_loaded,
            one_gpu_lost,
            dgx_a100,
            dgx_a100_layout,
            dgx_a100_all_1g5gb,
            mig_permission_denied,
            h100_mig,
            a30_mig,
            a100_compute_split,
            gb200_clique,
            clique_conflict,
        )
    }
)
"""Every named machine, by name."""
