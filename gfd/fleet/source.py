"""Where the fleet is read from: the API server (paginated LISTs of Nodes, unfinished Pods,
ResourceSlices, ResourceClaims and DeviceClasses, each page reduced to the fleet model as it
arrives), or a dump (``kubectl get nodes,pods,resourceslices,resourceclaims,deviceclasses -A
-o json``, a List; or a stream of such documents, JSON or YAML) read the same way. A LIST
that is refused or fails is one line in ``Fleet.incomplete``; what could be read is still
counted."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from gfd.errors import ApiError, ConfigError, one_line
from gfd.fleet.model import Fleet, claim_of, device_class_of, node_of, pod_of, slice_of
from gfd.kube.lists import Lister

UNFINISHED = "status.phase!=Succeeded,status.phase!=Failed"
"""Pods that ended hold nothing: the API server leaves them out of the answer."""
READS = (
    ("nodes", "/api/v1/nodes"),
    ("pods", "/api/v1/pods"),
    ("resourceslices", "/apis/resource.k8s.io/v1/resourceslices"),
    ("resourceclaims", "/apis/resource.k8s.io/v1/resourceclaims"),
    ("deviceclasses", "/apis/resource.k8s.io/v1/deviceclasses"),
)


def _empty(source: str) -> Fleet:
    return Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[], source=source)


def _take(fleet: Fleet, resource: str, items: Iterable[dict[str, Any]]) -> None:
    for obj in items:
        if resource == "nodes":
            node = node_of(obj)
            fleet.nodes[node.name] = node
        elif resource == "pods":
            pod = pod_of(obj)
            if pod is not None:
                fleet.pods.append(pod)
        elif resource == "resourceslices":
            fleet.slices.append(slice_of(obj))
        elif resource == "resourceclaims":
            claim = claim_of(obj)
            fleet.claims[(claim.namespace, claim.name)] = claim
        elif resource == "deviceclasses":
            found = device_class_of(obj)
            fleet.classes[found.name] = found


def _refused(resource: str, exc: ApiError) -> str:
    if exc.status == 403:
        return (f"list {resource}: forbidden (grant `list` on {resource} cluster-wide: the "
                "ClusterRole in manifests/fleet)")
    if exc.status == 404 and resource.startswith("resource"):
        return f"list {resource}: the API server serves no resource.k8s.io/v1 (DRA is off)"
    return f"list {resource}: {one_line(str(exc))}"


def live(lister: Lister, *, node_selector: str = "") -> Fleet:
    """The fleet as the API server holds it now."""
    fleet = _empty(lister.server)
    fleet.selected = bool(node_selector)
    for resource, path in READS:
        try:
            for page in lister.pages(
                    path, resource,
                    field_selector=UNFINISHED if resource == "pods" else "",
                    label_selector=node_selector if resource == "nodes" else ""):
                _take(fleet, resource, page)
        except ApiError as exc:
            if exc.status == 400 and resource == "nodes":
                raise ConfigError(f"--selector {node_selector}: {one_line(str(exc))}") from exc
            fleet.incomplete.append(_refused(resource, exc))
    if node_selector:
        fleet.pods = [p for p in fleet.pods if not p.node or p.node in fleet.nodes]
    return fleet


SAMPLE = "@sample"
"""``--from @sample``: the small fleet shipped with gfd (docs/fleet.md shows its summary)."""
SAMPLE_FILE = "data/fleet-sample.json"
KINDS = {"Node": "nodes", "Pod": "pods", "ResourceSlice": "resourceslices",
         "ResourceClaim": "resourceclaims", "DeviceClass": "deviceclasses"}


def _objects(doc: Any) -> Iterator[dict[str, Any]]:
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from _objects(item)
    elif isinstance(doc, dict) and doc.get("kind") in KINDS:
        yield doc
    elif isinstance(doc, list):
        for item in doc:
            yield from _objects(item)


def _documents(stream: IO[str], name: str) -> Iterator[Any]:
    text = stream.read()
    if text.lstrip().startswith(("{", "[")):
        decoder = json.JSONDecoder()
        at = 0
        while True:
            while at < len(text) and text[at].isspace():
                at += 1
            if at >= len(text):
                return
            try:
                doc, at = decoder.raw_decode(text, at)
            except ValueError as exc:
                raise ConfigError(f"--from {name}: not JSON at character {at}: {exc} (give "
                                  "the output of `kubectl get nodes,pods,resourceslices,"
                                  "resourceclaims,deviceclasses -A -o json`)") from exc
            yield doc
        return
    import yaml

    try:
        yield from yaml.safe_load_all(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--from {name}: neither JSON nor YAML: {one_line(str(exc))}") from exc


def from_dump(path: str, *, node_selector: str = "", stdin: IO[str] | None = None) -> Fleet:
    """The fleet a dump holds; ``path`` ``-`` is standard input. A dump holds what it holds:
    a kind it lacks is listed as incomplete."""
    if node_selector:
        raise ConfigError("--selector filters the nodes the API server lists; with --from, "
                          "leave it out (or cut the dump with `kubectl get nodes -l ...`)")
    fleet = _empty(f"file {path}")
    seen: set[str] = set()
    try:
        if path == SAMPLE:
            from importlib.resources import files

            docs = list(_documents(io.StringIO(
                files("gfd").joinpath(SAMPLE_FILE).read_text(encoding="utf-8")), path))
        elif path == "-":
            if stdin is None:
                raise ConfigError("--from -: no standard input")
            docs = list(_documents(stdin, "-"))
        else:
            with Path(path).open(encoding="utf-8") as stream:
                docs = list(_documents(stream, path))
    except OSError as exc:
        raise ConfigError(f"--from {path}: cannot read it: {one_line(str(exc))}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--from {path}: not text (compressed? unpack it first): "
                          f"{one_line(str(exc))}") from exc
    for doc in docs:
        for obj in _objects(doc):
            resource = KINDS[obj["kind"]]
            seen.add(resource)
            if resource == "pods" and (obj.get("status") or {}).get("phase") in (
                    "Succeeded", "Failed"):
                continue
            _take(fleet, resource, [obj])
    if not seen:
        raise ConfigError(f"--from {path}: no Node, Pod, ResourceSlice or ResourceClaim in it "
                          "(give the output of `kubectl get nodes,pods,resourceslices,"
                          "resourceclaims,deviceclasses -A -o json`)")
    for resource in ("nodes", "pods"):  # an empty kind leaves no trace in a dump: only
        if resource not in seen:        # a cluster without nodes or pods is not one
            fleet.incomplete.append(f"{resource}: none in {path} (was it dumped?)")
    return fleet
