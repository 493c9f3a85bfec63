"""The command line: the commands and what each prints and exits with. Options (generated
from the settings table), ``-o/--output``, help, errors and exit codes are
``cli_options``'s; the output formats ``render``'s; the agent's start ``cli_agent``'s.

Building the objects a command needs is ``app``'s job; this module only parses, prints
and decides the exit status.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

import click

from gfd import __version__, dra, render
from gfd.cli_agent import ReloadAsked, run_agent
from gfd.cli_fleet import fleet_cmd
from gfd.cli_options import (
    SELECTOR_MISSES,
    Exit,
    Group,
    chosen_output,
    exit_code,
    explicit,
    output_file_alias,
    output_option,
    prepare,
    selector_options,
    settings_options,
)
from gfd.cli_why import why_cmd
from gfd.errors import ConfigError, GfdError

__all__ = ["Exit", "ReloadAsked", "cli", "exit_code", "main", "run_agent"]

log = logging.getLogger("gfd")

_TIMESTAMP = "nvidia.com/gfd.timestamp"


class LabelNotFound(GfdError):
    """``gfd explain`` was asked about a label this machine does not get."""


@click.group("gfd", cls=Group,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", message="%(version)s")
def cli() -> None:
    """gfd: GPU feature discovery for Kubernetes (NVIDIA GPU node labels).

    Commands that print data take -o/--output (text, json, yaml...); `run` and
    `gpu-feature-discovery` keep GFD's -o FILE (the feature file). Each command's --help
    shows its main options; --help-all, every option in full."""


# --------------------------------------------------------------------------- one-shot commands


@cli.command("labels")
@settings_options("labels")
@output_option("labels")
@click.pass_context
def labels_cmd(ctx: click.Context, /, output: str, **params: Any) -> None:
    """Print the labels this node would get, sorted (no side effects); the resource manager
    they are for, and why, on stderr."""
    from gfd.app import label_once

    settings = prepare(params, quiet=True)
    snapshot, labelling = label_once(settings, int(time.time()))
    manager = snapshot.resource_manager
    click.echo(f"resource manager: {manager.name} ({manager.evidence})", err=True)
    click.echo(render.labels(labelling.labels, chosen_output(ctx, output)), nl=False)


@cli.command("snapshot")
@settings_options("snapshot")
@output_option("snapshot")
@click.pass_context
def snapshot_cmd(ctx: click.Context, /, output: str, **params: Any) -> None:
    """Print the raw GPU snapshot (attach it to bug reports; replay it, JSON or YAML, with
    --snapshot FILE)."""
    import json

    from gfd.app import read_once

    settings = prepare(params, level="warning")
    text = read_once(settings, device_facts=True).to_json()
    click.echo(text if output == "json" else render.document(json.loads(text), output),
               nl=False)


@cli.command("devices", help=(
    "Print each GPU, MIG and passthrough device as the NVIDIA DRA driver publishes it "
    f"(release {dra.RELEASE}): device names, attributes with their types, capacities, and "
    "under DynamicMIG the shared counter sets and what each device consumes; what to write "
    "CEL selectors against. A device the snapshot cannot describe fully lists what is "
    "missing: exit 1. Where the driver would fail to start (a lost GPU, a MIG device it cannot "
    "describe, an NVML error, refused gates) one line 'the plugin would not start: REASON' "
    "on stderr: exit 3."))
@settings_options("devices")
@click.option("--feature-gates", "feature_gates", default="", metavar="NAME=BOOL,...",
              help="The driver's feature gates, as its own flag takes them: "
                   f"{dra.DYNAMIC_MIG}=true (partitionable MIG devices, shared counters), "
                   f"{dra.PASSTHROUGH_SUPPORT}=true (gpu-vfio-<i> devices).")
@output_option("devices")
@click.pass_context
def devices_cmd(ctx: click.Context, /, output: str, **params: Any) -> None:
    from gfd.app import read_once
    from gfd.devices import document

    try:
        gates = dra.parse_gates(params["feature_gates"])
    except ValueError as exc:
        raise ConfigError(f"--feature-gates: {exc}") from None
    settings = prepare(params, level="warning")
    doc = document(read_once(settings, device_facts=True), gates)
    fmt = chosen_output(ctx, output)
    click.echo(render.devices_text(doc) if fmt == "text" else render.document(doc, fmt),
               nl=False)
    if "wouldNotStart" in doc:
        click.echo(f"the plugin would not start: {doc['wouldNotStart']}", err=True)
        sys.exit(Exit.NOT_STARTED)
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

    settings = prepare(params, level="error")
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
    and on the NodeFeature its features (`feature` lines). Takes every flag of `gfd run`
    (unlisted here), so it can run with the agent's arguments."""
    from gfd.app import make_sink, project_once
    from gfd.sinks.base import diff

    settings = prepare(output_file_alias(ctx, params), level="warning")
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
        click.echo(f"in sync: {len(wanted)} labels{carried} at {sink.where}", err=True)
        sys.exit(Exit.OK)
    if not drift.empty:
        click.echo(f"features: {drift.summary()} at {sink.where}", err=True)
    click.echo(f"{change.summary()} at {sink.where}", err=True)
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

    settings = prepare(params)
    sink = make_sink(settings, write=lambda text: None)
    try:
        result = sink.prune()
    finally:
        sink.close()
    for k in result.change.removed:
        click.echo(f"- {k}")
    removed = len(result.change.removed)
    click.echo(f"pruned {removed} labels at {sink.where}" if removed
               else f"nothing to prune at {sink.where}", err=True)


@cli.command("explain")
@click.argument("key")
@settings_options("explain")
@output_option("explain")
@click.pass_context
def explain_cmd(ctx: click.Context, /, key: str, output: str, **params: Any) -> None:
    """Explain why a label has its value on this machine: source, raw input, rules applied."""
    import difflib

    from gfd.app import label_once
    from gfd.labelers.catalog import EXCLUDED_KEYS, describe

    settings = prepare(params, level="error")
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
    module = labelling.origin.get(full, "")
    data = render.explain_document(full, label, doc, manager, rejected.get(full, ""),
                                   computed_in=f"{module.replace('.', '/')}.py" if module else "")
    click.echo(render.explain_text(data) if output == "text" else render.document(data, output),
               nl=False)


@cli.command("selector", epilog=SELECTOR_MISSES)
@selector_options
@output_option("selector")
def selector_cmd(product: str, min_memory: int | None, mig_profile: str, shared: bool,
                 dedicated: bool, renamed: bool, family: str, min_compute: str, count: int,
                 label_set: str, form: str, dra: bool, name: str | None, feature_gates: str,
                 uuid: str, output: str) -> None:
    """Print where a GPU pod may run and what it must request: a pod-spec fragment (YAML) with
    a nodeSelector or node affinity over gfd's labels and a container's resources.limits; with
    --dra, a ResourceClaimTemplate and an example Pod (`kubectl apply -f -` accepts both).

    A pod placed by it, requesting that resource, never gets a unit that breaks a filter;
    what it misses on purpose: docs/selector.md."""
    import yaml

    from gfd.selector import Options
    from gfd.selector import render as render_selector

    out = render_selector(
        Options(product=product, min_memory=min_memory, mig_profile=mig_profile, shared=shared,
                dedicated=dedicated, renamed=renamed, family=family, min_compute=min_compute,
                count=count, dra=dra, name=name),
        label_set=label_set, form=form, feature_gates=feature_gates, uuid=uuid)
    for line in out.warnings:
        click.echo(line, err=True)
    click.echo(yaml.safe_dump_all(out.documents, sort_keys=False) if output == "yaml"
               else render.document(render.one(list(out.documents)), output), nl=False)


cli.add_command(fleet_cmd)
cli.add_command(why_cmd)


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


def main(argv: list[str] | None = None, *, early: ReloadAsked | None = None,
         prog: str = "gfd") -> None:
    """Entry point (``gfd.launch`` calls it for the console scripts and ``python -m gfd``)."""
    cli.main(args=argv, prog_name=prog, obj=early)
