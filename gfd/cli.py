"""The command line: the commands and what each prints and exits with. Options (generated
from the settings table), ``-o/--output``, help, errors and exit codes are
``cli_options``'s; the output formats ``render``'s; the agent's start ``cli_agent``'s.

Building the objects a command needs is ``app``'s job; this module only parses, prints
and decides the exit status.
"""

from __future__ import annotations

import difflib
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from gfd import __version__, render
from gfd.cli_agent import ReloadAsked, run_agent
from gfd.cli_options import (
    Exit,
    Group,
    chosen_output,
    exit_code,
    explicit,
    output_file_alias,
    output_option,
    settings_options,
)
from gfd.config import Settings
from gfd.errors import ConfigError, GfdError
from gfd.labelers.catalog import EXCLUDED_KEYS, describe
from gfd.labelers.options import LABEL_SETS

if TYPE_CHECKING:
    from gfd.configfile import FileConfig

__all__ = ["Exit", "ReloadAsked", "cli", "exit_code", "main", "run_agent"]

log = logging.getLogger("gfd")

_TIMESTAMP = "nvidia.com/gfd.timestamp"


class LabelNotFound(GfdError):
    """``gfd explain`` was asked about a label this machine does not get."""


def build_settings(params: dict[str, Any]) -> tuple[Settings, FileConfig | None]:
    """Settings from this command's options and the config file; also the parsed file."""
    from gfd.app import load_settings

    return load_settings(explicit(params))


def _configure_logging(level: str, fmt: str) -> None:
    from gfd.logs import configure

    configure(level=level, fmt=fmt)


@click.group("gfd", cls=Group,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", message="%(version)s")
def cli() -> None:
    """gfd: GPU feature discovery for Kubernetes (NVIDIA GPU node labels).

    Commands that print data take -o/--output (text, json, yaml...); `run` and
    `gpu-feature-discovery` keep GFD's -o FILE (the feature file)."""


# --------------------------------------------------------------------------- one-shot commands


@cli.command("labels")
@settings_options("labels")
@output_option("labels")
@click.pass_context
def labels_cmd(ctx: click.Context, /, output: str, **params: Any) -> None:
    """Print the labels this node would get, sorted (no side effects); the resource manager
    they are for, and why, on stderr."""
    from gfd.app import label_once

    settings, _ = build_settings(params)
    _configure_logging(settings.log_level if settings.log_level != "info" else "warning",
                       settings.log_format)
    snapshot, labelling = label_once(settings, int(time.time()))
    manager = snapshot.resource_manager
    click.echo(f"resource manager: {manager.name} ({manager.evidence})", err=True)
    click.echo(render.labels(labelling.labels, chosen_output(ctx, output)), nl=False)


@cli.command("snapshot")
@settings_options("snapshot")
@output_option("snapshot")
@click.pass_context
def snapshot_cmd(ctx: click.Context, /, output: str, **params: Any) -> None:
    """Print the raw GPU snapshot (attach it to bug reports; replay the JSON with
    --snapshot)."""
    import json

    from gfd.app import read_once

    settings, _ = build_settings(params)
    _configure_logging("warning", settings.log_format)
    text = read_once(settings).to_json()
    click.echo(text if output == "json" else render.document(json.loads(text), output),
               nl=False)


@cli.command("devices")
@settings_options("devices")
@output_option("devices")
@click.pass_context
def devices_cmd(ctx: click.Context, /, output: str, **params: Any) -> None:
    """Print each GPU and MIG device as the NVIDIA DRA driver publishes it: device
    names, attributes with their types, capacities; what to write
    CEL selectors against. A device the snapshot cannot describe fully lists what is missing.
    Exit 1 when any device is incomplete."""
    from gfd.app import read_once
    from gfd.devices import document

    settings, _ = build_settings(params)
    _configure_logging("warning", settings.log_format)
    doc = document(read_once(settings))
    fmt = chosen_output(ctx, output)
    click.echo(render.devices_text(doc) if fmt == "text" else render.document(doc, fmt),
               nl=False)
    incomplete = [d for d in doc["devices"] if "missing" in d]
    if incomplete:
        click.echo(f"{len(incomplete)} device(s) cannot be described fully: see 'missing'",
                   err=True)
        sys.exit(Exit.FAILURE)


@cli.command("features")
@settings_options("features")
@output_option("features")
@click.pass_context
def features_cmd(ctx: click.Context, /, output: str, **params: Any) -> None:
    """Print the features this node's NodeFeature would carry (spec.features: one nvidia.gpu
    instance per GPU, one nvidia.mig per MIG device, nvidia.driver), what NodeFeatureRules
    match (docs/features.md); no side effects."""
    from gfd.app import project_once

    settings, _ = build_settings(params)
    _configure_logging("error", settings.log_format)
    _, projection = project_once(settings, int(time.time()))
    features = projection.features
    fmt = chosen_output(ctx, output)
    click.echo(render.labels(features.flat(), "text") if fmt == "text"
               else render.document(features.to_api(), fmt), nl=False)


@cli.command("diff")
@settings_options("diff")
@output_option("diff")
@click.pass_context
def diff_cmd(ctx: click.Context, /, output: str, **params: Any) -> None:
    """Show what `gfd run` would change at the chosen sink (no side effects): its labels,
    and on the NodeFeature its features (`feature` lines).

    Exit 0 when in sync, 1 when something would change, 3 when it could not look."""
    from gfd.app import make_sink, project_once
    from gfd.sinks.base import diff

    settings, _ = build_settings(output_file_alias(ctx, params))
    if settings.effective_sink == "file" and settings.output_file == "-":
        raise ConfigError("gfd diff compares with what is published; standard output (-) "
                          "holds nothing: name the feature file with --output-file")
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
    # the NodeFeature carries features too (the other sinks: None, nothing to compare)
    stored = current_features or {}
    features = projection.features.flat() if current_features is not None else {}
    drift = diff(stored, features)
    doc = render.diff_document(current, wanted, change, target=sink.name,
                               features=None if current_features is None
                               else (stored, features, drift))
    click.echo(render.diff_text(doc) if output == "text" else render.document(doc, output),
               nl=False)
    carried = "" if current_features is None else f" and {len(features)} feature elements"
    if change.empty and drift.empty:
        click.echo(f"in sync: {len(wanted)} labels{carried} at {sink.name}", err=True)
        sys.exit(Exit.OK)
    if not drift.empty:
        click.echo(f"features: {drift.summary()} at {sink.name}", err=True)
    click.echo(f"{change.summary()} at {sink.name}", err=True)
    sys.exit(Exit.FAILURE)


@cli.command("prune")
@settings_options("prune")
@click.pass_context
def prune_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Remove what gfd published at the chosen sink (its feature file, its NodeFeature, or the
    Node labels it set) and nothing else: for uninstalling or switching sinks. Also takes
    every flag of `gfd run` (unlisted here), so an uninstall Job can reuse the agent's
    arguments."""
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
    click.echo(f"pruned {len(result.change.removed)} labels at {sink.name}"
               if result.written else f"nothing to prune at {sink.name}", err=True)


@cli.command("explain")
@click.argument("key")
@settings_options("explain")
@output_option("explain")
@click.pass_context
def explain_cmd(ctx: click.Context, /, key: str, output: str, **params: Any) -> None:
    """Explain why a label has its value on this machine: source, raw input, rules applied."""
    from gfd.app import label_once

    settings, _ = build_settings(params)
    _configure_logging("error", settings.log_format)
    snapshot, labelling = label_once(settings, int(time.time()))
    manager = snapshot.resource_manager
    full = key if "/" in key else f"nvidia.com/{key}"
    label = labelling.explained.get(full)
    doc = describe(full)
    if label is None:
        close = difflib.get_close_matches(full, list(labelling.explained), n=3, cutoff=0.6)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        why = f"; it is present when: {doc.when}" if doc else ""
        if EXCLUDED_KEYS[manager.name].fullmatch(full):
            why = (f"; it is not published under resource manager {manager.name} "
                   f"({manager.evidence})")
        raise LabelNotFound(f"{full} is not a label on this machine{why}{hint}")
    rejected = {r.key: r.message for r in labelling.rejected}
    data = render.explain_document(full, label, doc, manager, rejected.get(full, ""))
    click.echo(render.explain_text(data) if output == "text" else render.document(data, output),
               nl=False)


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
@click.option("--dra", is_flag=True, default=False,
              help="Print a DRA ResourceClaimTemplate (CEL over the NVIDIA DRA driver's "
                   "attributes) and the pod's node affinity over the labels of "
                   "--resource-manager dra.")
@click.option("--count", type=int, default=1, help="--dra: how many devices to claim.")
@click.option("--name", default="", help="--dra: the ResourceClaimTemplate's name.")
@output_option("selector")
def selector_cmd(product: str, min_memory: int | None, mig_profile: str, shared: bool | None,
                 family: str, min_compute: str, label_set: str, form: str, dra: bool,
                 count: int, name: str, output: str) -> None:
    """Print a nodeSelector or node-affinity stanza (YAML) for a pod spec; with --dra, a
    ResourceClaimTemplate and the pod spec fragment (node affinity, resourceClaims) using it."""
    import yaml

    from gfd.selector import Constraints, claim, stanza

    constraints = Constraints(product=product, min_memory=min_memory, mig_profile=mig_profile,
                              shared=shared, family=family, min_compute=min_compute,
                              label_set=label_set)
    if dra:
        docs = claim(constraints, count=count, name=name)
        click.echo(yaml.safe_dump_all(docs, sort_keys=False) if output == "yaml"
                   else render.document(list(docs), output), nl=False)
        return
    if count != 1 or name:
        raise ConfigError("--count and --name go with --dra (a ResourceClaimTemplate)")
    click.echo(render.document(stanza(constraints, form=form), output), nl=False)


@cli.command("docs")
@click.argument("what", type=click.Choice(["labels", "settings"]), default="labels")
def docs_cmd(what: str) -> None:
    """Print a reference generated from the code (Markdown): labels (docs/labels.md) or
    settings (docs/settings.md)."""
    if what == "settings":
        from gfd.docs import render_settings

        click.echo(render_settings(), nl=False)
        return
    from gfd.docs import render as render_labels

    click.echo(render_labels(), nl=False)


@cli.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_cmd(shell: str) -> None:
    """Print the shell completion script for bash, zsh or fish; it completes commands,
    flags and values (machines, strategies, sinks, resource managers). Load it with
    `source <(gfd completion bash)` (zsh: the same; fish: `gfd completion fish | source`)."""
    from click.shell_completion import get_completion_class

    complete = get_completion_class(shell)
    assert complete is not None  # click ships these three
    click.echo(complete(cli, {}, "gfd", "_GFD_COMPLETE").source())


# --------------------------------------------------------------------------- the agent


@cli.command("run")
@settings_options("run")
@click.pass_context
def run_cmd(ctx: click.Context, /, **params: Any) -> None:
    """Run the agent: label this node and keep its labels current (the container entrypoint).
    -o is GFD's: the feature file."""
    sys.exit(run_agent(explicit(params), early=ctx.obj))


def main(argv: list[str] | None = None, *, early: ReloadAsked | None = None) -> None:
    """Entry point (``gfd.launch`` calls it for the console script and ``python -m gfd``)."""
    cli.main(args=argv, prog_name="gfd", obj=early)
