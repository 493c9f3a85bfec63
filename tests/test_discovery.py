"""Discovery: facts only an admin changes (timeslice policy via nvidia-smi, the vGPU scan) are
read at start, on refresh() (SIGHUP, and the loop's host-refresh duty every
--host-refresh-interval), and when the GPU set changes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fakes.sysfs import gpu_tree

from gfd.discovery import Discovery
from gfd.errors import NvmlInitError
from gfd.readers.host import HostReader
from gfd.readers.simulate import simulate
from gfd.snapshot import Snapshot

H100 = replace(simulate("hgx-h100").snapshot, machine_type=None, vgpu=None)


class Gpus:
    def __init__(self, *snaps: Snapshot | Exception) -> None:
        self.snaps = list(snaps)

    def read(self) -> Snapshot:
        item = self.snaps.pop(0) if len(self.snaps) > 1 else self.snaps[0]
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        pass


class Smi:
    def __init__(self) -> None:
        self.calls = 0

    def timeslices(self) -> dict[int, str] | None:
        self.calls += 1
        return {i: "default" for i in range(8)}


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def discovery(tmp: Path, gpus: Gpus, smi: Smi, clock: Clock) -> Discovery:
    host = HostReader(machine_type_file=str(tmp / "dmi"), sysfs_root=str(gpu_tree(tmp, [])))
    return Discovery(gpus, host, smi=smi)


def test_nvidia_smi_runs_at_start_not_every_cycle(tmp_path: Path) -> None:
    smi, clock = Smi(), Clock()
    d = discovery(tmp_path, Gpus(H100), smi, clock)
    for _ in range(20):
        snap = d.read()
        clock.now += 10
    assert smi.calls == 1 and snap.gpus[0].timeslice == "default"
    assert snap.vgpu is not None and not snap.vgpu.present


def test_slow_facts_are_reread_on_refresh_on_a_new_gpu_set_and_periodically(
        tmp_path: Path) -> None:
    smi, clock = Smi(), Clock()
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


def test_nvml_down_with_fail_on_init_error_false_still_scans_vgpu(tmp_path: Path) -> None:
    host = HostReader(machine_type_file=str(tmp_path / "dmi"),
                      sysfs_root=str(gpu_tree(tmp_path, [])))
    d = Discovery(Gpus(NvmlInitError("NVML could not start: x")), host, smi=Smi(),
                  fail_on_init_error=False)
    snap = d.read()
    assert not snap.nvml_available and snap.vgpu is not None and snap.gpus == ()
