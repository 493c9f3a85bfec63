"""``--no-vgpu-labels`` as a real process with the least privilege docs/privileges.md names:
uid 65532, no capability at all (every set empty, no new privileges), writing the feature
file into a features.d that belongs to root with group 65532 and mode 1775 (what the
manifests' init container sets). It publishes every label but the vgpu.* ones.

The test runs as root, so each run starts in a private mount namespace (where /root, mode
0700 on this machine, is replaced by a 0755 tmpfs holding the Python installation, so that
uid 65532 can run it), then drops to 65532 with ``setpriv`` before exec. The process runs
the base interpreter on a copy of gfd and of what it imports, in a directory every user may
read, as the image holds its installed copy: it depends on nothing of the checkout's place
(a clone inside a directory only root may enter, as ``mktemp -d`` makes, works too)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import profiles
from fakes.fakenvml import subprocess_env
from fakes.pods import unavailable
from fakes.sysfs import gpu_tree

from gfd.sinks.featurefile import parse

UID = GID = 65532
# setpriv: the user, its one group, and no capability in any set, as a pod with
# runAsUser/runAsGroup 65532, capabilities drop ALL and allowPrivilegeEscalation false.
DROP = ["setpriv", f"--reuid={UID}", f"--regid={GID}", f"--groups={GID}",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
# In the private mount namespace: make the Python under /root reachable, then drop.
STAGE = """set -e
mount --make-rprivate /
mkdir -p "$STAGE/root"
mount --rbind /root "$STAGE/root"
mount -t tmpfs -o mode=0755 tmpfs /root
for entry in "$STAGE"/root/.[!.]* "$STAGE"/root/*; do
  [ -e "$entry" ] || continue
  name=$(basename "$entry")
  if [ -d "$entry" ]; then mkdir "/root/$name"; else touch "/root/$name"; fi
  mount --rbind "$entry" "/root/$name"
done
chmod 0700 /root/* /root/.[!.]* 2>/dev/null || true
chmod 0755 /root/.pyenv
exec "$@"
"""


RUNS = ("gfd", "pynvml", "click", "yaml")
"""What the unprivileged gfd imports besides the standard library (the image installs them):
copied where uid 65532 can read them, wherever the checkout and its virtual environment are."""


def python() -> str:
    """The base interpreter (a virtual environment's may sit inside the checkout)."""
    version = sys.version_info
    base = Path(sys.base_prefix) / "bin" / f"python{version.major}.{version.minor}"
    return str(base) if base.exists() else os.path.realpath(sys.executable)


def readable_copy(site: Path) -> Path:
    """``RUNS`` copied into ``site``, every file and directory readable by all."""
    site.mkdir()
    for name in RUNS:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        if spec.submodule_search_locations:  # a package: its whole tree (data files too)
            shutil.copytree(next(iter(spec.submodule_search_locations)), site / name,
                            ignore=shutil.ignore_patterns("__pycache__"),
                            copy_function=shutil.copyfile)
        else:
            shutil.copyfile(spec.origin, site / Path(spec.origin).name)
    for path in [site, *site.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return site


@pytest.fixture
def world(fake_nvml_lib: Path) -> Iterator[Path]:
    """A directory every user may read (pytest's tmp directories are root's alone): the fake
    NVML in ``lib``, gfd and what it imports in ``site``."""
    if reason := unavailable():
        pytest.skip(reason)
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv here")
    path = Path(tempfile.mkdtemp(prefix="gfd-unprivileged-"))
    path.chmod(0o755)
    shutil.copytree(fake_nvml_lib, path / "lib", copy_function=shutil.copyfile)
    (path / "lib").chmod(0o755)
    readable_copy(path / "site")
    try:
        yield path
    finally:
        shutil.rmtree(path)


def features_d(world: Path) -> Path:
    """features.d as the init container leaves it: root's, group 65532, mode 1775."""
    directory = world / "features.d"
    directory.mkdir()
    os.chown(directory, 0, GID)
    directory.chmod(0o1775)
    return directory


def unprivileged(world: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` as uid 65532 without a capability, on the copy in ``world/site``
    (``-P``: not on the checkout the working directory may be, nor the user's site)."""
    stage = world / "stage"
    stage.mkdir(exist_ok=True)
    return subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", STAGE, "stage",
         *DROP, python(), "-s", "-P", *args], capture_output=True, text=True, timeout=60,
        check=False, cwd=world, env=env | {"STAGE": str(stage), "HOME": "/nonexistent",
                   "PYTHONPATH": str(world / "site"), "PYTHONDONTWRITEBYTECODE": "1"})


def test_the_wrapper_leaves_uid_65532_with_no_capability(world: Path) -> None:
    result = unprivileged(world, "-c", "import gfd; print(gfd.__file__); "
                          "print(open('/proc/self/status').read())", env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == str(world / "site" / "gfd" / "__init__.py")
    status = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    assert status["Uid"].split() == [str(UID)] * 4 and status["Gid"].split() == [str(GID)] * 4
    assert status["Groups"].split() == [str(GID)]
    for capset in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[capset], 16) == 0, capset
    assert status["NoNewPrivs"].strip() == "1"


def test_no_vgpu_labels_runs_unprivileged_and_publishes_every_other_label(world: Path) -> None:
    machine = profiles.t4x4()
    profile = machine.write(world / "profile.txt")
    sysfs = gpu_tree(world / "sys", [g.pci_bus_id for g in machine.resolve()],
                     vgpu=("550.54.16", "r550_40"))
    for config in sysfs.glob("bus/pci/devices/*/config"):
        config.chmod(0o600)  # root's alone, as the kernel keeps all but 64 bytes
    dmi = world / "product_name"
    dmi.write_text("g4dn.12xlarge\n")
    env = subprocess_env(world / "lib", profile)
    common = ["--oneshot", "--no-timestamp", "--sysfs-root", str(sysfs),
              "--machine-type-file", str(dmi)]

    # root with every privilege: the reference, vgpu.* included
    root_out = world / "root.labels"
    result = subprocess.run([sys.executable, "-m", "gfd", "run", *common, "-o", str(root_out)],
                            capture_output=True, text=True, timeout=60, check=False, env=env)
    assert result.returncode == 0, result.stderr
    everything, _ = parse(root_out.read_text())
    assert everything["nvidia.com/vgpu.present"] == "true"

    directory = features_d(world)
    out = directory / "gfd"
    result = unprivileged(world, "-m", "gfd", "run", *common, "--no-vgpu-labels", "-o",
                          str(out), env=env)
    assert result.returncode == 0, result.stderr
    assert "vgpu:" not in result.stderr and "WARNING" not in result.stderr, result.stderr
    assert out.stat().st_uid == UID and (out.stat().st_mode & 0o777) == 0o644
    assert parse(out.read_text())[0] == {k: v for k, v in everything.items()
                                      if not k.startswith("nvidia.com/vgpu.")}
    assert sorted(p.name for p in directory.iterdir()) == ["gfd"]


def test_without_the_flag_an_unprivileged_scan_says_why_vgpu_labels_are_missing(
        world: Path) -> None:
    machine = profiles.t4x4()
    profile = machine.write(world / "profile.txt")
    sysfs = gpu_tree(world / "sys", [g.pci_bus_id for g in machine.resolve()])
    for config in sysfs.glob("bus/pci/devices/*/config"):
        config.chmod(0o600)
    result = unprivileged(world, "-m", "gfd", "labels", "--sysfs-root", str(sysfs),
                          env=subprocess_env(world / "lib", profile))
    assert result.returncode == 0, result.stderr
    assert "vgpu: cannot read PCI configuration space" in result.stderr
    assert "nvidia.com/vgpu.present" not in result.stdout
    assert "nvidia.com/gpu.count=4" in result.stdout.splitlines()
