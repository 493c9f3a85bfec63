"""The settings table: every setting once, GFD's precedence, and changes."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import replace
from typing import Any

import pytest

from gfd.config import (
    BY_NAME,
    COMMANDS,
    TABLE,
    Entry,
    Part,
    Section,
    Settings,
    changed,
    entries,
    parse_text,
    resolve,
)
from gfd.errors import ConfigError
from gfd.settingkinds import Duration, ValueProblem
from gfd.sharing import Sharing


def test_every_setting_of_the_table_has_a_class_and_help() -> None:
    for entry in TABLE:
        assert isinstance(entry.spec.part, Part) and entry.spec.help, entry.name
        assert entry.spec.flags[0].startswith("--"), entry.name


def test_flags_environment_variables_and_file_paths_each_name_one_setting() -> None:
    flags = [f for e in TABLE for f in e.spec.flags]
    env = [v for e in TABLE for v in e.spec.env]
    files = [e.spec.file for e in TABLE if e.spec.file]
    assert len(flags) == len(set(flags))
    assert len(env) == len(set(env))
    assert len(files) == len(set(files))
    assert all(path.startswith("flags.") for path in files)


def test_the_table_is_every_setting_in_declaration_order() -> None:
    names = [f.name for f in dataclasses.fields(Settings) if f.name != "sharing"]
    assert [e.name for e in TABLE] == names
    assert set(BY_NAME) == set(names)
    assert all(BY_NAME[e.name] is e for e in TABLE)


@pytest.mark.parametrize("entry", TABLE, ids=lambda e: e.name)
def test_every_default_survives_its_own_rendering(entry: Entry) -> None:
    kind = entry.spec.kind
    assert kind.from_text(kind.render(entry.default)) == entry.default


@pytest.mark.parametrize("command, some, none_of", [
    ("labels", {"mig_strategy", "snapshot", "label_set"}, {"output_file", "oneshot", "sink"}),
    ("snapshot", {"simulate", "device_discovery_strategy"},
     {"mig_strategy", "label_set", "no_timestamp", "sink"}),
    ("diff", {"output_file", "node_name", "pod_name", "mig_strategy"}, {"oneshot", "events"}),
    ("prune", {"output_file", "sink", "log_level"}, {"mig_strategy", "oneshot"}),
    ("run", {"oneshot", "sleep_interval", "metrics_port", "sink", "mig_strategy"}, set()),
])
def test_entries_are_the_settings_that_change_what_a_command_does(
        command: str, some: set[str], none_of: set[str]) -> None:
    names = {e.name for e in entries(command)}
    assert some <= names and not (none_of & names)


def test_every_setting_names_a_section_and_only_commands_that_take_settings() -> None:
    for entry in TABLE:
        assert isinstance(entry.spec.section, Section), entry.name
        assert entry.spec.commands and set(entry.spec.commands) <= set(COMMANDS), entry.name
        assert "run" in entry.spec.commands, f"{entry.name}: the agent takes every setting"


# ----------------------------------------------------------------------------- precedence


def test_resolve_with_nothing_is_the_defaults() -> None:
    assert resolve({}) == Settings()


PRECEDENCE = [
    ("default", {}, None, "none"),
    ("file-beats-default", {}, {"mig_strategy": "single"}, "single"),
    ("explicit-beats-file", {"mig_strategy": "mixed"}, {"mig_strategy": "single"}, "mixed"),
    ("explicit-without-file", {"mig_strategy": "mixed"}, None, "mixed"),
]


@pytest.mark.parametrize("explicit, file_values, strategy", [p[1:] for p in PRECEDENCE],
                         ids=[p[0] for p in PRECEDENCE])
def test_resolve_takes_explicit_then_file_then_default(
        explicit: dict[str, Any], file_values: dict[str, Any] | None, strategy: str) -> None:
    assert resolve(explicit, file_values).mig_strategy == strategy


def test_resolve_falls_back_to_the_defaults_it_is_given() -> None:
    gfd_defaults = Settings(sleep_interval=60.0, label_set="compat")
    settings = resolve({"label_set": "extended"}, defaults=gfd_defaults)
    assert settings.sleep_interval == 60.0 and settings.label_set == "extended"


def test_resolve_takes_the_sharing_section_and_ignores_unknown_names() -> None:
    sharing = Sharing(strategy="mps")
    settings = resolve({"not_a_setting": 1}, {"also_not": 2}, sharing=sharing)
    assert settings.sharing is sharing
    assert settings == Settings(sharing=sharing)


@pytest.mark.parametrize("explicit, message", [
    ({"simulate": "hgx-h100", "snapshot": "/x.json"},
     "--simulate and --snapshot cannot be used together"),
    ({"accelerator_label": "Bad Key"}, "accelerator-label: 'Bad Key' is not a valid label key"),
    ({"accelerator_label": "a/b/c"}, "at most one '/'"),
], ids=["two-sources", "label-key-with-a-space", "label-key-with-two-slashes"])
def test_resolve_refuses_settings_that_do_not_go_together(explicit: dict[str, Any],
                                                          message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve(explicit)
    assert message in str(caught.value)


@pytest.mark.parametrize("key, problem", [
    ("nvidia.com/gpu.count", "a label gfd writes itself"),
    ("nvidia.com/gpu.product", "a label gfd writes itself"),
    ("nvidia.com/mig-1g.5gb.count", "a label gfd writes itself"),
    ("kubernetes.io/hostname", "which Kubernetes owns"),
    ("node.kubernetes.io/instance-type", "which Kubernetes owns"),
    ("beta.kubernetes.io/arch", "which Kubernetes owns"),
    ("k8s.io/x", "which Kubernetes owns"),
], ids=lambda v: v if "/" in v else None)
def test_accelerator_label_never_takes_another_writers_key(key: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        resolve({"accelerator_label": key})


@pytest.mark.parametrize("key", ["accelerator", "cloud.google.com/gke-accelerator",
                                 "nvidia.com/accelerator", "example.com/kubernetes.io-like"])
def test_accelerator_label_may_be_any_key_of_ones_own(key: str) -> None:
    assert resolve({"accelerator_label": key}).accelerator_label == key


def test_a_valid_accelerator_label_key_is_accepted() -> None:
    assert resolve({"accelerator_label": "cloud.example.com/accelerator"}).accelerator_label


def test_parse_text_names_the_flag_or_the_given_source() -> None:
    entry = BY_NAME["metrics_port"]
    assert parse_text(entry, "9100") == 9100
    with pytest.raises(ConfigError, match=r"^--metrics-port: must be an integer"):
        parse_text(entry, "x")
    with pytest.raises(ConfigError, match=r"^GFD_METRICS_PORT: must be 0\.\.65535"):
        parse_text(entry, "99999", source="GFD_METRICS_PORT")


# ----------------------------------------------------------------------------- changes


def test_changed_lists_exactly_the_rows_that_differ_in_table_order() -> None:
    old = Settings()
    new = replace(old, sleep_interval=1.0, mig_strategy="mixed")
    assert [e.name for e in changed(old, new)] == ["mig_strategy", "sleep_interval"]
    assert changed(old, replace(old)) == ()


def test_a_sharing_change_is_no_table_row() -> None:
    assert changed(Settings(), Settings(sharing=Sharing(strategy="mps"))) == ()


# ----------------------------------------------------------------------------- derived values


@pytest.mark.parametrize("sink, node_feature_api, effective", [
    ("file", False, "file"),
    ("file", True, "nodefeature"),
    ("node", True, "node"),
    ("nodefeature", False, "nodefeature"),
], ids=["file", "gfds-flag-turns-file-into-nodefeature", "an-explicit-sink-wins",
        "nodefeature"])
def test_the_effective_sink(sink: str, node_feature_api: bool, effective: str) -> None:
    settings = Settings(sink=sink, use_node_feature_api=node_feature_api)
    assert settings.effective_sink == effective


def test_label_options_carry_the_label_settings() -> None:
    sharing = Sharing(strategy="mps")
    settings = Settings(mig_strategy="single", label_set="compat", sharing=sharing,
                        accelerator_label="accelerator")
    options = settings.label_options(timestamp=17)
    assert (options.mig_strategy, options.label_set, options.sharing, options.timestamp,
            options.accelerator_label) == ("single", "compat", sharing, 17, "accelerator")


def test_label_options_drop_the_timestamp_with_no_timestamp_and_an_empty_mirror_key() -> None:
    options = Settings(no_timestamp=True).label_options(timestamp=17)
    assert options.timestamp is None and options.accelerator_label is None


DURATIONS = [e for e in TABLE if isinstance(e.spec.kind, Duration)]


@pytest.mark.parametrize("text", ["-1h", "xyz", "1h-"])
@pytest.mark.parametrize("entry", DURATIONS, ids=[e.name for e in DURATIONS])
def test_a_duration_refusal_suggests_only_values_the_setting_takes(entry: Entry,
                                                                   text: str) -> None:
    """`--expiry -1h` suggested `infinite`, which `--expiry infinite` then refused."""
    with pytest.raises(ValueProblem) as refused:
        entry.spec.kind.from_text(text)
    for suggested in re.findall(r"\b(infinite|\d+(?:h|m|s|ms|m30s))\b", str(refused.value)):
        entry.spec.kind.from_text(suggested)  # each suggestion is accepted
    assert ("infinite" in str(refused.value)) is entry.spec.kind.infinite
