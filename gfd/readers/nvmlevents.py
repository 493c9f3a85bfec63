"""NVML event sets: MIG reconfiguration, Xid errors and a GPU becoming unavailable, waited
for in their own NVML session from one thread while the reader reads in another; what they
receive tells the reader (``freshness.Changes``) which GPUs to read afresh."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from ctypes import c_void_p, cast
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pynvml

from gfd.errors import DiscoveryError
from gfd.logs import Once
from gfd.readers.failure import CallFailed
from gfd.readers.freshness import Changes
from gfd.readers.nvmlcall import (
    ABSENT,
    LOST,
    binding,
    decoded,
    end_session,
    nvml_call,
    optional,
    start_session,
)

log = logging.getLogger(__name__)

EVENT_TYPES: Mapping[str, int] = MappingProxyType(
    {
        "mig-config-change": int(getattr(pynvml, "nvmlEventMigConfigChange", 0x0100)),
        "xid": int(getattr(pynvml, "nvmlEventTypeXidCriticalError", 0x0008)),
        "gpu-unavailable": int(getattr(pynvml, "nvmlEventTypeGpuUnavailableError", 0x4000)),
    }
)
"""The NVML event kinds gfd listens to, by name: the nvmlEventType bit of each (nvml.h's
values, used where an older binding lacks the constant)."""

_KINDS: Mapping[int, str] = MappingProxyType({bit: kind for kind, bit in EVENT_TYPES.items()})

_MAX_WAIT_MS = 0xFFFFFFFF
"""nvmlEventSetWait_v2 takes its timeout as a C unsigned int of milliseconds."""


@dataclass(frozen=True, slots=True)
class NvmlEvent:
    """One NVML event of a kind gfd listens to."""

    kind: str
    """A key of EVENT_TYPES."""
    gpu_uuid: str
    """The GPU's UUID; "" when the event names a device that was not registered."""
    gpu_index: int | None
    """The GPU's NVML index when the set was opened; None with an unknown device."""
    data: int
    """NVML's eventData: the Xid number of an "xid" event, else 0."""


class _SetSpoiled(Exception):
    """nvmlDeviceRegisterEvents answered UNKNOWN: nvml.h says the set is then in an
    undefined state and must be freed (internal)."""

    def __init__(self, index: int, failed: CallFailed) -> None:
        super().__init__(index)
        self.index = index
        self.failed = failed


def _address(handle: Any) -> int:
    """A device handle as a number: what identifies the device an event names."""
    return int(cast(handle, c_void_p).value or 0)


class NvmlEvents:
    """Its own NVML session (nvmlInit is refcounted, so it coexists with NvmlReader's) and one
    event set with every GPU registered for the kinds of EVENT_TYPES it supports.

    Used from one dedicated thread: ``open()``, then ``wait()`` in a loop, then ``close()``,
    all from that thread (NVML does not define freeing a set another thread waits on: stop
    the thread by letting ``wait()`` time out). An NvmlReader may read the GPUs in another
    thread meanwhile; a wait holds no lock of gfd's or of the binding while it blocks."""

    def __init__(self, changes: Changes | None = None) -> None:
        self._changes = changes if changes is not None else Changes()
        """Where events are told to the reader that made this set."""
        self._initialised = False
        self._set: Any = None
        self._gpus: dict[int, tuple[int, str]] = {}
        """Device handle address -> (index, uuid), from registration."""
        self._reported = Once(log)

    def __enter__(self) -> NvmlEvents:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def open(self) -> dict[str, frozenset[str]]:
        """Start a session and register each GPU for the kinds it supports; returns GPU uuid
        -> kinds registered (an empty set for a GPU that supports none, answers an error, or
        is lost; a GPU whose handle or UUID cannot be had is left out; {} without GPUs or when
        the driver has no event sets). Opening again closes the previous set first.

        Raises NvmlInitError when NVML cannot start, DiscoveryError (one line) when the GPUs
        cannot be counted or the event set cannot be created; nothing stays open then."""
        self.close()
        start_session()
        self._initialised = True
        try:
            return self._open()
        except CallFailed as failed:
            self.close()
            raise DiscoveryError(failed.describe()) from failed.error

    def wait(self, timeout: float) -> NvmlEvent | None:
        """The next event, waiting up to ``timeout`` seconds for it; None when none came (NVML's
        TIMEOUT, which a signal also ends early with). Raises DiscoveryError (one line) for any
        other NVML error (GPU_IS_LOST...), or before ``open()``; the set stays open."""
        if not self._initialised:
            raise DiscoveryError("NVML events: wait() called before open()")
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            data = self._wait_once(deadline - time.monotonic())
            if data is None:
                return None
            event = self._event(data)
            if event is not None:
                return event

    def close(self) -> None:
        """Free the event set and end the session; idempotent, never raises."""
        if self._set is not None:
            self._free_set()
        self._gpus = {}
        if self._initialised:
            self._initialised = False
            end_session()

    # -- registration -------------------------------------------------------------

    def _open(self) -> dict[str, frozenset[str]]:
        count = int(nvml_call(pynvml.nvmlDeviceGetCount))
        skip: set[int] = set()
        while True:  # ends: each retry leaves one more GPU out
            try:
                return self._register_all(count, skip)
            except _SetSpoiled as spoiled:
                self._free_set()
                skip.add(spoiled.index)
                self._not_registered(spoiled.index, spoiled.failed)

    def _register_all(self, count: int, skip: set[int]) -> dict[str, frozenset[str]]:
        self._set = optional(pynvml.nvmlEventSetCreate)
        if self._set is None:
            self._reported.warning("NVML events are not supported by this driver "
                                   "(nvmlEventSetCreate): no GPU is listened to")
            return {}
        registered: dict[str, frozenset[str]] = {}
        for index in range(count):
            found = self._register(index, allowed=index not in skip)
            if found is not None:
                registered[found[0]] = found[1]
        return registered

    def _register(self, index: int, *, allowed: bool) -> tuple[str, frozenset[str]] | None:
        """(uuid, kinds registered) for GPU ``index``; None when it has no handle or UUID."""
        try:
            handle = nvml_call(pynvml.nvmlDeviceGetHandleByIndex, index)
            uuid = decoded(nvml_call(pynvml.nvmlDeviceGetUUID, handle))
        except CallFailed as failed:
            self._not_registered(index, failed)
            return None
        self._gpus[_address(handle)] = (index, uuid)
        kinds = self._supported(index, handle) if allowed else frozenset()
        if not kinds:
            return uuid, kinds
        mask = 0
        for kind in kinds:
            mask |= EVENT_TYPES[kind]
        try:
            nvml_call(pynvml.nvmlDeviceRegisterEvents, handle, mask, self._set)
        except CallFailed as failed:
            if failed.code == pynvml.NVML_ERROR_UNKNOWN:
                raise _SetSpoiled(index, failed) from failed.error
            self._not_registered(index, failed)
            return uuid, frozenset()
        return uuid, kinds

    def _supported(self, index: int, handle: Any) -> frozenset[str]:
        """The kinds of EVENT_TYPES the GPU supports; none when it cannot say."""
        try:
            supported = int(nvml_call(pynvml.nvmlDeviceGetSupportedEventTypes, handle))
        except CallFailed as failed:
            self._not_registered(index, failed)
            return frozenset()
        return frozenset(kind for kind, bit in EVENT_TYPES.items() if supported & bit)

    def _not_registered(self, index: int, failed: CallFailed) -> None:
        """Say once why GPU ``index`` is not listened to; quietly when it lacks the feature or
        is lost (the next read reports a lost GPU)."""
        failed.gpu = index
        if failed.code in ABSENT or failed.code in LOST:
            log.debug("no NVML events: %s", failed.describe())
            return
        self._reported.warning("%s: its NVML events are not listened to", failed.describe())

    def _free_set(self) -> None:
        try:
            pynvml.nvmlEventSetFree(self._set)
        except pynvml.NVMLError as exc:
            log.debug("nvmlEventSetFree failed (ignored): %s", exc)
        self._set = None
        self._gpus = {}

    # -- waiting ------------------------------------------------------------------

    def _wait_once(self, seconds: float) -> Any:
        """nvmlEventSetWait_v2's event data, or None on TIMEOUT; without a set, a sleep."""
        if self._set is None:
            time.sleep(max(seconds, 0.0))
            return None
        ms = min(max(math.ceil(seconds * 1000), 0), _MAX_WAIT_MS)
        try:
            return nvml_call(binding("nvmlEventSetWait_v2"), self._set, ms)
        except CallFailed as failed:
            if failed.code == pynvml.NVML_ERROR_TIMEOUT:
                return None
            raise DiscoveryError(failed.describe()) from failed.error

    def _event(self, data: Any) -> NvmlEvent | None:
        kind = _KINDS.get(int(data.eventType))
        if kind is None:
            log.debug("NVML event of an unregistered type %#x ignored", int(data.eventType))
            return None
        index, uuid = self._gpus.get(_address(data.device), (None, ""))
        self._changes.changed(uuid)
        return NvmlEvent(kind=kind, gpu_uuid=uuid, gpu_index=index, data=int(data.eventData))


__all__ = ["EVENT_TYPES", "NvmlEvent", "NvmlEvents"]
