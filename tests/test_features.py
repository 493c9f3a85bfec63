"""The NodeFeature's spec.features: one nvidia.gpu instance per GPU, one nvidia.mig instance
per MIG device, the driver's attributes; written from hand-built snapshots by the rules in
gfd/features.py's docstring, never guessed where a fact is unknown."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.builders import (
    A10,
    A10_BYTES,
    A100_1G5,
    A100_80,
    A100_80_BYTES,
    gpu,
    labels,
    mig_gpu,
    migs,
    snapshot,
    unknown,
)

from gfd.features import (
    FEATURES,
    DriverFeature,
    Features,
    GpuFeature,
    MigFeature,
    flatten,
    node_features,
)
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.snapshot import Gpu, Snapshot


def gpus(features: dict) -> list[dict[str, str]]:
    return [e["attributes"] for e in features["instances"]["nvidia.gpu"]["elements"]]


def test_a_mixed_node_has_one_instance_per_gpu_with_its_own_facts() -> None:
    snap = snapshot(gpu(0, A100_80, A100_80_BYTES, (8, 0)), gpu(1, A10, A10_BYTES, (8, 6)))
    got = gpus(node_features(snap).to_api())
    assert [g["product"] for g in got] == ["NVIDIA-A100-80GB-PCIe", "NVIDIA-A10"]
    assert [g["name"] for g in got] == [A100_80, A10]
    assert [g["memory"] for g in got] == [str(A100_80_BYTES // 2**20), str(A10_BYTES // 2**20)]
    assert [g["compute"] for g in got] == ["8.0", "8.6"]
    assert [g["family"] for g in got] == ["ampere", "ampere"]
    assert [g["index"] for g in got] == ["0", "1"]
    assert all(g["uuid"] for g in got)


def test_mig_mode_is_enabled_disabled_or_unsupported() -> None:
    snap = snapshot(mig_gpu(0, migs(1, **A100_1G5)), gpu(1, mig_capable=True),
                    gpu(2, A10, A10_BYTES, (8, 6)))
    assert [g["mig"] for g in gpus(node_features(snap).to_api())] == ["enabled", "disabled",
                                                             "unsupported"]


def test_each_mig_device_is_an_instance_naming_its_parent() -> None:
    snap = snapshot(gpu(0, A10, A10_BYTES, (8, 6)), mig_gpu(1, migs(2, **A100_1G5)))
    elements = node_features(snap).to_api()["instances"]["nvidia.mig"]["elements"]
    assert [e["attributes"]["parent"] for e in elements] == ["1", "1"]
    assert {e["attributes"]["profile"] for e in elements} == {"1g.5gb"}
    assert {e["attributes"]["memory"] for e in elements} == {"4864"}
    assert {e["attributes"]["multiprocessors"] for e in elements} == {"14"}


def test_the_driver_attributes_are_its_version_and_cuda_major_minor() -> None:
    features = node_features(snapshot(gpu(0), driver="550.54.15", cuda=12040)).to_api()
    assert features["attributes"] == {"nvidia.driver": {"elements": {
        "version": "550.54.15", "cuda": "12.4"}}}


def test_an_unknown_fact_is_left_out_not_guessed() -> None:
    lost = gpu(0, memory=None, cc=None, degraded=unknown("mig_mode"))
    got = gpus(node_features(snapshot(lost)).to_api())[0]
    assert not {"memory", "compute", "family", "mig"} & got.keys()


def test_no_gpu_or_no_nvml_means_no_instances() -> None:
    assert node_features(snapshot()).to_api()["instances"] == {}
    down = Snapshot(nvml_available=False, gpus=(gpu(0),))
    assert node_features(down).to_api() == {"attributes": {}, "flags": {}, "instances": {}}


def test_every_simulated_machine_writes_only_documented_elements() -> None:
    documented = {(feature, element) for feature, element, _ in FEATURES}
    for name in SIMULATIONS:
        features = node_features(simulate(name).snapshot).to_api()
        for feature, value in features["instances"].items():
            for element in value["elements"]:
                assert all(v and isinstance(v, str) for v in element["attributes"].values())
                assert {(feature, k) for k in element["attributes"]} <= documented, name
        for feature, value in features["attributes"].items():
            assert {(feature, k) for k in value["elements"]} <= documented, name


def test_every_feature_element_is_documented() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "features.md").read_text()
    for feature, element, meaning in FEATURES:
        assert f"| `{feature}` | `{element}` | {meaning} |" in doc


TEGRA = Gpu(index=0, uuid="GPU-0", name="Orin", memory_total_bytes=65893089280,
            compute_capability=(8, 7))


@pytest.mark.parametrize("cuda", [12020, 12060, 12100, 12120, 13000])
@pytest.mark.parametrize("backend", ["nvml", "tegra"])
def test_the_driver_cuda_agrees_with_the_cuda_labels_on_every_back_end(cuda: int,
                                                                       backend: str) -> None:
    # On a Tegra libcuda's version is split with GFD's rule, minor = (v % 100) / 10: 12100
    # is 12.0 there and 12.10 under NVML's rule; the feature says what the labels say.
    snap = snapshot(TEGRA if backend == "tegra" else gpu(0), cuda=cuda, backend=backend,
                    driver=None if backend == "tegra" else "550.54.15")
    want = labels(snap)["cuda.runtime-version.full"]
    assert node_features(snap).driver.cuda == want
    assert node_features(snap).to_api()["attributes"]["nvidia.driver"]["elements"]["cuda"] == want


# ----------------------------------------------------------------------------- typed, flat


def test_the_features_are_typed_records_of_the_snapshot() -> None:
    snap = snapshot(gpu(0, A100_80, A100_80_BYTES, (8, 0)), mig_gpu(1, migs(1, **A100_1G5)))
    features = node_features(snap)
    assert isinstance(features, Features)
    first = features.gpus[0]
    assert isinstance(first, GpuFeature)
    assert (first.index, first.memory, first.family, first.compute, first.mig) == (
        0, A100_80_BYTES // 2**20, "ampere", "8.0", "unsupported")
    [slice_] = features.migs
    assert isinstance(slice_, MigFeature)
    assert (slice_.parent, slice_.profile, slice_.memory) == (1, "1g.5gb", 4864)
    assert features.driver == DriverFeature(version="550.54.15", cuda="12.4")


def test_an_unknown_typed_fact_is_none_and_absent_from_the_api_form() -> None:
    unknown_memory = gpu(0, memory=None, degraded=unknown("memory"))
    [record] = node_features(snapshot(unknown_memory, driver=None, cuda=None)).gpus
    assert record.memory is None
    assert "memory" not in record.elements()
    assert node_features(snapshot(unknown_memory, driver=None, cuda=None)).to_api()[
        "attributes"] == {}


def test_flat_names_an_element_by_its_gpus_index_or_its_mig_uuid() -> None:
    snap = snapshot(gpu(3), mig_gpu(5, migs(1, **A100_1G5)))
    flat = node_features(snap).flat()
    assert flat["nvidia.driver.cuda"] == "12.4"
    assert flat["nvidia.gpu[3].uuid"] == "GPU-00000003"
    assert flat["nvidia.gpu[5].mig"] == "enabled"
    [mig_uuid] = {k.split("[")[1].split("]")[0] for k in flat if k.startswith("nvidia.mig[")}
    assert flat[f"nvidia.mig[{mig_uuid}].parent"] == "5"
    assert len(flat) == sum(len(g.elements()) for g in node_features(snap).gpus) + 5 + 2


def test_flatten_reads_an_object_someone_else_edited() -> None:
    stored = {
        "attributes": {"nvidia.driver": {"elements": {"cuda": "12.4"}},
                       "example.other": {"elements": {"x": "1"}}},
        "flags": {"nvidia.flagged": {"elements": {"on": {}}}},
        "instances": {"nvidia.gpu": {"elements": [
            {"attributes": {"memory": "1"}}, {"attributes": {"memory": "2"}},
            {"attributes": {"index": "0"}}, {"attributes": {"index": "0", "memory": "3"}},
            "not an element"]}},
    }
    assert flatten(stored) == {
        "nvidia.driver.cuda": "12.4", "nvidia.flagged.on": "",
        "nvidia.gpu[#0].memory": "1", "nvidia.gpu[#1].memory": "2",
        "nvidia.gpu[0].index": "0",
        "nvidia.gpu[#3].index": "0", "nvidia.gpu[#3].memory": "3",  # a second index 0
    }
    assert flatten(None) == {} and flatten({"instances": []}) == {}
