"""Trigger: every watcher in gfd fires one of the documented sources, and the metrics know
each source from the start."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers.paths import ROOT

from gfd.metrics import Metrics
from gfd.triggers import SOURCES, Trigger


def _fired_sources() -> dict[str, str]:
    """source value -> the module that builds a Trigger with it, from gfd's source code."""
    found = {}
    for path in sorted((ROOT / "gfd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", "")
            if name == "died":  # triggers.died(source, ...): a watcher's death
                assert node.args and isinstance(node.args[0], ast.Constant), path
                found[node.args[0].value] = str(Path(path).relative_to(ROOT))
            elif name == "Trigger":
                for keyword in node.keywords:
                    if keyword.arg == "source":
                        if path.name == "triggers.py":
                            continue  # died() passes its own argument on
                        assert isinstance(keyword.value, ast.Constant), path
                        found[keyword.value.value] = str(Path(path).relative_to(ROOT))
    return found


def test_every_trigger_gfd_fires_has_a_documented_source() -> None:
    fired = _fired_sources()
    assert fired, "gfd fires triggers"
    assert set(fired) <= set(SOURCES), fired


def test_a_trigger_defaults_to_no_action_and_no_config_read() -> None:
    trigger = Trigger(source="nvml", kind="xid", at=1.0)
    assert trigger.action is None and not trigger.reload_config


def test_the_repair_counter_starts_at_zero_for_the_sources_that_repair() -> None:
    text = Metrics(version="test").render().decode()
    for target in ("output", "api"):
        assert f'gfd_drift_repairs_total{{target="{target}"}} 0.0' in text


def test_every_watcher_reports_its_death_under_its_own_source() -> None:
    """Each watcher's thread (NVML events, the config file, the feature file, the object
    watch) reports a death the loop counts: ``died(<its source>, ...)`` is in gfd's code."""
    died_sources = set()
    for path in sorted((ROOT / "gfd").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "died"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                died_sources.add(node.args[0].value)
    assert died_sources == set(SOURCES)
