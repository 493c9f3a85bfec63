"""Python side of the fake libcuda.so.1 (the Tegra back end's library): build it, describe
machines, load it.

- ``build_library(out_dir)`` compiles ``cuda/fake_cuda.c`` against the real cuda.h (wheel
  ``nvidia-cuda-runtime-cu12``) into ``out_dir/libcuda.so.1``; ``no_v2=True`` builds the
  variant without ``cuDeviceTotalMem_v2`` / ``cuDeviceGetUuid_v2`` (an old driver).
- ``CudaMachine`` / ``CudaGpu`` describe a machine; ``CudaMachine.write(path)`` writes the
  profile file the library reads from ``$FAKE_CUDA_PROFILE`` at every ``cuInit``.
- ``FakeCuda(path)`` opens the library in this process for its counters and reset hook
  (the reader under test opens the same file, so they share one copy);
  ``subprocess_env(...)`` gives a child process's environment (LD_LIBRARY_PATH).

Profile format: see ``parse_line`` in fake_cuda.c.
"""

from __future__ import annotations

import ctypes
import os
import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .cbuild import compile_library, include_dir

SONAME = "libcuda.so.1"
SOURCE = Path(__file__).parent / "cuda" / "fake_cuda.c"
HEADER_DIR_ENV = "FAKE_CUDA_INCLUDE_DIR"
"""Optional override: a directory holding cuda.h."""
PROFILE_ENV = "FAKE_CUDA_PROFILE"

_NAMESPACE = uuidlib.UUID("1f0c3b0e-5d0b-4c55-8b7e-2a6f4c1d9e30")


def cuda_include_dir() -> Path:
    """The directory of the real cuda.h, from the nvidia-cuda-runtime-cu12 wheel."""
    return include_dir("cuda.h", HEADER_DIR_ENV, "nvidia-cuda-runtime-cu12")


def build_library(out_dir: Path, *, no_v2: bool = False) -> Path:
    """Compile the fake into ``out_dir/libcuda.so.1`` and return its path."""
    return compile_library(SOURCE, SONAME, out_dir, include=cuda_include_dir(),
                           what="fake CUDA library",
                           flags=["-Wextra", *(["-DFAKE_CUDA_NO_V2"] if no_v2 else [])])


class FakeCuda:
    """The fake opened in this process, with its test hooks."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        self.lib.fake_cuda_init_count.restype = ctypes.c_ulong
        self.lib.fake_cuda_call_count.restype = ctypes.c_ulong
        self.lib.fake_cuda_call_count.argtypes = [ctypes.c_char_p]

    def init_count(self) -> int:
        """Successful cuInit calls since the last reset."""
        return int(self.lib.fake_cuda_init_count())

    def call_count(self, symbol: str | None = None) -> int:
        """Calls of ``symbol`` (every CUDA call when None) since the last reset."""
        return int(self.lib.fake_cuda_call_count(symbol.encode() if symbol else None))

    def reset(self) -> None:
        """Forget the session and the counters (as a new process would start)."""
        self.lib.fake_cuda_reset()


def subprocess_env(lib_dir: Path | None, profile: Path | None,
                   base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a child process using the fake in ``lib_dir`` (None: no libcuda)."""
    env = dict(os.environ if base is None else base)
    env.pop("LD_LIBRARY_PATH", None)
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = str(lib_dir)
    if profile is not None:
        env[PROFILE_ENV] = str(profile)
    return env


# ----------------------------------------------------------------------------- machines


def gpu_uuid(seed: str, index: int) -> str:
    """The deterministic UUID the builder gives device ``index`` of machine ``seed``."""
    return f"GPU-{uuidlib.uuid5(_NAMESPACE, f'{seed}/cuda/{index}')}"


@dataclass
class CudaGpu:
    """One device as libcuda reports it."""

    name: str
    memory_bytes: int
    compute: tuple[int, int]
    uuid: str | None = None
    """``GPU-<uuid>``; None: derived from the machine's seed."""
    fail: dict[str, str] = field(default_factory=dict)
    """Forced errors for this device: symbol -> ``CUDA_ERROR_...``."""


@dataclass
class CudaMachine:
    gpus: list[CudaGpu] = field(default_factory=list)
    driver_version: int = 12020
    """cuDriverGetVersion: ``1000 * major + 10 * minor``."""
    init_error: str | None = None
    """``CUDA_ERROR_...`` that cuInit returns."""
    fail: dict[str, str] = field(default_factory=dict)
    """Forced errors for every call of a symbol: symbol -> ``CUDA_ERROR_...``."""
    seed: str = "tegra"

    def uuids(self) -> list[str]:
        return [g.uuid or gpu_uuid(self.seed, i) for i, g in enumerate(self.gpus)]

    def lines(self) -> list[str]:
        out = ["fake-cuda 1", f"driver_version {self.driver_version}"]
        if self.init_error:
            out.append(f"init_error {self.init_error}")
        out.extend(f"fail {symbol} {error}" for symbol, error in self.fail.items())
        for gpu, uuid in zip(self.gpus, self.uuids(), strict=True):
            out += ["gpu", f"name {gpu.name}", f"memory {gpu.memory_bytes}",
                    f"cc {gpu.compute[0]} {gpu.compute[1]}",
                    f"uuid {uuidlib.UUID(uuid.removeprefix('GPU-')).hex}"]
            out.extend(f"fail {symbol} {error}" for symbol, error in gpu.fail.items())
        return out

    def write(self, path: Path) -> Path:
        path.write_text("\n".join(self.lines()) + "\n")
        return path


# Recorded devices: name and total memory as deviceQuery prints them on the board
# (cuDeviceGetName / cuDeviceTotalMem_v2 -- the CUDA name has no "(nvgpu)", which only
# NVML's name carries), compute capability 8.7 for every Orin module.
ORIN_AGX_64GB_BYTES = 65893089280
"""Jetson AGX Orin 64GB: deviceQuery "62841 MBytes (65893089280 bytes)"; floored 62840 MiB."""
ORIN_NANO_8GB_BYTES = 7987728384
"""Jetson Orin Nano 8GB: deviceQuery "7618 MBytes (7987728384 bytes)"; floored 7617 MiB."""


def jetson_agx_orin(*, driver_version: int = 12020) -> CudaMachine:
    """A Jetson AGX Orin 64GB on JetPack 6.0 (CUDA 12.2: cuDriverGetVersion 12020)."""
    gpu = CudaGpu(name="Orin", memory_bytes=ORIN_AGX_64GB_BYTES, compute=(8, 7))
    return CudaMachine(gpus=[gpu], driver_version=driver_version, seed="agx-orin")


def jetson_orin_nano(*, driver_version: int = 12060) -> CudaMachine:
    """A Jetson Orin Nano 8GB on JetPack 6.1 (CUDA 12.6: cuDriverGetVersion 12060)."""
    gpu = CudaGpu(name="Orin", memory_bytes=ORIN_NANO_8GB_BYTES, compute=(8, 7))
    return CudaMachine(gpus=[gpu], driver_version=driver_version, seed="orin-nano")


def no_device() -> CudaMachine:
    """libcuda present, but cuInit finds no GPU (device nodes not mounted)."""
    return CudaMachine(init_error="CUDA_ERROR_NO_DEVICE")
