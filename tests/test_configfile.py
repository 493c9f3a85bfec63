"""The device-plugin config file v1: parsing, validation messages, sharing normalisation."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.configfiles import REFERENCE_FILE, ts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gfd.config import resolve
from gfd.configfile import (
    FileConfig,
    load_config_file,
    parse_config,
)
from gfd.errors import ConfigError
from gfd.sharing import SharedResource, Sharing

P = "/etc/gfd/config.yaml"
PREFIX = f"config file {P}: "
UUID = "b1028956-cfa2-0990-bf4a-5da9abb51763"

# Seed 001: the `any` key of the nvidia-device-plugin-config ConfigMap, comments included.
SEED_001 = """\
sharing:
  timeSlicing:
    # 共有GPUのリソース名は接頭尾に.sharedをつけるようにするオプション
    renameByDefault: true
    # 共有GPUを1つのコンテナに1より多く割り当てようとした場合のバリデーションをするかどうか
    failRequestsGreaterThanOne: true
    resources:
    # resources[*].name: 利用できるリソース名 (MIGでない場合は固定)
    - name: nvidia.com/gpu
      # resources[*].replicas: 1ノードあたりにアサインできるGPUの量
      replicas: 4
"""  # noqa: RUF001 - the seed's Japanese comments, verbatim


def parse(text: str) -> FileConfig:
    return parse_config(text, path=P)


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message
    return message


# --- every validation error: (id, document, field path, rule) -----------------------------

ERRORS = [
    ("version-v2", "version: v2", "version", "must be v1, got 'v2'"),
    ("version-number", "version: 1", "version", "must be v1, got 1"),
    ("flags-not-mapping", "flags: [1]", "flags", "must be a mapping, got a list: [1]"),
    ("mig-strategy", "flags: {migStrategy: bogus}", "flags.migStrategy",
     "must be one of none, single, mixed, got 'bogus'"),
    ("mig-strategy-number", "flags: {migStrategy: 3}", "flags.migStrategy",
     "must be one of none, single, mixed, got 3"),
    ("discovery-strategy", "flags: {deviceDiscoveryStrategy: cuda}",
     "flags.deviceDiscoveryStrategy", "must be one of auto, nvml, tegra, vfio, got 'cuda'"),
    ("fail-on-init-error", "flags: {failOnInitError: yes please}", "flags.failOnInitError",
     "must be a boolean, got 'yes please'"),
    ("fail-on-init-error-quoted-true", "flags: {failOnInitError: 'true'}",
     "flags.failOnInitError",
     "must be a boolean, got 'true' (write true or false without quotes)"),
    ("use-node-feature-api-number", "flags: {useNodeFeatureAPI: 1}", "flags.useNodeFeatureAPI",
     "must be a boolean, got 1"),
    ("plugin-only-bool", "flags: {gdsEnabled: x}", "flags.gdsEnabled",
     "must be a boolean, got 'x'"),
    ("plugin-only-string", "flags: {nvidiaDriverRoot: 5}", "flags.nvidiaDriverRoot",
     "must be a string, got a number: 5"),
    ("plugin-not-mapping", "flags: {plugin: 5}", "flags.plugin",
     "must be a mapping, got a number: 5"),
    ("gfd-not-mapping", "flags: {gfd: true}", "flags.gfd",
     "must be a mapping, got a boolean: True"),
    ("oneshot", "flags: {gfd: {oneshot: no way}}", "flags.gfd.oneshot",
     "must be a boolean, got 'no way'"),
    ("no-timestamp", "flags: {gfd: {noTimestamp: 0}}", "flags.gfd.noTimestamp",
     "must be a boolean, got 0"),
    ("sleep-interval-text", "flags: {gfd: {sleepInterval: soon}}", "flags.gfd.sleepInterval",
     "'soon' is not a duration (use Go syntax such as 10s, 1m30s, 1h, or infinite)"),
    ("sleep-interval-digit-string", "flags: {gfd: {sleepInterval: '60'}}",
     "flags.gfd.sleepInterval", "'60' has no unit (write e.g. 60s)"),
    ("sleep-interval-negative", "flags: {gfd: {sleepInterval: -5}}", "flags.gfd.sleepInterval",
     "must not be negative, got -5"),
    ("sleep-interval-bool", "flags: {gfd: {sleepInterval: true}}", "flags.gfd.sleepInterval",
     "must be a duration such as 60s or 1m30s, a number of nanoseconds, or infinite, got True"),
    ("sleep-interval-nan", "flags: {gfd: {sleepInterval: .nan}}", "flags.gfd.sleepInterval",
     "must be a duration such as 60s or 1m30s, a number of nanoseconds, or infinite, got nan"),
    ("sleep-interval-list", "flags: {gfd: {sleepInterval: [1]}}", "flags.gfd.sleepInterval",
     "must be a duration such as 60s or 1m30s, a number of nanoseconds, or infinite, got [1]"),
    ("output-file", "flags: {gfd: {outputFile: 5}}", "flags.gfd.outputFile",
     "must be a string, got a number: 5"),
    ("machine-type-file", "flags: {gfd: {machineTypeFile: [a]}}", "flags.gfd.machineTypeFile",
     "must be a string, got a list: ['a']"),
    ("resources-not-list", "resources: {gpus: x}", "resources.gpus",
     "must be a list, got a string: 'x'"),
    ("resources-missing-pattern", "resources: {gpus: [{name: gpu}]}",
     "resources.gpus[0].pattern", "required"),
    ("resources-bad-name", "resources: {mig: [{pattern: '*', name: 'A B'}]}",
     "resources.mig[0].name",
     "'A B' is not a valid resource name: the part after 'nvidia.com/' must be a DNS "
     "subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter "
     "or digit)"),
    ("sharing-not-mapping", "sharing: [timeSlicing]", "sharing",
     "must be a mapping, got a list: ['timeSlicing']"),
    ("section-unknown", "sharing: {timeSlicing: {replicas: 4}}", "sharing.timeSlicing.resources",
     "required: a non-empty list of {name, replicas}"),
    ("section-resources-missing", "sharing: {mps: {renameByDefault: true}}",
     "sharing.mps.resources", "required: a non-empty list of {name, replicas}"),
    ("section-resources-empty", "sharing: {timeSlicing: {resources: []}}",
     "sharing.timeSlicing.resources", "must be a non-empty list, got []"),
    ("section-resources-not-list", "sharing: {timeSlicing: {resources: {name: gpu}}}",
     "sharing.timeSlicing.resources", "must be a list, got a mapping: {'name': 'gpu'}"),
    ("rename-by-default", ts("{name: gpu, replicas: 2}", extra="renameByDefault: yes please, "),
     "sharing.timeSlicing.renameByDefault", "must be a boolean, got 'yes please'"),
    ("fail-requests", ts("{name: gpu, replicas: 2}", extra="failRequestsGreaterThanOne: 3, "),
     "sharing.timeSlicing.failRequestsGreaterThanOne", "must be a boolean, got 3"),
    ("entry-not-mapping", ts("gpu"), "sharing.timeSlicing.resources[0]",
     "must be a mapping, got a string: 'gpu'"),
    ("entry-unknown", ts("{name: gpu, replica: 4}", "mps"), "sharing.mps.resources[0].replicas",
     "required: an integer >= 2"),
    ("name-missing", ts("{replicas: 4}"), "sharing.timeSlicing.resources[0].name", "required"),
    ("name-not-string", ts("{name: 5, replicas: 4}"), "sharing.timeSlicing.resources[0].name",
     "must be a string, got a number: 5"),
    ("name-invalid", ts("{name: Bad_Name, replicas: 4}"),
     "sharing.timeSlicing.resources[0].name",
     "'Bad_Name' is not a valid resource name: the part after 'nvidia.com/' must be a DNS "
     "subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter "
     "or digit)"),
    ("name-other-domain", ts("{name: example.com/gpu, replicas: 4}"),
     "sharing.timeSlicing.resources[0].name",
     "'example.com/gpu' is not a valid resource name: the part after 'nvidia.com/' must be a "
     "DNS subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter "
     "or digit)"),
    ("name-too-long", ts("{name: " + "g" * 53 + ", replicas: 4}"),
     "sharing.timeSlicing.resources[0].name",
     f"'nvidia.com/{'g' * 53}' is too long: a full resource name must be at most 63 "
     "characters, got 64"),
    ("replicas-missing", ts("{name: gpu}"), "sharing.timeSlicing.resources[0].replicas",
     "required: an integer >= 2"),
    ("replicas-one", ts("{name: gpu, replicas: 1}"), "sharing.timeSlicing.resources[0].replicas",
     "must be >= 2, got 1"),
    ("replicas-zero-mps", ts("{name: gpu, replicas: 0}", "mps"),
     "sharing.mps.resources[0].replicas", "must be >= 2, got 0"),
    ("replicas-over-int64", ts("{name: gpu, replicas: 9223372036854775808}"),
     "sharing.timeSlicing.resources[0].replicas",
     "must be at most 9223372036854775807 (the device plugin's integer), got a number of 19 "
     "digits"),
    ("replicas-string", ts("{name: gpu, replicas: '4'}"),
     "sharing.timeSlicing.resources[0].replicas", "must be an integer >= 2, got a string: '4'"),
    ("replicas-float", ts("{name: gpu, replicas: 2.5}"),
     "sharing.timeSlicing.resources[0].replicas", "must be an integer >= 2, got a number: 2.5"),
    ("replicas-bool", ts("{name: gpu, replicas: true}"),
     "sharing.timeSlicing.resources[0].replicas",
     "must be an integer >= 2, got a boolean: True"),
    ("rename-invalid", ts("{name: gpu, replicas: 2, rename: 'Shared GPU'}"),
     "sharing.timeSlicing.resources[0].rename",
     "'Shared GPU' is not a valid resource name: the part after 'nvidia.com/' must be a DNS "
     "subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter "
     "or digit)"),
    ("devices-word", ts("{name: gpu, replicas: 2, devices: some}"),
     "sharing.timeSlicing.resources[0].devices",
     'must be "all", a count > 0, or a list of GPU indices, MIG indices (<gpu>:<mig>) or '
     "GPU/MIG UUIDs, got 'some'"),
    ("devices-zero", ts("{name: gpu, replicas: 2, devices: 0}"),
     "sharing.timeSlicing.resources[0].devices", "a count of devices must be > 0, got 0"),
    ("devices-bad-item", ts("{name: gpu, replicas: 2, devices: [0, GPU-xyz]}"),
     "sharing.timeSlicing.resources[0].devices[1]",
     "must be a GPU index, a MIG index <gpu>:<mig>, or a GPU/MIG UUID, got 'GPU-xyz'"),
    ("devices-negative-item", ts("{name: gpu, replicas: 2, devices: [-1]}"),
     "sharing.timeSlicing.resources[0].devices[0]",
     "must be a GPU index, a MIG index <gpu>:<mig>, or a GPU/MIG UUID, got -1"),
    ("devices-mapping", ts("{name: gpu, replicas: 2, devices: {all: true}}"),
     "sharing.timeSlicing.resources[0].devices",
     'must be "all", a count > 0, or a list of GPU indices, MIG indices (<gpu>:<mig>) or '
     "GPU/MIG UUIDs, got a mapping: {'all': True}"),
    ("imex-channel", "imex: {channelIDs: [-1]}", "imex.channelIDs[0]",
     "must be a non-negative integer, got -1"),
    ("imex-required", "imex: {required: maybe}", "imex.required",
     "must be a boolean, got 'maybe'"),
]


@pytest.mark.parametrize(("document", "field_path", "rule"),
                         [pytest.param(d, f, r, id=i) for i, d, f, r in ERRORS])
def test_validation_error(document: str, field_path: str, rule: str) -> None:
    assert error_of(document) == f"{PREFIX}{field_path}: {rule}"


# --- unknown fields: ignored with a warning naming them (GFD ignores them; one ConfigMap
# serves the device plugin's newer releases too), the rest of the file still applies -----

UNKNOWN_FIELDS = [
    ("unknown-top-level", "flagz: {}", "top level: unknown field ignored: flagz (did you mean "
     "flags?) (known: flags, imex, resources, sharing, version)"),
    ("unknown-top-level-odd-key", "? 3\n: x", "top level: unknown field ignored: 3 (known: "
     "flags, imex, resources, sharing, version)"),
    ("unknown-flag-wrong-case", "flags: {migstrategy: none}", "flags: unknown field ignored: "
     "migstrategy (did you mean migStrategy?) (known: deviceDiscoveryStrategy, failOnInitError, "
     "gdrcopyEnabled, gdsEnabled, gfd, migStrategy, mofedEnabled, mpsRoot, nvidiaDevRoot, "
     "nvidiaDriverRoot, plugin, restartOnDeviceUnhealthy, useNodeFeatureAPI)"),
    ("unknown-gfd-flag", "flags:\n  gfd:\n    sleepIntervall: 1s", "flags.gfd: unknown field "
     "ignored: sleepIntervall (did you mean sleepInterval?) (known: machineTypeFile, "
     "noTimestamp, oneshot, outputFile, resourceManager, sleepInterval)"),
    ("resources-unknown", "resources: {gpu: []}", "resources: unknown field ignored: gpu (did "
     "you mean gpus?) (known: gpus, mig)"),
    ("sharing-unknown", "sharing: {timeslicing: {}}", "sharing: unknown field ignored: "
     "timeslicing (did you mean timeSlicing?) (known: mps, timeSlicing)"),
    ("imex-unknown", "imex: {channelIds: [0]}", "imex: unknown field ignored: channelIds (did "
     "you mean channelIDs?) (known: channelIDs, required)"),
    ("newer-plugin", "flags: {migStrategy: mixed, someFutureFlag: true, plugin: {x: 1}}",
     "flags: unknown field ignored: someFutureFlag (known: deviceDiscoveryStrategy, "
     "failOnInitError, gdrcopyEnabled, gdsEnabled, gfd, migStrategy, mofedEnabled, mpsRoot, "
     "nvidiaDevRoot, nvidiaDriverRoot, plugin, restartOnDeviceUnhealthy, useNodeFeatureAPI)"),
]


@pytest.mark.parametrize(("document", "warning"),
                         [pytest.param(d, w, id=i) for i, d, w in UNKNOWN_FIELDS])
def test_an_unknown_field_is_a_warning_naming_it(document: str, warning: str) -> None:
    config = parse(document)
    assert config.warnings == (f"{PREFIX}{warning}",)


def test_known_fields_next_to_unknown_ones_still_apply() -> None:
    config = parse("flags: {migStrategy: mixed, someFutureFlag: true, gfd: {oneshot: true, "
                   "newer: 1}}\nsharing: {timeSlicing: {resources: [{name: gpu, replicas: 3, "
                   "extra: x}]}}")
    assert config.values == {"mig_strategy": "mixed", "oneshot": True}
    assert config.sharing.replicas("nvidia.com/gpu") == 3
    assert len(config.warnings) == 3


def test_an_invalid_value_of_a_known_field_next_to_an_unknown_one_is_still_an_error() -> None:
    assert error_of("flags: {someFutureFlag: 1, migStrategy: bogus}") == (
        f"{PREFIX}flags.migStrategy: must be one of none, single, mixed, got 'bogus'")


WHOLE_FILE_ERRORS = [
    ("top-level-list", "- a\n- b", "expected a mapping at the top level, got a list"),
    ("top-level-scalar", "hello", "expected a mapping at the top level, got a string"),
    ("duplicate-yaml-key", "flags: {}\nflags: {}",
     "line 2: duplicate key 'flags' (the later value would silently win)"),
    ("duplicate-json-key", '{"flags": {}, "flags": {}}',
     "duplicate key 'flags' (the later value would silently win)"),
]


@pytest.mark.parametrize(("document", "rule"),
                         [pytest.param(d, r, id=i) for i, d, r in WHOLE_FILE_ERRORS])
def test_whole_file_error(document: str, rule: str) -> None:
    assert error_of(document) == PREFIX + rule


@pytest.mark.parametrize("document", [
    pytest.param("flags: [", id="yaml-unclosed"),
    pytest.param("flags:\n\tgfd: {}", id="yaml-tab"),
    pytest.param('{"flags": {"migStrategy": "none"}', id="json-unclosed"),
    pytest.param("when: 2001-13-45", id="yaml-bad-date"),
    pytest.param("? [a]\n: 1", id="yaml-unhashable-key"),
    pytest.param("a: 1\n---\nb: 2", id="yaml-two-documents"),
    pytest.param("[" * 800 + "]" * 800, id="deep-nesting"),
])
def test_not_yaml_or_json(document: str) -> None:
    message = error_of(document)
    assert message.startswith(PREFIX + "not valid YAML or JSON: ")
    assert len(message) > len(PREFIX + "not valid YAML or JSON: ")


# --- files that parse --------------------------------------------------------------------


def test_reference_illustrative_file() -> None:
    config = parse(REFERENCE_FILE)
    assert config.path == P
    assert config.values == {
        "mig_strategy": "none",
        "fail_on_init_error": True,
        "oneshot": False,
        "no_timestamp": False,
        "sleep_interval": 60.0,
        "output_file": "/etc/kubernetes/node-feature-discovery/features.d/gfd",
        "machine_type_file": "/sys/class/dmi/id/product_name",
    }
    assert config.sharing == Sharing(
        strategy="time-slicing", rename_by_default=False,
        resources=(SharedResource(name="nvidia.com/gpu", replicas=4),),
        source=f"config file {P}: sharing.timeSlicing")
    assert config.warnings == ()
    assert config.digest == hashlib.sha256(REFERENCE_FILE.encode()).hexdigest()


def test_seed_001_configmap() -> None:
    config = parse(SEED_001)
    assert config.values == {}
    assert config.sharing.strategy == "time-slicing"
    assert config.sharing.rename_by_default is True
    assert config.sharing.resources == (SharedResource(name="nvidia.com/gpu", replicas=4),)
    assert config.sharing.replicas("nvidia.com/gpu") == 4
    assert config.warnings == ()


def test_values_feed_settings() -> None:
    config = parse(REFERENCE_FILE + "  mps:\n    resources:\n      - {name: gpu, replicas: 2}\n")
    settings = resolve({}, config.values, sharing=config.sharing)
    assert settings.sleep_interval == 60.0
    assert settings.sharing.strategy == "mps"
    assert settings.label_options(timestamp=1).sharing.replicas("nvidia.com/gpu") == 2


def test_yaml_and_json_forms_are_the_same() -> None:
    document = yaml.safe_load(REFERENCE_FILE)
    document["flags"]["plugin"] = {"deviceListStrategy": ["envvar"], "passDeviceSpecs": True}
    document["sharing"]["mps"] = {"resources": [{"name": "mig-1g.5gb", "replicas": 3,
                                                 "devices": [0]}]}
    from_yaml = parse(yaml.safe_dump(document))
    for text in (json.dumps(document), json.dumps(document, indent="\t")):
        from_json = parse(text)
        assert from_json.digest != from_yaml.digest
        assert dataclasses.replace(from_json, digest="") == dataclasses.replace(from_yaml,
                                                                                digest="")


@pytest.mark.parametrize("document", [
    pytest.param("", id="empty-file"),
    pytest.param("# nothing but a comment\n", id="comment-only"),
    pytest.param("{}", id="empty-json"),
    pytest.param("version: ''", id="empty-version"),
    pytest.param("version:\nflags:\nsharing:\nresources:\nimex:", id="all-null"),
    pytest.param("flags: {migStrategy: null, gfd: {outputFile: ~}}", id="null-flags"),
])
def test_empty_configs(document: str) -> None:
    config = parse(document)
    assert config.values == {}
    assert config.sharing == Sharing()
    assert config.warnings == ()


def test_device_plugin_fields_are_accepted_and_ignored() -> None:
    document = """\
version: v1
flags:
  migStrategy: mixed
  failOnInitError: false
  useNodeFeatureAPI: true
  deviceDiscoveryStrategy: nvml
  mpsRoot: /run/nvidia/mps
  nvidiaDriverRoot: /run/nvidia/driver
  nvidiaDevRoot: /
  gdrcopyEnabled: false
  gdsEnabled: false
  mofedEnabled: false
  restartOnDeviceUnhealthy: false
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [envvar, cdi-annotations]
    deviceIDStrategy: uuid
    cdiAnnotationPrefix: cdi.k8s.io/
    nvidiaCTKPath: /usr/bin/nvidia-ctk
    containerDriverRoot: /driver-root
    kubeletSocket: /var/lib/kubelet/device-plugins/kubelet.sock
    somethingNewer: {any: [thing]}
imex:
  channelIDs: [0]
  required: true
"""
    config = parse(document)
    assert config.values == {"mig_strategy": "mixed", "fail_on_init_error": False,
                             "use_node_feature_api": True, "device_discovery_strategy": "nvml"}
    assert config.warnings == ()


def test_yaml_11_booleans_are_booleans() -> None:
    config = parse("flags: {failOnInitError: no, gfd: {oneshot: yes, noTimestamp: on}}")
    assert config.values == {"fail_on_init_error": False, "oneshot": True, "no_timestamp": True}


@pytest.mark.parametrize(("value", "seconds"), [
    pytest.param("60s", 60.0, id="60s"),
    pytest.param("1m30s", 90.0, id="1m30s"),
    pytest.param("1h", 3600.0, id="1h"),
    pytest.param("500ms", 0.5, id="500ms"),
    pytest.param("infinite", None, id="infinite"),
    pytest.param("60000000000", 60.0, id="integer-nanoseconds"),
    pytest.param("15000000000.0", 15.0, id="float-nanoseconds"),
])
def test_sleep_interval_forms(value: str, seconds: float | None) -> None:
    config = parse(f"flags: {{gfd: {{sleepInterval: {value}}}}}")
    assert config.values == {"sleep_interval": seconds}
    assert config.warnings == ()


def test_small_bare_number_is_nanoseconds_with_warning() -> None:
    config = parse("flags: {gfd: {sleepInterval: 60}}")
    assert math.isclose(config.values["sleep_interval"], 60e-9)
    assert config.warnings == (
        f"{PREFIX}flags.gfd.sleepInterval: 60 is read as 60 nanoseconds, as GFD reads it; "
        "write e.g. '60s' if seconds were meant",)


def test_zero_sleep_interval_is_read_as_zero() -> None:
    # the loop raises it to its minimum (and says so); the file's value is what it says
    config = parse("flags: {gfd: {sleepInterval: 0s}}")
    assert config.values == {"sleep_interval": 0.0}
    assert config.warnings == ()


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param('""', "-", id="empty-means-stdout"),
    pytest.param("/tmp/features", "/tmp/features", id="path"),
    pytest.param("'-'", "-", id="dash"),
])
def test_output_file(value: str, expected: str) -> None:
    assert parse(f"flags: {{gfd: {{outputFile: {value}}}}}").values == {"output_file": expected}


# --- sharing normalisation ------------------------------------------------------------------

SHARING = [
    pytest.param(
        ts("{name: gpu, replicas: 4}"),
        Sharing(strategy="time-slicing", rename_by_default=False,
                resources=(SharedResource(name="nvidia.com/gpu", replicas=4),),
                source=f"config file {P}: sharing.timeSlicing"),
        id="time-slicing-only-bare-name"),
    pytest.param(
        ts("{name: nvidia.com/gpu, replicas: 3}", "mps", "renameByDefault: true, "),
        Sharing(strategy="mps", rename_by_default=True,
                resources=(SharedResource(name="nvidia.com/gpu", replicas=3),),
                source=f"config file {P}: sharing.mps"),
        id="mps-only"),
    pytest.param(
        "sharing:\n"
        "  timeSlicing: {renameByDefault: true, resources: [{name: gpu, replicas: 8}]}\n"
        "  mps: {resources: [{name: gpu, replicas: 2}]}\n",
        Sharing(strategy="mps", rename_by_default=False,
                resources=(SharedResource(name="nvidia.com/gpu", replicas=2),),
                source=f"config file {P}: sharing.mps"),
        id="both-mps-supplies-replicas"),
    pytest.param(
        ts("{name: mig-1g.5gb, replicas: 7}, {name: nvidia.com/mig-2g.10gb, replicas: 3}"),
        Sharing(strategy="time-slicing", rename_by_default=False,
                resources=(SharedResource(name="nvidia.com/mig-1g.5gb", replicas=7),
                           SharedResource(name="nvidia.com/mig-2g.10gb", replicas=3)),
                source=f"config file {P}: sharing.timeSlicing"),
        id="mig-resources"),
    pytest.param("sharing: {}", Sharing(), id="empty-sharing"),
    pytest.param("sharing: {timeSlicing: null, mps: ~}", Sharing(), id="null-sections"),
]


@pytest.mark.parametrize(("document", "expected"), SHARING)
def test_sharing_normalisation(document: str, expected: Sharing) -> None:
    assert parse(document).sharing == expected


def test_replicas_lookup() -> None:
    sharing = parse(ts("{name: mig-1g.5gb, replicas: 7}, {name: gpu, replicas: 2}")).sharing
    assert sharing.replicas("nvidia.com/mig-1g.5gb") == 7
    assert sharing.replicas("nvidia.com/gpu") == 2
    assert sharing.replicas("nvidia.com/mig-3g.20gb") == 1


def test_both_sections_warn_that_time_slicing_is_ignored() -> None:
    config = parse("sharing:\n  timeSlicing: {resources: [{name: gpu, replicas: 8}]}\n"
                   "  mps: {resources: [{name: gpu, replicas: 2}]}\n")
    assert config.warnings == (
        f"{PREFIX}sharing.timeSlicing: ignored because sharing.mps is present "
        "(replicas come from the MPS section)",)


@pytest.mark.parametrize("devices", [
    pytest.param("2", id="count"),
    pytest.param("[0, 1]", id="gpu-indices"),
    pytest.param("['0', '1:2']", id="index-strings-and-mig-index"),
    pytest.param(f"[GPU-{UUID}]", id="gpu-uuid"),
    pytest.param(f"[MIG-{UUID}]", id="mig-uuid"),
    pytest.param(f"[MIG-GPU-{UUID}/3/0]", id="old-mig-uuid"),
    pytest.param("[]", id="empty-list"),
])
def test_devices_forced_to_all_with_warning(devices: str) -> None:
    config = parse(ts(f"{{name: gpu, replicas: 2, devices: {devices}}}"))
    assert config.sharing.replicas("nvidia.com/gpu") == 2
    (warning,) = config.warnings
    assert warning.startswith(f"{PREFIX}sharing.timeSlicing.resources[0].devices: ")
    assert warning.endswith('is treated as "all" (selecting devices is not supported; '
                            "ignored as GFD does)")


def test_devices_all_is_silent() -> None:
    assert parse(ts("{name: gpu, replicas: 2, devices: all}")).warnings == ()


@pytest.mark.parametrize(("rename_by_default", "rename", "warned"), [
    pytest.param("false", "gpu.shared", True, id="false-custom"),
    pytest.param("true", "gpu.shared", False, id="true-default-rename"),
    pytest.param("true", "gpu-shared", True, id="true-custom"),
    pytest.param("false", "''", False, id="empty-rename"),
])
def test_rename_is_overridden(rename_by_default: str, rename: str, warned: bool) -> None:
    config = parse(ts(f"{{name: gpu, replicas: 2, rename: {rename}}}",
                      extra=f"renameByDefault: {rename_by_default}, "))
    assert config.sharing.resources == (SharedResource(name="nvidia.com/gpu", replicas=2),)
    if warned:
        (warning,) = config.warnings
        assert warning.startswith(f"{PREFIX}sharing.timeSlicing.resources[0].rename: "
                                  "custom renames are not supported; ignored")
    else:
        assert config.warnings == ()


def test_resources_customisation_warns() -> None:
    config = parse("resources:\n  gpus: [{pattern: '*A100*', name: a100}]\n  mig: []\n")
    assert config.warnings == (
        f"{PREFIX}resources: customizing the 'resources' field is not supported; ignored",)
    assert parse("resources: {gpus: [], mig: []}").warnings == ()


def test_duplicate_resource_name_warns() -> None:
    config = parse(ts("{name: gpu, replicas: 2}, {name: nvidia.com/gpu, replicas: 4}"))
    assert config.sharing.replicas("nvidia.com/gpu") == 2
    assert config.warnings == (
        f"{PREFIX}sharing.timeSlicing.resources[1].name: nvidia.com/gpu is also resources[0]; "
        "the first entry is used",)


# --- reading files -------------------------------------------------------------------------


def test_load_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(SEED_001, encoding="utf-8")
    config = load_config_file(str(path))
    assert config.path == str(path)
    assert config.digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert config.sharing.replicas("nvidia.com/gpu") == 4
    assert config.sharing.source == f"config file {path}: sharing.timeSlicing"


def test_load_dev_null_is_empty_config() -> None:
    config = load_config_file(os.devnull)
    assert config.values == {} and config.sharing == Sharing()


def test_load_a_link_to_dev_null_is_empty_config(tmp_path: Path) -> None:
    """GFD's config-manager with FALLBACK_STRATEGIES=empty links the config file there."""
    link = tmp_path / "config.yaml"
    link.symlink_to(os.devnull)
    config = load_config_file(str(link))
    assert config.values == {} and config.sharing == Sharing()


@pytest.mark.parametrize("kind, what", [("fifo", "a FIFO (named pipe)"),
                                        ("dev-zero", "a character device")])
def test_load_a_fifo_or_a_device_is_refused_without_reading_it(tmp_path: Path, kind: str,
                                                               what: str) -> None:
    path = tmp_path / "config.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(ConfigError) as caught:
        load_config_file(str(path))
    assert str(caught.value) == (
        f"config file {path}: is {what}, not a regular file: gfd reads only a regular file, "
        "or /dev/null for an empty config (point --config-file / CONFIG_FILE at the mounted "
        "ConfigMap's file)")


def test_load_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(ConfigError) as caught:
        load_config_file(str(path))
    assert str(caught.value) == (
        f"config file {path}: not found (check --config-file / CONFIG_FILE)")


def test_load_dangling_symlink_is_not_found(tmp_path: Path) -> None:
    link = tmp_path / "config.yaml"
    link.symlink_to(tmp_path / "available-configs" / "gone")
    with pytest.raises(ConfigError, match="not found"):
        load_config_file(str(link))


def test_load_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config_file(str(tmp_path))
    assert str(caught.value) == (
        f"config file {tmp_path}: is a directory, not a file (check --config-file / CONFIG_FILE)")


def test_load_permission_denied(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\n")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running with privileges that ignore file modes")
        with pytest.raises(ConfigError) as caught:
            load_config_file(str(path))
        assert str(caught.value).startswith(f"config file {path}: permission denied")
    finally:
        path.chmod(0o600)


def test_load_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(b"version: v1\nflags: {migStrategy: \xff}\n")
    with pytest.raises(ConfigError) as caught:
        load_config_file(str(path))
    assert str(caught.value) == f"config file {path}: not valid UTF-8 text (byte 33)"


# --- property: nothing but FileConfig or a one-line ConfigError ---------------------------------

KNOWN_KEYS = [
    "version", "flags", "resources", "sharing", "imex", "migStrategy", "failOnInitError",
    "useNodeFeatureAPI", "deviceDiscoveryStrategy", "mpsRoot", "plugin", "gfd", "oneshot",
    "noTimestamp", "sleepInterval", "outputFile", "machineTypeFile", "gpus", "mig", "pattern",
    "name", "timeSlicing", "mps", "renameByDefault", "failRequestsGreaterThanOne", "rename",
    "devices", "replicas", "channelIDs", "required",
]
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(10**30), max_value=10**30)
           | st.floats() | st.text(max_size=12)
           | st.sampled_from(["v1", "all", "60s", "infinite", "gpu", "mixed", "0:1", "", "²"]))
KEYS = st.sampled_from(KNOWN_KEYS) | st.text(max_size=6) | st.integers(-3, 3)
DOCUMENTS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=25,
)


def assert_config_or_one_line_error(text: str) -> None:
    try:
        result = parse(text)
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(PREFIX)
        assert "\n" not in message and "\r" not in message
    else:
        assert isinstance(result, FileConfig)
        assert all("\n" not in warning for warning in result.warnings)


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(document=st.dictionaries(st.sampled_from(KNOWN_KEYS[:5]), DOCUMENTS, max_size=5)
       | DOCUMENTS)
def test_property_yaml_documents(document: Any) -> None:
    assert_config_or_one_line_error(yaml.safe_dump(document))
    if not isinstance(document, float):
        try:
            text = json.dumps(document)
        except (TypeError, ValueError):
            return  # non-string keys
        assert_config_or_one_line_error(text)


@settings(max_examples=300, deadline=None, database=None)
@given(text=st.text(max_size=200))
def test_property_arbitrary_text(text: str) -> None:
    assert_config_or_one_line_error(text)


@pytest.mark.parametrize("value", ["'true'", "'no'", "1", "maybe"])
def test_a_sharing_boolean_is_read_by_the_settings_tables_rule(value: str) -> None:
    """One boolean rule for the whole file: the sharing section's booleans say what a flag's
    boolean in the same file says, word for word."""
    from gfd.settingkinds import Bool, ValueProblem

    with pytest.raises(ValueProblem) as rule:
        Bool().from_file(yaml.safe_load(value), lambda _: None)
    message = error_of(ts("{name: nvidia.com/gpu, replicas: 2}",
                          extra=f"renameByDefault: {value}, "))
    assert message.endswith(f"sharing.timeSlicing.renameByDefault: {rule.value}")
