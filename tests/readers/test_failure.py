"""CallFailed: the one failure type of the readers (NVML and the CUDA driver API)."""

from __future__ import annotations

from typing import Any

import pytest
from fakes import profiles

from gfd.errors import DiscoveryError
from gfd.readers.failure import CallFailed
from gfd.readers.nvml import NvmlReader


def test_a_failure_names_its_library_call_and_gpu_on_one_line() -> None:
    failed = CallFailed("NVML", "nvmlDeviceGetName", 999, RuntimeError("Unknown\n  Error"))
    assert failed.message == "Unknown Error"
    assert failed.describe() == "NVML nvmlDeviceGetName failed: Unknown Error"
    assert failed.describe(3) == "NVML nvmlDeviceGetName failed for GPU 3: Unknown Error"
    failed.gpu = 5
    assert failed.describe() == "NVML nvmlDeviceGetName failed for GPU 5: Unknown Error"
    assert failed.describe(2).endswith("for GPU 2: Unknown Error"), "an explicit GPU wins"


def test_the_cuda_reader_words_its_failures_the_same_way() -> None:
    failed = CallFailed("CUDA", "cuDeviceTotalMem_v2", 100,
                        RuntimeError("CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)"))
    assert failed.describe(0) == ("CUDA cuDeviceTotalMem_v2 failed for GPU 0: "
                                  "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)")


def test_an_nvml_system_failure_becomes_one_line_with_the_bindings_error_as_cause(
        nvml_machine: Any) -> None:
    machine = profiles.hgx_h100()
    machine.fail["nvmlSystemGetDriverVersion"] = "NO_PERMISSION"
    nvml_machine(machine)
    with NvmlReader() as reader, pytest.raises(DiscoveryError) as caught:
        reader.read()
    assert str(caught.value).startswith("NVML nvmlSystemGetDriverVersion failed: ")
    assert "\n" not in str(caught.value)
    assert type(caught.value.__cause__).__name__.startswith("NVMLError")
