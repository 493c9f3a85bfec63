"""The image's locked dependencies and pyproject.toml's declared ranges agree.

requirements.lock (written by ``.ci/lock`` from pyproject.toml) is what the Dockerfile
installs, with ``pip --require-hashes --no-deps``: every declared dependency must be pinned
there, inside its declared range, by hash, and nothing may be pinned for gfd that
pyproject.toml no longer declares. ``.ci/floors.py`` turns the declared floors into the
constraints CI installs to run the dependency tests at the lower bounds (.ci/run): each
floor is the exact lower bound, and every dependency has one.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest
from helpers.paths import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

LOCK = ROOT / "requirements.lock"
IMAGE_PYTHON = {"python_version": "3.11", "python_full_version": "3.11.13",
                "sys_platform": "linux", "platform_system": "Linux",
                "platform_machine": "x86_64", "implementation_name": "cpython",
                "platform_python_implementation": "CPython", "os_name": "posix"}


def declared() -> list[Requirement]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [Requirement(line) for line in pyproject["project"]["dependencies"]]


def locked() -> dict[str, tuple[Requirement, list[str], list[str]]]:
    """name -> (pin, its hashes, what it is there for), from the lock's entries."""
    entries: dict[str, tuple[Requirement, list[str], list[str]]] = {}
    current: str | None = None
    for line in LOCK.read_text().splitlines():
        text = line.strip()
        if not text:
            continue
        if not line.startswith((" ", "#")):
            pin = Requirement(text.rstrip("\\").strip())
            current = canonicalize_name(pin.name)
            entries[current] = (pin, [], [])
        elif current and text.startswith("--hash="):
            entries[current][1].append(text.split("=", 1)[1].rstrip("\\").strip())
        elif current and text.startswith("#"):
            via = text.lstrip("#").strip()
            entries[current][2].append(via.removeprefix("via").strip())
    return entries


def pinned_version(pin: Requirement) -> str:
    (spec,) = pin.specifier
    assert spec.operator == "==", f"{pin}: the lock pins exact versions"
    return spec.version


def test_every_declared_dependency_is_locked_inside_its_range() -> None:
    lock = locked()
    for req in declared():
        name = canonicalize_name(req.name)
        assert name in lock, f"{req.name} is declared but not locked: run .ci/lock"
        version = pinned_version(lock[name][0])
        assert req.specifier.contains(version, prereleases=True), (
            f"the lock pins {req.name}=={version}, outside pyproject.toml's {req}: run .ci/lock")


def test_nothing_is_locked_for_gfd_that_pyproject_no_longer_declares() -> None:
    names = {canonicalize_name(r.name) for r in declared()}
    for name, (_, _, via) in locked().items():
        if "gfd (pyproject.toml)" in via:
            assert name in names, f"the lock still pins {name} for gfd: run .ci/lock"


def test_every_locked_wheel_is_pinned_by_sha256_and_applies_to_the_image() -> None:
    lock = locked()
    assert len(lock) >= len(declared())
    for name, (pin, hashes, _) in lock.items():
        pinned_version(pin)
        assert hashes, f"{name} has no hash: the Dockerfile installs with --require-hashes"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name
    for_image = {n for n, (pin, _, _) in lock.items()
                 if pin.marker is None or pin.marker.evaluate(IMAGE_PYTHON)}
    assert {canonicalize_name(r.name) for r in declared()} <= for_image


def test_the_lock_says_how_to_refresh_it() -> None:
    assert "#    .ci/lock" in LOCK.read_text().splitlines()[1]


def test_the_dockerfile_installs_the_lock_with_hash_checking_then_gfd_alone() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"pip install [^\n]*--require-hashes --no-deps -r /tmp/requirements\.lock",
                     text)
    assert re.search(r"pip install [^\n]*--no-deps /dist/\*\.whl", text)
    assert "pip check" in text
    assert "!requirements.lock" in (ROOT / ".dockerignore").read_text().splitlines()


def floors() -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / ".ci" / "floors.py")],
                          capture_output=True, text=True, timeout=30, check=False)


def test_the_floors_are_the_declared_lower_bounds_of_every_dependency() -> None:
    result = floors()
    assert result.returncode == 0, result.stderr
    pins = {canonicalize_name(Requirement(line).name): pinned_version(Requirement(line))
            for line in result.stdout.split()}
    for req in declared():
        version = pins[canonicalize_name(req.name)]
        assert f">={version}" in {str(s) for s in req.specifier}, req
        assert req.specifier.contains(version), req
    assert len(pins) == len(declared())


@pytest.mark.parametrize("needs", ["kubernetes", "urllib3"])
def test_the_ranges_gfd_relies_on_internals_of_are_capped(needs: str) -> None:
    """gfd.kube calls the client generated since kubernetes 37 (param_serialize, call_api,
    response.response) and subclasses urllib3's pools (_get_conn, pool_classes_by_scheme):
    a new major release of either may change them, so each range ends before it."""
    (req,) = [r for r in declared() if canonicalize_name(r.name) == needs]
    assert any(s.operator == "<" for s in req.specifier), f"{req}: no ceiling"
