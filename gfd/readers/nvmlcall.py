"""NVML's session and calls, for the NVML reader and its event sets: ``nvmlInit`` and
``nvmlShutdown`` (refcounted by NVML: each session pairs them), a binding call whose error
becomes a ``CallFailed`` naming the call, a feature the driver lacks as a default, a binding
too old for a symbol as an old driver, and the error codes the readers' policy tells apart
(docs/nvml-errors.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import pynvml

from gfd.errors import NvmlInitError, one_line
from gfd.readers.failure import CallFailed

log = logging.getLogger(__name__)

ABSENT = frozenset({pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND})
"""Errors that mean the driver or the GPU does not have the feature."""

VERSION_MISMATCH = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
"""A versioned struct the driver does not know (treated like an absent call)."""

LOST = frozenset({pynvml.NVML_ERROR_GPU_IS_LOST})
"""The error that makes a GPU lost whatever the call (any error of its handle does too)."""

NOT_UTF8 = -1
"""Not an NVML code: the binding could not decode text NVML returned (not UTF-8)."""

BAD_VALUE = -2
"""Not an NVML code: NVML returned values that contradict each other (min above max)."""

_INIT_HINTS: MappingProxyType[int, tuple[str, str]] = MappingProxyType(
    {
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
            "libnvidia-ml.so.1 not found",
            "is the NVIDIA driver installed and the container run with the NVIDIA runtime, "
            "NVIDIA_VISIBLE_DEVICES=all?",
        ),
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED: (
            "",
            "load the NVIDIA kernel module (modprobe nvidia) or finish the driver install; "
            "nvidia-smi on the host should work",
        ),
        pynvml.NVML_ERROR_NO_PERMISSION: (
            "",
            "the process may not open /dev/nvidia*: run the container with the NVIDIA runtime "
            "or as a user allowed to use the GPUs",
        ),
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
            "",
            "the driver libraries do not match the loaded kernel module: reboot or reload the "
            "nvidia module after a driver upgrade",
        ),
    }
)


def nvml_failure(call: str, error: BaseException, code: int) -> CallFailed:
    """The failure of NVML call ``call``."""
    return CallFailed("NVML", call, code, error)


def nvml_call(fn: Callable[..., Any], *args: Any) -> Any:
    """Call a pynvml binding function; an NVMLError (or text the binding cannot decode)
    becomes CallFailed naming the call."""
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        name = getattr(fn, "__name__", "call")
        raise nvml_failure(name, exc, int(exc.value)) from exc
    except UnicodeDecodeError as exc:
        name = getattr(fn, "__name__", "call")
        problem = ValueError(f"returned text that is not UTF-8 (byte {exc.start})")
        raise nvml_failure(name, problem, NOT_UTF8) from exc


def optional(fn: Callable[..., Any], *args: Any, default: Any = None) -> Any:
    """Like call, but a feature the driver or GPU lacks gives ``default``."""
    try:
        return nvml_call(fn, *args)
    except CallFailed as failed:
        if failed.code in ABSENT:
            return default
        raise


def binding(name: str) -> Callable[..., Any]:
    """The pynvml function ``name``; one that behaves like FUNCTION_NOT_FOUND if the
    installed binding predates it (an old binding is treated like an old driver)."""
    fn: Callable[..., Any] | None = getattr(pynvml, name, None)
    if fn is not None:
        return fn

    def missing(*_: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    missing.__name__ = name
    return missing


def decoded(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _init_message(exc: Any) -> str:
    code = int(exc.value)
    what, fix = _INIT_HINTS.get(code, ("", "check the driver with nvidia-smi on the host"))
    what = what or one_line(str(exc)).rstrip(".")
    return f"NVML could not start: {what} ({fix})"


def start_session() -> None:
    """nvmlInit (refcounted by NVML: each session of this module pairs it with _shutdown);
    NvmlInitError naming the problem and the fix when it fails."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise NvmlInitError(_init_message(exc)) from exc


def end_session() -> None:
    """nvmlShutdown; an error (the session already ended) is only logged at debug level."""
    try:
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        log.debug("nvmlShutdown failed (ignored): %s", exc)


__all__ = [
    "ABSENT",
    "BAD_VALUE",
    "LOST",
    "NOT_UTF8",
    "VERSION_MISMATCH",
    "binding",
    "decoded",
    "end_session",
    "nvml_call",
    "nvml_failure",
    "optional",
    "start_session",
]
