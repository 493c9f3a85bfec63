"""Property tests: the device-plugin config parser on any document.

Promises: the config file is the device plugin's YAML/JSON v1 file; config problems are a
ConfigError (exit code 2) whose message is one line naming the problem; the parser never
crashes.
Whatever the text, parse_config returns a FileConfig or raises ConfigError, nothing else.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from fuzz.strategies import fuzz_settings, json_scalars, json_values, texts
from gfd.configfile import FileConfig, parse_config
from gfd.errors import ConfigError
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.readers.simulate import simulate

PATH = "/etc/gfd/config.yaml"

# Documents shaped like the real schema, each value either of the right shape or any leaf,
# so examples get past the top-level checks and reach the deep ones (durations, resource
# names, replicas, devices, booleans, channel IDs).
leaf = st.one_of(
    json_scalars,
    st.sampled_from(["v1", "none", "single", "mixed", "all", "60s", "1m30s", "infinite", "10",
                     "nvidia.com/gpu", "gpu", "mig-1g.5gb", "GPU-8ee5c8a4-3b4c-4f8e-9b19-"
                     "4a7f1d1e2b3c", "0:1", "-5s", "1e400s", "", True, False, 0, 2, -1,
                     2**64, 1e308]),
)


def maybe(shape: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the right shape, sometimes any leaf (one wrong value per document, roughly)."""
    return st.sampled_from([True] * 12 + [False]).flatmap(lambda ok: shape if ok else leaf)


def fields(required: dict[str, st.SearchStrategy[Any]] | None = None, /,
           **optional: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """A mapping with these required and optional fields (``required=`` may be a field)."""
    return st.fixed_dictionaries(required or {}, optional=optional)


booleans = maybe(st.booleans())
durations = maybe(st.one_of(st.sampled_from(["60s", "1m30s", "infinite", "0", "500", "10ms"]),
                            st.integers(-10, 10**20), st.floats(), texts))
resource_names = maybe(st.sampled_from(["nvidia.com/gpu", "gpu", "mig-1g.5gb",
                                        "nvidia.com/mig-3g.20gb", "Bad_Name", "a" * 70]))
devices = maybe(st.one_of(st.just("all"), st.integers(-2, 8),
                          st.lists(st.one_of(st.integers(-1, 8), leaf), max_size=3)))
replicated_resource = fields({"name": resource_names, "replicas": maybe(st.integers(-1, 2**40))},
                             rename=resource_names, devices=devices)
replicated = fields({"resources": maybe(st.lists(maybe(replicated_resource), max_size=3))},
                    renameByDefault=booleans, failRequestsGreaterThanOne=booleans)
resource_entry = fields({"pattern": maybe(texts), "name": resource_names})
config_docs = fields(
    version=maybe(st.sampled_from(["v1", ""])),
    flags=maybe(fields(
        migStrategy=maybe(st.sampled_from(["none", "single", "mixed", "Mixed"])),
        failOnInitError=booleans, useNodeFeatureAPI=booleans,
        deviceDiscoveryStrategy=maybe(st.sampled_from(["auto", "nvml", "tegra", "x"])),
        mpsRoot=maybe(texts), gdsEnabled=booleans, plugin=maybe(st.just({"x": 1})),
        gfd=maybe(fields(oneshot=booleans, noTimestamp=booleans, sleepInterval=durations,
                         outputFile=maybe(texts), machineTypeFile=maybe(texts))))),
    resources=maybe(fields(gpus=maybe(st.lists(maybe(resource_entry), max_size=2)),
                           mig=maybe(st.lists(maybe(resource_entry), max_size=2)))),
    sharing=maybe(fields(timeSlicing=maybe(replicated), mps=maybe(replicated))),
    imex=maybe(fields(channelIDs=maybe(st.lists(maybe(st.integers(-1, 10)), max_size=3)),
                      required=booleans)),
)


def _check(text: str) -> None:
    try:
        result = parse_config(text, path=PATH)
    except ConfigError as exc:
        message = str(exc)
        assert message, "a ConfigError says what is wrong"
        assert len(message.splitlines()) == 1, repr(message)
        assert message.startswith(f"config file {PATH}"), message
        return
    assert isinstance(result, FileConfig)
    assert result.path == PATH
    for warning in result.warnings:
        assert len(warning.splitlines()) == 1, repr(warning)


def _yaml(document: Any) -> str:
    return yaml.safe_dump(document, allow_unicode=True, default_flow_style=None)


@fuzz_settings(200)
@given(texts)
@example("")
@example("\ufeff")
@example("{")
@example("[" * 1000)
@example("{" * 1000)
@example("a: &a [*a]")
@example("!!python/object:os.system {}")
@example("? [a]\n: b")
@example("flags:\n  migStrategy: mixed\nflags: {}\n")
@example('{"flags": {}, "flags": {}}')
@example("version: v1\nflags:\n  gfd:\n    sleepInterval: 99999999999999999999999h\n")
@example("sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
         "      replicas: 1e3\n")
@example("\x85\u2028\u2029: x")
def test_any_text_is_a_file_config_or_one_line_config_error(text: str) -> None:
    """Raw text of any kind (broken YAML, JSON, tags, aliases, deep nesting, duplicate
    keys, odd line breaks) gives a FileConfig or a one-line ConfigError, never another error."""
    _check(text)


@fuzz_settings(200)
@given(json_values)
def test_any_json_or_yaml_document_is_a_file_config_or_one_line_config_error(
        document: Any) -> None:
    """Any JSON value, written as JSON and as YAML, parses or is refused cleanly."""
    _check(json.dumps(document))
    _check(_yaml(document))


@fuzz_settings(200)
@given(config_docs)
@example({"flags": {"gfd": {"sleepInterval": 1e308}}})
@example({"flags": {"gfd": {"sleepInterval": 2**64}}})
@example({"flags": {"gfd": {"sleepInterval": "1e400s"}}})
@example({"sharing": {"mps": {"resources": [{"name": "gpu", "replicas": 2**64,
                                             "devices": ["0:1", -1]}]}}})
@example({"sharing": {"timeSlicing": {"resources": [{"name": "a" * 80, "replicas": 2}]}}})
@example({"resources": {"gpus": [{"pattern": "*", "name": "gpu"}]}, "imex": {"channelIDs": [-1]}})
def test_config_shaped_documents_are_a_file_config_or_one_line_config_error(
        document: dict[str, Any]) -> None:
    """Documents built from the real field names (so the deep checks run:
    durations, resource names, replicas, devices, booleans) parse or fail with one line."""
    _check(json.dumps(document))
    _check(_yaml(document))


@fuzz_settings(100)
@given(st.one_of(st.integers(min_value=2, max_value=2**70),
                 st.integers(min_value=1, max_value=500).map(lambda digits: 10**digits)))
@example(2**63 - 1)
@example(2**63)
@example(10**400)
def test_replicas_are_refused_or_labelled_whole(replicas: int) -> None:
    """A replicas count is either refused with one line (over the device plugin's 64-bit
    integer) or published: never a `-SHARED` product without its `gpu.replicas`."""
    text = ("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: "
            f"{replicas}}}]}}}}")
    try:
        config = parse_config(text, path=PATH)
    except ConfigError as exc:
        assert replicas > 2**63 - 1, exc
        assert len(str(exc).splitlines()) == 1 and "at most 9223372036854775807" in str(exc)
        return
    assert replicas <= 2**63 - 1
    options = LabelOptions(sharing=config.sharing)
    labels = compute_labels(simulate("hgx-h100").snapshot, options).labels
    assert labels["nvidia.com/gpu.replicas"] == str(replicas)
    assert labels["nvidia.com/gpu.product"].endswith("-SHARED")
