"""Discovery: one snapshot per read from the GPU source and the host files, with GFD's
--fail-on-init-error semantics. Facts only an admin changes (timeslice policy via nvidia-smi,
the vGPU scan) are read at start, on refresh() (SIGHUP, and the loop's host-refresh duty every
--host-refresh-interval), and when the GPU set changes. Recorded snapshot files load with a
clear error."""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fakes.sysfs import COMPUTE, GRAPHICS, gpu_tree
from helpers.timing import Clock

from gfd.discovery import SNAPSHOT_MAX_BYTES, Discovery, read_snapshot_file
from gfd.errors import DiscoveryError, NvmlInitError
from gfd.readers.host import HostReader
from gfd.readers.simulate import simulate
from gfd.snapshot import Snapshot, Vgpu

H100 = replace(simulate("hgx-h100").snapshot, machine_type=None, vgpu=None)


class Gpus:
    def __init__(self, *snaps: Snapshot | Exception) -> None:
        self.snaps = list(snaps)

    def read(self) -> Snapshot:
        item = self.snaps.pop(0) if len(self.snaps) > 1 else self.snaps[0]
        if isinstance(item, Exception):
            raise item
        return item

    def events(self) -> Any:
        return self.event_source

    event_source: Any = None
    refreshed = 0

    def refresh(self) -> None:
        self.refreshed += 1

    def close(self) -> None:
        pass


class Smi:
    def __init__(self) -> None:
        self.calls = 0

    def timeslices(self) -> dict[int, str] | None:
        self.calls += 1
        return {i: "default" for i in range(8)}


def discovery(tmp: Path, gpus: Gpus, smi: Smi, clock: Clock) -> Discovery:
    host = HostReader(machine_type_file=str(tmp / "dmi"), sysfs_root=str(gpu_tree(tmp, [])))
    return Discovery(gpus, host, smi=smi)


def test_nvidia_smi_runs_at_start_not_every_cycle(tmp_path: Path) -> None:
    smi, clock = Smi(), Clock(0.0)
    d = discovery(tmp_path, Gpus(H100), smi, clock)
    for _ in range(20):
        snap = d.read()
        clock.now += 10
    assert smi.calls == 1 and snap.gpus[0].timeslice == "default"
    assert snap.vgpu is not None and not snap.vgpu.present


def test_slow_facts_are_reread_on_refresh_on_a_new_gpu_set_and_periodically(
        tmp_path: Path) -> None:
    smi, clock = Smi(), Clock(0.0)
    lost = replace(H100, gpus=(*H100.gpus[:3], replace(H100.gpus[3], error="GPU is lost"),
                               *H100.gpus[4:]))
    d = discovery(tmp_path, Gpus(H100, H100, lost, lost, lost), smi, clock)
    d.read()
    d.refresh()
    d.read()
    assert smi.calls == 2
    d.read()
    assert smi.calls == 3, "the set of healthy GPUs changed"
    d.read()
    assert smi.calls == 3
    clock.now += 300
    d.refresh()  # what the host-refresh duty does every --host-refresh-interval
    d.read()
    assert smi.calls == 4


def test_only_sighups_refresh_asks_the_gpu_back_end_to_read_every_static_fact(
        tmp_path: Path) -> None:
    """The host-refresh duty (every 5 minutes) re-reads the host's slow facts only; SIGHUP
    (``refresh(gpus=True)``) also has the GPU back end read each GPU's fixed properties."""
    gpus = Gpus(H100)
    d = discovery(tmp_path, gpus, Smi(), Clock(0.0))
    d.refresh()
    assert gpus.refreshed == 0
    d.refresh(gpus=True)
    assert gpus.refreshed == 1


def test_nvml_down_with_fail_on_init_error_false_still_scans_vgpu(tmp_path: Path) -> None:
    host = HostReader(machine_type_file=str(tmp_path / "dmi"),
                      sysfs_root=str(gpu_tree(tmp_path, [])))
    d = Discovery(Gpus(NvmlInitError("NVML could not start: x")), host, smi=Smi(),
                  fail_on_init_error=False)
    snap = d.read()
    assert not snap.nvml_available and snap.vgpu is not None and snap.gpus == ()


# ----------------------------------------------------------------------------- host facts


class Closing(Gpus):
    closed = False

    def close(self) -> None:
        self.closed = True


def test_each_gpu_gets_its_pci_class_and_timeslice_and_the_node_its_machine_type(
        tmp_path: Path) -> None:
    root = gpu_tree(tmp_path / "sys", [g.pci_bus_id for g in H100.gpus[:4]], pci_class=GRAPHICS)
    (tmp_path / "dmi").write_text("DGX H100\n")
    host = HostReader(machine_type_file=str(tmp_path / "dmi"), sysfs_root=str(root))
    snap = Discovery(Gpus(H100), host, smi=Smi()).read()
    assert [g.pci_class for g in snap.gpus] == [GRAPHICS] * 4 + [None] * 4
    assert {g.timeslice for g in snap.gpus} == {"default"}
    assert snap.machine_type == "DGX H100\n"
    assert snap.vgpu == Vgpu(present=False)


def test_the_pci_bus_is_scanned_only_for_the_facts_gfd_devices_shows(tmp_path: Path) -> None:
    """Labels and features read nothing of the PCI bus scan (PassthroughSupport's devices):
    the agent and gfd labels do not pay for it; gfd devices and gfd snapshot do."""
    host = HostReader(machine_type_file="", sysfs_root=str(gpu_tree(tmp_path / "sys", [])))
    assert Discovery(Gpus(H100), host).read().pci is None
    assert Discovery(Gpus(H100), host, device_facts=True).read().pci is not None  # scanned


def test_a_lost_gpu_gets_no_pci_class(tmp_path: Path) -> None:
    lost = replace(H100, gpus=(replace(H100.gpus[0], error="GPU is lost"), *H100.gpus[1:]))
    root = gpu_tree(tmp_path / "sys", [g.pci_bus_id for g in H100.gpus])
    host = HostReader(machine_type_file="", sysfs_root=str(root))
    snap = Discovery(Gpus(lost), host).read()
    assert snap.gpus[0].pci_class is None and snap.gpus[1].pci_class == COMPUTE


def test_without_gpus_neither_nvidia_smi_nor_the_machine_type_is_read(tmp_path: Path) -> None:
    smi = Smi()
    (tmp_path / "dmi").write_text("PowerEdge R650\n")
    host = HostReader(machine_type_file=str(tmp_path / "dmi"),
                      sysfs_root=str(gpu_tree(tmp_path / "sys", [])))
    snap = Discovery(Gpus(Snapshot(source="nvml")), host, smi=smi).read()
    assert smi.calls == 0 and snap.machine_type is None
    assert snap.vgpu == Vgpu(present=False), "the vGPU scan runs without GPUs"


def test_a_fixed_snapshot_is_returned_as_is(tmp_path: Path) -> None:
    fixed = simulate("t4-time-sliced").snapshot
    host = HostReader(machine_type_file=str(tmp_path / "missing"), sysfs_root=str(tmp_path))
    assert Discovery(None, host, fixed=fixed).read() is fixed


# ----------------------------------------------------------------------------- --fail-on-init-error


def test_nvml_down_with_fail_on_init_error_is_raised(tmp_path: Path) -> None:
    host = HostReader(machine_type_file="", sysfs_root=str(gpu_tree(tmp_path, [])))
    with pytest.raises(NvmlInitError):
        Discovery(Gpus(NvmlInitError("NVML could not start: x")), host).read()


def test_another_read_error_is_raised_whatever_fail_on_init_error_says(tmp_path: Path) -> None:
    host = HostReader(machine_type_file="", sysfs_root=str(gpu_tree(tmp_path, [])))
    d = Discovery(Gpus(DiscoveryError("NVML: Unknown Error")), host, fail_on_init_error=False)
    with pytest.raises(DiscoveryError, match="Unknown Error"):
        d.read()


def test_nvml_down_is_warned_once_and_its_return_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gfd")
    down = NvmlInitError("NVML could not start: Driver Not Loaded")
    host = HostReader(machine_type_file="", sysfs_root=str(gpu_tree(tmp_path, [])))
    d = Discovery(Gpus(down, down, down, H100, H100, down, H100), host,
                  fail_on_init_error=False)
    snaps = [d.read() for _ in range(7)]
    assert [s.nvml_available for s in snaps] == [False, False, False, True, True, False, True]
    assert snaps[0].nvml_error == str(down) and snaps[0].source == "nvml"
    text = [r.getMessage() for r in caplog.records]
    assert sum("Driver Not Loaded" in t for t in text) == 2, "once per outage"
    assert text.count("the GPU back end is available now") == 2


def test_close_closes_the_gpu_source(tmp_path: Path) -> None:
    gpus = Closing(H100)
    host = HostReader(machine_type_file="", sysfs_root=str(tmp_path))
    Discovery(gpus, host).close()
    assert gpus.closed
    Discovery(None, host, fixed=H100).close()  # nothing to close: no error


# ----------------------------------------------------------------------------- recorded snapshots


def test_a_recorded_snapshot_file_is_loaded_with_its_path_as_source(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    path.write_text(H100.to_json())
    snap = read_snapshot_file(str(path))
    assert snap.source == f"file:{path}" and snap.gpus == H100.gpus


@pytest.mark.parametrize("content, message", [
    (None, "No such file or directory"),
    ("{", "snapshot: not valid JSON"),
    ('{"gpus": [{"index": "0"}]}', "snapshot.gpus[0].index: expected int"),
], ids=["missing", "not-json", "wrong-type"])
def test_a_bad_snapshot_file_is_one_discovery_error_naming_it(tmp_path: Path, content: str | None,
                                                              message: str) -> None:
    path = tmp_path / "node.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DiscoveryError) as caught:
        read_snapshot_file(str(path))
    assert str(caught.value).startswith(f"snapshot file {path}: ")
    assert message in str(caught.value) and "\n" not in str(caught.value)


# ----------------------------------------------------------------------------- GPU events


def test_a_gpu_marked_unusable_is_unhealthy_from_the_next_read_on(tmp_path: Path) -> None:
    found = discovery(tmp_path, Gpus(H100), Smi(), Clock(0.0))
    uuid = H100.gpus[2].uuid
    found.mark_unusable(uuid, "Xid 79 (GPU has fallen off the bus)")
    found.mark_unusable(uuid, "Xid 48 (double-bit ECC error)")  # the first reason stays
    for _ in range(2):  # and it stays marked
        snap = found.read()
        assert [g.error for g in snap.gpus] == [None, None,
                                                "Xid 79 (GPU has fallen off the bus)",
                                                None, None, None, None, None]
    assert snap.gpus[2].name == H100.gpus[2].name, "what was read is kept"


def test_marking_a_gpu_without_a_uuid_marks_nothing(tmp_path: Path) -> None:
    found = discovery(tmp_path, Gpus(H100), Smi(), Clock(0.0))
    found.mark_unusable("", "GPU unavailable (NVML event)")
    assert all(g.error is None for g in found.read().gpus)


class Events:
    """An EventSource with nothing to say: its open() is all the watch needs here."""

    def __init__(self) -> None:
        self.opened = 0
        self.closed = 0

    def open(self) -> dict[str, frozenset[str]]:
        self.opened += 1
        return {}

    def wait(self, timeout: float) -> None:
        return None

    def close(self) -> None:
        self.closed += 1


def test_watch_starts_the_back_ends_event_watch_once(tmp_path: Path) -> None:
    gpus = Gpus(H100)
    gpus.event_source = Events()
    found = discovery(tmp_path, gpus, Smi(), Clock(0.0))
    found.watch(lambda trigger: None)
    found.watch(lambda trigger: None)
    assert found._events is not None and found._events.join(5)
    assert gpus.event_source.opened == 1 and gpus.event_source.closed == 1


def test_watch_without_a_back_end_or_its_events_does_nothing(tmp_path: Path) -> None:
    found = discovery(tmp_path, Gpus(H100), Smi(), Clock(0.0))
    found.watch(lambda trigger: None)
    assert found._events is None
    fixed = Discovery(None, HostReader(machine_type_file="", sysfs_root=str(tmp_path)),
                      fixed=H100)
    fixed.watch(lambda trigger: None)
    assert fixed._events is None


@pytest.mark.parametrize("kind, message", [
    ("fifo", "is a FIFO (named pipe), not a regular file (point --snapshot at a file written "
             "by `gfd snapshot`)"),
    ("dev-zero", "is a character device, not a regular file (point --snapshot at a file "
                 "written by `gfd snapshot`)"),
    ("directory", "is a directory, not a file (point --snapshot at a file written by "
                  "`gfd snapshot`)"),
    ("binary", "not UTF-8 text (byte 0), so not a snapshot (write one with "
               "`gfd snapshot > FILE`)"),
    ("huge", "is larger than 16 MiB (point --snapshot at a file written by `gfd snapshot`)"),
], ids=["fifo", "dev-zero", "directory", "binary", "huge"])
def test_a_snapshot_file_that_is_not_a_text_file_is_one_discovery_error(
        tmp_path: Path, kind: str, message: str) -> None:
    path = tmp_path / "node.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\x8a\xff\x00" * 10)
    else:
        with path.open("wb") as f:
            f.truncate(SNAPSHOT_MAX_BYTES + 1)
    with pytest.raises(DiscoveryError) as caught:
        read_snapshot_file(str(path))
    assert str(caught.value) == f"snapshot file {path}: {message}"


def test_only_a_resource_manager_that_counts_resource_slices_asks_the_api(tmp_path) -> None:
    from gfd.readers.resourcemanager import ResourceManagerReader

    host = HostReader(machine_type_file=str(tmp_path / "dmi"), sysfs_root=str(tmp_path))
    counted: list[int] = []

    def slices() -> int:
        counted.append(1)
        return 1

    asking = Discovery(None, host, fixed=H100,
                       manager=ResourceManagerReader("auto", str(tmp_path), slices=slices))
    assert asking.asks_api
    assert asking.read().resource_manager.name == "dra" and counted == [1]
    local = Discovery(None, host, fixed=H100,
                      manager=ResourceManagerReader("auto", str(tmp_path)))
    assert not local.asks_api
    assert not Discovery(None, host, fixed=H100).asks_api, "no resource manager: none asked"
