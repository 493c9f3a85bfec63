"""Building the fake C libraries (fake NVML, fake CUDA): find the real header a fake is
compiled against, and compile one source file into a shared library with its soname."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path


def include_dir(header: str, env: str, wheel: str) -> Path:
    """The directory holding the real ``header`` from an ``nvidia-*`` wheel (``$env``
    overrides it); a clear error naming the wheel when it is missing."""
    override = os.environ.get(env)
    candidates: list[Path] = [Path(override)] if override else []
    spec = importlib.util.find_spec("nvidia")
    if spec is not None:
        for root in spec.submodule_search_locations or ():
            candidates.extend(sorted(Path(root).glob("*/include")))
            candidates.append(Path(root) / "include")
    for directory in candidates:
        if (directory / header).is_file():
            return directory
    raise RuntimeError(
        f"{header} not found: install the test extras (pip install -e '.[test]', which "
        f"brings the {wheel} wheel) or set {env} to a directory holding {header}"
    )


def compile_library(source: Path, soname: str, out_dir: Path, *, include: Path,
                    what: str, flags: Sequence[str] = ()) -> Path:
    """Compile ``source`` into ``out_dir/<soname>`` (warnings are errors) and return its
    path; ``what`` names the library in errors."""
    compiler = shutil.which(os.environ.get("CC", "gcc"))
    if compiler is None:
        raise RuntimeError(f"no C compiler (gcc) on PATH: the {what} cannot be built")
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / soname
    command = [compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-pthread",
               f"-Wl,-soname,{soname}", f"-I{include}", *flags, "-o", str(target), str(source)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"building the {what} failed:\n{result.stderr}")
    return target
