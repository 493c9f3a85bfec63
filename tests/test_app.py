"""Wiring: the factories that build an agent's parts from settings, and what a reload
(`Factory.rebuild`) builds anew for each class of setting."""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer
from helpers.timing import Clock

from gfd import app
from gfd.app import (
    Factory,
    Reloader,
    label_once,
    load_settings,
    make_discovery,
    make_duties,
    make_gpu_source,
    make_sink,
    read_once,
    wants_events,
)
from gfd.budget import Budget
from gfd.config import Part, Settings
from gfd.configsource import QUIET
from gfd.discovery import Discovery
from gfd.errors import ApiError, ConfigError, DiscoveryError
from gfd.readers.nvml import NvmlReader
from gfd.readers.resourcemanager import assumed
from gfd.readers.simulate import simulate
from gfd.readers.smi import SmiReader
from gfd.readers.tegra import TegraReader
from gfd.readers.vfio import VfioReader
from gfd.sinks.featurefile import FeatureFileSink
from gfd.sinks.node import NodeSink
from gfd.sinks.nodefeature import NodeFeatureSink
from gfd.sinks.stdout import StdoutSink
from gfd.snapshot import ResourceManager

DRA = ResourceManager(name="dra", evidence="--resource-manager dra")


class Tracked:
    """Stands in for a discovery or sink: records close() and refresh()."""

    fail_on_init_error = True
    name = "tracked"
    manager = None
    asks_api = False

    def __init__(self) -> None:
        self.closed = False
        self.refreshed = 0

    def refresh(self, *, gpus: bool = False) -> None:
        self.refreshed += 1

    def watch(self, fire: Any) -> None:
        pass

    def close(self) -> None:
        self.closed = True


# ----------------------------------------------------------------------------- rebuild


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


def test_gpus_an_event_made_unusable_stay_so_across_a_reload_that_replaces_discovery(
        tmp_path: Path, nvml_machine: Any) -> None:
    from fakes import profiles

    nvml_machine(profiles.hgx_h100())
    settings = Settings(device_discovery_strategy="nvml", nvidia_smi=str(tmp_path / "no-smi"),
                        sysfs_root=str(tmp_path), machine_type_file=str(tmp_path / "dmi"),
                        output_file=str(tmp_path / "gfd"))
    factory = Factory(started=1, write=lambda text: None)
    current = factory.parts(settings)
    candidate = current
    try:
        uuid = current.discovery.read().gpus[3].uuid
        assert isinstance(current.discovery, Discovery)
        current.discovery.mark_unusable(uuid, "Xid 79 (GPU has fallen off the bus)")
        candidate = factory.rebuild(current, replace(settings, machine_type_file="/elsewhere"))
        assert candidate.discovery is not current.discovery, "a new Discovery"
        current.discovery.close()
        errors = [g.error for g in candidate.discovery.read().gpus]
        assert errors == [None] * 3 + ["Xid 79 (GPU has fallen off the bus)"] + [None] * 4
    finally:
        current.discovery.close()
        candidate.discovery.close()
        current.sink.close()


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


def test_rebuild_names_each_change_old_to_new(tmp_path: Path) -> None:
    factory, settings = running(tmp_path)
    current = factory.parts(settings)
    candidate = factory.rebuild(current, replace(settings, mig_strategy="mixed",
                                                 sleep_interval=None))
    assert candidate.changes == ("flags.migStrategy: none -> mixed",
                                 "flags.gfd.sleepInterval: 1m -> infinite")


def test_rebuild_reports_a_new_sharing_section(tmp_path: Path) -> None:
    factory, settings = running(tmp_path)
    current = factory.parts(settings)
    shared = replace(settings, sharing=simulate("t4-time-sliced").sharing)
    candidate = factory.rebuild(current, shared)
    assert candidate.changes == ("sharing",)
    assert candidate.options.sharing == shared.sharing
    assert candidate.discovery is current.discovery and candidate.sink is current.sink


def test_rebuild_with_the_same_settings_reuses_everything(tmp_path: Path) -> None:
    factory, settings = running(tmp_path)
    current = factory.parts(settings)
    candidate = factory.rebuild(current, settings)
    assert candidate.changes == ()
    assert candidate.discovery is current.discovery and candidate.sink is current.sink


def test_rebuild_names_every_restart_only_setting_it_refuses(tmp_path: Path) -> None:
    factory, settings = running(tmp_path)
    current = factory.parts(settings)
    with pytest.raises(ConfigError, match=r"--log-level, flags\.gfd\.oneshot cannot change"):
        factory.rebuild(current, replace(settings, oneshot=True, log_level="debug"))


# ----------------------------------------------------------------------------- make_sink


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[tuple[FakeApiServer, str]]:
    with FakeApiServer() as server:
        server.add_node("n1")
        yield server, str(server.write_kubeconfig(tmp_path / "kubeconfig"))


def test_the_default_sink_is_the_feature_file_with_its_expiry(tmp_path: Path) -> None:
    sink = make_sink(Settings(output_file=str(tmp_path / "gfd"), expiry=60.0),
                     write=lambda text: None)
    assert isinstance(sink, FeatureFileSink)
    assert (sink.path, sink.expiry) == (str(tmp_path / "gfd"), 60.0)


def test_output_file_dash_writes_through_the_given_function() -> None:
    out: list[str] = []
    sink = make_sink(Settings(output_file="-"), write=out.append)
    assert isinstance(sink, StdoutSink)
    sink.publish({"a/b": "1"})
    assert out == ["a/b=1\n"]


@pytest.mark.parametrize("changes", [{"sink": "node"}, {"sink": "nodefeature"},
                                     {"use_node_feature_api": True}],
                         ids=["node", "nodefeature", "use-node-feature-api"])
def test_the_api_sinks_need_a_node_name(changes: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="--node-name / NODE_NAME is required"):
        make_sink(Settings(**changes), write=lambda text: None)


def test_an_api_request_ends_within_a_quarter_of_stuck_after(
        kubeconfig: tuple[FakeApiServer, str]) -> None:
    server, path = kubeconfig
    server.inject(200, None, trickle=0.05, body={"kind": "Node", "apiVersion": "v1"})
    sink = make_sink(Settings(sink="node", node_name="n1", kubeconfig=path, stuck_after=2.0),
                     write=lambda text: None)
    try:
        assert isinstance(sink, NodeSink)
        with pytest.raises(ApiError, match=r"no complete answer .* within 0\.5 s"):
            sink.api.get_node("n1")
    finally:
        sink.close()


@pytest.mark.parametrize("sink", ["node", "nodefeature"])
def test_every_api_client_of_a_factorys_parts_takes_from_one_cycle_budget(
        kubeconfig: tuple[FakeApiServer, str], tmp_path: Path, sink: str) -> None:
    """The read's ResourceSlice LIST (a client of its own), the sink's requests and its
    retries: a spent budget stops all of them, and the parts carry it for the loop to open."""
    server, path = kubeconfig
    server.inject(503, None)  # a retriable answer: only the budget stops the retry
    settings = Settings(simulate="hgx-h100", plugins_registry=str(tmp_path), sink=sink,
                        node_name="n1", namespace="gfd", kubeconfig=path)
    clock = Clock()  # each answer moves it 9.9 s: a slow API server, on no schedule
    factory = Factory(started=1, write=lambda text: None, budget=Budget(clock=clock),
                      on_request=lambda verb, code: setattr(clock, "now", clock.now + 9.9))
    parts = factory.parts(settings)
    try:
        assert parts.budget is factory.budget
        factory.budget.open(0.0)
        assert parts.discovery.read().resource_manager.name == "device-plugin"
        with pytest.raises(ApiError, match="not sent: the requests before it used up this "
                                           "cycle's 0 s for API requests"):
            parts.sink.publish({"nvidia.com/gpu.count": "8"})
        assert server.requests == [], "nothing sent"
        factory.budget.open(60.0)
        with pytest.raises(ApiError, match="HTTP 503"):
            parts.sink.publish({"nvidia.com/gpu.count": "8"})
        assert len(server.requests) == 2, "retried once: 50.1 s left"
        factory.budget.open(10.0)
        with pytest.raises(ApiError, match="HTTP 503"):
            parts.sink.publish({"nvidia.com/gpu.count": "8"})
        assert len(server.requests) == 3, "no retry: 0.1 s left, less than any retry's wait"
    finally:
        factory.budget.close()
        parts.sink.close()
        parts.discovery.close()


def test_the_node_sink_talks_to_the_configured_api_server(
        kubeconfig: tuple[FakeApiServer, str]) -> None:
    server, path = kubeconfig
    requests: list[tuple[str, str]] = []
    sink = make_sink(Settings(sink="node", node_name="n1", kubeconfig=path),
                     write=lambda text: None,
                     on_request=lambda verb, code: requests.append((verb, code)))
    try:
        assert isinstance(sink, NodeSink) and sink.node == "n1"
        assert sink.published() == {}
    finally:
        sink.close()
    assert requests == [("get", "200")]
    assert server.count("GET", "/api/v1/nodes/n1") == 1


@pytest.mark.parametrize("changes", [{"sink": "nodefeature"}, {"use_node_feature_api": True}],
                         ids=["sink-nodefeature", "use-node-feature-api"])
def test_the_nodefeature_sink_gets_namespace_and_pod(kubeconfig: tuple[FakeApiServer, str],
                                                     changes: dict[str, Any]) -> None:
    _, path = kubeconfig
    sink = make_sink(Settings(node_name="n1", kubeconfig=path, namespace="gpu",
                              pod_name="gfd-x", **changes), write=lambda text: None)
    try:
        assert isinstance(sink, NodeFeatureSink)
        assert (sink.node, sink.namespace, sink.pod_name) == ("n1", "gpu", "gfd-x")
    finally:
        sink.close()


# ----------------------------------------------------------------------------- make_discovery


def test_a_simulation_is_a_fixed_snapshot_without_a_gpu_source() -> None:
    discovery = make_discovery(Settings(simulate="hgx-h100", resource_manager="dra"))
    assert discovery.gpus is None and discovery.smi is None
    assert discovery.fixed == simulate("hgx-h100").snapshot
    assert discovery.read() == replace(discovery.fixed, resource_manager=DRA)


@pytest.mark.parametrize("source", ["simulate", "snapshot"])
def test_auto_on_a_simulated_or_recorded_machine_assumes_its_manager_without_the_hosts_kubelet(
        tmp_path: Path, source: str) -> None:
    """Only where the plugin registry is this host's kubelet's (the default): one given
    elsewhere is looked at (below)."""
    path = tmp_path / "snap.json"
    path.write_text(simulate("hgx-h100").snapshot.to_json())
    settings = Settings(simulate="hgx-h100") if source == "simulate" else Settings(
        snapshot=str(path))
    discovery = make_discovery(settings)
    assert discovery.manager is None  # nothing looks at this host's plugin registry
    assert discovery.read().resource_manager == assumed(simulate("hgx-h100").snapshot,
                                                        simulated=source == "simulate")


def test_auto_finds_the_resource_manager_in_the_plugins_registry(tmp_path: Path) -> None:
    settings = Settings(simulate="hgx-h100", plugins_registry=str(tmp_path))
    assert read_once(settings).resource_manager.name == "device-plugin"
    os.mknod(tmp_path / "gpu.nvidia.com-reg.sock", stat.S_IFSOCK | 0o600)
    assert read_once(settings).resource_manager.name == "dra"


@pytest.mark.parametrize("sink", ["node", "nodefeature"])
def test_auto_with_an_api_sink_asks_for_the_nodes_resource_slices(
        kubeconfig: tuple[FakeApiServer, str], tmp_path: Path, sink: str) -> None:
    server, path = kubeconfig
    requests: list[tuple[str, str]] = []
    settings = Settings(simulate="hgx-h100", plugins_registry=str(tmp_path), sink=sink,
                        node_name="n1", kubeconfig=path)
    discovery = make_discovery(settings, api=True,
                               on_request=lambda verb, code: requests.append((verb, code)))
    try:
        assert discovery.read().resource_manager.name == "device-plugin"
        server.add_resourceslice("n1", "gpu.nvidia.com")
        assert discovery.read().resource_manager.name == "device-plugin"  # not asked again
        discovery.recheck_resource_manager()  # the loop's daily duty
        found = discovery.read().resource_manager
        assert found.name == "dra" and "ResourceSlice" in found.evidence
    finally:
        discovery.close()
    assert requests == [("list", "200")] * 2
    assert [r.query["fieldSelector"] for r in server.requests] == [
        "spec.nodeName=n1,spec.driver=gpu.nvidia.com"] * 2


@pytest.mark.parametrize("changes", [
    {"sink": "file"}, {"resource_manager": "device-plugin"}, {"resource_manager": "dra"},
], ids=["file-sink", "device-plugin", "dra"])
def test_the_api_is_asked_only_for_auto_with_an_api_sink(
        kubeconfig: tuple[FakeApiServer, str], tmp_path: Path, changes: dict[str, str]) -> None:
    server, path = kubeconfig
    server.add_resourceslice("n1", "gpu.nvidia.com")
    settings = replace(Settings(simulate="hgx-h100", plugins_registry=str(tmp_path),
                                sink="node", node_name="n1", kubeconfig=path), **changes)
    discovery = make_discovery(settings, api=True)
    try:
        assert discovery.manager is not None and discovery.manager.slices is None
        discovery.read()
    finally:
        discovery.close()
    assert server.requests == []


def test_one_shot_reads_never_ask_the_api(kubeconfig: tuple[FakeApiServer, str],
                                          tmp_path: Path) -> None:
    server, path = kubeconfig
    server.add_resourceslice("n1", "gpu.nvidia.com")
    settings = Settings(simulate="hgx-h100", plugins_registry=str(tmp_path), sink="node",
                        node_name="n1", kubeconfig=path)
    assert read_once(settings).resource_manager.name == "device-plugin"
    assert server.requests == []


def test_a_recorded_snapshot_is_a_fixed_snapshot_read_from_its_file(tmp_path: Path) -> None:
    path = tmp_path / "snap.json"
    path.write_text(simulate("hgx-h100").snapshot.to_json())
    discovery = make_discovery(Settings(snapshot=str(path)))
    assert discovery.gpus is None and discovery.fixed is not None
    assert discovery.fixed.source == f"file:{path}"
    assert discovery.fixed.gpus == simulate("hgx-h100").snapshot.gpus


@pytest.mark.parametrize("source", ["simulate", "snapshot"])
def test_no_vgpu_labels_leaves_the_vgpu_fact_out_of_every_source(tmp_path: Path,
                                                                source: str) -> None:
    path = tmp_path / "snap.json"
    path.write_text(simulate("hgx-h100").snapshot.to_json())
    where = {"simulate": "hgx-h100"} if source == "simulate" else {"snapshot": str(path)}
    assert make_discovery(Settings(**where)).read().vgpu is not None
    discovery = make_discovery(Settings(**where, no_vgpu_labels=True))
    assert discovery.read().vgpu is None and not discovery.host.scan_vgpu
    assert discovery.read().gpus == simulate("hgx-h100").snapshot.gpus


def test_no_vgpu_labels_turns_the_hosts_scan_off() -> None:
    assert make_discovery(Settings(device_discovery_strategy="nvml")).host.scan_vgpu
    discovery = make_discovery(Settings(device_discovery_strategy="nvml", no_vgpu_labels=True))
    assert not discovery.host.scan_vgpu
    discovery.close()


def test_an_unreadable_recorded_snapshot_fails_when_discovery_is_built(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="snapshot file"):
        make_discovery(Settings(snapshot=str(tmp_path / "missing.json")))


@pytest.mark.parametrize("label_set, smi", [("extended", True), ("compat", False)])
def test_nvidia_smi_runs_only_for_the_extended_label_set(label_set: str, smi: bool) -> None:
    discovery = make_discovery(Settings(label_set=label_set, nvidia_smi="/opt/nvidia-smi",
                                        fail_on_init_error=False))
    assert isinstance(discovery.gpus, NvmlReader)
    assert isinstance(discovery.smi, SmiReader) is smi
    if smi:
        assert isinstance(discovery.smi, SmiReader)
        assert discovery.smi.executable == "/opt/nvidia-smi"
    assert discovery.fail_on_init_error is False


def test_discovery_reads_host_files_where_the_settings_say() -> None:
    discovery = make_discovery(Settings(machine_type_file="/m", sysfs_root="/s"))
    assert (discovery.host.machine_type_file, discovery.host.sysfs_root) == ("/m", "/s")


@pytest.mark.parametrize("strategy, reader", [
    ("nvml", NvmlReader), ("tegra", TegraReader), ("vfio", VfioReader),
], ids=["nvml", "tegra", "vfio"])
def test_each_discovery_strategy_has_its_back_end(strategy: str, reader: type) -> None:
    assert isinstance(make_gpu_source(Settings(device_discovery_strategy=strategy)), reader)


# ----------------------------------------------------------------------------- make_duties


DUTIES = [
    ("feature-file", {}, {"host refresh": 300.0, "expiry refresh": 1800.0}),
    ("feature-file-that-never-expires", {"expiry": 0.0}, {"host refresh": 300.0}),
    ("stdout", {"output_file": "-"}, {"host refresh": 300.0}),
    ("node", {"sink": "node"}, {"host refresh": 300.0, "resync": 3600.0}),
    ("nodefeature", {"use_node_feature_api": True, "resync_interval": 60.0},
     {"host refresh": 300.0, "resync": 60.0}),
    ("host-refresh-interval", {"host_refresh_interval": 30.0},
     {"host refresh": 30.0, "expiry refresh": 1800.0}),
]


@pytest.mark.parametrize("changes, every", [d[1:] for d in DUTIES], ids=[d[0] for d in DUTIES])
def test_the_duties_and_their_intervals_follow_the_settings(changes: dict[str, Any],
                                                            every: dict[str, float]) -> None:
    duties = make_duties(Settings(**changes), Tracked(), Tracked())  # type: ignore[arg-type]
    assert {d.name: d.every for d in duties} == every


def test_the_host_refresh_refreshes_discovery_and_the_others_the_sink() -> None:
    for changes in ({}, {"sink": "node"}):
        discovery, sink = Tracked(), Tracked()
        duties = make_duties(Settings(**changes), discovery, sink)  # type: ignore[arg-type]
        for duty in duties:
            duty.action()
        assert (discovery.refreshed, sink.refreshed) == (1, 1)


def test_the_resourceslice_check_is_a_daily_duty_only_where_the_api_is_asked(
        kubeconfig: tuple[FakeApiServer, str], tmp_path: Path) -> None:
    server, path = kubeconfig
    settings = Settings(simulate="hgx-h100", plugins_registry=str(tmp_path), sink="node",
                        node_name="n1", kubeconfig=path)
    for api, fixed in ((True, "auto"), (False, "auto"), (True, "dra")):
        discovery = make_discovery(replace(settings, resource_manager=fixed), api=api)
        try:
            duties = {d.name: d for d in make_duties(settings, discovery, Tracked())}  # type: ignore[arg-type]
            assert ("resourceslice check" in duties) is (api and fixed == "auto")
            if "resourceslice check" not in duties:
                continue
            assert duties["resourceslice check"].every == 86400.0  # SPEC §4: <= 1/node-hour
            discovery.read()
            discovery.refresh()  # the 5-minute host refresh asks the API nothing
            discovery.read()
            assert server.count(path_contains="resourceslices") == 1
            duties["resourceslice check"].action()
            discovery.read()
            assert server.count(path_contains="resourceslices") == 2
        finally:
            discovery.close()


# ----------------------------------------------------------------------------- Factory.parts


def test_parts_are_built_from_the_settings_with_the_start_time(tmp_path: Path) -> None:
    _, settings = running(tmp_path)
    parts = Factory(started=1_700_000_000, write=lambda text: None).parts(settings)
    assert parts.settings is settings
    assert isinstance(parts.discovery, Discovery) and isinstance(parts.sink, FeatureFileSink)
    assert parts.options == settings.label_options(timestamp=1_700_000_000)
    assert {d.name for d in parts.duties} == {"host refresh", "expiry refresh"}
    assert parts.changes == ()


def test_parts_close_the_new_discovery_when_the_sink_cannot_be_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built = Tracked()
    monkeypatch.setattr(app, "make_discovery", lambda settings, unusable=None, **_: built)
    with pytest.raises(ConfigError, match="NODE_NAME"):
        Factory(started=1, write=lambda text: None).parts(Settings(sink="node"))
    assert built.closed


def test_rebuild_closes_the_new_discovery_when_the_new_sink_cannot_be_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    factory, settings = running(tmp_path)
    current = factory.parts(settings)
    built = Tracked()
    monkeypatch.setattr(app, "make_discovery", lambda settings, unusable=None, **_: built)
    with pytest.raises(ConfigError, match="NODE_NAME"):
        factory.rebuild(current, replace(settings, machine_type_file="/x", sink="node"))
    assert built.closed


# ----------------------------------------------------------------------------- settings


def test_without_a_config_file_a_simulation_brings_its_sharing() -> None:
    settings, loaded = load_settings({"simulate": "t4-time-sliced"})
    assert loaded is None
    assert settings.sharing == simulate("t4-time-sliced").sharing


def test_a_config_file_is_read_its_values_applied_and_its_warnings_logged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("flags: {migStrategy: single, gfd: {sleepInterval: 100}}\n")
    settings, loaded = load_settings({"config_file": str(path)})
    assert loaded is not None and loaded.path == str(path)
    assert settings.mig_strategy == "single"
    assert any("nanoseconds" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


def test_the_config_file_can_come_from_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("flags: {migStrategy: mixed}\n")
    settings, loaded = load_settings({}, defaults=Settings(config_file=str(path)))
    assert loaded is not None and settings.mig_strategy == "mixed"


def test_a_config_file_replaces_a_simulations_sharing(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("version: v1\n")
    settings, _ = load_settings({"simulate": "t4-time-sliced", "config_file": str(path)})
    assert settings.sharing.strategy == "none"


# ----------------------------------------------------------------------------- Reloader


def reloader_for(tmp_path: Path, text: str, explicit: dict[str, Any] | None = None,
                 ) -> tuple[Reloader, Path, Any]:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    base = {"config_file": str(path), "simulate": "hgx-h100",
            "output_file": str(tmp_path / "gfd"), **(explicit or {})}
    settings, loaded = load_settings(base)
    assert loaded is not None
    factory = Factory(started=1, write=lambda text: None)
    return Reloader(base, loaded, factory), path, factory.parts(settings)


def settled_write(path: Path, text: str) -> None:
    """Write the config file as a writer that finished a while ago (``QUIET`` seconds)."""
    path.write_text(text)
    old = time.time() - 2 * QUIET
    os.utime(path, (old, old))


def test_an_unchanged_file_is_no_news(tmp_path: Path) -> None:
    reloader, _, current = reloader_for(tmp_path, "flags: {migStrategy: none}\n")
    assert reloader.poll(current, force=False) is None


def test_a_changed_setting_gives_a_candidate_built_for_it(tmp_path: Path) -> None:
    reloader, path, current = reloader_for(tmp_path, "flags: {migStrategy: none}\n")
    settled_write(path, "flags: {migStrategy: mixed}\n")
    candidate = reloader.poll(current, force=False)
    assert candidate is not None and candidate is not current
    assert candidate.options.mig_strategy == "mixed"
    assert candidate.changes == ("flags.migStrategy: none -> mixed",)


def test_a_change_a_flag_overrides_gives_the_running_parts(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gfd")
    reloader, path, current = reloader_for(tmp_path, "flags: {migStrategy: none}\n",
                                           {"mig_strategy": "single"})
    settled_write(path, "flags: {migStrategy: mixed}\n")
    assert reloader.poll(current, force=False) is current
    assert any("no setting changed" in r.getMessage() for r in caplog.records)


def test_a_forced_poll_of_an_unchanged_file_gives_the_running_parts_quietly(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gfd")
    reloader, _, current = reloader_for(tmp_path, "flags: {migStrategy: none}\n")
    assert reloader.poll(current, force=True) is current
    assert not any("no setting changed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("text, message", [
    ("flags: {migStrategy: bogus}\n", "flags.migStrategy"),
    ("flags: {gfd: {oneshot: true}}\n", "flags.gfd.oneshot cannot change while gfd runs"),
], ids=["invalid-value", "restart-only-setting"])
def test_a_refused_file_is_one_config_error_naming_the_file(tmp_path: Path, text: str,
                                                            message: str) -> None:
    reloader, path, current = reloader_for(tmp_path, "flags: {migStrategy: none}\n")
    settled_write(path, text)
    with pytest.raises(ConfigError) as caught:
        reloader.poll(current, force=False)
    assert str(caught.value).startswith(f"config file {path}: ")
    assert message in str(caught.value)


# ----------------------------------------------------------------------------- one-shot reads


def test_read_once_reads_one_snapshot() -> None:
    assert (read_once(Settings(simulate="no-gpu", resource_manager="dra"))
            == replace(simulate("no-gpu").snapshot, resource_manager=DRA))


def test_label_once_labels_it_with_the_start_time_and_logs_warnings(
        caplog: pytest.LogCaptureFixture) -> None:
    snapshot, labelling = label_once(Settings(simulate="mixed-a100-a10"), 1_724_632_719)
    assert replace(snapshot, resource_manager=ResourceManager()) == simulate(
        "mixed-a100-a10").snapshot
    assert labelling.labels["nvidia.com/gfd.timestamp"] == "1724632719"
    assert any("several GPU models" in r.getMessage() for r in caplog.records
               if r.levelno == logging.WARNING)


def test_label_once_logs_each_dropped_label(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    data = json.loads(simulate("hgx-h100").snapshot.to_json())
    data["driver_version"] = "550.54.-15"  # "-15" is no valid label value
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(data))
    _, labelling = label_once(Settings(snapshot=str(path)), 1)
    assert "nvidia.com/cuda.driver.rev" not in labelling.labels
    assert any("dropped invalid label" in r.getMessage() and "cuda.driver.rev" in r.getMessage()
               for r in caplog.records)


# ----------------------------------------------------------------------------- Events on the Node


@pytest.mark.parametrize(("settings", "wanted"), [
    (Settings(sink="node", node_name="n1"), True),
    (Settings(sink="nodefeature", node_name="n1"), True),
    (Settings(sink="node", node_name="n1", events=False), False),
    (Settings(sink="node", node_name="n1", oneshot=True), True),  # sent before it exits
    (Settings(), False),
    (Settings(kubeconfig="/k", node_name="n1"), True),  # the file sink with credentials
    (Settings(kubeconfig="/k", node_name="n1", output_file="-"), False),
], ids=["node", "nodefeature", "events-false", "oneshot", "file", "file-with-kubeconfig",
        "stdout"])
def test_events_go_with_api_credentials_unless_turned_off(settings: Settings,
                                                          wanted: bool) -> None:
    assert wants_events(settings) is wanted


def test_parts_of_an_api_sink_record_events_through_the_sinks_client(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        server.add_node("n1")
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        factory = Factory(started=1, write=lambda text: None)
        parts = factory.parts(Settings(simulate="hgx-h100", sink="node", node_name="n1",
                                       kubeconfig=kubeconfig))
        assert isinstance(parts.sink, NodeSink) and parts.events is not None
        parts.events.failed("publish", "HTTP 503")
        parts.events.close()  # sends what is queued, then stops
        parts.sink.close()
        off = factory.parts(Settings(simulate="hgx-h100", sink="node", node_name="n1",
                                     kubeconfig=kubeconfig, events=False))
        assert off.events is None
        off.sink.close()
        assert [e["reason"] for e in server.events("default")] == ["LabelPublishFailing"]
