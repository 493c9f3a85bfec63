"""Golden label files for the built-in simulated machines.

Each file under ``tests/data/golden/simulate/`` is named
``<machine>__<mig-strategy>__<label-set>.labels`` and holds the sorted ``key=value``
lines that ``gfd labels --simulate <machine> --no-timestamp`` must print under
``--resource-manager device-plugin``; a ``__dra`` suffix names the files for
``--resource-manager dra``, written by applying the dra rule (docs/labels.md) to the
machine's hand-derived device-plugin files. The lines
were derived by hand from the machine's inputs (``gfd/readers/simulate.py``) and the
rules (``docs/gfd-compatibility.md`` and gfd's own extended labels, ``docs/labels.md``),
never copied from the program's output. Lines starting with ``#`` are comments (each file names
the rule sections it was derived from).

A single changed, added or removed label fails the test with a line-by-line diff.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers.paths import DATA

from gfd.cli import cli
from gfd.readers.simulate import SIMULATIONS

GOLDEN_DIR = DATA / "golden" / "simulate"
GOLDEN_FILES = sorted(GOLDEN_DIR.glob("*.labels"))

# Every environment variable the CLI reads: unset them so the host cannot leak in.
_ENV_NAMES = (
    "GFD_ACCELERATOR_LABEL", "GFD_CONFIG_FILE", "CONFIG_FILE", "GFD_EXPIRY",
    "GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR", "GFD_LABEL_SET", "GFD_LOG_FORMAT",
    "GFD_LOG_LEVEL", "GFD_MACHINE_TYPE_FILE", "GFD_METRICS_PORT", "GFD_MIG_STRATEGY",
    "MIG_STRATEGY", "GFD_NO_TIMESTAMP", "GFD_NVIDIA_SMI", "GFD_ONESHOT", "GFD_OUTPUT_FILE",
    "GFD_RESYNC_INTERVAL", "GFD_SIMULATE", "GFD_SINK", "GFD_SLEEP_INTERVAL", "GFD_SNAPSHOT",
    "GFD_SYSFS_ROOT", "DEVICE_DISCOVERY_STRATEGY", "DRIVER_ROOT_CTR_PATH",
    "CONTAINER_DRIVER_ROOT", "GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API",
    "GFD_RESOURCE_MANAGER", "GFD_PLUGINS_REGISTRY",
)


def _expected_lines(path: Path) -> list[str]:
    return [
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]


def _parse_name(path: Path) -> tuple[str, str, str, str]:
    machine, strategy, label_set, *manager = path.stem.split("__")
    return machine, strategy, label_set, (manager or ["device-plugin"])[0]


def test_golden_files_exist() -> None:
    assert GOLDEN_FILES, f"no golden files under {GOLDEN_DIR}"


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.name for p in GOLDEN_FILES])
def test_golden_file_is_well_formed(path: Path) -> None:
    """Each golden file: a '# derived from:' header, then sorted unique key=value lines."""
    first = path.read_text(encoding="utf-8").splitlines()[0]
    assert first.startswith("# derived from:"), first
    lines = _expected_lines(path)
    keys = [line.split("=", 1)[0] for line in lines]
    assert all("=" in line for line in lines)
    assert keys == sorted(keys), "golden lines must be sorted by key"
    assert len(set(keys)) == len(keys), "duplicate keys"
    assert not any(k.endswith("gfd.timestamp") for k in keys)


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=[p.name for p in GOLDEN_FILES])
def test_simulated_machine_matches_golden_labels(path: Path) -> None:
    machine, strategy, label_set, manager = _parse_name(path)
    runner = CliRunner(env=dict.fromkeys(_ENV_NAMES))
    result = runner.invoke(
        cli,
        [
            "labels", "--simulate", machine, "--no-timestamp",
            "--mig-strategy", strategy, "--label-set", label_set,
            "--resource-manager", manager,
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    actual = [line for line in result.stdout.splitlines() if line.strip()]
    expected = _expected_lines(path)
    assert actual == expected


DEVICE_PLUGIN_KEYS = re.compile(
    r"nvidia\.com/(gpu\.replicas|gpu\.sharing-strategy|gpu\.memory\.per-replica|mig\.strategy"
    r"|mps\.capable|mig-.+)")
"""The labels that describe device-plugin resources (issue 19): never published under dra."""


def test_every_simulated_machine_has_a_dra_golden_file() -> None:
    covered = {_parse_name(p)[0] for p in GOLDEN_FILES if _parse_name(p)[3] == "dra"}
    assert covered == set(SIMULATIONS)


@pytest.mark.parametrize("path", [p for p in GOLDEN_FILES if _parse_name(p)[3] == "dra"],
                         ids=lambda p: p.name)
def test_dra_golden_file_has_gpu_present_and_no_device_plugin_label(path: Path) -> None:
    labels = dict(line.split("=", 1) for line in _expected_lines(path))
    assert not [k for k in labels if DEVICE_PLUGIN_KEYS.fullmatch(k)]
    assert not labels.get("nvidia.com/gpu.product", "").endswith("-SHARED")
    if _parse_name(path)[0] == "no-gpu":
        assert "nvidia.com/gpu.present" not in labels
    else:
        assert labels["nvidia.com/gpu.present"] == "true"
