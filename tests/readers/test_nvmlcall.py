"""NVML's calls as the reader and its event sets make them: an error names its call, a feature
the driver lacks is a default, a binding too old for a symbol behaves as an old driver, text
that is not UTF-8 is an error of its own, and a session that cannot start names the fix."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from gfd.errors import NvmlInitError
from gfd.readers.failure import CallFailed
from gfd.readers.nvmlcall import (
    ABSENT,
    NOT_UTF8,
    binding,
    decoded,
    end_session,
    nvml_call,
    optional,
    start_session,
)


def answering(code: int) -> Any:
    def nvmlDeviceGetSomething(*_: Any) -> Any:
        raise pynvml.NVMLError(code)
    return nvmlDeviceGetSomething


def test_an_error_names_its_call_and_keeps_the_bindings_error() -> None:
    with pytest.raises(CallFailed) as caught:
        nvml_call(answering(pynvml.NVML_ERROR_UNKNOWN), 0)
    failed = caught.value
    assert (failed.library, failed.call, failed.code) == (
        "NVML", "nvmlDeviceGetSomething", pynvml.NVML_ERROR_UNKNOWN)
    assert isinstance(failed.error, pynvml.NVMLError)
    assert failed.describe(2) == "NVML nvmlDeviceGetSomething failed for GPU 2: Unknown Error"


def test_text_that_is_not_utf8_is_its_own_error() -> None:
    def nvmlDeviceGetName(*_: Any) -> str:
        return b"\xff".decode()

    with pytest.raises(CallFailed) as caught:
        nvml_call(nvmlDeviceGetName)
    assert caught.value.code == NOT_UTF8
    assert caught.value.message == "returned text that is not UTF-8 (byte 0)"


@pytest.mark.parametrize("code", sorted(ABSENT))
def test_a_feature_the_driver_lacks_is_the_default(code: int) -> None:
    assert optional(answering(code), 0, default="none") == "none"
    with pytest.raises(CallFailed):
        optional(answering(pynvml.NVML_ERROR_NO_PERMISSION), 0)


def test_a_binding_without_the_symbol_behaves_as_a_driver_without_it() -> None:
    missing = binding("nvmlDeviceGetSomethingFromTheFuture")
    assert optional(missing, 0) is None
    with pytest.raises(CallFailed) as caught:
        nvml_call(missing, 0)
    assert caught.value.code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    assert caught.value.call == "nvmlDeviceGetSomethingFromTheFuture"
    assert binding("nvmlDeviceGetCount") is pynvml.nvmlDeviceGetCount


def test_bytes_are_decoded_and_text_kept() -> None:
    assert decoded(b"NVIDIA H100") == "NVIDIA H100" and decoded("550.54.15") == "550.54.15"


def test_a_session_that_cannot_start_names_the_problem_and_the_fix(nvml_machine: Any) -> None:
    from fakes import profiles

    machine = profiles.hgx_h100()
    machine.init_error = "DRIVER_NOT_LOADED"
    nvml_machine(machine)
    with pytest.raises(NvmlInitError, match=r"NVML could not start: .*modprobe nvidia"):
        start_session()
    end_session()  # ending a session that did not start is only logged
