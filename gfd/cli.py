"""The command line: options (generated from the settings table), the commands, their
output, signals, and the mapping of errors to exit codes (0 ok, 1 runtime, 2 usage/config).

Building the objects a command needs is ``app``'s job; this module only parses, prints
and decides the exit status.
"""

from __future__ import annotations

import difflib
import enum
import json
import logging
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gfd import __version__, dra
from gfd.config import BY_NAME, Bool, Entry, Group, Settings, ValueProblem, entries
from gfd.errors import ConfigError, GfdError
from gfd.labelers.catalog import EXCLUDED_KEYS, describe
from gfd.labelers.options import LABEL_SETS

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
    NOT_STARTED = 3
    """``gfd devices``: the DRA driver's plugin would not start on this node."""


# --------------------------------------------------------------------------- options


class _SettingType(click.ParamType[Any]):
    """A click type that parses a setting's text with its kind from the settings table."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.name = entry.spec.kind.metavar.lower()

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return self.entry.spec.kind.metavar

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a valueless boolean flag: its flag_value
        try:
            return self.entry.spec.kind.from_text(value)
        except ValueProblem as exc:
            self.fail(str(exc), param, ctx)


class _SettingOption(click.Option):
    """An option whose default lives in the settings table: click sees None (so an option
    not given lets the config file decide), help shows the table's default."""

    def __init__(self, *args: Any, entry: Entry, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entry = entry

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        extra["default"] = self.entry.spec.kind.render(self.entry.default) or '""'
        return extra


def _option(entry: Entry) -> Callable[[F], F]:
    spec = entry.spec
    extra: dict[str, Any] = {}
    if isinstance(spec.kind, Bool):
        extra = {"is_flag": False, "flag_value": True}  # --x, --x=true|false, as GFD
    return click.option(*spec.flags, entry.name, cls=_SettingOption, entry=entry,
                        type=_SettingType(entry), default=None, envvar=list(spec.env),
                        show_envvar=bool(spec.env), help=spec.help, **extra)


def options(*groups: Group) -> Callable[[F], F]:
    """The options of the settings in these groups, in table order."""

    def apply(func: F) -> F:
        for entry in reversed(list(entries(*groups))):
            func = _option(entry)(func)
        return func

    return apply


def _explicit(params: dict[str, Any]) -> dict[str, Any]:
    """The settings given on the command line or in the environment (click passes None for
    the others, so the config file and the defaults can fill them)."""
    return {k: v for k, v in params.items() if k in BY_NAME and v is not None}


def build_settings(params: dict[str, Any]) -> tuple[Settings, FileConfig | None]:
    """Settings from this command's options and the config file; also the parsed file."""
    from gfd.app import load_settings

    return load_settings(_explicit(params))


def _configure_logging(level: str, fmt: str) -> None:
    from gfd.logs import configure

    configure(level=level, fmt=fmt)


def exit_code(prog: str, exc: GfdError) -> Exit:
    """One line on stderr for an error, and its exit code: 2 for usage and config, else 1."""
    click.echo(f"{prog}: error: {exc}", err=True)
    return Exit.USAGE if isinstance(exc, ConfigError) else Exit.FAILURE


class GfdGroup(click.Group):
    """Maps gfd's errors to one line on stderr and an exit code, for every command."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GfdError as exc:
            ctx.exit(exit_code("gfd", exc))


@click.group(cls=GfdGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", message="%(version)s")
def cli() -> None:
    """gfd: GPU feature discovery for Kubernetes (NVIDIA GPU node labels)."""


# --------------------------------------------------------------------------- one-shot commands


@cli.command("labels")
@options(Group.DISCOVERY)
@click.option("--format", "output_format", type=click.Choice(["text", "json"]), default="text",
              help="text: sorted key=value lines; json: one object.")
@click.pass_context
def labels_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Print the labels this node would get, sorted (no side effects); the resource manager
    they are for, and why, on stderr."""
    from gfd.app import label_once
    from gfd.sinks.featurefile import render

    settings, _ = build_settings(params)
    _configure_logging(settings.log_level if settings.log_level != "info" else "warning",
                       settings.log_format)
    snapshot, labelling = label_once(settings, int(time.time()))
    manager = snapshot.resource_manager
    click.echo(f"resource manager: {manager.name} ({manager.evidence})", err=True)
    if params["output_format"] == "json":
        click.echo(json.dumps(labelling.labels, indent=2, sort_keys=True))
    else:
        click.echo(render(labelling.labels, expires=None), nl=False)


@cli.command("snapshot")
@options(Group.DISCOVERY)
@click.pass_context
def snapshot_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Print the raw GPU snapshot as JSON (attach it to bug reports; replay with --snapshot)."""
    from gfd.app import read_once

    settings, _ = build_settings(params)
    _configure_logging("warning", settings.log_format)
    click.echo(read_once(settings).to_json(), nl=False)


@cli.command("devices", help=(
    "Print each GPU, MIG and passthrough device as the NVIDIA DRA driver publishes it "
    f"(release {dra.RELEASE}): device names, attributes with their types, capacities, and "
    "under DynamicMIG the shared counter sets and what each device consumes; what to write "
    "CEL selectors against. A device the snapshot cannot describe fully lists what is "
    "missing: exit 1. Where the driver would fail to start (a lost GPU, a MIG device it cannot "
    "describe, an NVML error, refused gates) one line 'the plugin would not start: REASON' "
    "on stderr: exit 3."))
@options(Group.DISCOVERY)
@click.option("--format", "output_format", type=click.Choice(["yaml", "json"]), default="yaml",
              help="yaml (default) or json.")
@click.option("--feature-gates", "feature_gates", default="", metavar="NAME=BOOL,...",
              help="The driver's feature gates, as its own flag takes them: "
                   f"{dra.DYNAMIC_MIG}=true (partitionable MIG devices, shared counters), "
                   f"{dra.PASSTHROUGH_SUPPORT}=true (gpu-vfio-<i> devices).")
@click.pass_context
def devices_cmd(ctx: click.Context, /, **params: Any) -> None:
    import yaml

    from gfd.app import read_once
    from gfd.devices import document

    try:
        gates = dra.parse_gates(params["feature_gates"])
    except ValueError as exc:
        raise ConfigError(f"--feature-gates: {exc}") from None
    settings, _ = build_settings(params)
    _configure_logging("warning", settings.log_format)
    doc = document(read_once(settings), gates)
    if params["output_format"] == "json":
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)
    if "wouldNotStart" in doc:
        click.echo(f"the plugin would not start: {doc['wouldNotStart']}", err=True)
        sys.exit(Exit.NOT_STARTED)
    incomplete = [d for d in doc["devices"] if "missing" in d]
    if incomplete:
        click.echo(f"{len(incomplete)} device(s) cannot be described fully: see 'missing'",
                   err=True)
        sys.exit(Exit.FAILURE)


@cli.command("features")
@options(Group.DISCOVERY)
@click.option("--format", "output_format", type=click.Choice(["yaml", "json", "text"]),
              default="yaml", help="yaml (default), json, or text: one sorted "
              "feature[instance].element=value line each.")
@click.pass_context
def features_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Print the features this node's NodeFeature would carry (spec.features: one nvidia.gpu
    instance per GPU, one nvidia.mig per MIG device, nvidia.driver), what NodeFeatureRules
    match (docs/features.md); no side effects."""
    import yaml

    from gfd.app import project_once

    settings, _ = build_settings(params)
    _configure_logging("error", settings.log_format)
    _, projection = project_once(settings, int(time.time()))
    features = projection.features
    if params["output_format"] == "text":
        click.echo("".join(f"{k}={v}\n" for k, v in sorted(features.flat().items())), nl=False)
    elif params["output_format"] == "json":
        click.echo(json.dumps(features.to_api(), indent=2))
    else:
        click.echo(yaml.safe_dump(features.to_api(), sort_keys=False), nl=False)


@cli.command("diff")
@options(Group.DISCOVERY, Group.PUBLISH)
@click.pass_context
def diff_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Show what `gfd run` would change at the chosen sink (no side effects): its labels,
    and on the NodeFeature its features (`feature` lines).

    Exit 0 when in sync, 1 when something would change."""
    from gfd.app import make_sink, project_once
    from gfd.sinks.base import diff

    settings, _ = build_settings(params)
    _configure_logging("warning", settings.log_format)
    _, projection = project_once(settings, int(time.time()))
    labelling = projection.labelling
    sink = make_sink(settings, write=lambda text: None)
    try:  # the keys gfd wants too: another writer may hold them now (it took them over)
        current = sink.published(also=labelling.labels)
        current_features = sink.published_features()
    finally:
        sink.close()
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
    # the NodeFeature carries features too (the other sinks: None, nothing to compare)
    stored = current_features or {}
    features = projection.features.flat() if current_features is not None else {}
    drift = diff(stored, features)
    for k in drift.added:
        click.echo(f"+ feature {k}={features[k]}")
    for k in drift.changed:
        click.echo(f"~ feature {k}: {stored[k]} -> {features[k]}")
    for k in drift.removed:
        click.echo(f"- feature {k}={stored[k]}")
    carried = "" if current_features is None else f" and {len(features)} feature elements"
    if change.empty and drift.empty:
        click.echo(f"in sync: {len(wanted)} labels{carried} at {sink.name}", err=True)
        sys.exit(Exit.OK)
    if not drift.empty:
        click.echo(f"features: {drift.summary()} at {sink.name}", err=True)
    click.echo(f"{change.summary()} at {sink.name}", err=True)
    sys.exit(Exit.FAILURE)


@cli.command("prune")
@options(Group.DISCOVERY, Group.PUBLISH, Group.RUN)
@click.pass_context
def prune_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Remove what gfd published at the chosen sink (its feature file, its NodeFeature, or the
    Node labels it set) and nothing else: for uninstalling or switching sinks. Takes the same
    flags as `gfd run`, so an uninstall Job can reuse the agent's arguments."""
    from gfd.app import make_sink

    settings, _ = build_settings(params)
    _configure_logging(settings.log_level, settings.log_format)
    sink = make_sink(settings, write=lambda text: None)
    try:
        result = sink.prune()
    finally:
        sink.close()
    for k in result.change.removed:
        click.echo(f"- {k}")
    removed = len(result.change.removed)
    click.echo(f"pruned {removed} labels at {sink.name}" if removed
               else f"nothing to prune at {sink.name}", err=True)


@cli.command("explain")
@click.argument("key")
@options(Group.DISCOVERY)
@click.pass_context
def explain_cmd(ctx: click.Context, /, key: str, **params: Any) -> None:
    """Explain why a label has its value on this machine: source, raw input, rules applied."""
    from gfd.app import label_once

    settings, _ = build_settings(params)
    _configure_logging("error", settings.log_format)
    snapshot, labelling = label_once(settings, int(time.time()))
    manager = snapshot.resource_manager
    full = key if "/" in key else f"nvidia.com/{key}"
    label = labelling.explained.get(full)
    if label is None:
        close = difflib.get_close_matches(full, list(labelling.explained), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        doc = describe(full)
        why = f"; it is present when: {doc.when}" if doc else ""
        if EXCLUDED_KEYS[manager.name].fullmatch(full):
            why = (f"; it is not published under resource manager {manager.name} "
                   f"({manager.evidence})")
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
        module = labelling.origin.get(full, "")
        where = f" (computed in {module.replace('.', '/')}.py)" if module else ""
        click.echo(f"  set:    {doc.set}{where}")
        if manager.name == "dra" and doc.dra:
            click.echo(f"  under dra: {doc.dra}")
    if manager.name == "dra" and full.startswith("nvidia.com/gpu."):
        click.echo("  per device: `gfd devices` (each GPU and MIG device as DRA claims select "
                   "it: attributes, capacities)")
    click.echo(f"  resource manager: {manager.name} ({manager.evidence})")
    if full in rejected:
        click.echo(f"  NOT PUBLISHED: {rejected[full].message}")


@cli.command("selector", epilog="Missed on purpose, where the labels cannot tell (each kind "
             "in docs/selector.md): nodes with GPUs of several models when a filter needs the "
             "model; MIG slices under --mig-strategy single when --mig-profile is given "
             "(request them as nvidia.com/gpu); --shared/--dedicated where gpu.replicas is 0 "
             "or absent (DRA nodes); MPS with MIG enabled (no labels); shared units for "
             "--count above 1; models gfd's list names differently from NVML (a warning says "
             "so).")
@click.option("--product", default="", help="GPU model words, in any order (H100, A100-80GB), "
              "or an exact gpu.product value (with or without -SHARED).")
@click.option("--min-memory", type=int, default=None, help="At least this much memory per "
              "unit the pod can get, MiB (a MIG slice's, an MPS replica's share).")
@click.option("--mig-profile", default="", help="A MIG slice, e.g. 1g.10gb: requests "
              "nvidia.com/mig-<profile> (mixed strategy).")
@click.option("--shared", is_flag=True, default=False,
              help="A time-sliced or MPS replica.")
@click.option("--dedicated", is_flag=True, default=False, help="A unit no other pod shares.")
@click.option("--renamed", is_flag=True, default=False, help="The device plugin renames shared "
              "resources (renameByDefault): request <name>.shared (implies --shared).")
@click.option("--family", default="", help="Architecture, e.g. hopper.")
@click.option("--min-compute", default="", help="Minimum compute capability, e.g. 8.0.")
@click.option("--count", type=int, default=1, help="How many units (devices with --dra).")
@click.option("--label-set", type=click.Choice(LABEL_SETS), default="extended",
              help="compat: use only GFD's labels (for clusters labelled by GFD).")
@click.option("--form", type=click.Choice(["auto", "nodeSelector", "affinity"]), default="auto",
              help="auto: a nodeSelector when exact values suffice, else node affinity.")
@click.option("--dra", is_flag=True, default=False,
              help="Print a DRA ResourceClaimTemplate (CEL over the NVIDIA DRA driver's "
                   "attributes) and an example Pod using it, placed by node affinity over the "
                   "labels of --resource-manager dra.")
@click.option("--name", default=None, help="--dra: the ResourceClaimTemplate's name.")
@click.option("--feature-gates", default="", help="--dra: the DRA driver's gates, e.g. "
              "DynamicMIG=true (what its devices publish changes).")
@click.option("--uuid", default="", help="--dra: one GPU (GPU-...) or MIG device (MIG-...).")
def selector_cmd(product: str, min_memory: int | None, mig_profile: str, shared: bool,
                 dedicated: bool, renamed: bool, family: str, min_compute: str, count: int,
                 label_set: str, form: str, dra: bool, name: str | None, feature_gates: str,
                 uuid: str) -> None:
    """Print where a GPU pod may run and what it must request: a pod-spec fragment (YAML) with
    a nodeSelector or node affinity over gfd's labels and a container's resources.limits; with
    --dra, a ResourceClaimTemplate and an example Pod (`kubectl apply -f -` accepts both).

    A pod placed by it, requesting that resource, never gets a unit that breaks a filter."""
    import yaml

    from gfd.selector import Options, render

    out = render(Options(product=product, min_memory=min_memory, mig_profile=mig_profile,
                         shared=shared, dedicated=dedicated, renamed=renamed, family=family,
                         min_compute=min_compute, count=count, dra=dra, name=name),
                 label_set=label_set, form=form, feature_gates=feature_gates, uuid=uuid)
    for line in out.warnings:
        click.echo(line, err=True)
    click.echo(yaml.safe_dump_all(out.documents, sort_keys=False), nl=False)


@cli.command("docs")
@click.argument("what", type=click.Choice(["labels", "settings"]), default="labels")
def docs_cmd(what: str) -> None:
    """Print a reference generated from the code: labels (docs/labels.md) or settings
    (docs/settings.md)."""
    if what == "settings":
        from gfd.docs import render_settings

        click.echo(render_settings(), nl=False)
        return
    from gfd.docs import render

    click.echo(render(), nl=False)


# --------------------------------------------------------------------------- the agent


@cli.command("run")
@options(Group.DISCOVERY, Group.PUBLISH, Group.RUN)
@click.pass_context
def run_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Run the agent: label this node and keep its labels current (the container entrypoint)."""
    sys.exit(run_agent(_explicit(params), early=ctx.obj))


Notes = Callable[[Settings, "FileConfig | None"], list[str]]
ReloadAsked = Callable[[], bool]
"""Whether a SIGHUP arrived before the agent's own handlers were in place (``gfd.launch``)."""


def run_agent(explicit: dict[str, Any], *, defaults: Settings | None = None,
              notes: Notes | None = None, early: ReloadAsked | None = None) -> int:
    """Start ``gfd run`` from explicit setting values (any command line maps onto these);
    returns the exit code. ``defaults``: the defaults to resolve against (GFD's own for the
    ``gpu-feature-discovery`` command line); ``notes``: warnings to log once the settings
    are known; ``early``: whether a SIGHUP came during start-up (it becomes a reload)."""
    started = int(time.time())
    from gfd.app import Factory, Reloader, load_settings

    settings, loaded = load_settings(explicit, defaults=defaults)
    _configure_logging(settings.log_level, settings.log_format)
    log.info("gfd %s starting: %s", __version__, settings_summary(settings))
    for note in notes(settings, loaded) if notes else ():
        log.warning("%s", note)
    from gfd.daemon import Agent, Signals
    from gfd.metrics import Health, Metrics, MetricsServer

    metrics = Metrics(version=__version__)
    factory = Factory(started=started, write=lambda text: click.echo(text, nl=False),
                      on_request=metrics.api_request, on_reconnect=metrics.watch_reconnect,
                      on_event=metrics.kube_event)
    health = Health(stuck_after=settings.stuck_after)
    server = None
    if settings.metrics_port:
        server = MetricsServer(metrics, health, port=settings.metrics_port,
                               host=settings.metrics_address)
        server.start()
    reloader = None
    try:
        parts = factory.parts(settings)
        reloader = Reloader(explicit, loaded, factory, defaults=defaults) if loaded else None
        signals = Signals()
        watched = reloader is not None and not settings.oneshot and reloader.watch(signals.fire)
        agent = Agent(parts, reloader=reloader, observer=metrics, health=health,
                      config_watched=watched)
        _install_signal_handlers(signals)
        if early is not None and early():  # a SIGHUP that came while starting
            signals.request_reload()
        try:
            code = agent.run(signals)
        finally:
            signals.close()
    finally:
        if reloader is not None:
            reloader.close()
        if server:
            server.stop()
    log.info("gfd stopped; published labels left in place")
    return code


def settings_summary(settings: Settings) -> str:
    """The merged settings as one JSON line (GFD logs its merged config at start)."""
    from dataclasses import asdict

    data = asdict(settings)
    data["sharing"] = {"strategy": settings.sharing.strategy,
                       "resources": {r.name: r.replicas for r in settings.sharing.resources}}
    return json.dumps(data, sort_keys=True, default=str)


def _install_signal_handlers(signals: Any) -> None:
    """Handlers only record the signal (no lock, no logging: they run on the loop's thread
    between any two bytecodes, maybe inside the loop's own wait); the loop logs and acts."""
    import signal

    def stop(signum: int, frame: object) -> None:
        signals.request_stop(signum)

    def reload(signum: int, frame: object) -> None:
        signals.request_reload()

    signals.wake.install()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, stop)
    signal.signal(signal.SIGHUP, reload)


def main(argv: list[str] | None = None, *, early: ReloadAsked | None = None) -> None:
    """Entry point (``gfd.launch`` calls it for the console script and ``python -m gfd``)."""
    cli.main(args=argv, prog_name="gfd", obj=early)
