"""Shared fixtures: the fake libnvidia-ml.so.1 (and an event FIFO for it) and the fake
libcuda.so.1 (Tegra back end), each built once per session (tests/fakes), and ``agents``,
which reaps every `gfd run` process a test starts (tests/helpers/process.py); and the real
control plane of the realapi tier (``control_plane``, once per session, tests/realapi)."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from fakes import fakecuda
from fakes.fakecuda import CudaMachine, FakeCuda
from fakes.fakenvml import EVENTS_ENV, EventPipe, FakeNvml, Machine, build_library, load_in_process
from helpers.controlplane import ASSETS_ENV, ENABLE_HINT, ControlPlane, assets_from_env
from helpers.process import Agent

# ----------------------------------------------------------------------------- fake NVML


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the fake libnvidia-ml.so.1 (for LD_LIBRARY_PATH in subprocesses)."""
    return build_library(tmp_path_factory.mktemp("fake-nvml")).parent


@pytest.fixture(scope="session")
def fake_nvml_old_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the "old driver" variant (no profile-name or fabric symbols)."""
    return build_library(tmp_path_factory.mktemp("fake-nvml-old"), old_driver=True).parent


@pytest.fixture(scope="session")
def fake_nvml(fake_nvml_lib: Path) -> FakeNvml:
    """The fake loaded into this process, so pynvml (and NvmlReader) here use it."""
    return load_in_process(fake_nvml_lib / "libnvidia-ml.so.1")


class NvmlMachine:
    """Callable: ``nvml_machine(machine)`` writes the profile and points the fake at it.

    Call it again (same file) to change the machine under a running NVML session.
    """

    def __init__(self, fake: FakeNvml, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fake = fake
        self.path = path
        self._monkeypatch = monkeypatch

    def __call__(self, machine: Machine) -> Path:
        machine.write(self.path)
        self._monkeypatch.setenv("FAKE_NVML_PROFILE", str(self.path))
        return self.path


@pytest.fixture
def nvml_machine(
    fake_nvml: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[NvmlMachine]:
    """Install a Machine in the in-process fake NVML; every session is shut down after."""
    fake_nvml.shutdown_all()
    fake_nvml.reset_counts()
    yield NvmlMachine(fake_nvml, tmp_path / "machine.nvml", monkeypatch)
    fake_nvml.shutdown_all()


@pytest.fixture
def nvml_events(fake_nvml: FakeNvml, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> Iterator[EventPipe]:
    """An event FIFO the in-process fake NVML reads ($FAKE_NVML_EVENTS): event sets created
    during the test see what is ``send``-ed to it."""
    with EventPipe(tmp_path / "nvml-events.fifo") as pipe:
        monkeypatch.setenv(EVENTS_ENV, str(pipe.path))
        yield pipe


# ----------------------------------------------------------------------------- fake CUDA


@pytest.fixture(scope="session")
def fake_cuda_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the fake libcuda.so.1 (for LD_LIBRARY_PATH in subprocesses)."""
    return fakecuda.build_library(tmp_path_factory.mktemp("fake-cuda")).parent


@pytest.fixture(scope="session")
def fake_cuda_old_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the variant without cuDeviceTotalMem_v2 / cuDeviceGetUuid_v2."""
    return fakecuda.build_library(tmp_path_factory.mktemp("fake-cuda-old"), no_v2=True).parent


@pytest.fixture(scope="session")
def fake_cuda(fake_cuda_lib: Path) -> FakeCuda:
    """The fake opened in this process (a TegraReader given its path shares this copy)."""
    return FakeCuda(fake_cuda_lib / fakecuda.SONAME)


class CudaMachineFile:
    """Callable: ``cuda_machine(machine)`` writes the profile and points the fake at it."""

    def __init__(self, fake: FakeCuda, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fake = fake
        self.path = path
        self.library = str(fake.path)
        self._monkeypatch = monkeypatch

    def __call__(self, machine: CudaMachine) -> Path:
        machine.write(self.path)
        self._monkeypatch.setenv(fakecuda.PROFILE_ENV, str(self.path))
        return self.path


@pytest.fixture
def cuda_machine(fake_cuda: FakeCuda, tmp_path: Path,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[CudaMachineFile]:
    """Install a CudaMachine in the in-process fake libcuda, starting from a fresh session."""
    fake_cuda.reset()
    yield CudaMachineFile(fake_cuda, tmp_path / "machine.cuda", monkeypatch)
    fake_cuda.reset()


# ----------------------------------------------------------------------------- gfd run processes


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    """Append each started Agent; any still running at the end is killed and reaped."""
    started: list[Agent] = []
    yield started
    for agent in started:
        if agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait()
        if not agent.log.closed:
            agent.log.close()


# ----------------------------------------------------------------------------- real API server
# tests/realapi/conftest.py has the rest; these two are here so an e2e test can run on both
# servers (``server`` parametrised "fake"/"real:<mode>", helpers/realserver.py).

SKIP_REASON = f"real API server tier off: {ASSETS_ENV} is unset; to run it: {ENABLE_HINT}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Every skip for want of assets is reported at this file, so ``-rs`` folds them into
    one line instead of one per test."""
    report: pytest.TestReport = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and longrepr[2].endswith(SKIP_REASON):
        report.longrepr = (__file__, 1, longrepr[2])
    return report


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver, running for the whole session, NFD's CRDs served."""
    assets = assets_from_env()
    if assets is None:
        pytest.skip(SKIP_REASON)
    plane = ControlPlane.start(assets, tmp_path_factory.mktemp("controlplane"))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def admin_kubeconfig(control_plane: ControlPlane) -> Path:
    """A kubeconfig for the cluster admin (client certificate in system:masters)."""
    return control_plane.admin_kubeconfig
