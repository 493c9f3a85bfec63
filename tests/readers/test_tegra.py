"""TegraReader in process over the fake libcuda.so.1 (loaded by path), and the Tegra platform
checks of GFD's auto strategy."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from fakes.fakecuda import (
    ORIN_AGX_64GB_BYTES,
    ORIN_NANO_8GB_BYTES,
    SONAME,
    CudaGpu,
    CudaMachine,
    jetson_agx_orin,
    jetson_orin_nano,
)

from gfd.errors import BackendInitError, CudaInitError, DiscoveryError, GfdError
from gfd.readers.tegra import (
    TegraReader,
    has_integrated_gpu,
    has_tegra_files,
    is_integrated_gpu_name,
)
from gfd.snapshot import Gpu, Snapshot, validate_types


def read(cuda_machine: Any, machine: CudaMachine, library: str | None = None) -> Snapshot:
    cuda_machine(machine)
    with TegraReader(library or cuda_machine.library) as reader:
        return reader.read()


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    return message


# ----------------------------------------------------------------------------- reading


def test_reads_a_jetson_agx_orin_as_a_tegra_snapshot(cuda_machine: Any) -> None:
    machine = jetson_agx_orin()
    snap = read(cuda_machine, machine)
    assert snap == Snapshot(
        nvml_available=True,
        driver_version=None,
        cuda_driver_version=12020,
        gpus=(Gpu(index=0, uuid=machine.uuids()[0], name="Orin",
                  memory_total_bytes=ORIN_AGX_64GB_BYTES, compute_capability=(8, 7)),),
        source="tegra",
        backend="tegra",
    )
    validate_types(snap)


def test_devices_are_read_in_ordinal_order(cuda_machine: Any) -> None:
    machine = CudaMachine(driver_version=13000, gpus=[
        CudaGpu(name="NVIDIA Thor", memory_bytes=131_000_000_000, compute=(11, 0)),
        CudaGpu(name="Orin", memory_bytes=ORIN_NANO_8GB_BYTES, compute=(8, 7)),
    ])
    snap = read(cuda_machine, machine)
    assert [(g.index, g.name, g.compute_capability) for g in snap.gpus] == [
        (0, "NVIDIA Thor", (11, 0)), (1, "Orin", (8, 7))]
    assert [g.uuid for g in snap.gpus] == machine.uuids()
    assert snap.cuda_driver_version == 13000


def test_cuinit_runs_once_per_session(cuda_machine: Any) -> None:
    cuda_machine(jetson_orin_nano())
    reader = TegraReader(cuda_machine.library)
    for _ in range(3):
        assert reader.read().gpus[0].memory_total_bytes == ORIN_NANO_8GB_BYTES
    assert cuda_machine.fake.call_count("cuInit") == 1
    assert cuda_machine.fake.call_count("cuDeviceGetCount") == 3
    reader.close()
    reader.read()
    assert cuda_machine.fake.call_count("cuInit") == 2


def test_a_reader_loads_nothing_until_it_reads(tmp_path: Path) -> None:
    reader = TegraReader(str(tmp_path / SONAME))
    reader.close()
    with pytest.raises(CudaInitError):
        reader.read()


# ----------------------------------------------------------------------------- start-up errors


def test_missing_library_is_an_init_error_naming_the_fix(tmp_path: Path) -> None:
    with pytest.raises(CudaInitError) as exc:
        TegraReader(str(tmp_path / SONAME)).read()
    assert isinstance(exc.value, BackendInitError)
    message = one_line(exc)
    assert message.startswith(f"CUDA could not start: {tmp_path / SONAME} not found (")
    assert "NVIDIA container runtime" in message


def test_a_library_without_cuinit_is_not_taken_for_libcuda() -> None:
    with pytest.raises(CudaInitError) as exc:
        TegraReader("libc.so.6").read()
    assert one_line(exc).startswith(
        "CUDA could not start: libc.so.6 has no cuInit, so it is not the CUDA driver library (")


INIT_ERRORS = [
    ("CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected", "/dev/nvmap"),
    ("CUDA_ERROR_NOT_INITIALIZED", "initialization error", "deviceQuery or tegrastats"),
    ("CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library", "stub libcuda.so.1"),
    ("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination", "JetPack/L4T"),
]


@pytest.mark.parametrize(("error", "text", "fix"), INIT_ERRORS, ids=[e for e, _, _ in INIT_ERRORS])
def test_cuinit_failure_is_one_line_naming_the_error_and_the_fix(
        cuda_machine: Any, error: str, text: str, fix: str) -> None:
    machine = jetson_agx_orin()
    machine.init_error = error
    with pytest.raises(CudaInitError) as exc:
        read(cuda_machine, machine)
    message = one_line(exc)
    assert message.startswith(f"CUDA could not start: cuInit failed: {error} ({text}) (")
    assert fix in message


def test_a_failed_cuinit_is_tried_again_on_the_next_read(cuda_machine: Any) -> None:
    machine = jetson_agx_orin()
    machine.init_error = "CUDA_ERROR_NO_DEVICE"
    cuda_machine(machine)
    reader = TegraReader(cuda_machine.library)
    with pytest.raises(CudaInitError):
        reader.read()
    machine.init_error = None
    cuda_machine(machine)
    assert [g.name for g in reader.read().gpus] == ["Orin"]


# ----------------------------------------------------------------------------- call errors

CALL_ERRORS = [
    # (where the failure is forced: None = every call, else the GPU index), symbol, error, message
    (None, "cuDriverGetVersion", "CUDA_ERROR_UNKNOWN",
     "CUDA cuDriverGetVersion failed: CUDA_ERROR_UNKNOWN (unknown error)"),
    (None, "cuDeviceGetCount", "CUDA_ERROR_OPERATING_SYSTEM",
     "CUDA cuDeviceGetCount failed: CUDA_ERROR_OPERATING_SYSTEM "
     "(OS call failed or operation not supported on this OS)"),
    (1, "cuDeviceGet", "CUDA_ERROR_INVALID_DEVICE",
     "CUDA cuDeviceGet failed for GPU 1: CUDA_ERROR_INVALID_DEVICE (invalid device ordinal)"),
    (1, "cuDeviceGetName", "CUDA_ERROR_INVALID_VALUE",
     "CUDA cuDeviceGetName failed for GPU 1: CUDA_ERROR_INVALID_VALUE (invalid argument)"),
    (0, "cuDeviceGetAttribute", "CUDA_ERROR_NOT_SUPPORTED",
     "CUDA cuDeviceGetAttribute failed for GPU 0: CUDA_ERROR_NOT_SUPPORTED "
     "(operation not supported)"),
]


@pytest.mark.parametrize(("gpu", "symbol", "error", "message"), CALL_ERRORS,
                         ids=[s for _, s, _, _ in CALL_ERRORS])
def test_a_failed_call_is_one_line_naming_the_call_and_the_gpu(
        cuda_machine: Any, gpu: int | None, symbol: str, error: str, message: str) -> None:
    machine = CudaMachine(gpus=[CudaGpu(name="Orin", memory_bytes=ORIN_NANO_8GB_BYTES,
                                        compute=(8, 7)) for _ in range(2)])
    (machine.fail if gpu is None else machine.gpus[gpu].fail)[symbol] = error
    with pytest.raises(DiscoveryError) as exc:
        read(cuda_machine, machine)
    assert not isinstance(exc.value, BackendInitError)
    assert one_line(exc) == message


def test_a_failed_memory_query_only_warns(cuda_machine: Any,
                                          caplog: pytest.LogCaptureFixture) -> None:
    machine = jetson_agx_orin()
    machine.gpus[0].fail["cuDeviceTotalMem_v2"] = "CUDA_ERROR_NOT_SUPPORTED"
    with caplog.at_level(logging.WARNING, logger="gfd.readers.tegra"):
        snap = read(cuda_machine, machine)
    assert snap.gpus[0].memory_total_bytes is None
    assert snap.gpus[0].compute_capability == (8, 7)
    assert [r.getMessage() for r in caplog.records] == [
        "GPU 0: memory unavailable: CUDA cuDeviceTotalMem_v2 failed for GPU 0: "
        "CUDA_ERROR_NOT_SUPPORTED (operation not supported)"]


def test_a_failed_uuid_query_leaves_the_uuid_empty(cuda_machine: Any) -> None:
    machine = jetson_agx_orin()
    machine.gpus[0].fail["cuDeviceGetUuid_v2"] = "CUDA_ERROR_NOT_SUPPORTED"
    snap = read(cuda_machine, machine)
    assert snap.gpus[0].uuid == ""
    assert snap.gpus[0].name == "Orin"


def test_every_failure_is_a_gfd_error(cuda_machine: Any) -> None:
    for symbol in ("cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetName",
                   "cuDeviceGetAttribute"):
        machine = jetson_agx_orin()
        machine.fail[symbol] = "CUDA_ERROR_DEINITIALIZED"
        with pytest.raises(GfdError, match=f"CUDA {symbol} failed"):
            read(cuda_machine, machine)


# ----------------------------------------------------------------------------- old driver


@pytest.fixture
def old_library(cuda_machine: Any, fake_cuda_old_lib: Path) -> str:
    """The fake without the _v2 entry points (the profile still comes from cuda_machine)."""
    return str(fake_cuda_old_lib / SONAME)


def test_without_v2_calls_the_legacy_ones_are_used(cuda_machine: Any, old_library: str) -> None:
    machine = CudaMachine(gpus=[CudaGpu(name="Orin", memory_bytes=3 * 2**30, compute=(8, 7))])
    snap = read(cuda_machine, machine, old_library)
    assert snap.gpus[0].memory_total_bytes == 3 * 2**30
    assert snap.gpus[0].uuid == machine.uuids()[0]


def test_a_saturated_legacy_memory_query_is_unknown(cuda_machine: Any, old_library: str,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gfd.readers.tegra"):
        snap = read(cuda_machine, jetson_agx_orin(), old_library)
    assert snap.gpus[0].memory_total_bytes is None
    assert "saturates at 4 GiB" in caplog.text


# ----------------------------------------------------------------------------- platform


def test_tegra_release_file_marks_a_tegra_system(tmp_path: Path) -> None:
    release = tmp_path / "nv_tegra_release"
    release.write_text("# R36 (release), REVISION: 3.0, GCID: 36923193, BOARD: generic, "
                       "EABI: aarch64, DATE: Fri Jul 19 23:24:25 UTC 2024\n")
    assert has_tegra_files(release_file=str(release), sysfs_root=str(tmp_path / "sys")) == (
        True, f"{release} found")


@pytest.mark.parametrize(("family", "tegra"), [
    ("Tegra\n", True), ("tegra194\n", True), ("TEGRA", True),
    ("jep106:036b\n", False), ("", False), ("nvidia tegra\n", False),
])
def test_soc_family_marks_a_tegra_system_when_it_begins_with_tegra(
        tmp_path: Path, family: str, tegra: bool) -> None:
    soc = tmp_path / "sys" / "devices" / "soc0"
    soc.mkdir(parents=True)
    (soc / "family").write_text(family)
    found, reason = has_tegra_files(release_file=str(tmp_path / "absent"),
                                    sysfs_root=str(tmp_path / "sys"))
    assert found is tegra
    assert str(soc / "family") in reason


def test_no_markers_and_a_directory_are_not_tegra(tmp_path: Path) -> None:
    (tmp_path / "nv_tegra_release").mkdir()
    (tmp_path / "sys" / "devices" / "soc0" / "family").mkdir(parents=True)
    found, reason = has_tegra_files(release_file=str(tmp_path / "nv_tegra_release"),
                                    sysfs_root=str(tmp_path / "sys"))
    assert not found
    assert reason.startswith("neither ")


@pytest.mark.parametrize(("name", "integrated"), [
    ("Orin (nvgpu)", True),
    ("NVIDIA Thor", True),
    ("Xavier (nvgpu)", True),
    ("Orin", False),  # libcuda's name for the same GPU: the marker is NVML's
    ("NVIDIA H100 80GB HBM3", False),
    ("NVIDIA GH200 480GB", False),
])
def test_nvml_names_that_mean_an_integrated_gpu(name: str, integrated: bool) -> None:
    assert is_integrated_gpu_name(name) is integrated


def test_any_integrated_gpu_among_the_nvml_devices_counts() -> None:
    assert has_integrated_gpu(["NVIDIA A100-SXM4-40GB", "Orin (nvgpu)"]) == (
        True, "device 'Orin (nvgpu)' is an integrated GPU")
    assert has_integrated_gpu(["NVIDIA A100-SXM4-40GB"])[0] is False
    assert has_integrated_gpu([])[0] is False
