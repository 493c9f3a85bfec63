"""Wiring: the factories that build an agent's parts from settings, and what a reload
(`Factory.rebuild`) builds anew for each class of setting."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gfd.app import Factory
from gfd.config import Part, Settings
from gfd.errors import ConfigError

# ----------------------------------------------------------------------------- rebuild


class Tracked:
    """Stands in for a discovery or sink: records close()."""

    fail_on_init_error = True
    name = "tracked"

    def __init__(self) -> None:
        self.closed = False

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def running(tmp_path: Path) -> tuple[Factory, Settings]:
    settings = Settings(simulate="hgx-h100", output_file=str(tmp_path / "gfd"))
    return Factory(started=1, write=lambda text: None), settings


def value_for(part: Part) -> dict[str, object]:
    """One changed setting of each class."""
    return {
        Part.LABELS: {"mig_strategy": "mixed"},
        Part.DISCOVERY: {"machine_type_file": "/elsewhere"},
        Part.SINK: {"expiry": 60.0},
        Part.SCHEDULE: {"sleep_interval": 1.0},
    }[part]


@pytest.mark.parametrize("part, new_discovery, new_sink", [
    (Part.LABELS, False, False),
    (Part.DISCOVERY, True, False),
    (Part.SINK, False, True),
    (Part.SCHEDULE, False, False),
], ids=lambda v: v.value if isinstance(v, Part) else str(v))
def test_rebuild_builds_anew_only_what_the_change_affects(
        tmp_path: Path, part: Part, new_discovery: bool, new_sink: bool) -> None:
    factory, settings = running(tmp_path)
    current = factory.parts(settings)
    candidate = factory.rebuild(current, replace(settings, **value_for(part)))  # type: ignore[arg-type]
    assert (candidate.discovery is not current.discovery) is new_discovery
    assert (candidate.sink is not current.sink) is new_sink
    assert candidate.settings != current.settings and len(candidate.changes) == 1
    if part is Part.LABELS:
        assert candidate.options.mig_strategy == "mixed"


def test_rebuild_refuses_a_restart_only_setting(tmp_path: Path) -> None:
    factory, settings = running(tmp_path)
    current = factory.parts(settings)
    with pytest.raises(ConfigError, match=r"flags\.gfd\.oneshot cannot change while gfd runs"):
        factory.rebuild(current, replace(settings, oneshot=True))


def test_rebuild_closes_a_new_discovery_when_the_new_sink_cannot_be_built(
        tmp_path: Path) -> None:
    factory, settings = running(tmp_path)
    current = factory.parts(settings)
    bad = replace(settings, machine_type_file="/x", sink="node", node_name="")
    with pytest.raises(ConfigError, match="NODE_NAME"):
        factory.rebuild(current, bad)
