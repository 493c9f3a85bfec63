"""The fake-NVML machines of the end-to-end tests, each with its DMI product name and PCI
class, and ``node()``, which lays one out like a host: the NVML profile, a sysfs tree holding
its GPUs, and the DMI file. Golden label files (tests/data/golden/nvml) are named after them."""

from __future__ import annotations

from pathlib import Path

from fakes import profiles
from fakes.fakenvml import Machine
from fakes.sysfs import COMPUTE, GRAPHICS, gpu_tree

MACHINES = {
    "hgx_h100": (profiles.hgx_h100, "DGX H100\n", COMPUTE),
    "t4x4": (profiles.t4x4, "g4dn.12xlarge\n", COMPUTE),
    "a100_a10": (profiles.a100_a10, "PowerEdge R750xa\n", COMPUTE),
    "geforce": (profiles.geforce, "Legion 5 15ACH6H\n", GRAPHICS),
    "no_gpu": (profiles.no_gpu, "PowerEdge R650\n", COMPUTE),
    "driver_not_loaded": (profiles.driver_not_loaded, "PowerEdge R650\n", COMPUTE),
    "one_gpu_lost": (profiles.one_gpu_lost, "DGX H100\n", COMPUTE),
    "dgx_a100_layout": (profiles.dgx_a100_layout, "DGXA100 920-23687-2530-000\n", COMPUTE),
    "dgx_a100_all_1g5gb": (profiles.dgx_a100_all_1g5gb, "DGXA100 920-23687-2530-000\n",
                           COMPUTE),
}


def node(tmp: Path, name: str) -> tuple[Machine, Path, Path, Path]:
    build, dmi, pci_class = MACHINES[name]
    machine = build()
    profile = machine.write(tmp / "profile.txt")
    buses = [gpu.pci_bus_id for gpu in machine.resolve()]
    sysfs = gpu_tree(tmp / "sys", buses, pci_class=pci_class)
    dmi_file = tmp / "product_name"
    dmi_file.write_text(dmi)
    return machine, profile, sysfs, dmi_file
