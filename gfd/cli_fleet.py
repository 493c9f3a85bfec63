"""``gfd fleet`` (and ``kubectl gfd fleet``): the cluster's GPUs by kind, per node, where a
pod fits, and what disagrees; its options, its output and its exit status. Reading is
``gfd.fleet.source``'s (one read) or ``gfd.fleet.livesource``'s (``--watch``, ``--serve``: the
read kept current by watches), counting ``gfd.fleet``'s.

``--serve [ADDR]`` hands the live view to the fleet server through one seam, ``serve_view``:
``gfd.metrics.fleetserver.serve(source, host=..., port=..., stop=...)``, which binds ``host``
and ``port`` (a ``ConfigError`` when it cannot), serves ``source`` (a
``gfd.fleet.view.ViewSource``) until ``stop`` (a ``threading.Event``) is set, then returns."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from gfd import render
from gfd.cli_help import Command
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
    "a line); Ctrl-C ends it (exit 0). --serve [ADDR] (default 0.0.0.0:8080): the view over "
    "HTTP (docs/fleet.md).")
DEFAULT_SERVE = "0.0.0.0:8080"


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
@click.option("-w", "--watch", is_flag=True, default=False,
              help="Print it again whenever it changes.")
@click.option("--serve", default=None, is_flag=False, flag_value=DEFAULT_SERVE,
              metavar="[ADDR]", help="Serve the live view over HTTP.")
@fleet_filter_options
@output_option("fleet")
def fleet_cmd(kubeconfig: str | None, context: str, node_selector: str, from_file: str | None,
              per_node: bool, no_headers: bool, tolerate: tuple[str, ...], check: bool,
              watch: bool, serve: str | None, output: str, **filters: Any) -> None:
    """Show the cluster's GPUs by kind (model, memory, MIG profile, sharing, resource, device
    plugin or DRA): total, allocated, free and pending, as the scheduler counts them; with
    the selector's filters, where such a pod fits now; with --check, which nodes' labels
    disagree with what the scheduler sees."""
    from gfd.fleet import checks as fleet_checks
    from gfd.fleet import source
    from gfd.fleet.count import count
    from gfd.fleet.placement import DEFAULT_TOLERATED

    parsed = _filters(filters)
    tolerated = tuple(dict.fromkeys((*DEFAULT_TOLERATED, *tolerate)))
    if watch and serve is not None:
        raise ConfigError("--watch prints the view, --serve serves it: give one of them")
    if serve is not None:
        if parsed is not None:
            raise ConfigError("--serve serves every view: ask its /fleet with the filters as "
                              "query parameters (docs/fleet.md) instead of giving them here")
        host, port = serve_address(serve)
    if (watch or serve is not None) and from_file is None:
        from gfd.kube.lists import Lister

        lister = Lister(kubeconfig=_kubeconfig(kubeconfig), context=context)
        try:
            live = _live_source(lister, node_selector, tolerated, checks=check or serve
                                is not None)
            if serve is not None:
                _serve_until_stopped(live, host, port)
            else:
                _watch(live, _renderer(parsed, per_node, not no_headers, check, output,
                                       lines=True), output)
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
    if serve is not None:
        from gfd.fleet.health import Collection, ViewHealth
        from gfd.fleet.view import StaticSource, View

        counted = count(fleet, tolerated=tolerated)
        health = ViewHealth(collections=tuple(Collection(name=r, synced=True)
                                              for r, _ in source.READS))
        static = StaticSource(View(fleet=fleet, counted=counted, health=health, generation=0,
                                   findings=tuple(fleet_checks.check(fleet, counted))))
        try:
            serve_view(static, host, port, _stop_on_signals())
        finally:
            static.stop()
        return
    counted = count(fleet, tolerated=tolerated)
    text, notes, findings = _renderer(parsed, per_node, not no_headers, check, output)(
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
              check: bool, output: str, *, lines: bool = False) -> Render:
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
        parts: list[str] = []
        if output in ("json", "yaml"):
            doc = report.document(fleet, counted, fits=fit, findings=findings)
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


def serve_address(text: str) -> tuple[str, int]:
    """``--serve``'s ADDR: ``HOST:PORT``, ``:PORT`` (every IPv4 interface), ``PORT``, or
    ``[IPV6]:PORT``; HOST an IP address."""
    from gfd.settingkinds import Address, ValueProblem

    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        host, port_text = "", text.strip()
    if host.count(":") and not host.startswith("["):
        raise ConfigError(f"--serve {text}: write an IPv6 address in brackets, as "
                          "[::]:8080")
    try:
        host = Address().from_text(host) if host else "0.0.0.0"
    except ValueProblem as exc:
        raise ConfigError(f"--serve {text}: {exc}") from None
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"--serve {text}: the port must be a number from 0 to 65535, as "
                          "in :8080")
    return host, int(port_text)


def serve_view(source: ViewSource, host: str, port: int, stop: threading.Event) -> None:
    """The seam to the fleet server: ``gfd.metrics.fleetserver.serve`` serves ``source`` on
    ``host``:``port`` until ``stop`` is set."""
    name = "gfd.metrics.fleetserver"
    try:
        server = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise
        raise ConfigError("--serve: this gfd has no fleet server (gfd.metrics.fleetserver); "
                          "--watch prints the same view") from None
    serve: Callable[..., None] = server.serve
    serve(source, host=host, port=port, stop=stop)


def _stop_on_signals() -> threading.Event:
    """An event SIGTERM (the kubelet stopping the pod) and SIGINT (Ctrl-C) set."""
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _sig, _frame: stop.set())
    return stop


def _serve_until_stopped(source: ViewSource, host: str, port: int) -> None:
    try:
        serve_view(source, host, port, _stop_on_signals())
    finally:
        stop = getattr(source, "stop", None)
        if stop is not None:
            stop()


def _filters(params: dict[str, Any]) -> tuple[Any, str, dict[str, bool]] | None:
    """The selector's filters parsed by the selector's own parser (None: none given)."""
    from gfd.selector import Options, parse
    from gfd.selector.claims import parse_gates

    label_set, gates_text = params.pop("label_set"), params.pop("feature_gates")
    defaults = {"count": 1}
    given = [k for k, v in params.items()
             if v is not None and v is not False and v != "" and v != defaults.get(k)]
    if not given:
        if gates_text:
            raise ConfigError("--feature-gates goes with --dra and the filters of a pod "
                              "(where it fits)")
        return None
    f = parse(Options(**params))
    if gates_text and not f.dra:
        raise ConfigError("--feature-gates goes with --dra: the DRA driver's gates change "
                          "what its devices publish")
    return f, label_set, parse_gates(gates_text) if f.dra else {}
