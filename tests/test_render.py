"""The output formats, as pure functions of their data: labels in every form, diff and
explain documents and their text, the devices table, and the start log's settings (one
short text line; every value as a JSON field)."""

from __future__ import annotations

import json
from dataclasses import replace

import yaml

from gfd import devices, dra, render
from gfd.config import TABLE, Settings
from gfd.labelers.base import Label
from gfd.labelers.catalog import describe
from gfd.readers.simulate import simulate
from gfd.sharing import SharedResource, Sharing
from gfd.sinks.base import diff
from gfd.snapshot import ResourceManager

LABELS = {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "4"}


def test_labels_are_sorted_in_every_form_and_the_documents_agree() -> None:
    assert render.labels(LABELS, "text") == ("nvidia.com/gpu.count=4\n"
                                             "nvidia.com/gpu.product=Tesla-T4\n")
    assert render.labels(LABELS, "name") == "nvidia.com/gpu.count\nnvidia.com/gpu.product\n"
    as_json, as_yaml = render.labels(LABELS, "json"), render.labels(LABELS, "yaml")
    assert json.loads(as_json) == yaml.safe_load(as_yaml) == LABELS
    assert list(json.loads(as_json)) == sorted(LABELS)
    assert yaml.safe_load(render.labels({"a/n": "8"}, "yaml")) == {"a/n": "8"}, "a string"


def test_several_documents_are_one_v1_list_and_one_is_itself() -> None:
    pod = {"kind": "Pod"}
    assert render.one([pod]) is pod
    assert render.one([pod, pod]) == {"apiVersion": "v1", "kind": "List", "items": [pod, pod]}


def test_a_diff_document_holds_each_difference_and_its_text_is_diffs_lines() -> None:
    current = {"a/kept": "1", "a/old": "x", "a/changed": "4"}
    wanted = {"a/kept": "1", "a/new": "y", "a/changed": "8"}
    doc = render.diff_document(current, wanted, diff(current, wanted), target="node")
    assert doc == {"target": "node", "inSync": False, "added": {"a/new": "y"},
                   "changed": {"a/changed": {"from": "4", "to": "8"}},
                   "removed": {"a/old": "x"}}
    assert render.diff_text(doc) == "+ a/new=y\n~ a/changed: 4 -> 8\n- a/old=x\n"
    same = render.diff_document(current, current, diff(current, current), target="file")
    assert same["inSync"] is True and render.diff_text(same) == "" and "features" not in same


def test_a_diff_at_the_nodefeature_adds_its_feature_elements_and_their_drift() -> None:
    labels = {"a/kept": "1"}
    stored = {"nvidia.gpu[0].memory": "40960", "nvidia.gpu[1].memory": "40960"}
    wanted = {"nvidia.gpu[0].memory": "81920"}
    drift = diff(stored, wanted)
    doc = render.diff_document(labels, labels, diff(labels, labels), target="nodefeature",
                               features=(stored, wanted, drift))
    assert doc["inSync"] is False and doc["added"] == {} and doc["features"] == {
        "added": {}, "changed": {"nvidia.gpu[0].memory": {"from": "40960", "to": "81920"}},
        "removed": {"nvidia.gpu[1].memory": "40960"}}
    assert render.diff_text(doc) == ("~ feature nvidia.gpu[0].memory: 40960 -> 81920\n"
                                     "- feature nvidia.gpu[1].memory=40960\n")
    synced = render.diff_document(labels, labels, diff(labels, labels), target="nodefeature",
                                  features=(wanted, wanted, diff(wanted, wanted)))
    assert synced["inSync"] is True


def test_the_explain_text_shows_each_part_of_the_document() -> None:
    doc = render.explain_document(
        "nvidia.com/gpu.product", Label(value="Tesla-T4-SHARED", source="nvmlDeviceGetName",
                                        raw="Tesla T4", rules=("spaces -> '-'", "+ -SHARED")),
        describe("nvidia.com/gpu.product"),
        ResourceManager(name="device-plugin", evidence="--resource-manager device-plugin"),
        "value too long", computed_in="gfd/labelers/gpu.py")
    assert json.loads(json.dumps(doc)) == doc
    lines = render.explain_text(doc).splitlines()
    assert lines[:5] == ["nvidia.com/gpu.product=Tesla-T4-SHARED",
                         "  source: nvmlDeviceGetName", "  raw:    Tesla T4",
                         "  rule 1: spaces -> '-'", "  rule 2: + -SHARED"]
    assert lines[5].startswith("  set:    ") and lines[5].endswith(" (computed in "
                                                                 "gfd/labelers/gpu.py)")
    assert lines[-2:] == ["  resource manager: device-plugin (--resource-manager "
                          "device-plugin)", "  NOT PUBLISHED: value too long"]


def test_the_devices_table_has_a_row_per_device_and_says_what_is_missing() -> None:
    doc = {"devices": [
        {"name": "gpu-0", "attributes": {"type": {"string": "gpu"},
                                         "productName": {"string": "NVIDIA A10"}},
         "capacity": {"memory": {"value": "23028Mi"}}},
        {"name": "gpu-1-mig-1g", "attributes": {"type": {"string": "mig"}},
         "missing": ["productName"]}]}
    lines = render.devices_text(doc).splitlines()
    assert lines[0].split() == ["NAME", "TYPE", "PRODUCT", "MEMORY"]
    assert lines[1].split() == ["gpu-0", "gpu", "NVIDIA", "A10", "23028Mi"]
    assert lines[2].split() == ["gpu-1-mig-1g", "mig", "-", "-"]
    assert lines[3] == "gpu-1-mig-1g: missing productName"
    assert lines[0].index("TYPE") == lines[1].index("gpu  ") == lines[2].index("mig  ")


def test_the_devices_table_shows_a_passthrough_devices_memory_its_addressable_memory() -> None:
    doc = devices.document(simulate("mixed-a100-a10").snapshot, {dra.PASSTHROUGH_SUPPORT: True})
    rows = {line.split()[0]: line.split() for line in render.devices_text(doc).splitlines()[1:]}
    assert rows["gpu-vfio-3"][1] == "vfio" and rows["gpu-vfio-3"][-1] == "64Gi"  # an A10's BARs
    assert rows["gpu-2"][-1] == "23028Mi" and "-" not in {r[-1] for r in rows.values()}


def test_the_devices_table_names_a_device_it_cannot_name_by_its_gpu() -> None:
    doc = {"devices": [{"gpu": 3, "attributes": {}, "capacity": {},
                        "missing": ["name (the minor number)"]}]}
    assert render.devices_text(doc).splitlines()[1:] == [
        "(GPU 3)   -      -         -", "(GPU 3): missing name (the minor number)"]


def test_the_start_line_names_the_sink_and_only_the_settings_not_at_their_default() -> None:
    settings = Settings(mig_strategy="mixed", output_file="-", sleep_interval=None)
    line = render.settings_line(settings)
    assert line == "sink file; --mig-strategy=mixed --output-file=- --sleep-interval=infinite"
    assert render.settings_line(Settings()) == ("sink file (/etc/kubernetes/node-feature-"
                                                "discovery/features.d/gfd); every setting at "
                                                "its default")
    gfd_defaults = replace(Settings(), label_set="compat")
    assert "--label-set" not in render.settings_line(gfd_defaults, gfd_defaults)
    assert len(render.settings_line(replace(settings, node_name="n1", sink="node"))) < 200


def test_the_start_fields_hold_every_setting_as_json_with_the_sharing_flattened() -> None:
    sharing = Sharing(strategy="time-slicing",
                      resources=(SharedResource(name="nvidia.com/gpu", replicas=4),))
    data = render.settings_fields(Settings(sharing=sharing))
    assert set(data) == {e.name for e in TABLE} | {"sharing"}
    assert json.loads(json.dumps(data))["sleep_interval"] == 60.0
    assert data["sharing"] == {"strategy": "time-slicing", "resources": {"nvidia.com/gpu": 4}}
