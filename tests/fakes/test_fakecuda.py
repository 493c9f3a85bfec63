"""The fake libcuda.so.1 answers like the real one where gfd depends on it."""

from __future__ import annotations

import ctypes
from typing import Any

from fakes.fakecuda import jetson_agx_orin

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101


def out_int(fn: Any, *args: Any) -> tuple[int, int]:
    value = ctypes.c_int(-1)
    return int(fn(ctypes.byref(value), *args)), value.value


def test_device_calls_before_cuinit_answer_not_initialized(cuda_machine: Any) -> None:
    cuda_machine(jetson_agx_orin())
    lib = cuda_machine.fake.lib
    assert out_int(lib.cuDeviceGetCount) == (CUDA_ERROR_NOT_INITIALIZED, -1)
    assert out_int(lib.cuDriverGetVersion) == (CUDA_SUCCESS, 12020)  # needs no cuInit
    assert lib.cuInit(0) == CUDA_SUCCESS
    assert out_int(lib.cuDeviceGetCount) == (CUDA_SUCCESS, 1)


def test_cuinit_takes_no_flags_and_reports_the_forced_error(cuda_machine: Any) -> None:
    machine = jetson_agx_orin()
    machine.init_error = "CUDA_ERROR_NO_DEVICE"
    cuda_machine(machine)
    lib = cuda_machine.fake.lib
    assert lib.cuInit(1) == CUDA_ERROR_INVALID_VALUE
    assert lib.cuInit(0) == CUDA_ERROR_NO_DEVICE
    assert out_int(lib.cuDeviceGetCount)[0] == CUDA_ERROR_NOT_INITIALIZED


def test_a_bad_ordinal_is_an_invalid_device(cuda_machine: Any) -> None:
    cuda_machine(jetson_agx_orin())
    lib = cuda_machine.fake.lib
    assert lib.cuInit(0) == CUDA_SUCCESS
    assert out_int(lib.cuDeviceGet, 1)[0] == CUDA_ERROR_INVALID_DEVICE
    assert out_int(lib.cuDeviceGet, 0) == (CUDA_SUCCESS, 0)


def test_names_are_truncated_to_the_buffer(cuda_machine: Any) -> None:
    cuda_machine(jetson_agx_orin())
    lib = cuda_machine.fake.lib
    assert lib.cuInit(0) == CUDA_SUCCESS
    buffer = ctypes.create_string_buffer(8)
    assert lib.cuDeviceGetName(buffer, 3, 0) == CUDA_SUCCESS
    assert buffer.value == b"Or"


def test_error_names_and_strings_come_from_the_library(cuda_machine: Any) -> None:
    lib = cuda_machine.fake.lib
    text = ctypes.c_char_p()
    assert lib.cuGetErrorName(CUDA_ERROR_NO_DEVICE, ctypes.byref(text)) == CUDA_SUCCESS
    assert text.value == b"CUDA_ERROR_NO_DEVICE"
    assert lib.cuGetErrorString(CUDA_ERROR_NO_DEVICE, ctypes.byref(text)) == CUDA_SUCCESS
    assert text.value == b"no CUDA-capable device is detected"
    assert lib.cuGetErrorName(12345, ctypes.byref(text)) == CUDA_ERROR_INVALID_VALUE
