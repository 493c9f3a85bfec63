"""The command line: the only reader of argv and the environment; builds the object graph,
configures logging, prints, and maps errors to exit codes (0 ok, 1 runtime, 2 usage/config)."""

from __future__ import annotations

import difflib
import enum
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from gfd import __version__
from gfd.config import (
    DEFAULT_MACHINE_TYPE_FILE,
    DEFAULT_OUTPUT_FILE,
    DISCOVERY_STRATEGIES,
    LOG_FORMATS,
    SINKS,
    Settings,
    parse_duration,
    resolve,
)
from gfd.discovery import Discovery, read_snapshot_file
from gfd.errors import ConfigError, GfdError
from gfd.labelers.catalog import describe
from gfd.labelers.options import LABEL_SETS, MIG_STRATEGIES, LabelOptions
from gfd.labelers.pipeline import Labelling, compute_labels
from gfd.readers.host import HostReader
from gfd.sharing import Sharing
from gfd.sinks.base import Sink, diff
from gfd.sinks.featurefile import FeatureFileSink, StdoutSink, render
from gfd.snapshot import Snapshot

if TYPE_CHECKING:
    from gfd.configfile import FileConfig

log = logging.getLogger("gfd")

F = TypeVar("F", bound=Callable[..., Any])
_TIMESTAMP = "nvidia.com/gfd.timestamp"


class LabelNotFound(GfdError):
    """``gfd explain`` was asked about a label this machine does not get."""


class Exit(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2


def _bool_option(*decls: str, envvar: list[str], default: bool, help: str) -> Callable[[F], F]:
    """A GFD-style boolean: ``--x``, ``--x=true|false`` and its environment variables."""
    return click.option(*decls, type=click.BOOL, is_flag=False, flag_value=True,
                        default=default, envvar=envvar, show_envvar=True, help=help)


def _duration(value: Any, what: str) -> float | None:
    return parse_duration(value, what=what) if isinstance(value, str) else value


# Discovery options: shared by every command that reads GPUs.
DISCOVERY_OPTIONS: list[Callable[[F], F]] = [
    click.option("--mig-strategy", envvar=["GFD_MIG_STRATEGY", "MIG_STRATEGY"],
                 type=click.Choice(MIG_STRATEGIES), default="none", show_envvar=True,
                 help="How MIG devices are labelled."),
    _bool_option("--fail-on-init-error", envvar=["GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"],
                 default=True, help="Fail when NVML cannot start (false: label without it)."),
    _bool_option("--no-timestamp", envvar=["GFD_NO_TIMESTAMP"], default=False,
                 help="Do not write the gfd.timestamp label."),
    click.option("--machine-type-file", envvar=["GFD_MACHINE_TYPE_FILE"],
                 default=DEFAULT_MACHINE_TYPE_FILE, show_envvar=True,
                 help="File holding the machine type (DMI product name)."),
    click.option("--sysfs-root", envvar=["GFD_SYSFS_ROOT"], default="/sys", show_envvar=True,
                 help="Root of sysfs, for PCI class and vGPU detection."),
    click.option("--nvidia-smi", "nvidia_smi", envvar=["GFD_NVIDIA_SMI"], default="nvidia-smi",
                 show_envvar=True, help="nvidia-smi to run for the compute timeslice policy."),
    click.option("--config-file", envvar=["GFD_CONFIG_FILE", "CONFIG_FILE"], default="",
                 show_envvar=True, help="The device plugin's config file (YAML or JSON)."),
    click.option("--label-set", envvar=["GFD_LABEL_SET"], type=click.Choice(LABEL_SETS),
                 default="extended", show_envvar=True,
                 help="compat: exactly GFD's labels; extended: plus gfd's own."),
    click.option("--accelerator-label", envvar=["GFD_ACCELERATOR_LABEL"], default="",
                 show_envvar=True, help="Also write gpu.accelerator under this key."),
    click.option("--device-discovery-strategy", envvar=["DEVICE_DISCOVERY_STRATEGY"],
                 type=click.Choice(DISCOVERY_STRATEGIES), default="auto", show_envvar=True,
                 help="Accepted for GFD compatibility; gfd reads GPUs through NVML."),
    click.option("--driver-root-ctr-path", "--container-driver-root", "driver_root_ctr_path",
                 envvar=["DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"],
                 default="/driver-root", show_envvar=True,
                 help="Accepted for GFD compatibility; unused."),
    click.option("--simulate", envvar=["GFD_SIMULATE"], default="", show_envvar=True,
                 help="Label a built-in simulated machine instead of this one."),
    click.option("--snapshot", envvar=["GFD_SNAPSHOT"], default="", show_envvar=True,
                 help="Label a recorded snapshot (gfd snapshot output) instead of this machine."),
    click.option("--log-format", envvar=["GFD_LOG_FORMAT"], type=click.Choice(LOG_FORMATS),
                 default="text", show_envvar=True, help="Log line format."),
    click.option("--log-level", envvar=["GFD_LOG_LEVEL"],
                 type=click.Choice(["debug", "info", "warning", "error"]), default="info",
                 show_envvar=True, help="Log verbosity."),
]

# Options that name Settings fields but are GFD-compatibility-only or aliases.
_NOT_SETTINGS = {"driver_root_ctr_path", "output_format"}


def options(decorators: list[Callable[[F], F]]) -> Callable[[F], F]:
    def apply(func: F) -> F:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func

    return apply


def build_settings(ctx: click.Context, params: dict[str, Any],
                   loaded: FileConfig | None = None) -> Settings:
    """Flags and env (explicit ones win) > config file > defaults. ``loaded``: the config
    file already parsed (on reload), so it is not read a second time."""
    explicit: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    for name, value in params.items():
        if name in _NOT_SETTINGS:
            continue
        source = ctx.get_parameter_source(name)
        target = explicit if source in (ParameterSource.COMMANDLINE,
                                        ParameterSource.ENVIRONMENT) else defaults
        target[name] = value
    for table in (explicit, defaults):
        for name in ("sleep_interval", "expiry", "resync_interval", "stuck_after"):
            if name in table:
                table[name] = _duration(table[name], name.replace("_", "-"))
        if table.get("output_file") == "":
            table["output_file"] = "-"
    file_values: dict[str, Any] | None = None
    sharing: Sharing | None = None
    config_file = explicit.get("config_file") or ""
    if config_file:
        if loaded is None:
            from gfd.configfile import load_config_file

            loaded = load_config_file(config_file)
        file_values = loaded.values
        sharing = loaded.sharing
        for warning in loaded.warnings:
            log.warning("%s", warning)
    return resolve(explicit, defaults, file_values, sharing=sharing)


def make_discovery(settings: Settings) -> tuple[Discovery, Settings]:
    """The readers for these settings, and the settings with a simulation's own sharing
    config applied (a simulated node brings one unless a config file gave one)."""
    host = HostReader(machine_type_file=settings.machine_type_file,
                      sysfs_root=settings.sysfs_root)
    if settings.simulate:
        from gfd.readers.simulate import simulate

        sim = simulate(settings.simulate)
        if sim.sharing is not None and not settings.config_file:
            settings = replace(settings, sharing=sim.sharing)
        return Discovery(None, host, fixed=sim.snapshot), settings
    if settings.snapshot:
        return Discovery(None, host, fixed=read_snapshot_file(settings.snapshot)), settings
    from gfd.readers.nvml import NvmlReader

    smi = None
    if settings.label_set == "extended":
        from gfd.readers.smi import SmiReader

        smi = SmiReader(settings.nvidia_smi)
    return Discovery(NvmlReader(), host, smi=smi,
                     fail_on_init_error=settings.fail_on_init_error), settings


def read_once(settings: Settings) -> tuple[Snapshot, Settings]:
    """One snapshot (NVML started and shut down again) for the one-shot commands."""
    discovery, settings = make_discovery(settings)
    try:
        return discovery.read(), settings
    finally:
        discovery.close()


def label_once(settings: Settings, started: int) -> tuple[Snapshot, Labelling]:
    snapshot, settings = read_once(settings)
    labelling = compute_labels(snapshot, settings.label_options(timestamp=started))
    for warning in labelling.warnings:
        log.warning("%s", warning)
    for rejection in labelling.rejected:
        log.warning("dropped invalid label: %s", rejection.message)
    return snapshot, labelling


def _configure_logging(level: str, fmt: str) -> None:
    from gfd.logs import configure

    configure(level=level, fmt=fmt)


class GfdGroup(click.Group):
    """Maps gfd's errors to one line on stderr and an exit code, for every command."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ConfigError as exc:
            click.echo(f"gfd: error: {exc}", err=True)
            ctx.exit(Exit.USAGE)
        except GfdError as exc:
            click.echo(f"gfd: error: {exc}", err=True)
            ctx.exit(Exit.FAILURE)


@click.group(cls=GfdGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", message="%(version)s")
def cli() -> None:
    """gfd: GPU feature discovery for Kubernetes (NVIDIA GPU node labels)."""


@cli.command("labels")
@options(DISCOVERY_OPTIONS)
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              help="text: sorted key=value lines; json: one object.")
@click.pass_context
def labels_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Print the labels this node would get, sorted (no side effects)."""
    settings = build_settings(ctx, params)
    _configure_logging(settings.log_level if settings.log_level != "info" else "warning",
                       settings.log_format)
    _, labelling = label_once(settings, int(time.time()))
    if params["output_format"] == "json":
        click.echo(json.dumps(labelling.labels, indent=2, sort_keys=True))
    else:
        click.echo(render(labelling.labels, expires=None), nl=False)


@cli.command("snapshot")
@options(DISCOVERY_OPTIONS)
@click.pass_context
def snapshot_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Print the raw GPU snapshot as JSON (attach it to bug reports; replay with --snapshot)."""
    settings = build_settings(ctx, params)
    _configure_logging("warning", settings.log_format)
    snapshot, _ = read_once(settings)
    click.echo(snapshot.to_json(), nl=False)


# Publishing options: shared by run, diff and prune.
PUBLISH_OPTIONS: list[Callable[[F], F]] = [
    click.option("--output-file", "--output", "-o", "output_file", envvar=["GFD_OUTPUT_FILE"],
                 default=DEFAULT_OUTPUT_FILE, show_envvar=True,
                 help="Feature file to write; '-' writes to stdout."),
    _bool_option("--use-node-feature-api", envvar=["GFD_USE_NODE_FEATURE_API",
                                                   "USE_NODE_FEATURE_API"],
                 default=False, help="Publish an NFD NodeFeature (same as --sink nodefeature)."),
    click.option("--sink", envvar=["GFD_SINK"], type=click.Choice(SINKS), default="file",
                 show_envvar=True, help="Where labels go: feature file, NodeFeature, or the Node."),
    click.option("--expiry", envvar=["GFD_EXPIRY"], default="1h", show_envvar=True,
                 help="Feature-file label lifetime if gfd is gone for good (0: never expire)."),
    click.option("--resync-interval", envvar=["GFD_RESYNC_INTERVAL"], default="1h",
                 show_envvar=True, help="API sinks: how often to re-read and heal drift."),
    click.option("--kubeconfig", envvar=["KUBECONFIG"], default="", show_envvar=True,
                 help="kubeconfig file; empty means in-cluster config."),
    click.option("--kube-api-qps", envvar=["KUBE_API_QPS"], type=float, default=5.0,
                 show_envvar=True, help="Client-side request rate limit."),
    click.option("--kube-api-burst", envvar=["KUBE_API_BURST"], type=int, default=10,
                 show_envvar=True, help="Client-side request burst."),
    click.option("--namespace", envvar=["NAMESPACE"], default="default", show_envvar=True,
                 help="Namespace of the NodeFeature object."),
    click.option("--node-name", envvar=["NODE_NAME"], default="", show_envvar=True,
                 help="This node's name (required by the API sinks)."),
    click.option("--pod-name", envvar=["POD_NAME"], default="", show_envvar=True,
                 help="This pod's name, to find the owning DaemonSet."),
]

RUN_OPTIONS: list[Callable[[F], F]] = [
    _bool_option("--oneshot", envvar=["GFD_ONESHOT"], default=False,
                 help="Label once and exit."),
    click.option("--sleep-interval", envvar=["GFD_SLEEP_INTERVAL"], default="10s",
                 show_envvar=True, help="Time between cycles (Go duration, or 'infinite')."),
    click.option("--metrics-port", envvar=["GFD_METRICS_PORT"], type=int, default=0,
                 show_envvar=True, help="Serve /metrics, /healthz, /readyz here (0: off)."),
    click.option("--stuck-after", envvar=["GFD_STUCK_AFTER"], default="2m", show_envvar=True,
                 help="/healthz fails when a cycle runs longer than this (a hung NVML call)."),
]


def make_sink(settings: Settings, *, write: Callable[[str], None],
              on_request: Callable[[str, str], None] | None = None) -> Sink:
    """The sink the settings select; the Kubernetes client is imported only for API sinks."""
    kind = settings.effective_sink
    if kind == "file":
        if settings.output_file == "-":
            return StdoutSink(write)
        return FeatureFileSink(settings.output_file, expiry=settings.expiry)
    from gfd.sinks.api import make_api_sink

    return make_api_sink(settings, on_request=on_request)


class ConfigReloader:
    """Re-reads the config file when its content changes or on SIGHUP (daemon.OptionsSource)."""

    def __init__(self, ctx: click.Context, params: dict[str, Any], started: int,
                 config_file: str) -> None:
        from gfd.configfile import ConfigSource

        self._ctx, self._params, self._started = ctx, params, started
        self._source = ConfigSource(config_file)
        self._source.poll()

    def poll(self, *, force: bool) -> LabelOptions | None:
        loaded = self._source.poll(force=force)
        if loaded is None:
            return None
        settings = build_settings(self._ctx, self._params, loaded)
        return settings.label_options(timestamp=self._started)


@cli.command("run")
@options(DISCOVERY_OPTIONS + PUBLISH_OPTIONS + RUN_OPTIONS)
@click.pass_context
def run_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Run the agent: label this node and keep its labels current (the container entrypoint)."""
    started = int(time.time())
    settings = build_settings(ctx, params)
    _configure_logging(settings.log_level, settings.log_format)
    log.info("gfd %s starting: %s", __version__, settings_summary(settings))
    discovery, settings = make_discovery(settings)
    from gfd.daemon import Agent, Signals
    from gfd.metrics import Health, Metrics, MetricsServer

    metrics = Metrics(version=__version__)
    sink = make_sink(settings, write=lambda text: click.echo(text, nl=False),
                     on_request=metrics.api_request)
    reloader = (ConfigReloader(ctx, params, started, settings.config_file)
                if settings.config_file else None)
    interval = settings.sleep_interval
    health = Health(stuck_after=settings.stuck_after)
    server = None
    if settings.metrics_port:
        server = MetricsServer(metrics, health, port=settings.metrics_port)
        server.start()
    agent = Agent(discovery, sink, settings.label_options(timestamp=started), reloader=reloader,
                  observer=metrics, health=health)
    signals = Signals()
    _install_signal_handlers(signals)
    try:
        code = agent.run(signals, interval=interval, oneshot=settings.oneshot)
    finally:
        if server:
            server.stop()
    log.info("gfd stopped; published labels left in place")
    sys.exit(code)


@cli.command("diff")
@options(DISCOVERY_OPTIONS + PUBLISH_OPTIONS)
@click.pass_context
def diff_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Show what `gfd run` would change at the chosen sink (no side effects).

    Exit 0 when in sync, 1 when something would change."""
    settings = build_settings(ctx, params)
    _configure_logging("warning", settings.log_format)
    _, labelling = label_once(settings, int(time.time()))
    sink = make_sink(settings, write=lambda text: None)
    current = sink.published()
    wanted = labelling.labels
    if settings.no_timestamp is False and _TIMESTAMP in current and _TIMESTAMP in wanted:
        wanted = {**wanted, _TIMESTAMP: current[_TIMESTAMP]}  # a restart keeps no old stamp
    change = diff(current, wanted)
    for k in change.added:
        click.echo(f"+ {k}={wanted[k]}")
    for k in change.changed:
        click.echo(f"~ {k}: {current[k]} -> {wanted[k]}")
    for k in change.removed:
        click.echo(f"- {k}={current[k]}")
    if change.empty:
        click.echo(f"in sync: {len(wanted)} labels at {sink.name}", err=True)
        sys.exit(Exit.OK)
    click.echo(f"{change.summary()} at {sink.name}", err=True)
    sys.exit(Exit.FAILURE)


@cli.command("prune")
@options(DISCOVERY_OPTIONS + PUBLISH_OPTIONS + RUN_OPTIONS)
@click.pass_context
def prune_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Remove what gfd published at the chosen sink (its feature file, its NodeFeature, or the
    Node labels it set) and nothing else: for uninstalling or switching sinks. Takes the same
    flags as `gfd run`, so an uninstall Job can reuse the agent's arguments."""
    settings = build_settings(ctx, params)
    _configure_logging(settings.log_level, settings.log_format)
    sink = make_sink(settings, write=lambda text: None)
    result = sink.prune()
    for k in result.change.removed:
        click.echo(f"- {k}")
    click.echo(f"pruned {len(result.change.removed)} labels at {sink.name}"
               if result.written else f"nothing to prune at {sink.name}", err=True)


@cli.command("explain")
@click.argument("key")
@options(DISCOVERY_OPTIONS)
@click.pass_context
def explain_cmd(ctx: click.Context, /, key: str, **params: Any) -> None:
    """Explain why a label has its value on this machine: source, raw input, rules applied."""
    settings = build_settings(ctx, params)
    _configure_logging("error", settings.log_format)
    _, labelling = label_once(settings, int(time.time()))
    full = key if "/" in key else f"nvidia.com/{key}"
    label = labelling.explained.get(full)
    if label is None:
        close = difflib.get_close_matches(full, list(labelling.explained), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        doc = describe(full)
        why = f"; it is present when: {doc.when}" if doc else ""
        raise LabelNotFound(f"{full} is not a label on this machine{why}{hint}")
    rejected = {r.key: r for r in labelling.rejected}
    click.echo(f"{full}={label.value}")
    click.echo(f"  source: {label.source or '-'}")
    if label.raw:
        click.echo(f"  raw:    {label.raw}")
    for i, rule in enumerate(label.rules, 1):
        click.echo(f"  rule {i}: {rule}")
    doc = describe(full)
    if doc:
        where = " or ".join(f"gfd/labelers/{m.strip()}.py" for m in doc.module.split("/"))
        click.echo(f"  set:    {doc.set} (computed in {where})")
    if full in rejected:
        click.echo(f"  NOT PUBLISHED: {rejected[full].message}")


@cli.command("selector")
@click.option("--product", default="", help="GPU model, e.g. H100, A100-80GB, or an exact "
              "gpu.product value.")
@click.option("--min-memory", type=int, default=None, help="At least this much GPU memory, MiB.")
@click.option("--mig-profile", default="", help="A MIG slice, e.g. 1g.10gb (mixed strategy).")
@click.option("--shared/--dedicated", default=None, help="A time-sliced/MPS resource, or not.")
@click.option("--family", default="", help="Architecture, e.g. hopper.")
@click.option("--min-compute", default="", help="Minimum compute capability, e.g. 8.0.")
@click.option("--label-set", type=click.Choice(LABEL_SETS), default="extended",
              help="compat: use only GFD's labels (for clusters labelled by GFD).")
@click.option("--form", type=click.Choice(["auto", "nodeSelector", "affinity"]), default="auto",
              help="auto: a nodeSelector when exact values suffice, else node affinity.")
def selector_cmd(product: str, min_memory: int | None, mig_profile: str, shared: bool | None,
                 family: str, min_compute: str, label_set: str, form: str) -> None:
    """Print a nodeSelector or node-affinity stanza (YAML) for a pod spec."""
    import yaml

    from gfd.selector import Constraints, stanza

    constraints = Constraints(product=product, min_memory=min_memory, mig_profile=mig_profile,
                              shared=shared, family=family, min_compute=min_compute,
                              label_set=label_set)
    click.echo(yaml.safe_dump(stanza(constraints, form=form), sort_keys=False), nl=False)


@cli.command("docs")
def docs_cmd() -> None:
    """Print the label reference (docs/labels.md) generated from the code."""
    from gfd.docs import render

    click.echo(render(), nl=False)


def settings_summary(settings: Settings) -> str:
    """The merged settings as one JSON line (GFD logs its merged config at start)."""
    from dataclasses import asdict

    data = asdict(settings)
    data["sharing"] = {"strategy": settings.sharing.strategy,
                       "resources": {r.name: r.replicas for r in settings.sharing.resources}}
    return json.dumps(data, sort_keys=True, default=str)


def _install_signal_handlers(signals: Any) -> None:
    import signal

    def stop(signum: int, frame: object) -> None:
        log.info("received %s: finishing the current cycle, then exiting",
                 signal.Signals(signum).name)
        signals.request_stop()

    def reload(signum: int, frame: object) -> None:
        log.info("received SIGHUP: reloading the config")
        signals.request_reload()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, stop)
    signal.signal(signal.SIGHUP, reload)


def main(argv: list[str] | None = None) -> None:
    """Entry point (console script and ``python -m gfd``)."""
    cli.main(args=argv, prog_name="gfd")
