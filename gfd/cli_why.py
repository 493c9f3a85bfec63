"""``gfd why`` (and ``kubectl gfd why``): why a pod is pending, node by node in GPU terms, and
the nearest change that binds it now; its options, its output and its exit status. Reading
is ``gfd.fleet.source``'s and ``gfd.kube``'s, judging ``gfd.fleet.why``'s."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gfd import render
from gfd.cli_help import Command
from gfd.cli_options import Exit, output_option
from gfd.errors import ConfigError, one_line

WHY_NOTES = (
    "Each node is judged by kube-scheduler's filters in its order (NodeUnschedulable, "
    "TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, volumes, topology spread, "
    "inter-pod affinity, DynamicResources) and counted at the first it fails, under each "
    "reason that filter gives, in the scheduler's words (docs/why.md): the counts are those "
    "of its FailedScheduling message. What gfd cannot see (host ports, volumes, inter-pod "
    "affinity, topology spread) is 'not judged here'. The fix is the smallest change gfd "
    "finds that the same judgement binds now: a toleration, a selector value, a resource "
    "name, a CEL selector, a count. Reads the fleet as gfd fleet does, and GETs the pod, its "
    "claims and their templates.")
POD_PREFIXES = ("pod/", "pods/", "po/")
CLAIM_API = "/apis/resource.k8s.io/v1/namespaces/{ns}/{kind}/{name}"
KEEP_KINDS = frozenset({"ResourceClaimTemplate", "Deployment", "StatefulSet", "DaemonSet",
                        "ReplicaSet", "Job", "CronJob"})


@click.command("why", cls=Command, epilog=WHY_NOTES)
@click.argument("pod", required=False, metavar="[POD]")
@click.option("-n", "--namespace", default="", metavar="NS",
              help="The pod's namespace (default: the context's).")
@click.option("-f", "--filename", "filename", default=None, metavar="FILE",
              help="A Pod or workload manifest (- stdin), not yet applied.")
@click.option("--from", "from_file", default=None, metavar="FILE",
              help="A kubectl dump of the cluster (as gfd fleet --from).")
@click.option("--kubeconfig", default=None, metavar="FILE",
              help="Default: $KUBECONFIG, ~/.kube/config, in-cluster.")
@click.option("--context", default="", metavar="NAME", help="The kubeconfig context to use.")
@output_option("why")
def why_cmd(pod: str | None, namespace: str, filename: str | None, from_file: str | None,
            kubeconfig: str | None, context: str, output: str) -> None:
    """Explain why a pod is pending: its GPU asks, every node grouped by the first scheduler
    filter that keeps it off (the scheduler's reasons and counts), and the smallest change
    that binds it now."""
    from gfd.cli_fleet import _kubeconfig
    from gfd.fleet import source, whyreport
    from gfd.fleet.count import index

    if (pod is None) == (filename is None):
        raise ConfigError("give a pod (gfd why NAME) or a manifest (gfd why -f FILE), one "
                          "of the two")
    if from_file is not None and (kubeconfig or context):
        raise ConfigError("--from reads a dump, not the API server: leave out --kubeconfig "
                          "and --context")
    kept: list[dict[str, Any]] = []
    lister = None
    if from_file is not None:
        fleet = source.from_dump(from_file, stdin=sys.stdin if filename != "-" else None,
                                 keep=kept.append, keep_kinds=KEEP_KINDS)
    else:
        from gfd.kube.lists import Lister

        config = _kubeconfig(kubeconfig)
        lister = Lister(kubeconfig=config, context=context)
    try:
        if lister is not None:
            from gfd.kube.credentials import namespace as context_namespace

            fleet = source.live(lister)
            default_ns = context_namespace(config, context=context)
        else:
            default_ns = "default"
        subject = _subject(pod, filename, namespace, default_ns, kept, lister)
    finally:
        if lister is not None:
            lister.close()
    ix = index(fleet)
    answer = whyreport.answer(ix, subject)
    if output in ("json", "yaml"):
        doc = whyreport.document(fleet, ix, answer)
        click.echo(render.document(doc, output), nl=False)
    else:
        click.echo(whyreport.text(fleet, ix, answer, wide=output == "wide"), nl=False)
    for line in (*(f"incomplete: {x}" for x in fleet.incomplete),
                 *(f"skipped: {x}" for x in fleet.skipped)):
        click.echo(line, err=True)
    if fleet.incomplete or fleet.skipped:
        sys.exit(Exit.INCOMPLETE)
    fits = True if answer.bound else answer.judgement.fits
    if fits is None:
        sys.exit(Exit.INCOMPLETE)
    if not fits:
        sys.exit(Exit.FAILURE)


def _pod_name(given: str) -> str:
    for prefix in POD_PREFIXES:
        if given.startswith(prefix):
            return given[len(prefix):]
    if "/" in given:
        raise ConfigError(f"{given}: not a pod (give NAME or pod/NAME; a workload with -f)")
    return given


def _documents(filename: str) -> list[Any]:
    import yaml

    try:
        data = sys.stdin.buffer.read() if filename == "-" else Path(filename).read_bytes()
    except OSError as exc:
        raise ConfigError(f"-f {filename}: cannot read it: {one_line(str(exc))}") from exc
    try:
        text = data.decode("utf-16") if data.startswith((b"\xff\xfe", b"\xfe\xff")) \
            else data.decode("utf-8-sig")
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"-f {filename}: neither JSON nor YAML: {one_line(str(exc))}") from exc
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and isinstance(doc.get("items"), list):
            out.extend(doc["items"])
        else:
            out.append(doc)
    return out


def _file_objects(filename: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The one Pod or workload in the file, and the claims and templates beside it."""
    from gfd.fleet.subject import CLAIM_KINDS, TEMPLATE_AT

    objects = [d for d in _documents(filename) if isinstance(d, dict)]
    workloads = [d for d in objects if d.get("kind") in TEMPLATE_AT]
    claims = [d for d in objects if d.get("kind") in CLAIM_KINDS]
    if not workloads:
        kinds = sorted({str(d.get("kind")) for d in objects}) or ["nothing"]
        raise ConfigError(f"-f {filename}: no Pod or workload in it ({', '.join(kinds)}; give "
                          f"one of {', '.join(TEMPLATE_AT)})")
    if len(workloads) > 1:
        names = ", ".join(f"{w.get('kind')} {(w.get('metadata') or {}).get('name')}"
                          for w in workloads)
        raise ConfigError(f"-f {filename}: {len(workloads)} pods or workloads ({names}): give "
                          "one")
    return workloads[0], claims


def _subject(pod: str | None, filename: str | None, namespace: str, default_ns: str,
             kept: list[dict[str, Any]], lister: Any) -> Any:
    from gfd.fleet.model import Malformed
    from gfd.fleet.subject import TEMPLATE_AT, read

    given: list[dict[str, Any]] = []
    if filename is not None:
        manifest, given = _file_objects(filename)
        meta = manifest.get("metadata") if isinstance(manifest.get("metadata"), dict) else {}
        ns = namespace or str((meta or {}).get("namespace") or "") or default_ns
        if manifest.get("kind") not in TEMPLATE_AT:
            raise ConfigError(f"-f {filename}: {manifest.get('kind')}: not a Pod or workload")
    else:
        assert pod is not None
        name = _pod_name(pod)
        ns = namespace or default_ns
        found = _get_pod(ns, name, kept, lister)
        if found is None:
            raise ConfigError(f"pod {ns}/{name} not found")
        manifest = found
    try:
        first = read(manifest, namespace=ns, given=given)
        fetched = _fetch(first, kept, lister)
        return read(manifest, namespace=ns, given=given, fetched=fetched)
    except Malformed as exc:
        raise ConfigError(f"{manifest.get('kind')} {ns}: {exc}") from exc


def _get_pod(ns: str, name: str, kept: list[dict[str, Any]], lister: Any) -> Any:
    if lister is None:
        for raw in kept:
            meta: dict[str, Any] = raw.get("metadata") or {}
            if raw.get("kind") == "Pod" and meta.get("name") == name \
                    and (meta.get("namespace") or "default") == ns:
                return raw
        return None
    return lister.get(f"/api/v1/namespaces/{ns}/pods/{name}", "pods")


def _fetch(subject: Any, kept: list[dict[str, Any]], lister: Any) -> list[dict[str, Any]]:
    """The pod's ResourceClaims and ResourceClaimTemplates as the cluster (or the dump)
    holds them, where none was given with the pod."""
    from gfd.errors import ApiError

    wanted = []
    for ref in subject.pod_claims:
        if ref.template and ("ResourceClaimTemplate", ref.template) not in subject.given:
            wanted.append(("ResourceClaimTemplate", "resourceclaimtemplates", ref.template))
        if ref.claim and ("ResourceClaim", ref.claim) not in subject.given:
            wanted.append(("ResourceClaim", "resourceclaims", ref.claim))
    out: list[dict[str, Any]] = []
    for kind, plural, name in wanted:
        if lister is None:
            out.extend(r for r in kept if r.get("kind") == kind
                       and (r.get("metadata") or {}).get("name") == name
                       and (r.get("metadata") or {}).get("namespace") == subject.namespace)
            continue
        try:
            raw = lister.get(CLAIM_API.format(ns=subject.namespace, kind=plural, name=name),
                             plural)
        except ApiError:
            raw = None  # the fleet's LIST holds what judging needs; a fix just lacks it
        if raw is not None:
            out.append({**raw, "kind": kind})
    return out
