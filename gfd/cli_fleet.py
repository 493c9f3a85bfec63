"""``gfd fleet`` (and ``kubectl gfd fleet``): the cluster's GPUs by kind, per node, where a
pod fits, and what disagrees; its options, its output and its exit status. Reading is
``gfd.fleet.source``'s (one read) or ``gfd.fleet.livesource``'s (``--watch``, ``--serve``: the
read kept current by watches), counting ``gfd.fleet``'s.

``--serve [ADDR]`` hands a ``gfd.fleet.view.ViewSource`` (the live view; a dump's, as it is)
to ``gfd.metrics.fleetserver.serve``, which serves it until SIGTERM or Ctrl-C."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gfd import render
from gfd.cli_help import BriefOption, Command
from gfd.cli_options import Exit, fleet_filter_options, output_option
from gfd.errors import ConfigError

if TYPE_CHECKING:
    from gfd.fleet.checks import Finding
    from gfd.fleet.count import Counted
    from gfd.fleet.fits import Fits
    from gfd.fleet.model import Fleet
    from gfd.fleet.view import ViewSource

FLEET_NOTES = (
    "Counted as the scheduler counts (docs/fleet.md): TOTAL is allocatable (the device "
    "plugin) or the devices of the newest pool generation (DRA); ALLOCATED what bound, "
    "unfinished pods request (the larger of the largest init container and the containers' "
    "sum, sidecars included) or allocated claims hold; FREE what one-unit pods can still get "
    "(DRA: within shared counters, untainted devices); PENDING what unscheduled pods ask "
    "that admit a node of the kind. Cordoned, not-Ready and tainted nodes count apart. "
    "Time-slicing and MPS units are replicas: which GPU a replica is on is not the API "
    "server's to know. Reads: paginated LISTs of nodes, unfinished pods, resourceslices, "
    "resourceclaims and deviceclasses (manifests/fleet has the ClusterRole); --watch and "
    "--serve then WATCH each (grant watch too) and count each change where it happens. "
    "--watch: as kubectl get -w, the view again whenever it changes (-o json: one document "
    "a line); Ctrl-C ends it (exit 0). --serve [ADDR] (bare: :8080): the view over "
    "HTTP (docs/fleet.md).")
SERVE_DEFAULT = ":8080"
"""``--serve`` bare: every interface, port 8080."""


def _kubeconfig(given: str | None) -> str:
    """kubectl's order: --kubeconfig, $KUBECONFIG, ~/.kube/config, then the pod's
    ServiceAccount ("")."""
    if given:
        return given
    env = os.environ.get("KUBECONFIG", "")
    if env:
        return env.split(os.pathsep)[0]
    home = Path.home() / ".kube" / "config"
    return str(home) if home.is_file() else ""


@click.command("fleet", cls=Command, epilog=FLEET_NOTES)
@click.option("--kubeconfig", default=None, metavar="FILE",
              help="$KUBECONFIG, ~/.kube/config, in-cluster.")
@click.option("--context", default="", metavar="NAME", help="The kubeconfig context to use.")
@click.option("-l", "--selector", "node_selector", default="", metavar="SELECTOR",
              help="Only nodes with these labels.")
@click.option("--from", "from_file", default=None, metavar="FILE",
              help="A kubectl dump; - stdin; @sample: a demo.")
@click.option("--nodes", "per_node", is_flag=True, default=False,
              help="One row per node and kind.")
@click.option("--no-headers", is_flag=True, default=False, help="Tables without headers.")
@click.option("--tolerate", multiple=True, metavar="KEY",
              help="A taint key GPU pods tolerate.")
@click.option("--check", is_flag=True, default=False,
              help="List what disagrees (exit 1 if any).")
@click.option("--pending", is_flag=True, default=False,
              help="Pending GPU pods, each with its reason.")
@click.option("-w", "--watch", is_flag=True, default=False,
              help="Print it again whenever it changes.")
@click.option("--serve", "serve_address", is_flag=False, flag_value=SERVE_DEFAULT, default=None,
              metavar="[ADDR]", cls=BriefOption,
              brief="Serve /, /fleet, /metrics on ADDR (:8080).",
              help="Serve the live view on ADDR (HOST:PORT, :PORT or PORT; bare: :8080) until "
                   "SIGTERM: the page at /, the JSON document at /fleet (the filters as its "
                   "query parameters), Prometheus metrics at /metrics, /healthz and /readyz "
                   "(docs/fleet.md).")
@click.option("--node-findings", is_flag=True, default=False, cls=BriefOption,
              brief="--serve: findings per node in /metrics.",
              help="--serve: the findings per node and check in /metrics "
                   "(gfd_fleet_node_findings), beside the count by check.")
@fleet_filter_options
@output_option("fleet")
def fleet_cmd(kubeconfig: str | None, context: str, node_selector: str, from_file: str | None,
              per_node: bool, no_headers: bool, tolerate: tuple[str, ...], check: bool,
              pending: bool, watch: bool, serve_address: str | None, node_findings: bool,
              output: str, **filters: Any) -> None:
    """Show the cluster's GPUs by kind (model, memory, MIG profile, sharing, resource, device
    plugin or DRA): total, allocated, free and pending, as the scheduler counts them; with
    the selector's filters, where such a pod fits now; with --check, which nodes' labels
    disagree with what the scheduler sees."""
    from gfd.fleet import checks as fleet_checks
    from gfd.fleet import source
    from gfd.fleet.count import count
    from gfd.fleet.placement import DEFAULT_TOLERATED

    serve = serve_address
    if serve is None and node_findings:
        raise ConfigError("--node-findings goes with --serve (it shapes /metrics)")
    if watch and serve is not None:
        raise ConfigError("--watch prints the view, --serve serves it: give one of them")
    if serve is not None:
        _serving(serve, filters, per_node=per_node, check=check or pending, output=output,
                 no_headers=no_headers)
    parsed = _filters(filters)
    tolerated = tuple(dict.fromkeys((*DEFAULT_TOLERATED, *tolerate)))
    if (watch or serve is not None) and from_file is None:
        from gfd.kube.lists import Lister

        lister = Lister(kubeconfig=_kubeconfig(kubeconfig), context=context)
        try:
            live = _live_source(lister, node_selector, tolerated, checks=check or serve
                                is not None)
            if serve is not None:
                _serve(live, serve, node_findings=node_findings)
            else:
                _watch(live, _renderer(parsed, per_node, not no_headers, check, output,
                                       pending=pending, lines=True), output)
        finally:
            lister.close()
        return
    if watch:
        raise ConfigError("--watch follows the API server: a dump (--from) does not change")
    if from_file is not None:
        if kubeconfig or context:
            raise ConfigError("--from reads a dump, not the API server: leave out "
                              "--kubeconfig and --context")
        fleet = source.from_dump(from_file, node_selector=node_selector,
                                 stdin=sys.stdin)
    else:
        from gfd.kube.lists import Lister

        lister = Lister(kubeconfig=_kubeconfig(kubeconfig), context=context)
        try:
            fleet = source.live(lister, node_selector=node_selector)
        finally:
            lister.close()
    counted = count(fleet, tolerated=tolerated)
    if serve is not None:
        _serve_dump(fleet, counted, serve, node_findings=node_findings)
        return
    text, notes, findings = _renderer(parsed, per_node, not no_headers, check, output,
                                      pending=pending)(
        fleet, counted, fleet_checks.check(fleet, counted) if check else None)
    click.echo(text, nl=False)
    for line in notes:
        click.echo(line, err=True)
    if findings:
        sys.exit(Exit.FAILURE)
    if fleet.incomplete or fleet.skipped:
        sys.exit(Exit.INCOMPLETE)


Render = Callable[["Fleet", "Counted", "list[Finding] | None"],
                  tuple[str, list[str], "list[Finding] | None"]]
"""A fleet and its count (and findings, with --check) as printed: the text for stdout, the
lines for stderr, and the findings."""


def _renderer(parsed: tuple[Any, str, dict[str, bool]] | None, per_node: bool, headers: bool,
              check: bool, output: str, *, pending: bool = False,
              lines: bool = False) -> Render:
    """How this command line prints a fleet: the summary, the nodes, where a pod fits and
    what disagrees, as text or one document (``lines``: JSON on one line, YAML after
    ``---``, as a stream of documents is printed)."""
    import json

    from gfd.fleet import report
    from gfd.fleet.fits import fits as fleet_fits

    def show(fleet: Fleet, counted: Counted,
             findings: list[Finding] | None) -> tuple[str, list[str], list[Finding] | None]:
        fit: Fits | None = None
        notes: list[str] = []
        if parsed is not None:
            f, label_set, gates = parsed
            fit = fleet_fits(fleet, counted, f, label_set=label_set, gates=gates)
            notes += [*f.warnings, *(f"note: {n}" for n in fit.notes)]
        findings = findings if check else None
        waiting = None
        if pending and counted.index is not None:
            from gfd.fleet import whyreport

            waiting = whyreport.pending(counted.index)
        parts: list[str] = []
        if output in ("json", "yaml"):
            doc = report.document(fleet, counted, fits=fit, findings=findings)
            if waiting is not None:
                doc["pending"] = [row.to_api() for row in waiting]
            if lines and output == "json":
                parts.append(json.dumps(doc) + "\n")
            else:
                parts += ["---\n" if lines else "", render.document(doc, output)]
        else:
            if not per_node or output == "wide":
                parts.append(report.summary_text(counted, headers=headers))
            if per_node or output == "wide":
                if not per_node:
                    parts.append("\n")
                parts.append(report.nodes_text(counted, headers=headers))
            if fit is not None:
                import yaml

                parts += ["\n", report.fits_text(fit, headers=headers),
                          yaml.safe_dump_all(fit.selector, sort_keys=False)]
            if findings is not None:
                parts += ["\n", report.findings_text(findings)]
            if waiting is not None:
                from gfd.fleet import whyreport

                parts += ["\n", whyreport.pending_text(waiting, headers=headers)]
        return "".join(parts), notes + report.notes(fleet, counted), findings

    return show


def _live_source(lister: Any, node_selector: str, tolerated: tuple[str, ...], *,
                 checks: bool) -> ViewSource:
    """The live view of the API server ``lister`` reads, started."""
    from gfd.fleet.livesource import LiveSource

    live = LiveSource(lister, node_selector=node_selector, tolerated=tolerated, checks=checks)
    live.start()
    return live


SETTLE = 3600.0
"""Seconds --watch waits for the first read of every collection (and then for a change)
before it looks again."""


def _watch(source: ViewSource, show: Render, output: str) -> None:
    """Print the view once every collection was read, then again whenever what would be
    printed changes (text: after a blank line), its notes on stderr as they come, until
    Ctrl-C; the source is stopped then."""
    wait_settled = getattr(source, "wait_settled", None)
    last_text: str | None = None
    last_notes: list[str] = []
    try:
        if wait_settled is not None:
            wait_settled(SETTLE)
        while True:
            with source.read() as view:
                generation = view.generation
                text, notes, _ = show(view.fleet, view.counted, list(view.findings))
            if text != last_text:
                if last_text is not None and output not in ("json", "yaml"):
                    click.echo()
                click.echo(text, nl=False)
                last_text = text
            for line in notes:
                if line not in last_notes:
                    click.echo(line, err=True)
            last_notes = notes
            source.wait(generation, SETTLE)
    except KeyboardInterrupt:
        pass
    finally:
        stop = getattr(source, "stop", None)
        if stop is not None:
            stop()


def _serve(source: ViewSource, address: str, *, node_findings: bool) -> None:
    """Serve ``source`` until SIGTERM or Ctrl-C, then stop it."""
    from gfd.logs import configure
    from gfd.metrics.fleetserver import serve

    configure(level="info", fmt="text")
    try:
        serve(source, address, node_findings=node_findings,
              announce=lambda line: click.echo(f"gfd fleet: {line}", err=True))
    finally:
        stop = getattr(source, "stop", None)
        if stop is not None:
            stop()


def _serve_dump(fleet: Fleet, counted: Counted, address: str, *, node_findings: bool) -> None:
    """Serve a dump as it was (a support bundle), until SIGTERM or Ctrl-C."""
    import time

    from gfd.fleet import checks as fleet_checks
    from gfd.fleet import report
    from gfd.fleet.view import StaticSource, one_read

    findings = tuple(fleet_checks.check(fleet, counted))
    for line in report.notes(fleet, counted):
        click.echo(line, err=True)
    _serve(StaticSource(one_read(fleet, counted, findings, when=time.time())), address,
           node_findings=node_findings)


def _filters(params: dict[str, Any]) -> tuple[Any, str, dict[str, bool]] | None:
    """The selector's filters parsed by the selector's own parser (None: none given)."""
    from gfd.fleet.query import parse_filters

    asked = parse_filters(params)
    return None if asked is None else (asked.filters, asked.label_set, asked.gates)


def _serving(address: str, filters: dict[str, Any], *, per_node: bool, check: bool,
             output: str, no_headers: bool) -> None:
    """--serve serves every view at once: what shapes one printed answer goes with it not."""
    from gfd.fleet.query import parse_filters

    shaping = [flag for flag, given in (("--nodes", per_node), ("--check", check),
                                         ("-o", output != "text"), ("--no-headers", no_headers))
               if given]
    if shaping:
        raise ConfigError(f"--serve {address}: leave out {', '.join(shaping)}: /fleet has the "
                          "nodes (?nodes=true) and the findings, /metrics and / the rest")
    if parse_filters(dict(filters)) is not None:
        raise ConfigError(f"--serve {address}: where a pod fits is /fleet's query "
                          "parameters (/fleet?product=H100&count=2), not options")
    from gfd.metrics.fleetserver import parse_address

    parse_address(address)  # a bad address is refused before anything is read
