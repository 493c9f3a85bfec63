"""``gfd fleet`` (and ``kubectl gfd fleet``): the cluster's GPUs by kind, per node, where a
pod fits, and what disagrees; its options, its output and its exit status. Reading is
``gfd.fleet.source``'s, counting ``gfd.fleet``'s."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from gfd import render
from gfd.cli_help import BriefOption, Command
from gfd.cli_options import Exit, fleet_filter_options, output_option
from gfd.errors import ConfigError

FLEET_NOTES = (
    "Counted as the scheduler counts (docs/fleet.md): TOTAL is allocatable (the device "
    "plugin) or the devices of the newest pool generation (DRA); ALLOCATED what bound, "
    "unfinished pods request (the larger of the largest init container and the containers' "
    "sum, sidecars included) or allocated claims hold; FREE what one-unit pods can still get "
    "(DRA: within shared counters, untainted devices); PENDING what unscheduled pods ask "
    "that admit a node of the kind. Cordoned, not-Ready and tainted nodes count apart. "
    "Time-slicing and MPS units are replicas: which GPU a replica is on is not the API "
    "server's to know. Reads: paginated LISTs of nodes, unfinished pods, resourceslices, "
    "resourceclaims and deviceclasses (manifests/fleet has the ClusterRole).")


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
              help="Default: $KUBECONFIG, ~/.kube/config, in-cluster.")
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
@click.option("--serve", "serve_address", is_flag=False, flag_value=SERVE_DEFAULT, default=None,
              metavar="[ADDR]", cls=BriefOption,
              brief="Serve /, /fleet, /metrics on ADDR (:8080).",
              help="Serve the fleet on ADDR (HOST:PORT, :PORT or PORT; bare: :8080) until "
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
              pending: bool, serve_address: str | None, node_findings: bool,
              output: str, **filters: Any) -> None:
    """Show the cluster's GPUs by kind (model, memory, MIG profile, sharing, resource, device
    plugin or DRA): total, allocated, free and pending, as the scheduler counts them; with
    the selector's filters, where such a pod fits now; with --check, which nodes' labels
    disagree with what the scheduler sees."""
    from gfd.fleet import checks as fleet_checks
    from gfd.fleet import report, source
    from gfd.fleet.count import count
    from gfd.fleet.fits import fits as fleet_fits
    from gfd.fleet.placement import DEFAULT_TOLERATED

    if serve_address is None and node_findings:
        raise ConfigError("--node-findings goes with --serve (it shapes /metrics)")
    if serve_address is not None:
        _serving(serve_address, filters, per_node=per_node, check=check or pending,
                 output=output, no_headers=no_headers)
    parsed = _filters(filters)
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
    tolerated = tuple(dict.fromkeys((*DEFAULT_TOLERATED, *tolerate)))
    counted = count(fleet, tolerated=tolerated)
    if serve_address is not None:
        _serve(fleet, counted, serve_address, node_findings=node_findings)
        return
    fit = None
    if parsed is not None:
        f, label_set, gates = parsed
        fit = fleet_fits(fleet, counted, f, label_set=label_set, gates=gates)
        for line in (*f.warnings, *(f"note: {n}" for n in fit.notes)):
            click.echo(line, err=True)
    findings = fleet_checks.check(fleet, counted) if check else None
    waiting = None
    if pending and counted.index is not None:
        from gfd.fleet import whyreport

        waiting = whyreport.pending(counted.index)
    headers = not no_headers
    if output in ("json", "yaml"):
        doc = report.document(fleet, counted, fits=fit, findings=findings)
        if waiting is not None:
            doc["pending"] = [row.to_api() for row in waiting]
        click.echo(render.document(doc, output), nl=False)
    else:
        if not per_node or output == "wide":
            click.echo(report.summary_text(counted, headers=headers), nl=False)
        if per_node or output == "wide":
            if not per_node:
                click.echo()
            click.echo(report.nodes_text(counted, headers=headers), nl=False)
        if fit is not None:
            import yaml

            click.echo()
            click.echo(report.fits_text(fit, headers=headers), nl=False)
            click.echo(yaml.safe_dump_all(fit.selector, sort_keys=False), nl=False)
        if findings is not None:
            click.echo()
            click.echo(report.findings_text(findings), nl=False)
        if waiting is not None:
            from gfd.fleet import whyreport

            click.echo()
            click.echo(whyreport.pending_text(waiting, headers=headers), nl=False)
    for line in report.notes(fleet, counted):
        click.echo(line, err=True)
    if findings:
        sys.exit(Exit.FAILURE)
    if fleet.incomplete or fleet.skipped:
        sys.exit(Exit.INCOMPLETE)


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


def _serve(fleet: Any, counted: Any, address: str, *, node_findings: bool) -> None:
    """Serve what was read, as it was read (a dump: a support bundle; or one read of the
    API server), until SIGTERM or Ctrl-C."""
    import time

    from gfd.fleet import checks as fleet_checks
    from gfd.fleet import report
    from gfd.fleet.view import StaticSource, one_read
    from gfd.logs import configure
    from gfd.metrics.fleetserver import serve

    configure(level="info", fmt="text")
    findings = tuple(fleet_checks.check(fleet, counted))
    for line in report.notes(fleet, counted):
        click.echo(line, err=True)
    source = StaticSource(one_read(fleet, counted, findings, when=time.time()))
    serve(source, address, node_findings=node_findings,
          announce=lambda line: click.echo(f"gfd fleet: {line}", err=True))

