"""NVML's MIG side of one GPU: its MIG devices (by slot, each with its profile name and GPU
instance placement), the check each read makes of whether they changed (``Layout``,
``unchanged``), and its profile tables (GPU-instance and compute-instance profiles, with the
GPU-instance profiles' possible placements), which are fixed by the model and driver and
kept until the reader's next full read."""

from __future__ import annotations

import logging
from ctypes import byref, c_uint
from dataclasses import dataclass
from typing import Any

import pynvml

from gfd.readers.failure import CallFailed
from gfd.readers.nvmlcall import (
    ABSENT,
    LOST,
    VERSION_MISMATCH,
    binding,
    decoded,
    nvml_call,
    nvml_failure,
    optional,
)
from gfd.snapshot import GiProfile, MigDevice, Placement

log = logging.getLogger(__name__)

_EMPTY_SLOT = frozenset({pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT})
"""nvmlDeviceGetMigDeviceHandleByIndex on a slot without a MIG device (as go-nvlib skips)."""

_NO_SUCH_PROFILE = frozenset({pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT})
"""A MIG profile index this GPU (or GPU instance) does not offer."""

Tables = dict[str, "ProfileTables"]
"""GPU uuid -> its MIG profile tables, until the next full read."""


@dataclass(frozen=True, slots=True)
class Layout:
    """A MIG-enabled GPU's MIG devices as one enumeration found them, and the MIG device
    handle in each of its slots (None: the slot was empty): what ``unchanged`` asks again."""

    devices: tuple[MigDevice, ...]
    handles: tuple[Any, ...]
    """One per slot (nvmlDeviceGetMaxMigDeviceCount of them)."""


def read_mig_layout(handle: Any, tables: ProfileTables) -> Layout:
    """The MIG devices of a MIG-enabled GPU, by slot (empty slots are skipped), with the
    handle of each slot's device."""
    try:
        count = int(optional(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle, default=0))
        names = _ProfileNames(handle, tables)
        devices = []
        handles: list[Any] = []
        for slot in range(count):
            try:
                mig = nvml_call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            except CallFailed as failed:
                if failed.code in _EMPTY_SLOT:
                    handles.append(None)
                    continue
                raise
            devices.append(_mig_device(slot, mig, names))
            handles.append(mig)
        return Layout(devices=tuple(devices), handles=tuple(handles))
    except CallFailed as failed:
        if failed.code == pynvml.NVML_ERROR_NO_PERMISSION:
            hint = RuntimeError(f"{failed.message}: reading MIG devices was refused; run the "
                                "container with NVIDIA_MIG_MONITOR_DEVICES=all and "
                                "CAP_SYS_ADMIN")
            raise nvml_failure(failed.call, hint, failed.code) from failed.error
        raise


def unchanged(handle: Any, layout: Layout) -> bool:
    """Whether the GPU's MIG devices are still those of ``layout``: a look at each empty slot
    (NOT_FOUND while it stays empty), and through the handle of each occupied one its UUID
    and attributes (two calls). NVML: a destroyed compute instance's handle is invalid, or
    reused with other properties. The UUID alone would not do: it follows from the GPU and
    the GPU and compute instance ids, and a new GPU instance of another profile can get the
    id of the one destroyed (3g.20gb and 4g.20gb share ids on an A100); the attributes (slices,
    memory, multiprocessors, engines) tell the profile. False at the first difference, and at
    any error but a lost GPU's (the full read that follows applies the error policy)."""
    devices = {d.index: d for d in layout.devices}
    for slot, mig in enumerate(layout.handles):
        try:
            if mig is None:
                nvml_call(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
                return False  # a device where there was none
            device = devices.get(slot)
            if device is None or decoded(nvml_call(pynvml.nvmlDeviceGetUUID, mig)) \
                    != device.uuid or _attributes(mig) != _attributes_of(device):
                return False
        except CallFailed as failed:
            if failed.code in LOST:
                raise
            if mig is None and failed.code in _EMPTY_SLOT:
                continue
            return False
    return True


_ATTRIBUTES = (("memory_mib", "memorySizeMB"), ("multiprocessors", "multiprocessorCount"),
               ("gi_slices", "gpuInstanceSliceCount"), ("ci_slices", "computeInstanceSliceCount"),
               ("copy_engines", "sharedCopyEngineCount"), ("decoders", "sharedDecoderCount"),
               ("encoders", "sharedEncoderCount"), ("jpegs", "sharedJpegCount"),
               ("ofas", "sharedOfaCount"))
"""MigDevice fields from nvmlDeviceGetAttributes_v2, by its struct's field names."""


def _attributes(mig: Any) -> dict[str, int]:
    """A MIG device's attributes as MigDevice fields (0 where the driver lacks the call)."""
    attrs = optional(binding("nvmlDeviceGetAttributes"), mig)
    return {field: int(getattr(attrs, name)) if attrs is not None else 0
            for field, name in _ATTRIBUTES}


def _attributes_of(device: MigDevice) -> dict[str, int]:
    return {field: int(getattr(device, field)) for field, _ in _ATTRIBUTES}


def _mig_device(slot: int, mig: Any, names: _ProfileNames) -> MigDevice:
    uuid = decoded(nvml_call(pynvml.nvmlDeviceGetUUID, mig))
    attributes = _attributes(mig)
    gi_id = optional(pynvml.nvmlDeviceGetGpuInstanceId, mig)
    ci_id = optional(pynvml.nvmlDeviceGetComputeInstanceId, mig)
    profile = ""
    if gi_id is not None and ci_id is not None:
        profile = names.name(int(gi_id), int(ci_id))
    placement = names.placement(int(gi_id)) if gi_id is not None else None
    return MigDevice(
        index=slot,
        uuid=uuid,
        gpu_instance_id=int(gi_id) if gi_id is not None else None,
        compute_instance_id=int(ci_id) if ci_id is not None else None,
        profile_name=profile,
        **attributes,
        gi_profile_id=placement[0] if placement else None,
        placement_start=placement[1] if placement else None,
        placement_size=placement[2] if placement else None,
    )


class ProfileTables:
    """One GPU's MIG profile tables: fixed by its model and driver, so they are read once per
    NVML session (a third of the calls of a DGX A100 read otherwise)."""

    def __init__(self) -> None:
        self.gi: dict[int, Any] | None = None
        self.ci: dict[int, dict[int, Any]] = {}
        self.profiles: tuple[GiProfile, ...] | None = None


def read_gi_profiles(handle: Any, tables: ProfileTables) -> tuple[GiProfile, ...]:
    """Every GPU instance profile of a MIG-capable GPU with its possible placements, whatever
    its MIG mode (nvmlDeviceGetGpuInstanceProfileInfoV, ..._PossiblePlacements_v2); a profile
    the GPU does not offer (NOT_SUPPORTED, INVALID_ARGUMENT) is skipped, as the DRA driver
    does. Read once per NVML session."""
    if tables.profiles is None:
        found = []
        for index in range(int(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            try:
                info, name = _gi_profile_info(handle, index)
                placements = _placements(handle, int(info.id))
            except CallFailed as failed:
                if failed.code in _NO_SUCH_PROFILE:
                    continue
                raise
            found.append(GiProfile(
                index=index, id=int(info.id), name=name, slices=int(info.sliceCount),
                memory_mib=int(info.memorySizeMB), multiprocessors=int(info.multiprocessorCount),
                copy_engines=int(info.copyEngineCount), decoders=int(info.decoderCount),
                encoders=int(info.encoderCount), jpegs=int(info.jpegCount),
                ofas=int(info.ofaCount), placements=placements))
        tables.profiles = tuple(found)
    return tables.profiles


def _gi_profile_info(handle: Any, index: int) -> tuple[Any, str]:
    """One GPU instance profile and its NVML name ("" on drivers without the V call)."""
    try:
        info = nvml_call(binding("nvmlDeviceGetGpuInstanceProfileInfoV"), handle, index)
        return info, decoded(info.name)
    except CallFailed as failed:
        if failed.code not in ABSENT and failed.code != VERSION_MISMATCH:
            raise
    return nvml_call(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, index, 1), ""


def _placements(handle: Any, profile_id: int) -> tuple[Placement, ...]:
    """nvmlDeviceGetGpuInstancePossiblePlacements_v2: asked for the count, then the list."""
    count = c_uint(0)
    possible = binding("nvmlDeviceGetGpuInstancePossiblePlacements")
    nvml_call(possible, handle, profile_id, None, byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    nvml_call(possible, handle, profile_id, array, byref(count))
    return tuple(Placement(start=int(p.start), size=int(p.size)) for p in array[:count.value])


class _ProfileNames:
    """NVML's MIG profile names for one parent GPU, from its (cached) profile tables.

    The name is the GPU-instance profile's (``MIG 1g.10gb+me``) when the compute
    instance spans the whole GPU instance, else the compute-instance profile's
    (``MIG 1c.3g.20gb``). Drivers without the named ("V") profile calls give "".
    """

    def __init__(self, parent: Any, tables: ProfileTables) -> None:
        self._parent = parent
        self._absent = False
        self._tables = tables
        self._instances: dict[int, tuple[Any, Any]] = {}
        """GPU instance id -> (its handle, nvmlGpuInstanceGetInfo), read once per read."""

    def _instance(self, gi_id: int) -> tuple[Any, Any]:
        found = self._instances.get(gi_id)
        if found is None:
            gpu_instance = nvml_call(pynvml.nvmlDeviceGetGpuInstanceById, self._parent, gi_id)
            found = (gpu_instance, nvml_call(pynvml.nvmlGpuInstanceGetInfo, gpu_instance))
            self._instances[gi_id] = found
        return found

    def placement(self, gi_id: int) -> tuple[int, int, int] | None:
        """(GPU instance profile id, placement start, placement size) of GPU instance
        ``gi_id``; None when the driver lacks the call."""
        try:
            _, info = self._instance(gi_id)
        except CallFailed as failed:
            if failed.code not in ABSENT:
                raise
            return None
        return int(info.profileId), int(info.placement.start), int(info.placement.size)

    def name(self, gi_id: int, ci_id: int) -> str:
        if self._absent:
            return ""
        try:
            return self._name(gi_id, ci_id)
        except CallFailed as failed:
            if failed.code not in ABSENT and failed.code != VERSION_MISMATCH:
                raise
            log.debug("MIG profile names unavailable: %s", failed.describe())
            self._absent = True
            return ""

    def _name(self, gi_id: int, ci_id: int) -> str:
        gpu_instance, gi_info = self._instance(gi_id)
        gi_profile_id = int(gi_info.profileId)
        gi_profile = self._gi_table().get(gi_profile_id)
        compute_instance = nvml_call(pynvml.nvmlGpuInstanceGetComputeInstanceById, gpu_instance,
                                     ci_id)
        ci_info = nvml_call(binding("nvmlComputeInstanceGetInfo"), compute_instance)
        ci_profile_id = int(ci_info.profileId)
        ci_profile = self._ci_table(gpu_instance, gi_profile_id).get(ci_profile_id)
        if gi_profile is None or ci_profile is None:
            return ""
        if int(ci_profile.sliceCount) == int(gi_profile.sliceCount):
            return decoded(gi_profile.name)
        return decoded(ci_profile.name)

    def _gi_table(self) -> dict[int, Any]:
        if self._tables.gi is None:
            get_info = binding("nvmlDeviceGetGpuInstanceProfileInfoV")
            table: dict[int, Any] = {}
            for profile_index in range(int(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)):
                try:
                    info = nvml_call(get_info, self._parent, profile_index)
                except CallFailed as failed:
                    if failed.code in _NO_SUCH_PROFILE:
                        continue
                    raise
                table[int(info.id)] = info
            self._tables.gi = table
        return self._tables.gi

    def _ci_table(self, gpu_instance: Any, gi_profile_id: int) -> dict[int, Any]:
        table = self._tables.ci.get(gi_profile_id)
        if table is None:
            get_info = binding("nvmlGpuInstanceGetComputeInstanceProfileInfoV")
            table = {}
            for profile_index in range(int(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT)):
                try:
                    info = nvml_call(
                        get_info,
                        gpu_instance,
                        profile_index,
                        pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                    )
                except CallFailed as failed:
                    if failed.code in _NO_SUCH_PROFILE:
                        continue
                    raise
                table[int(info.id)] = info
            self._tables.ci[gi_profile_id] = table
        return table


__all__ = ["Layout", "ProfileTables", "Tables", "read_gi_profiles", "read_mig_layout",
           "unchanged"]
