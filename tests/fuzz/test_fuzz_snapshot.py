"""Property tests: the snapshot JSON loader (``gfd labels --snapshot FILE``, bug reports).

Promises: a recorded snapshot (``--snapshot FILE.json``) replaces NVML, and ``gfd snapshot``
output fed back reproduces the labels; the loader's own contract (gfd.snapshot: "a clear
DiscoveryError on bad input"; "snapshots from files are untrusted"): any input gives a
Snapshot or a DiscoveryError, never another exception, its message on one line, and a valid
snapshot round-trips exactly.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz.checks import check_labelling
from fuzz.strategies import fuzz_settings, json_values, snapshots, texts
from gfd.errors import DiscoveryError
from gfd.labelers.options import LabelOptions
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.snapshot import Snapshot, load_snapshot

REAL = [simulate(name).snapshot for name in sorted(SIMULATIONS)]
REAL_DICTS = [s.to_dict() for s in REAL]
OPTIONS = (LabelOptions(), LabelOptions(mig_strategy="mixed"), LabelOptions(mig_strategy="single"))


def _load(text: str) -> Snapshot | None:
    """The snapshot, or None for a DiscoveryError (any other exception fails the test).

    The message is checked for content only: that it is one line is checked by
    test_unknown_field_names_cannot_break_the_error_message_into_lines below.
    """
    try:
        snap = load_snapshot(text, source="file:fuzz.json")
    except DiscoveryError as exc:
        assert str(exc).startswith("snapshot"), str(exc)
        return None
    assert isinstance(snap, Snapshot) and snap.source == "file:fuzz.json"
    return snap


@pytest.mark.parametrize("snapshot", REAL, ids=sorted(SIMULATIONS))
def test_every_simulated_snapshot_round_trips_exactly(snapshot: Snapshot) -> None:
    """``gfd snapshot`` fed back with ``--snapshot``: to_json then load_snapshot
    gives back an equal Snapshot, field for field."""
    assert load_snapshot(snapshot.to_json(), source=snapshot.source) == snapshot


@fuzz_settings(150)
@given(snapshots)
def test_any_built_snapshot_round_trips_exactly(snapshot: Snapshot) -> None:
    """Any well-typed snapshot (arbitrary strings, huge integers, nested MIG devices,
    fabric, vGPU) survives to_json -> load_snapshot unchanged."""
    assert load_snapshot(snapshot.to_json(), source=snapshot.source) == snapshot
    assert Snapshot.from_dict(json.loads(json.dumps(snapshot.to_dict()))) == snapshot


@fuzz_settings(200)
@given(json_values)
@example({})
@example({"schema": 2})
@example({"schema": None, "gpus": None})
@example({"gpus": [{}]})
@example({"gpus": [{"index": True}]})
@example({"gpus": [{"index": 0, "compute_capability": [8, True]}]})
@example({"gpus": [{"index": 0, "mig_devices": [{"index": "0"}]}]})
@example({"gpus": [{"index": 0, "fabric": {"state": 1}}]})
@example({"vgpu": []})
@example({"__class__": 1})
def test_any_json_value_is_a_snapshot_or_a_discovery_error(value: Any) -> None:
    """gfd.snapshot contract: any JSON value gives a Snapshot or a DiscoveryError."""
    snap = _load(json.dumps(value))
    if snap is not None:
        check_labelling(snap, LabelOptions(mig_strategy="mixed"))


@fuzz_settings(200)
@given(texts)
@example("")
@example("NaN")
@example('{"gpus": [' + "1" * 5000 + "]}")
@example('{"driver_version": "\\ud800"}')
def test_any_text_is_a_snapshot_or_a_discovery_error(text: str) -> None:
    """gfd.snapshot contract: any file content (not JSON, broken JSON) gives a Snapshot or a
    DiscoveryError, never another exception."""
    _load(text)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside a JSON document."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out.extend(_paths(v, (*prefix, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out.extend(_paths(v, (*prefix, i)))
    return out


def _mutate(document: dict[str, Any], choices: random.Random, replacements: list[Any]) -> Any:
    """Replace or delete a few values (or keys) anywhere in a copy of the document."""
    doc: Any = copy.deepcopy(document)
    for replacement in replacements:
        paths = [p for p in _paths(doc) if p]
        if not paths:
            return replacement
        path = choices.choice(paths)
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        action = choices.random()
        if action < 0.3:
            del parent[path[-1]]
        elif action < 0.4 and isinstance(parent, dict):
            parent[f"{path[-1]}_x"] = replacement  # an unknown field beside a known one
        else:
            parent[path[-1]] = replacement
    return doc


@fuzz_settings(200)
@given(st.sampled_from(range(len(REAL_DICTS))), st.integers(0, 2**32),
       st.lists(json_values, min_size=1, max_size=3))
def test_mutated_real_snapshots_are_a_snapshot_or_a_discovery_error(
        which: int, seed: int, replacements: list[Any]) -> None:
    """gfd.snapshot contract on near-valid input: a real snapshot (every built-in simulation)
    with fields replaced by any JSON value, deleted, or joined by unknown ones loads or fails
    with a DiscoveryError; when it loads, it round-trips, and labelling it (as `gfd labels
    --snapshot` does) never crashes nor emits an invalid label."""
    mutated = _mutate(REAL_DICTS[which], random.Random(seed), replacements)
    snap = _load(json.dumps(mutated))
    if snap is not None:
        assert load_snapshot(snap.to_json(), source=snap.source) == snap
        for options in OPTIONS:  # `gfd labels --snapshot FILE` end to end
            check_labelling(snap, options)


def test_deeply_nested_json_is_a_discovery_error() -> None:
    """gfd.snapshot contract ("a clear DiscoveryError on bad input"; files are untrusted):
    100 000 nested arrays are bad input like any other."""
    with pytest.raises(DiscoveryError):
        load_snapshot("[" * 100_000 + "]" * 100_000, source="file:deep.json")


@pytest.mark.parametrize("key", ["a\nb", "\x850", "\x1e0", "x\u2028y"])
def test_unknown_field_names_cannot_break_the_error_message_into_lines(key: str) -> None:
    """Messages are one line naming the problem: an unknown field whose name holds
    a line break is still reported on one line (e.g. quoted with repr, as configfile does)."""
    with pytest.raises(DiscoveryError) as err:
        load_snapshot(json.dumps({key: 1}), source="file:bad.json")
    assert len(str(err.value).splitlines()) == 1, repr(str(err.value))
