"""The resource manager: fixed by the setting, or found on the node (auto) from the DRA
kubelet plugin's registration socket and the node's ResourceSlices; logged once per change."""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.process import wait_for

from gfd.errors import ApiError
from gfd.readers.resourcemanager import REGISTRATION_SOCKET, ResourceManagerReader, assumed
from gfd.snapshot import ResourceManager, Snapshot
from gfd.triggers import Trigger


def register(registry: Path) -> Path:
    """What the DRA kubelet plugin leaves in the kubelet's plugin registry: a socket."""
    path = registry / REGISTRATION_SOCKET
    os.mknod(path, stat.S_IFSOCK | 0o600)
    return path


@pytest.mark.parametrize("setting", ["device-plugin", "dra"])
def test_a_fixed_setting_is_taken_as_is(tmp_path: Path, setting: str) -> None:
    register(tmp_path)
    found = ResourceManagerReader(setting, str(tmp_path)).read()
    assert (found.name, found.evidence) == (setting, f"--resource-manager {setting}")


@pytest.mark.parametrize(("recorded", "simulated", "name", "evidence"), [
    (ResourceManager(name="dra", evidence="x"), True, "device-plugin",
     "assumed for a simulated machine; --resource-manager dra for the DRA driver's labels"),
    (ResourceManager(name="dra", evidence="2 ResourceSlice(s)"), False, "dra",
     "as the snapshot recorded it; --resource-manager device-plugin for the device plugin's "
     "labels"),
    (ResourceManager(name="device-plugin", evidence="no sign of DRA"), False, "device-plugin",
     "as the snapshot recorded it; --resource-manager dra for the DRA driver's labels"),
    (ResourceManager(), False, "device-plugin",
     "assumed: the snapshot records none; --resource-manager dra for the DRA driver's labels"),
], ids=["simulated", "recorded-dra", "recorded-device-plugin", "recorded-none"])
def test_a_machine_that_is_not_this_host_has_its_manager_assumed_and_says_so(
        recorded: ResourceManager, simulated: bool, name: str, evidence: str) -> None:
    found = assumed(Snapshot(resource_manager=recorded), simulated=simulated)
    assert (found.name, found.evidence) == (name, evidence)


def test_auto_picks_dra_where_the_plugin_is_registered(tmp_path: Path) -> None:
    path = register(tmp_path)
    found = ResourceManagerReader("auto", str(tmp_path)).read()
    assert found.name == "dra" and str(path) in found.evidence


def test_auto_without_evidence_is_device_plugin(tmp_path: Path) -> None:
    found = ResourceManagerReader("auto", str(tmp_path / "missing")).read()
    assert found.name == "device-plugin" and found.evidence.startswith("no sign of DRA")


def test_a_regular_file_under_the_socket_name_is_no_evidence(tmp_path: Path) -> None:
    (tmp_path / REGISTRATION_SOCKET).write_text("")
    found = ResourceManagerReader("auto", str(tmp_path)).read()
    assert found.name == "device-plugin" and "is not a socket" in found.evidence


def test_auto_follows_the_plugin_coming_and_going(tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    reader = ResourceManagerReader("auto", str(tmp_path))
    caplog.set_level(logging.INFO, "gfd.readers.resourcemanager")
    assert reader.read().name == "device-plugin"
    assert reader.read().name == "device-plugin"
    path = register(tmp_path)
    assert reader.read().name == "dra"
    path.unlink()
    assert reader.read().name == "device-plugin"
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said  # once at first, once per change: not every read
    assert said[1].startswith("resource manager changed from device-plugin to dra")


class Slices:
    """The node's ResourceSlices of gpu.nvidia.com as the API answers (an int or an error)."""

    def __init__(self, *answers: int | ApiError) -> None:
        self.answers = list(answers)
        self.calls = 0

    def __call__(self) -> int:
        self.calls += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, ApiError):
            raise answer
        return answer


def test_auto_picks_dra_from_the_nodes_resource_slices(tmp_path: Path) -> None:
    slices = Slices(2)
    found = ResourceManagerReader("auto", str(tmp_path), slices=slices).read()
    assert found.name == "dra" and "2 ResourceSlice(s) of driver gpu.nvidia.com" in found.evidence


def test_the_api_is_asked_once_per_refresh_not_every_read(tmp_path: Path) -> None:
    slices = Slices(0, 1)
    reader = ResourceManagerReader("auto", str(tmp_path), slices=slices)
    assert [reader.read().name for _ in range(3)] == ["device-plugin"] * 3
    assert slices.calls == 1
    reader.refresh()
    assert reader.read().name == "dra" and slices.calls == 2


def test_the_socket_spares_the_api_call(tmp_path: Path) -> None:
    register(tmp_path)
    slices = Slices(0)
    assert ResourceManagerReader("auto", str(tmp_path), slices=slices).read().name == "dra"
    assert slices.calls == 0


def test_an_unreadable_api_keeps_the_last_decision(tmp_path: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    forbidden = ApiError("list resourceslices: forbidden", status=403)
    slices = Slices(3, forbidden)
    reader = ResourceManagerReader("auto", str(tmp_path), slices=slices)
    assert reader.read().name == "dra"
    reader.refresh()
    with caplog.at_level(logging.WARNING, "gfd.readers.resourcemanager"):
        kept = reader.read()
        reader.refresh()
        reader.read()
    assert kept.name == "dra" and kept.evidence.startswith("kept:")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "resourceslices" in warnings[0]


def test_an_unreadable_api_at_start_means_device_plugin(tmp_path: Path) -> None:
    slices = Slices(ApiError("list resourceslices: forbidden", status=403))
    found = ResourceManagerReader("auto", str(tmp_path), slices=slices).read()
    assert found.name == "device-plugin" and "unreadable" in found.evidence


def test_auto_watches_the_registry_and_fires_when_the_plugin_comes_and_goes(
        tmp_path: Path) -> None:
    fired: list[Trigger] = []
    reader = ResourceManagerReader("auto", str(tmp_path))
    reader.watch(fired.append)
    reader.watch(fired.append)  # idempotent: one watch
    try:
        (tmp_path / "unrelated.sock").write_text("")
        path = register(tmp_path)
        wait_for(lambda: len(fired) == 1, timeout=5)
        path.unlink()
        wait_for(lambda: len(fired) == 2, timeout=5)
    finally:
        reader.close()
    assert {(t.source, t.kind) for t in fired} == {("registry", "registration")}
    assert all(t.detail == str(path) for t in fired)


def test_a_fixed_setting_or_a_missing_registry_watches_nothing(tmp_path: Path) -> None:
    fired: list[Trigger] = []
    fixed = ResourceManagerReader("dra", str(tmp_path))
    fixed.watch(fired.append)
    missing = ResourceManagerReader("auto", str(tmp_path / "absent"))
    missing.watch(fired.append)  # no directory: the per-cycle stat still sees a plugin
    register(tmp_path)
    time.sleep(0.2)
    assert fired == [] and not fixed._watch.watching
    assert missing.read().name == "device-plugin"
    fixed.close()
    missing.close()


@pytest.fixture
def world() -> Iterator[Path]:
    """A directory every user may reach (pytest's own are root's alone, mode 0700)."""
    path = Path(tempfile.mkdtemp(prefix="gfd-registry-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_a_registry_gfd_may_not_look_into_is_said_once_with_the_fix(world: Path) -> None:
    """The kubelet makes plugins_registry 0750 root: a non-root gfd cannot see the plugin's
    socket there, and says so (with what to do) rather than quietly deciding device-plugin.
    The reads run in a forked child that became uid 65532, since root ignores the mode."""
    registry = world / "plugins_registry"
    registry.mkdir(mode=0o750)
    os.mknod(registry / REGISTRATION_SOCKET, stat.S_IFSOCK | 0o600)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to 65532, read twice, report, never return to pytest
        try:
            os.close(read_end)
            out = os.fdopen(write_end, "w")
            os.setgroups([])
            os.setresgid(65532, 65532, 65532)
            os.setresuid(65532, 65532, 65532)
            handler = logging.StreamHandler(out)
            handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
            logger = logging.getLogger("gfd.readers.resourcemanager")
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
            reader = ResourceManagerReader(setting="auto", plugins_registry=str(registry))
            reader.read()
            out.write(f"DECISION {reader.read().name}\n")
            out.flush()
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as child:
        output = child.read()
    os.waitpid(pid, 0)
    warnings = [line for line in output.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, output
    assert "0750 root" in warnings[0] and "set --resource-manager" in warnings[0]
    assert "DECISION device-plugin" in output
