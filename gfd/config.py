"""The settings table: every setting of gfd declared once, and GFD's precedence.

Each field of :class:`Settings` is one setting, declared with :func:`setting`: its type
(a ``gfd.settingkinds.Kind`` that parses command-line/environment text and config-file values),
default, command-line flags, environment variables (in GFD's order: the first one set
wins), path in the device plugin's config file (``flags.migStrategy``,
``flags.gfd.sleepInterval``), which part of a running agent a change affects, and its
help text. The click options (``cli.py``), GFD's own command line
(``gpu_feature_discovery.py``), the config file's ``flags`` section (``configfile.py``)
and the settings reference (``docs/settings.md``) are all generated from it.

Precedence per setting (docs/gfd-compatibility.md, "Config file"): an explicitly given
flag or environment variable, then the config file, then the default.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gfd import dra
from gfd.errors import ConfigError, show
from gfd.labelers.options import LABEL_SETS, MIG_STRATEGIES, LabelOptions
from gfd.settingkinds import (
    Address,
    Bool,
    Choice,
    Duration,
    Float,
    Int,
    Kind,
    OutputPath,
    PathKind,
    Text,
    ValueProblem,
)
from gfd.sharing import Sharing
from gfd.snapshot import RESOURCE_MANAGERS

DEFAULT_OUTPUT_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
DEFAULT_MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"
SINKS = ("file", "nodefeature", "node")
LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")
DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra", "vfio")
RESOURCE_MANAGER_CHOICES = ("auto", *RESOURCE_MANAGERS)
"""``--resource-manager``: a resource manager (``snapshot.RESOURCE_MANAGERS``), or ``auto``."""
DEFAULT_PLUGINS_REGISTRY = "/var/lib/kubelet/plugins_registry"
MIN_SLEEP_INTERVAL = 0.1
"""The shortest pause between label cycles; a shorter ``--sleep-interval`` is raised to it
(GFD has no minimum: its ``0s`` is a busy loop)."""


class Part(enum.Enum):
    """What a change of a setting affects in a running agent (``gfd run``)."""

    LABELS = "labels"
    """Label options: applied at the next cycle; nothing is rebuilt."""
    DISCOVERY = "discovery"
    """The readers (NVML session, host files, nvidia-smi): rebuilt."""
    SINK = "sink"
    """The publish target: rebuilt; labels move from the old target to the new one."""
    SCHEDULE = "schedule"
    """An interval of the loop: applied at once."""
    RESTART = "restart"
    """Fixed for the life of the process: a config file that changes it is refused."""
    NONE = "none"
    """Accepted for GFD compatibility and not used."""


class Section(enum.Enum):
    """The heading a setting is listed under in a command's ``--help``."""

    LABELS = "labels"
    DISCOVERY = "discovery"
    PUBLISHING = "publishing"
    HEALTH = "health"
    LOGGING = "logging"
    ADVANCED = "advanced"


COMMANDS = ("labels", "explain", "snapshot", "devices", "features", "diff", "prune", "run")
"""The commands that take settings (``selector``, ``docs`` and ``completion`` take none)."""

_LABELLING = ("labels", "explain", "diff", "run")
"""Label options: they change the labels, so every command that computes labels."""
_READING = ("labels", "explain", "snapshot", "devices", "features", "diff", "run")
"""Where the GPUs are read from and how: every command that reads GPUs."""
_LABEL_INPUTS = ("labels", "explain", "snapshot", "diff", "run")
"""What only the labels read (the machine type, the timeslice policy, the resource manager),
so also the snapshot that records it; the DRA devices and NodeFeature features do not."""
_VGPU = ("labels", "explain", "snapshot", "devices", "diff", "run")
"""The vGPU scan: the labels and the DRA devices (a vGPU guest has no DynamicMIG); not the
features."""
_TARGET = ("diff", "prune", "run")
"""The publish target: the commands that talk to it."""
_AGENT = ("run",)
"""Only the running agent (its loop, its Events, its health endpoints)."""
_LOGGING = COMMANDS


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True, slots=True, kw_only=True)
class Spec:
    """Everything about one setting besides its name, type annotation and default."""

    kind: Kind
    flags: tuple[str, ...]
    """Command-line spellings, the canonical ``--name`` first."""
    env: tuple[str, ...] = ()
    """Environment variables in GFD's order: the first one that is set wins."""
    file: str = ""
    """Path in the device plugin's config file (``flags.gfd.sleepInterval``); "" if none."""
    part: Part
    section: Section
    """The heading of ``--help`` the setting is listed under."""
    commands: tuple[str, ...]
    """The commands whose output or behaviour it changes, and so whose ``--help`` offers it
    (``prune`` also accepts ``run``'s settings, unlisted, so an uninstall Job can reuse the
    agent's arguments)."""
    help: str
    brief: str = ""
    """A shorter help for ``--help`` where ``help`` is long ("" : ``help`` itself); the
    settings reference (``gfd docs settings``) gives ``help`` in full."""
    gfd: tuple[str, ...] = ()
    """Spellings of GFD's own flag (``gpu-feature-discovery``); () when GFD has none."""


def setting(default: Any, **spec: Any) -> Any:
    """Declare one setting: a dataclass field whose metadata is its :class:`Spec`."""
    return field(default=default, metadata={"setting": Spec(**spec)})


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every setting of gfd, after precedence. Field names are the flags' names."""

    mig_strategy: str = setting(
        "none", kind=Choice(MIG_STRATEGIES), flags=("--mig-strategy",),
        env=("GFD_MIG_STRATEGY", "MIG_STRATEGY"), file="flags.migStrategy", part=Part.LABELS,
        section=Section.LABELS, commands=_LABELLING, gfd=("mig-strategy",),
        help="How MIG devices are labelled.")
    fail_on_init_error: bool = setting(
        True, kind=Bool(), flags=("--fail-on-init-error",),
        env=("GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"), file="flags.failOnInitError",
        part=Part.DISCOVERY,
        section=Section.DISCOVERY, commands=_READING, gfd=("fail-on-init-error",),
        brief="Fail when NVML cannot start (false: label without it).",
        help="Fail when NVML cannot start (false: label without it, retry every cycle).")
    no_timestamp: bool = setting(
        False, kind=Bool(), flags=("--no-timestamp",), env=("GFD_NO_TIMESTAMP",),
        file="flags.gfd.noTimestamp", part=Part.LABELS, section=Section.LABELS, commands=_LABELLING,
        gfd=("no-timestamp",), help="Do not write the gfd.timestamp label.")
    machine_type_file: str = setting(
        DEFAULT_MACHINE_TYPE_FILE, kind=PathKind(), flags=("--machine-type-file",),
        env=("GFD_MACHINE_TYPE_FILE",), file="flags.gfd.machineTypeFile",
        part=Part.DISCOVERY,
        section=Section.ADVANCED, commands=_LABEL_INPUTS, gfd=("machine-type-file",),
        help="File holding the machine type (DMI product name).")
    sysfs_root: str = setting(
        "/sys", kind=PathKind(), flags=("--sysfs-root",), env=("GFD_SYSFS_ROOT",),
        part=Part.DISCOVERY, section=Section.ADVANCED, commands=_READING,
        help="Root of sysfs, for PCI class and vGPU detection and the vfio back end.")
    no_vgpu_labels: bool = setting(
        False, kind=Bool(), flags=("--no-vgpu-labels",), env=("GFD_NO_VGPU_LABELS",),
        part=Part.DISCOVERY, section=Section.DISCOVERY, commands=_VGPU,
        brief="Skip the vGPU scan of PCI config space and its vgpu.* labels (then no "
              "capability is needed).",
        help="Skip the vGPU scan of PCI config space and its vgpu.* labels: gfd then needs "
             "no capability (reading all of config space needs CAP_SYS_ADMIN).")
    nvidia_smi: str = setting(
        "nvidia-smi", kind=Text(), flags=("--nvidia-smi",), env=("GFD_NVIDIA_SMI",),
        part=Part.DISCOVERY, section=Section.ADVANCED, commands=_LABEL_INPUTS,
        help="nvidia-smi to run for the compute timeslice policy (looked up on PATH).")
    config_file: str = setting(
        "", kind=PathKind(), flags=("--config-file",), env=("GFD_CONFIG_FILE", "CONFIG_FILE"),
        part=Part.RESTART, section=Section.LABELS, commands=_READING, gfd=("config-file",),
        brief="The device plugin's config file.",
        help="The device plugin's config file (YAML or JSON).")
    label_set: str = setting(
        "extended", kind=Choice(LABEL_SETS), flags=("--label-set",), env=("GFD_LABEL_SET",),
        part=Part.DISCOVERY, section=Section.LABELS, commands=_LABELLING,
        help="compat: exactly GFD's labels; extended: plus gfd's own.")
    accelerator_label: str = setting(
        "", kind=Text(), flags=("--accelerator-label",), env=("GFD_ACCELERATOR_LABEL",),
        part=Part.LABELS,
        section=Section.LABELS, commands=_LABELLING,
        help="Also write gpu.accelerator under this key.")
    device_discovery_strategy: str = setting(
        "auto", kind=Choice(DISCOVERY_STRATEGIES), flags=("--device-discovery-strategy",),
        env=("DEVICE_DISCOVERY_STRATEGY",), file="flags.deviceDiscoveryStrategy",
        part=Part.DISCOVERY,
        section=Section.DISCOVERY, commands=_READING, gfd=("device-discovery-strategy",),
        brief="How GPUs are read; auto: tegra on Tegra without NVML, else nvml.",
        help="How GPUs are read: nvml; tegra (the CUDA driver API, for Jetson/IGX); vfio "
             "(GPUs bound to vfio-pci, from sysfs and the PCI IDs database); auto: GFD's "
             "rule (tegra on a Tegra SoC without NVML, else nvml; never vfio).")
    resource_manager: str = setting(
        "auto", kind=Choice(RESOURCE_MANAGER_CHOICES), flags=("--resource-manager",),
        env=("GFD_RESOURCE_MANAGER",), file="flags.gfd.resourceManager", part=Part.DISCOVERY,
        section=Section.DISCOVERY, commands=_LABEL_INPUTS,
        brief="What hands out the GPUs (it decides the labels); auto: dra if the DRA "
              "driver runs here.",
        help="What hands out this node's GPUs, which decides the labels: device-plugin (GFD's "
             "labels); dra (hardware truth and gpu.present, no device-plugin resource labels, "
             "sharing ignored); auto: dra while the NVIDIA DRA kubelet plugin is registered "
             "(its socket in --plugins-registry) or, with an API sink, the node has "
             f"{dra.DRIVER} ResourceSlices, else device-plugin; on --simulate or --snapshot "
             "(not this host's machine) auto assumes device-plugin, or the manager the snapshot "
             "recorded, unless --plugins-registry names a registry to look in. "
             "gpu-feature-discovery: device-plugin.")
    plugins_registry: str = setting(
        DEFAULT_PLUGINS_REGISTRY, kind=PathKind(), flags=("--plugins-registry",),
        env=("GFD_PLUGINS_REGISTRY",), part=Part.DISCOVERY,
        section=Section.DISCOVERY, commands=_LABEL_INPUTS,
        brief="The kubelet's plugin registration directory, where auto looks for the DRA driver.",
        help="The kubelet's plugin registration directory (mounted read-only), where "
             f"--resource-manager auto looks for the DRA driver's {dra.REGISTRATION_SOCKET}.")
    driver_root_ctr_path: str = setting(
        "/driver-root", kind=PathKind(),
        flags=("--driver-root-ctr-path", "--container-driver-root"),
        env=("DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"), part=Part.NONE,
        section=Section.ADVANCED, commands=_AGENT,
        gfd=("driver-root-ctr-path", "container-driver-root"),
        help="Accepted for GFD compatibility; unused.")
    pci_ids: str = setting(
        "", kind=PathKind(), flags=("--pci-ids",), env=("GFD_PCI_IDS",), part=Part.DISCOVERY,
        section=Section.DISCOVERY, commands=_READING,
        brief="vfio back end: a pci.ids file to name GPUs from, instead of the bundled one.",
        help="vfio back end: a pci.ids file to name GPUs from, instead of the NVIDIA section "
             "of pci.ids bundled with gfd (mount a newer one for GPUs it does not know).")
    simulate: str = setting(
        "", kind=Text(), flags=("--simulate",), env=("GFD_SIMULATE",), part=Part.DISCOVERY,
        section=Section.DISCOVERY, commands=_READING,
        brief="Label a built-in simulated machine.",
        help="Label a built-in simulated machine instead of this one.")
    snapshot: str = setting(
        "", kind=PathKind(), flags=("--snapshot",), env=("GFD_SNAPSHOT",), part=Part.DISCOVERY,
        section=Section.DISCOVERY, commands=_READING,
        brief="Label a recorded snapshot (JSON or YAML).",
        help="Label a recorded snapshot (gfd snapshot output, JSON or YAML; standard input "
             "for -) instead of this machine.")
    log_format: str = setting(
        "text", kind=Choice(LOG_FORMATS), flags=("--log-format",), env=("GFD_LOG_FORMAT",),
        part=Part.RESTART, section=Section.LOGGING, commands=_LOGGING, help="Log line format.")
    log_level: str = setting(
        "info", kind=Choice(LOG_LEVELS), flags=("--log-level",), env=("GFD_LOG_LEVEL",),
        part=Part.RESTART, section=Section.LOGGING, commands=_LOGGING, help="Log verbosity.")

    output_file: str = setting(
        DEFAULT_OUTPUT_FILE, kind=OutputPath(), flags=("--output-file", "--output", "-o"),
        env=("GFD_OUTPUT_FILE",), file="flags.gfd.outputFile", part=Part.SINK,
        section=Section.PUBLISHING, commands=_TARGET,
        gfd=("output-file", "output", "o"),
        brief="Feature file to write ('-': stdout).",
        help="Feature file to write; '-' (or '') writes to stdout.")
    use_node_feature_api: bool = setting(
        False, kind=Bool(), flags=("--use-node-feature-api",),
        env=("GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"), file="flags.useNodeFeatureAPI",
        part=Part.SINK, section=Section.PUBLISHING, commands=_TARGET, gfd=("use-node-feature-api",),
        brief="Publish a NodeFeature (--sink nodefeature).",
        help="Publish an NFD NodeFeature (same as --sink nodefeature).")
    sink: str = setting(
        "file", kind=Choice(SINKS), flags=("--sink",), env=("GFD_SINK",), part=Part.SINK,
        section=Section.PUBLISHING, commands=_TARGET,
        brief="Where labels go.",
        help="Where labels go: feature file, NodeFeature, or the Node.")
    expiry: float = setting(
        3600.0, kind=Duration(), flags=("--expiry",), env=("GFD_EXPIRY",), part=Part.SINK,
        section=Section.PUBLISHING, commands=_AGENT,
        help="Feature-file label lifetime if gfd is gone for good (0: never expire).")
    resync_interval: float = setting(
        3600.0, kind=Duration(zero=False), flags=("--resync-interval",),
        env=("GFD_RESYNC_INTERVAL",), part=Part.SCHEDULE,
        section=Section.PUBLISHING, commands=_AGENT,
        brief="API sinks: how often to re-apply the labels while the object is not watched.",
        help="API sinks: how often to re-apply the labels (heals drift) while the object "
             "is not watched; with a healthy watch, drift is repaired at once and this "
             "resync runs once a day.")
    watch: bool = setting(
        True, kind=Bool(), flags=("--watch",), env=("GFD_WATCH",), part=Part.SINK,
        section=Section.PUBLISHING, commands=_AGENT,
        brief="API sinks: watch the published object and repair drift at once.",
        help="API sinks: watch the published object and repair drift at once (needs list "
             "and watch on it; forbidden, gfd falls back to the resync); false: no watch, "
             "drift repaired at the resync. The watch costs no request but holds one "
             "connection: about 155 KiB of API server memory per node, 40-50 KiB without "
             "(BENCHMARKS.md).")
    events: bool = setting(
        True, kind=Bool(), flags=("--events",), env=("GFD_EVENTS",), part=Part.SINK,
        section=Section.PUBLISHING, commands=_AGENT,
        brief="Record Kubernetes Events on the Node (labels changed, GPU lost, MIG "
              "reconfigured, publishing failing).",
        help="Record Kubernetes Events on the Node (labels changed, a GPU lost or back, MIG "
             "reconfigured, publishing failing or recovered; needs create and patch on "
             "events in the default namespace) with an API sink, or with --kubeconfig and "
             "--node-name; --oneshot sends its Events before it exits (for at most 5 s); "
             "false: none.")
    kubeconfig: str = setting(
        "", kind=PathKind(), flags=("--kubeconfig",), env=("KUBECONFIG",), part=Part.SINK,
        section=Section.PUBLISHING, commands=_TARGET, gfd=("kubeconfig",),
        brief="kubeconfig file (none: in-cluster config).",
        help="kubeconfig file; empty means in-cluster config.")
    kube_api_qps: float = setting(
        5.0, kind=Float(0.0), flags=("--kube-api-qps",), env=("KUBE_API_QPS",),
        part=Part.SINK, section=Section.ADVANCED, commands=_TARGET, gfd=("kube-api-qps",),
        help="Client-side request rate limit.")
    kube_api_burst: int = setting(
        10, kind=Int(0, 2**31 - 1), flags=("--kube-api-burst",), env=("KUBE_API_BURST",),
        part=Part.SINK, section=Section.ADVANCED, commands=_TARGET, gfd=("kube-api-burst",),
        help="Client-side request burst.")
    namespace: str = setting(
        "default", kind=Text(), flags=("--namespace",), env=("NAMESPACE",), part=Part.SINK,
        section=Section.PUBLISHING, commands=_TARGET, gfd=("namespace",),
        brief="NodeFeature namespace.",
        help="Namespace of the NodeFeature object.")
    node_name: str = setting(
        "", kind=Text(), flags=("--node-name",), env=("NODE_NAME",), part=Part.SINK,
        section=Section.PUBLISHING, commands=_TARGET, gfd=("node-name",),
        brief="This node's name (API sinks).",
        help="This node's name (required by the API sinks).")
    pod_name: str = setting(
        "", kind=Text(), flags=("--pod-name",), env=("POD_NAME",), part=Part.SINK,
        section=Section.PUBLISHING, commands=_AGENT, gfd=("pod-name",),
        brief="This pod's name (the NodeFeature's owner).",
        help="This pod's name, to find the owning DaemonSet (the NodeFeature's owner).")

    oneshot: bool = setting(
        False, kind=Bool(), flags=("--oneshot",), env=("GFD_ONESHOT",),
        file="flags.gfd.oneshot", part=Part.RESTART,
        section=Section.PUBLISHING, commands=_AGENT, gfd=("oneshot",),
        help="Label once and exit.")
    sleep_interval: float | None = setting(
        60.0, kind=Duration(infinite=True),
        flags=("--sleep-interval",),
        env=("GFD_SLEEP_INTERVAL",), file="flags.gfd.sleepInterval", part=Part.SCHEDULE,
        section=Section.PUBLISHING, commands=_AGENT, gfd=("sleep-interval",),
        brief="Time between polling cycles, or 'infinite'.",
        help="Time between polling cycles (Go duration, or 'infinite': label once, then "
             "wait); at least 100ms. Changes that send events (NVML, the config file, the "
             "publish target) are labelled at once in between.")
    host_refresh_interval: float = setting(
        300.0, kind=Duration(zero=False), flags=("--host-refresh-interval",),
        env=("GFD_HOST_REFRESH_INTERVAL",), part=Part.SCHEDULE,
        section=Section.ADVANCED, commands=_AGENT,
        brief="How often to re-read nvidia-smi's timeslice policy and the vGPU scan.",
        help="How often to re-read what only an admin changes (nvidia-smi timeslice policy, "
             "vGPU scan); also on SIGHUP and when the set of GPUs changes.")
    metrics_port: int = setting(
        0, kind=Int(0, 65535), flags=("--metrics-port",), env=("GFD_METRICS_PORT",),
        part=Part.RESTART,
        section=Section.HEALTH, commands=_AGENT,
        brief="Serve /metrics, /healthz, /readyz (0: off).",
        help="Serve /metrics, /healthz, /readyz here (0: off).")
    metrics_address: str = setting(
        "0.0.0.0", kind=Address(), flags=("--metrics-address",), env=("GFD_METRICS_ADDRESS",),
        part=Part.RESTART, section=Section.HEALTH, commands=_AGENT,
        brief="Address the metrics port listens on (0.0.0.0, ::, 127.0.0.1).",
        help="Address the metrics port listens on: 0.0.0.0, every IPv4 interface (the "
             "kubelet probes the pod IP); :: for IPv6 too; 127.0.0.1 for this host only.")
    stuck_after: float = setting(
        120.0, kind=Duration(zero=False), flags=("--stuck-after",), env=("GFD_STUCK_AFTER",),
        part=Part.RESTART, section=Section.HEALTH, commands=_AGENT,
        brief="/healthz fails when a cycle runs longer than this, or the loop is this late to "
              "wake.",
        help="/healthz fails when a cycle runs longer than this (a hung NVML call), or the "
             "loop is this late to wake; a cycle's API requests share half of it (from the "
             "cycle's start), each at most a quarter of it and 30s, connect included.")

    sharing: Sharing = field(default_factory=Sharing)
    """From the config file's sharing section (no flag sets it)."""

    @property
    def file_expiry(self) -> float:
        """Seconds the feature file's labels live unless refreshed; 0: no expiry. A running
        agent refreshes the expiry at half its life whatever its interval (``infinite``
        included); ``--oneshot`` writes none, since nothing would be left to refresh it."""
        return 0.0 if self.oneshot else self.expiry

    @property
    def effective_sink(self) -> str:
        return "nodefeature" if self.use_node_feature_api and self.sink == "file" else self.sink

    def label_options(self, *, timestamp: int | None) -> LabelOptions:
        return LabelOptions(
            mig_strategy=self.mig_strategy,
            sharing=self.sharing,
            label_set=self.label_set,
            timestamp=None if self.no_timestamp else timestamp,
            accelerator_label=self.accelerator_label or None,
        )


@dataclass(frozen=True, slots=True)
class Entry:
    """One row of the settings table."""

    name: str
    default: Any
    spec: Spec

    @property
    def flag(self) -> str:
        return self.spec.flags[0]


def _table() -> tuple[Entry, ...]:
    rows = []
    for f in fields(Settings):
        spec = f.metadata.get("setting")
        if isinstance(spec, Spec):
            rows.append(Entry(f.name, f.default, spec))
    return tuple(rows)


TABLE: tuple[Entry, ...] = _table()
"""Every setting, in declaration order."""

BY_NAME: Mapping[str, Entry] = {e.name: e for e in TABLE}


def entries(command: str) -> Iterator[Entry]:
    """The settings that change what ``command`` does, in table order."""
    return (e for e in TABLE if command in e.spec.commands)


# --------------------------------------------------------------------------- precedence


def resolve(explicit: Mapping[str, Any], file_values: Mapping[str, Any] | None = None, *,
            sharing: Sharing | None = None, defaults: Settings | None = None) -> Settings:
    """Combine typed values: explicit flag/env > config file > default, then check them.
    ``defaults``: the settings to fall back to (``Settings()``, or GFD's own defaults)."""
    merged: dict[str, Any] = {}
    for entry in TABLE:
        if entry.name in explicit:
            merged[entry.name] = explicit[entry.name]
        elif file_values and entry.name in file_values:
            merged[entry.name] = file_values[entry.name]
    _sink_rules(explicit, merged)
    settings = replace(defaults or Settings(), **merged)
    if sharing is not None:
        settings = replace(settings, sharing=sharing)
    check(settings)
    return settings


def _sink_rules(explicit: Mapping[str, Any], merged: dict[str, Any]) -> None:
    """``--use-node-feature-api`` is ``--sink nodefeature``: both given and disagreeing is
    refused; a ``--sink`` given explicitly wins over the config file's or the default's
    ``useNodeFeatureAPI`` (explicit > file > default, as for every setting)."""
    if "sink" not in explicit or explicit["sink"] == "nodefeature":
        return
    if explicit.get("use_node_feature_api"):
        raise ConfigError(f"--use-node-feature-api and --sink {explicit['sink']} contradict "
                          "each other (--use-node-feature-api means --sink nodefeature): give "
                          "one of them")
    merged["use_node_feature_api"] = False


def changed(old: Settings, new: Settings) -> tuple[Entry, ...]:
    """The table rows whose value differs between two settings."""
    return tuple(e for e in TABLE if getattr(old, e.name) != getattr(new, e.name))


def check(settings: Settings) -> None:
    """Rules that involve more than one setting, or more than a value's own kind."""
    if settings.simulate and settings.snapshot:
        raise ConfigError("--simulate and --snapshot cannot be used together: pick one source")
    if settings.accelerator_label:
        check_accelerator_label(settings.accelerator_label)
        if settings.label_set == "compat":
            raise ConfigError(
                f"--accelerator-label {show(settings.accelerator_label)} adds a label GFD does "
                "not write, and --label-set compat writes exactly GFD's labels: use --label-set "
                "extended, or drop --accelerator-label")


RESERVED_PREFIXES = ("kubernetes.io", "k8s.io")
"""Label namespaces the kubelet and Kubernetes own (and their subdomains)."""


def check_accelerator_label(label: str) -> None:
    """``--accelerator-label`` must be a valid key that is nobody else's: not a label gfd
    writes itself (it would overwrite it) and not a Kubernetes-owned one (the Node sink would
    take it over from the kubelet, and ``gfd prune`` would then delete it)."""
    from gfd.labelers.catalog import describe
    from gfd.labelers.validate import key_problem

    problem = key_problem(label)
    if problem is not None:
        raise ConfigError(f"accelerator-label: {show(label)} is not a valid label key: {problem}")
    prefix = label.rpartition("/")[0]
    if any(prefix == p or prefix.endswith("." + p) for p in RESERVED_PREFIXES):
        raise ConfigError(f"accelerator-label: {show(label)} is in the {prefix} namespace, which "
                          "Kubernetes owns; choose a key of your own (e.g. accelerator or "
                          "example.com/accelerator)")
    if prefix == "nvidia.com" and describe(label) is not None:
        raise ConfigError(f"accelerator-label: {show(label)} is a label gfd writes itself; choose "
                          "another key (e.g. accelerator)")


def parse_text(entry: Entry, text: str, *, source: str = "") -> Any:
    """Parse one setting from text (a flag or environment value); ConfigError names it."""
    try:
        return entry.spec.kind.from_text(text)
    except ValueProblem as exc:
        where = source or entry.flag
        raise ConfigError(f"{where}: {exc}") from None
