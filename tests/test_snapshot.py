"""The data model: a Snapshot round-trips through JSON and YAML exactly, and
``load_snapshot`` refuses what is not one (wrong types, unknown fields, unknown back ends,
other schemas, YAML aliases) with a one-line DiscoveryError naming the field. (Property
tests of the same: tests/fuzz.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from gfd.errors import DiscoveryError
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.snapshot import (
    BACKENDS,
    SCHEMA_VERSION,
    Fabric,
    GiProfile,
    Gpu,
    MigDevice,
    Placement,
    Snapshot,
    Vgpu,
    load_snapshot,
)

RICH = Snapshot(
    driver_version="550.54.15", cuda_driver_version=12040, machine_type="DGX H100\n",
    vgpu=Vgpu(present=True, host_driver_version="550.54.16", host_driver_branch="r550_40"),
    source="nvml", backend="nvml",
    gpus=(
        Gpu(index=0, uuid="GPU-0", name="NVIDIA A100-SXM4-40GB", memory_total_bytes=42949672960,
            compute_capability=(8, 0), architecture="ampere", brand="nvidia",
            pci_bus_id="00000000:18:00.0", pci_class="0x030200", mig_capable=True,
            mig_enabled=True, mig_pending_enabled=False, compute_mode="default",
            nvlink_active=True, timeslice="default", power_limits_mw=(100000, 400000),
            fabric=Fabric(state="completed", status_ok=True,
                          cluster_uuid="7b968a6d-c8aa-45e1-9e07-e1e51be99c31", clique_id=1),
            mig_devices=(MigDevice(index=0, uuid="MIG-0", gpu_instance_id=1,
                                   compute_instance_id=0, profile_name="MIG 1g.5gb",
                                   memory_mib=4864, multiprocessors=14, gi_slices=1,
                                   ci_slices=1, copy_engines=1),),
            addressing_mode="HMM",
            mig_profiles=(GiProfile(index=7, id=20, name="MIG 1g.5gb+me", slices=1,
                                    memory_mib=4864, multiprocessors=14, copy_engines=1,
                                    decoders=1, jpegs=1, ofas=1,
                                    placements=(Placement(start=0, size=1),
                                                Placement(start=6, size=1))),)),
        Gpu(index=1, error="GPU is lost"),
    ))


def document(**changes: Any) -> dict[str, Any]:
    """RICH as parsed JSON, with top-level fields replaced (None values are kept as null)."""
    data = json.loads(RICH.to_json())
    data.update(changes)
    return data


def gpu_document(**changes: Any) -> dict[str, Any]:
    """RICH as parsed JSON with fields of its first GPU replaced."""
    data = json.loads(RICH.to_json())
    data["gpus"][0].update(changes)
    return data


def refusal(data: Any) -> str:
    with pytest.raises(DiscoveryError) as caught:
        load_snapshot(json.dumps(data), source="test")
    message = str(caught.value)
    assert "\n" not in message
    return message


# ----------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_every_simulated_machine_round_trips_through_json(name: str) -> None:
    snap = simulate(name).snapshot
    assert Snapshot.from_json(snap.to_json()) == snap


def test_a_snapshot_with_every_field_set_round_trips_through_json() -> None:
    assert Snapshot.from_json(RICH.to_json()) == RICH
    assert load_snapshot(RICH.to_json(), source="nvml") == RICH


def test_json_carries_the_schema_sorted_keys_and_lists_for_tuples() -> None:
    text = RICH.to_json()
    data = json.loads(text)
    assert data["schema"] == SCHEMA_VERSION
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"
    assert data["gpus"][0]["compute_capability"] == [8, 0]
    assert data["gpus"][0]["power_limits_mw"] == [100000, 400000]
    assert isinstance(data["gpus"][0]["mig_devices"], list)


def test_a_document_without_a_schema_is_read_as_this_schema() -> None:
    data = document()
    del data["schema"]
    assert Snapshot.from_dict(data) == RICH


def test_load_snapshot_records_where_the_snapshot_came_from() -> None:
    assert load_snapshot(RICH.to_json(), source="file:/tmp/x.json").source == "file:/tmp/x.json"
    assert load_snapshot(RICH.to_json(), source="file:/tmp/x.json").recorded
    assert load_snapshot(RICH.to_json(), source="stdin").recorded
    assert not RICH.recorded and not simulate("hgx-h100").snapshot.recorded


def test_mig_profiles_tell_a_gpu_that_offers_none_from_one_not_read() -> None:
    """``[]``: NVML was asked and offered no profile; ``null``, or no field at all (a snapshot
    recorded before gfd read them): not read. Each round-trips as itself."""
    offers_none, unread = gpu_document(mig_profiles=[]), gpu_document(mig_profiles=None)
    assert load_snapshot(json.dumps(offers_none), source="test").gpus[0].mig_profiles == ()
    assert load_snapshot(json.dumps(unread), source="test").gpus[0].mig_profiles is None
    old = gpu_document()
    del old["gpus"][0]["mig_profiles"]
    loaded = load_snapshot(json.dumps(old), source="test")
    assert loaded.gpus[0].mig_profiles is None and loaded.gpus[1].mig_profiles is None
    for data in (offers_none, unread):
        snap = Snapshot.from_dict(data)
        assert Snapshot.from_json(snap.to_json()) == snap
        assert Snapshot.from_text(yaml.safe_dump(snap.to_dict())) == snap


# ----------------------------------------------------------------------------- refusals

REFUSALS = [
    ("not-an-object", [1, 2],
     "expected a JSON object (a YAML mapping) at the top level, got a list"),
    ("other-schema", document(schema=2), "schema 2 is not supported (this gfd reads 1)"),
    ("unknown-top-field", document(colour="red"), "snapshot: unknown field(s) 'colour'"),
    ("unknown-gpu-field", gpu_document(colour="red"), "snapshot.gpus[0]: unknown field(s)"),
    ("gpus-null", document(gpus=None), "snapshot.gpus: must not be null"),
    ("gpus-not-a-list", document(gpus={"0": {}}), "snapshot.gpus: expected a list"),
    ("gpu-not-an-object", document(gpus=[3]), "snapshot.gpus[0]: expected an object, got int"),
    ("gpu-without-index", document(gpus=[{"name": "x"}]), "snapshot.gpus[0]:"),
    ("capability-one-number", gpu_document(compute_capability=[8]),
     "snapshot.gpus[0].compute_capability: expected [major, minor] integers"),
    ("capability-text", gpu_document(compute_capability=[8, "0"]), "expected [major, minor]"),
    ("capability-boolean", gpu_document(compute_capability=[True, 0]), "expected [major, minor]"),
    ("power-one-number", gpu_document(power_limits_mw=[100000]),
     "snapshot.gpus[0].power_limits_mw: expected [min, max] integers"),
    ("power-text", gpu_document(power_limits_mw=["100 W", "400 W"]), "power_limits_mw: expected"),
    ("index-as-text", gpu_document(index="0"), "snapshot.gpus[0].index: expected int, got '0'"),
    ("memory-as-boolean", gpu_document(memory_total_bytes=True),
     "snapshot.gpus[0].memory_total_bytes: expected int | None, got True"),
    ("name-as-number", gpu_document(name=5), "snapshot.gpus[0].name: expected str, got 5"),
    ("flag-as-number", gpu_document(mig_capable=1), "snapshot.gpus[0].mig_capable: expected bool"),
    ("nvml-flag-as-text", document(nvml_available="yes"), "snapshot.nvml_available: expected bool"),
    ("mig-device-field", gpu_document(mig_devices=[{"index": 0, "memory_mib": "4864"}]),
     "snapshot.gpus[0].mig_devices[0].memory_mib: expected int"),
    ("fabric-field", gpu_document(fabric={"state": "completed", "status_ok": True,
                                          "cluster_uuid": "x", "clique_id": "1"}),
     "snapshot.gpus[0].fabric.clique_id: expected int"),
    ("vgpu-field", document(vgpu={"present": "no"}), "snapshot.vgpu.present: expected bool"),
    ("addressing-mode", gpu_document(addressing_mode="NVLINK"),
     "snapshot: GPU 0: addressing_mode 'NVLINK' is not one of None, HMM, ATS"),
    ("placement-field", gpu_document(mig_profiles=[{"index": 0, "id": 19, "placements": [
        {"start": "0", "size": 1}]}]),
     "snapshot.gpus[0].mig_profiles[0].placements[0].start: expected int"),
    ("unknown-backend", document(backend="cuda"),
     "snapshot.backend: must be one of nvml, tegra, vfio, got 'cuda'"),
]


@pytest.mark.parametrize("data, message", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_load_snapshot_refuses_what_is_not_a_snapshot(data: Any, message: str) -> None:
    assert message in refusal(data)


BIG = "x" * 1_500_000
HOSTILE = [
    ("huge-schema", document(schema=BIG)),
    ("huge-schema-list", document(schema=[[BIG] * 10] * 10)),
    ("huge-name", gpu_document(name=[BIG])),
    ("huge-index", gpu_document(index=BIG)),
    ("huge-backend", document(backend=BIG)),
    ("huge-fact", gpu_document(degraded=[{"fact": BIG, "held": True}])),
    ("many-unknown-fields", document(**{f"f{n}": 1 for n in range(100_000)})),
    ("huge-unknown-field", document(**{BIG: 1})),
]


@pytest.mark.parametrize("data", [h[1] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_a_hostile_snapshot_is_refused_in_one_short_line(data: Any) -> None:
    """A recorded snapshot is untrusted input: the refusal quotes it, within a line."""
    message = refusal(data)
    assert message.startswith("snapshot") and "\n" not in message
    assert len(message) < 600, len(message)


@pytest.mark.parametrize("text", ["{", "[" * 100_000, ' {"gpus": []'],
                         ids=["truncated", "too-deep", "unclosed"])
def test_text_that_starts_as_json_and_is_not_is_a_discovery_error(text: str) -> None:
    with pytest.raises(DiscoveryError, match="snapshot: not valid JSON"):
        load_snapshot(text, source="test")


# ----------------------------------------------------------------------------- YAML


def as_yaml(snapshot: Snapshot) -> str:
    """What ``gfd snapshot -o yaml`` prints: the JSON document dumped as block YAML."""
    return yaml.safe_dump(json.loads(snapshot.to_json()), sort_keys=False)


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_every_simulated_machine_round_trips_through_yaml(name: str) -> None:
    snap = simulate(name).snapshot
    text = as_yaml(snap)
    assert not text.lstrip().startswith(("{", "[")), "block YAML, told apart from JSON"
    assert Snapshot.from_text(text) == snap == Snapshot.from_text(snap.to_json())


def test_a_snapshot_with_every_field_set_round_trips_through_yaml() -> None:
    assert load_snapshot(as_yaml(RICH), source="nvml") == RICH


YAML_REFUSALS = [
    ("empty", "", "snapshot: empty, so not a snapshot"),
    ("blank", " \n\n", "snapshot: empty, so not a snapshot"),
    ("words", "not a snapshot\n", "at the top level, got a string"),
    ("null", "~\n", "at the top level, got nothing (null)"),
    ("list", "- gpus: []\n", "at the top level, got a list"),
    ("broken", "gpus: [\n", "snapshot: not valid YAML (nor JSON): "),
    ("tab-indent", "gpus:\n\t- index: 0\n", "snapshot: not valid YAML (nor JSON): "),
    ("alias", "gpus: &g []\nbackend: nvml\nx: *g\n", "line 3: a YAML alias"),
    ("twice", "gpus: []\nbackend: nvml\ngpus: []\n", "line 3: key 'gpus' is given twice"),
    ("deep", "a: " + "[" * 5000 + "]" * 5000 + "\n", "snapshot"),
    ("unquoted-version", "driver_version: 550.54\ngpus: []\n",
     "snapshot.driver_version: expected str | None, got 550.54"),
    ("date", "gpus: []\nmachine_type: 2024-01-01\n", "snapshot.machine_type: expected str"),
    ("missing-index", "gpus:\n- {}\n", "snapshot.gpus[0]: missing field(s) 'index'"),
    ("unknown", "gpus: []\ncolour: blue\n", "snapshot: unknown field(s) 'colour'"),
]


@pytest.mark.parametrize("text, message", [r[1:] for r in YAML_REFUSALS],
                         ids=[r[0] for r in YAML_REFUSALS])
def test_yaml_that_is_not_a_snapshot_is_refused_in_one_line_naming_the_field(
        text: str, message: str) -> None:
    with pytest.raises(DiscoveryError) as caught:
        load_snapshot(text, source="test")
    assert message in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


@pytest.mark.parametrize("field", ["vgpu", "machine_type", "driver_version"])
def test_unknown_facts_may_be_null(field: str) -> None:
    assert getattr(load_snapshot(json.dumps(document(**{field: None})), source="t"), field) is None


@pytest.mark.parametrize("field", ["fabric", "compute_capability", "memory_total_bytes",
                                   "mig_pending_enabled", "nvlink_active", "power_limits_mw"])
def test_unknown_gpu_facts_may_be_null(field: str) -> None:
    snap = load_snapshot(json.dumps(gpu_document(**{field: None})), source="t")
    assert getattr(snap.gpus[0], field) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_gpu_back_end_is_accepted(backend: str) -> None:
    assert load_snapshot(json.dumps(document(backend=backend)), source="t").backend == backend


# ----------------------------------------------------------------------------- Gpu.memory_mib

MEMORY = [
    ("unknown", None, None),
    ("zero", 0, 0),
    ("just-under-one-mib", 2**20 - 1, 0),
    ("a100-40gb", 42949672960, 40960),
    ("h100-80gb-floors", 85520809984, 81559),
]


@pytest.mark.parametrize("total, mib", [m[1:] for m in MEMORY], ids=[m[0] for m in MEMORY])
def test_memory_mib_is_bytes_floored_to_mebibytes(total: int | None, mib: int | None) -> None:
    assert Gpu(index=0, memory_total_bytes=total).memory_mib == mib
