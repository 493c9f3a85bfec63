"""The image under test, once per session: ``GFD_IMAGE`` when CI (.ci/run) already built it,
else built here by ``.ci/image``. Where podman cannot be had this tier skips with one line,
or fails where ``GFD_REQUIRE_IMAGE`` is set (CI sets it)."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import NoReturn

import pytest
from helpers.paths import ROOT


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("GFD_REQUIRE_IMAGE"):
        pytest.fail(f"the image tier is required here (GFD_REQUIRE_IMAGE): {reason}")
    pytest.skip(f"image tier: {reason}")


@pytest.fixture(scope="session")
def image() -> str:
    if shutil.which("podman") is None:
        unavailable("no podman on PATH (apt-get install podman runc)")
    name = os.environ.get("GFD_IMAGE")
    if not name:
        if os.geteuid() != 0 or shutil.which("debootstrap") is None:
            unavailable("no image given (GFD_IMAGE) and none can be built here "
                        "(.ci/image needs root and debootstrap)")
        built = subprocess.run([str(ROOT / ".ci" / "image")], capture_output=True, text=True,
                               timeout=900, check=False)
        if built.returncode != 0:
            unavailable(f".ci/image failed: {built.stderr.strip().splitlines()[-1:]}")
        name = built.stdout.split()[-1]
    found = subprocess.run(["podman", "image", "exists", name], capture_output=True,
                           timeout=60, check=False)
    if found.returncode != 0:
        unavailable(f"no image {name} in podman's storage")
    return name
