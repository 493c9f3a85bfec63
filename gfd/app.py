"""Wiring: settings -> GPU back end -> labelers -> sink. The same functions build an agent's
parts at start and on reload, so a reload applies every setting it changes.

Adding a back end or a sink: write ``readers/<name>.py`` or ``sinks/<name>.py``, then add
one line to :func:`make_gpu_source` or :func:`make_sink` (docs/architecture.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from gfd.budget import Budget
from gfd.config import Part, Settings, changed, resolve
from gfd.discovery import Discovery, GpuSource, UnusableGpus, read_snapshot_file
from gfd.errors import ConfigError
from gfd.labelers.pipeline import Labelling
from gfd.parts import EventRecorder, Parts
from gfd.projection import Projection, project
from gfd.readers.host import HostReader
from gfd.readers.resourcemanager import (
    DEFAULT_REGISTRY,
    DRA_DRIVER,
    SLICE_RECHECK,
    ResourceManagerReader,
    assumed,
)
from gfd.schedule import Duty
from gfd.sinks.base import Sink
from gfd.snapshot import Snapshot

if TYPE_CHECKING:
    from gfd.configfile import FileConfig
    from gfd.configwatch import ConfigWatch
    from gfd.events import Answers
    from gfd.kube import Kube
    from gfd.triggers import Fire

log = logging.getLogger(__name__)

Write = Callable[[str], None]
OnRequest = Callable[[str, str], None]
OnReconnect = Callable[[str], None]
OnEvent = Callable[[str, str], None]


# --------------------------------------------------------------------------- settings


def load_settings(explicit: Mapping[str, Any], *, defaults: Settings | None = None,
                  ) -> tuple[Settings, FileConfig | None]:
    """Settings from explicit flag/env values and the config file they name (GFD's
    precedence), and that file as parsed (None without one). Its warnings are logged."""
    loaded: FileConfig | None = None
    config_file = explicit.get("config_file") or (defaults.config_file if defaults else "")
    if config_file:
        from gfd.configfile import load_config_file

        loaded = load_config_file(config_file)
    return settings_from(explicit, loaded, defaults=defaults), loaded


def settings_from(explicit: Mapping[str, Any], loaded: FileConfig | None, *,
                  defaults: Settings | None = None) -> Settings:
    if loaded is None:
        return _simulation_sharing(resolve(explicit, defaults=defaults))
    for warning in loaded.warnings:
        log.warning("%s", warning)
    return resolve(explicit, loaded.values, sharing=loaded.sharing, defaults=defaults)


def _simulation_sharing(settings: Settings) -> Settings:
    """A simulated node brings the sharing config of its device plugin (no config file)."""
    if not settings.simulate:
        return settings
    from gfd.readers.simulate import simulate

    sharing = simulate(settings.simulate).sharing
    return settings if sharing is None else replace(settings, sharing=sharing)


# --------------------------------------------------------------------------- factories


def make_gpu_source(settings: Settings, *, device_facts: bool = False) -> GpuSource:
    """The GPU back end for ``--device-discovery-strategy`` (one line per back end);
    ``device_facts``: NVML also reads what only ``gfd devices`` shows (``read_once``)."""
    strategy = settings.device_discovery_strategy
    if strategy == "auto":
        from gfd.readers.nvml import device_names
        from gfd.readers.platform import resolve

        strategy, why = resolve(sysfs_root=settings.sysfs_root, nvml_device_names=device_names)
        log.info("device discovery: auto chose %s: %s", strategy, why)
    if strategy == "vfio":
        from gfd.readers.vfio import VfioReader

        return VfioReader(settings.sysfs_root, pci_ids_file=settings.pci_ids)
    if strategy == "tegra":
        from gfd.readers.tegra import TegraReader

        return TegraReader()
    from gfd.readers.nvml import NvmlReader

    return NvmlReader(device_facts=device_facts)


def make_manager(settings: Settings, *, api: bool = False,
                 on_request: OnRequest | None = None,
                 budget: Budget | None = None) -> ResourceManagerReader:
    """What decides the resource manager at each read (``--resource-manager``). With ``api``
    (a running agent whose sink talks to the API server) ``auto`` also asks the API server
    for this node's ResourceSlices of the DRA driver, through a client of its own: one LIST
    at start and once a day (``SLICE_RECHECK``, a duty of the loop), never per cycle; that
    LIST runs in a cycle and takes its time from the cycle's ``budget``."""
    if not _asks_slices(settings, api=api):
        return ResourceManagerReader(settings.resource_manager, settings.plugins_registry)
    # A client of its own, not the sink's: this reader lives with the discovery, the sink's
    # client with the sink, and a reload rebuilds either one alone (each setting's Part in
    # the settings table); a sink closes its client when it goes, so one shared client would
    # be closed under this reader by a reload of the sink alone. It sends one LIST at start
    # and one a day, taking its time from the same cycle budget as the sink's requests.
    kube = make_kube(settings, on_request=on_request, budget=budget)
    node = settings.node_name
    return ResourceManagerReader(settings.resource_manager, settings.plugins_registry,
                                 slices=lambda: kube.count_resourceslices(node, DRA_DRIVER),
                                 release=kube.close)


def _asks_slices(settings: Settings, *, api: bool) -> bool:
    """Whether ``auto`` asks the API server for the node's ResourceSlices: in a running agent
    whose sink talks to it."""
    return (api and settings.resource_manager == "auto" and bool(settings.node_name)
            and settings.effective_sink in ("node", "nodefeature"))


def _assumes_manager(settings: Settings, *, api: bool) -> bool:
    """Whether the resource manager is assumed, not looked for: ``auto`` on a simulated or
    recorded machine, which this host's kubelet (its default plugin registry) says nothing
    about. A registry given elsewhere, or the node's ResourceSlices, are still looked at."""
    return (bool(settings.simulate or settings.snapshot) and settings.resource_manager == "auto"
            and settings.plugins_registry == DEFAULT_REGISTRY
            and not _asks_slices(settings, api=api))


def make_discovery(settings: Settings, unusable: UnusableGpus | None = None, *,
                   api: bool = False, on_request: OnRequest | None = None,
                   budget: Budget | None = None, device_facts: bool = False) -> Discovery:
    """The readers for these settings, composed into one snapshot per read. ``unusable``:
    the agent's marks of GPUs an event made unusable (kept across reloads); ``api`` and
    ``budget``: see :func:`make_manager`; ``device_facts``: see :func:`read_once`. On a
    simulated or recorded machine ``auto`` assumes its resource manager
    (``resourcemanager.assumed``) rather than look at this host's kubelet."""
    if _assumes_manager(settings, api=api):
        return _discovery(settings, unusable, None, device_facts)
    manager = make_manager(settings, api=api, on_request=on_request, budget=budget)
    try:
        return _discovery(settings, unusable, manager, device_facts)
    except BaseException:
        manager.close()
        raise


def _discovery(settings: Settings, unusable: UnusableGpus | None,
               manager: ResourceManagerReader | None, device_facts: bool) -> Discovery:
    host = HostReader(machine_type_file=settings.machine_type_file,
                      sysfs_root=settings.sysfs_root, scan_vgpu=not settings.no_vgpu_labels)
    if settings.simulate or settings.snapshot:
        if settings.simulate:
            from gfd.readers.simulate import simulate

            fixed = simulate(settings.simulate).snapshot
        else:
            fixed = read_snapshot_file(settings.snapshot)
        if settings.no_vgpu_labels:  # as if the scan had not run there either
            fixed = replace(fixed, vgpu=None)
        if manager is None:
            fixed = replace(fixed, resource_manager=assumed(fixed,
                                                            simulated=bool(settings.simulate)))
        return Discovery(None, host, fixed=fixed, manager=manager)
    smi = None
    # nvidia-smi numbers the GPUs NVML sees: none of them is a vfio GPU.
    if settings.label_set == "extended" and settings.device_discovery_strategy != "vfio":
        from gfd.readers.smi import SmiReader

        smi = SmiReader(settings.nvidia_smi)
    return Discovery(make_gpu_source(settings, device_facts=device_facts), host, smi=smi,
                     fail_on_init_error=settings.fail_on_init_error, manager=manager,
                     unusable=unusable if unusable is not None else UnusableGpus(),
                     device_facts=device_facts)


def share_features_lock(old: Sink, new: Sink) -> None:
    """A reload moving the feature file within its directory: the new sink shares the old
    one's lock on it (one gfd per directory; this is still the one)."""
    from gfd.sinks.featurefile import FeatureFileSink

    if isinstance(old, FeatureFileSink) and isinstance(new, FeatureFileSink):
        new.share_lock(old)


def make_kube(settings: Settings, *, on_request: OnRequest | None = None,
              budget: Budget | None = None) -> Kube:
    """The Kubernetes client for these settings (imported only here, when needed).
    ``budget``: the agent's cycle deadline, which the loop's requests share (``gfd.budget``)."""
    from gfd.kube import DEADLINE, Kube

    # One request may take a quarter of --stuck-after; all the requests of a cycle (and the
    # retry waits between them) share the cycle's budget, so that no run of slow answers
    # makes /healthz fail over an API problem.
    return Kube(kubeconfig=settings.kubeconfig, qps=settings.kube_api_qps,
                burst=settings.kube_api_burst, on_request=on_request,
                timeout=min(DEADLINE, settings.stuck_after / 4), budget=budget)


def wants_events(settings: Settings) -> bool:
    """Events on the Node: an API sink, or the file sink given a kubeconfig and node name
    (a one-shot too: it sends them before it exits, for at most ``events.CLOSE_GRACE``)."""
    if not settings.events:
        return False
    if settings.effective_sink in ("node", "nodefeature"):
        return True
    return bool(settings.kubeconfig and settings.node_name and settings.output_file != "-")


def make_events(settings: Settings, kube: Kube, *, on_event: OnEvent | None = None,
                answers: Answers | None = None,
                node_uid: Callable[[], str] | None = None) -> EventRecorder:
    """Events on the Node, sent on their own thread through ``kube``; ``answers``: the
    requests of the sink's client that the API server answered (Events then retry on the
    sink's backoff); ``node_uid``: the Node's uid without a request of their own."""
    from gfd.events import NodeEvents, Recorder, Sender

    return NodeEvents(Recorder(settings.node_name),
                      Sender(kube, settings.node_name, report=on_event, answers=answers,
                             node_uid=node_uid),
                      report=on_event)


def known_node_uid(settings: Settings, sink: Sink) -> Callable[[], str] | None:
    """The involved Node's uid for Events, known without a request: the Node sink's last
    read of the Node; the node's name in the NodeFeature mode, whose RBAC may not read
    Nodes (as the kubelet names its own Events); None: the Events read the Node."""
    from gfd.sinks.node import NodeSink

    if isinstance(sink, NodeSink):
        return lambda: sink.uid
    if settings.effective_sink == "nodefeature":
        node = settings.node_name
        return lambda: node
    return None


def make_sink(settings: Settings, *, write: Write, on_request: OnRequest | None = None,
              on_reconnect: OnReconnect | None = None, kube: Kube | None = None,
              budget: Budget | None = None) -> Sink:
    """The sink the settings select; the Kubernetes client is imported only for API sinks
    (``kube``: the client to use, else one is made with ``budget``). An API sink's retries
    wait only as long as its client's budget allows."""
    kind = settings.effective_sink
    if kind == "file":
        if settings.output_file == "-":
            from gfd.sinks.stdout import StdoutSink

            return StdoutSink(write)
        from gfd.sinks.featurefile import FeatureFileSink

        return FeatureFileSink(settings.output_file, expiry=settings.file_expiry)
    if not settings.node_name:
        raise ConfigError(
            "--node-name / NODE_NAME is required with the NodeFeature and Node sinks "
            "(set it from the downward API: fieldRef spec.nodeName)")
    if kube is None:
        kube = make_kube(settings, on_request=on_request, budget=budget)
    from gfd.sinks.retry import Retry

    watch_api = kube if settings.watch else None
    retry = Retry(budget=kube.budget)
    if kind == "node":
        from gfd.sinks.node import NodeSink

        return NodeSink(kube, settings.node_name, retry=retry, watch_api=watch_api,
                        on_reconnect=on_reconnect)
    from gfd.sinks.nodefeature import NodeFeatureSink

    return NodeFeatureSink(kube, settings.node_name, namespace=settings.namespace,
                           pod_name=settings.pod_name, retry=retry, watch_api=watch_api,
                           on_reconnect=on_reconnect)


def make_duties(settings: Settings, discovery: Discovery, sink: Sink) -> tuple[Duty, ...]:
    """The periodic duties besides the label cycle, each with its interval from a setting."""
    duties = [Duty("host refresh", settings.host_refresh_interval, discovery.refresh)]
    if discovery.asks_api:
        duties.append(Duty("resourceslice check", SLICE_RECHECK,
                           discovery.recheck_resource_manager))
    kind = settings.effective_sink
    if kind in ("node", "nodefeature"):
        duties.append(Duty("resync", settings.resync_interval, sink.refresh))
    elif settings.output_file != "-" and settings.file_expiry > 0:
        duties.append(Duty("expiry refresh", settings.file_expiry / 2, sink.refresh))
    return tuple(duties)


def _both(first: OnRequest | None, second: OnRequest) -> OnRequest:
    """One ``on_request`` that reports to both."""
    if first is None:
        return second

    def report(verb: str, code: str) -> None:
        first(verb, code)
        second(verb, code)

    return report


@dataclass(frozen=True, slots=True, kw_only=True)
class Factory:
    """Builds an agent's parts from settings (at start, and again on reload)."""

    started: int
    """The agent's start time: the ``gfd.timestamp`` value, kept across reloads."""
    write: Write
    on_request: OnRequest | None = None
    on_reconnect: OnReconnect | None = None
    unusable: UnusableGpus = field(default_factory=UnusableGpus)
    """GPUs an event made unusable: every Discovery built here shares them, so a reload
    that builds a new one forgets none."""
    on_event: OnEvent | None = None
    budget: Budget = field(default_factory=Budget)
    """The deadline the API requests of each cycle share: every client built here takes
    from it, and the agent opens it at each cycle (``Parts.budget``)."""

    def _publishing(self, settings: Settings) -> tuple[Sink, EventRecorder | None]:
        """The sink, and the Events on the Node (sharing the sink's client) when wanted."""
        kube = answers = None
        if settings.node_name and wants_events(settings):
            on_request = self.on_request
            if settings.effective_sink in ("node", "nodefeature"):  # one API, one backoff
                from gfd.events import Answers

                answers = Answers()
                on_request = _both(self.on_request, answers.seen)
            kube = make_kube(settings, on_request=on_request, budget=self.budget)
        sink = make_sink(settings, write=self.write, on_request=self.on_request,
                         on_reconnect=self.on_reconnect, kube=kube, budget=self.budget)
        events = None if kube is None else make_events(
            settings, kube, on_event=self.on_event, answers=answers,
            node_uid=known_node_uid(settings, sink))
        return sink, events

    def parts(self, settings: Settings) -> Parts:
        discovery = make_discovery(settings, self.unusable, api=True,
                                   on_request=self.on_request, budget=self.budget)
        try:
            sink, events = self._publishing(settings)
        except BaseException:
            discovery.close()
            raise
        return self._assemble(settings, discovery, sink, events)

    def rebuild(self, current: Parts, settings: Settings) -> Parts:
        """New parts for changed settings: what they affect is built anew, the rest reused."""
        rows = changed(current.settings, settings)
        parts = {row.spec.part for row in rows}
        fixed = [row for row in rows if row.spec.part is Part.RESTART]
        if fixed:
            names = ", ".join(row.spec.file or row.flag for row in fixed)
            raise ConfigError(f"{names} cannot change while gfd runs (restart gfd to apply it)")
        discovery = current.discovery
        if Part.DISCOVERY in parts:
            discovery = make_discovery(settings, self.unusable, api=True,
                                       on_request=self.on_request, budget=self.budget)
        sink, events = current.sink, current.events
        if Part.SINK in parts:
            try:
                sink, events = self._publishing(settings)
                share_features_lock(current.sink, sink)
            except BaseException:
                if discovery is not current.discovery:
                    discovery.close()
                raise
        assert isinstance(discovery, Discovery)
        changes = tuple(f"{row.spec.file or row.flag}: "
                        f"{row.spec.kind.render(getattr(current.settings, row.name))} -> "
                        f"{row.spec.kind.render(getattr(settings, row.name))}" for row in rows)
        if current.settings.sharing != settings.sharing:
            changes += ("sharing",)
        return self._assemble(settings, discovery, sink, events, changes=changes)

    def _assemble(self, settings: Settings, discovery: Discovery, sink: Sink,
                  events: EventRecorder | None = None, *,
                  changes: tuple[str, ...] = ()) -> Parts:
        return Parts(settings=settings, discovery=discovery, sink=sink, events=events,
                     options=settings.label_options(timestamp=self.started),
                     duties=make_duties(settings, discovery, sink), changes=changes,
                     budget=self.budget)


class Reloader:
    """Watches the config file for ``gfd run``: on a change (or SIGHUP) it resolves the
    settings anew and builds the parts they change (``parts.PartsSource``)."""

    def __init__(self, explicit: Mapping[str, Any], loaded: FileConfig, factory: Factory, *,
                 defaults: Settings | None = None) -> None:
        from gfd.configsource import ConfigSource

        self._explicit = dict(explicit)
        self._defaults = defaults
        self._source = ConfigSource(loaded.path, current=loaded)
        self._factory = factory
        self._watch: ConfigWatch | None = None

    def watch(self, fire: Fire) -> bool:
        """Fire a ``config`` trigger when the file changes; False when that cannot be
        watched (the agent then checks the file every cycle)."""
        from gfd.configwatch import ConfigWatch

        self._watch = ConfigWatch(self._source.path, fire, quiet=self._source.quiet,
                                  writers=self._source.writers)
        return self._watch.start()

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()

    def poll(self, current: Parts, *, force: bool) -> Parts | None:
        loaded = self._source.poll(force=force)
        if loaded is None:
            return None
        where = f"config file {loaded.path}"
        settings = settings_from(self._explicit, loaded, defaults=self._defaults)
        if settings == current.settings:
            if not force:
                log.info("%s changed; no setting changed (flags and environment variables "
                         "take precedence over the file)", where)
            return current
        try:
            return self._factory.rebuild(current, settings)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from exc


# --------------------------------------------------------------------------- one-shot


def read_once(settings: Settings, *, device_facts: bool = False) -> Snapshot:
    """One snapshot (NVML started and shut down again) for the one-shot commands.
    ``device_facts``: with what only ``gfd devices`` shows (``gfd snapshot`` records it too):
    each GPU's minor number, architecture and addressing mode, each MIG-capable GPU's
    GPU-instance profiles and possible placements (``NvmlReader``); no label or feature uses
    them, and the profiles cost more NVML calls than the rest of a DGX A100's read."""
    discovery = make_discovery(settings, device_facts=device_facts)
    try:
        return discovery.read()
    finally:
        discovery.close()


def project_once(settings: Settings, started: int) -> tuple[Snapshot, Projection]:
    """One snapshot and its projection (labels and features), as ``gfd run`` would publish
    them; label warnings and rejections are logged."""
    snapshot = read_once(settings)
    projection = project(snapshot, settings.label_options(timestamp=started))
    for warning in projection.labelling.warnings:
        log.warning("%s", warning)
    for rejection in projection.labelling.rejected:
        log.warning("dropped invalid label: %s", rejection.message)
    return snapshot, projection


def label_once(settings: Settings, started: int) -> tuple[Snapshot, Labelling]:
    """One snapshot and its labels; label warnings and rejections are logged."""
    snapshot, projection = project_once(settings, started)
    return snapshot, projection.labelling
