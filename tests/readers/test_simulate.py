"""Built-in simulated machines (``--simulate NAME``): complete, well-typed snapshots that say
where they came from, the sharing config of the machines that are shared, and a ConfigError
listing the names for an unknown one. (Their exact labels: tests/e2e/test_golden_simulate.py.)"""

from __future__ import annotations

import pytest

from gfd.errors import ConfigError
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.snapshot import validate_types


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_every_machine_is_a_well_typed_snapshot_naming_its_source(name: str) -> None:
    snap = simulate(name).snapshot
    validate_types(snap)
    assert snap.source == f"simulate:{name}"
    assert snap.nvml_available and snap.backend == "nvml"


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_every_machine_is_built_afresh_and_the_same_each_time(name: str) -> None:
    assert simulate(name) == simulate(name)


@pytest.mark.parametrize("name", sorted(n for n in SIMULATIONS if n != "no-gpu"))
def test_every_gpu_of_a_machine_is_complete_with_its_host_facts(name: str) -> None:
    snap = simulate(name).snapshot
    assert snap.driver_version and snap.cuda_driver_version and snap.machine_type
    assert snap.vgpu is not None
    for gpu in snap.gpus:
        assert gpu.uuid and gpu.name and gpu.pci_bus_id and gpu.pci_class, gpu.index
        assert gpu.memory_mib and gpu.compute_capability, gpu.index
    assert len({g.uuid for g in snap.gpus}) == len(snap.gpus), "UUIDs are unique"
    assert [g.index for g in snap.gpus] == list(range(len(snap.gpus)))


def test_the_machine_without_a_gpu_has_none() -> None:
    assert simulate("no-gpu").snapshot.gpus == ()


def test_mig_machines_have_mig_devices_on_their_mig_enabled_gpus() -> None:
    for name in ("dgx-a100-mig-mixed", "dgx-a100-mig-single", "h100-mig"):
        gpus = simulate(name).snapshot.gpus
        assert any(g.mig_enabled for g in gpus), name
        assert all(g.mig_capable for g in gpus if g.mig_enabled), name
        assert all(not g.mig_devices for g in gpus if not g.mig_enabled), name


def test_the_time_sliced_machine_brings_its_device_plugins_sharing() -> None:
    sim = simulate("t4-time-sliced")
    assert sim.sharing is not None and sim.sharing.strategy == "time-slicing"
    assert sim.sharing.replicas("nvidia.com/gpu") > 1


def test_unshared_machines_bring_no_sharing_config() -> None:
    assert simulate("hgx-h100").sharing is None


def test_an_unknown_name_is_a_config_error_listing_every_name() -> None:
    with pytest.raises(ConfigError) as caught:
        simulate("dgx-z900")
    message = str(caught.value)
    assert "'dgx-z900'" in message
    assert all(name in message for name in SIMULATIONS)
