"""Where the fleet is read from: the API server (paginated LISTs of Nodes, unfinished Pods,
ResourceSlices, ResourceClaims and DeviceClasses, each page reduced to the fleet model as it
arrives), or a dump (``kubectl get nodes,pods,resourceslices,resourceclaims,deviceclasses -A
-o json``, a List; or a stream of such documents, JSON or YAML) read the same way. A LIST
that is refused or fails is one line in ``Fleet.incomplete``; what could be read is still
counted."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from gfd.errors import ApiError, ConfigError, one_line
from gfd.fleet.model import (
    Fleet,
    Load,
    Malformed,
    claim_of,
    device_class_of,
    ident,
    node_of,
    obj,
    pod_of,
    slice_of,
    text,
    usage_of,
)
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


KIND_OF = {"nodes": "Node", "pods": "Pod", "resourceslices": "ResourceSlice",
           "resourceclaims": "ResourceClaim", "deviceclasses": "DeviceClass"}


class Reader:
    """Objects taken into a fleet one by one: each reduced to the model's values, a malformed
    one skipped and named (``Fleet.skipped``), one seen before (the same ``metadata.uid``, or
    without one the same kind, namespace and name: two overlapping Lists, a LIST restarted)
    taken once."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._seen: set[str] = set()
        self._taken = 0

    def take(self, resource: str, raw: Any) -> None:
        self._taken += 1
        kind = KIND_OF[resource]
        if not isinstance(raw, dict):
            self.fleet.skipped.append(f"{kind} #{self._taken}: not an object")
            return
        try:
            key = self._key(kind, raw)
            if key in self._seen:
                return
            self._seen.add(key)
            self._reduce(resource, raw)
        except Malformed as exc:
            self.fleet.skipped.append(f"{ident(kind, raw, self._taken)}: {exc}")

    @staticmethod
    def _key(kind: str, raw: dict[str, Any]) -> str:
        meta = obj(raw, "metadata", "")
        uid = text(meta, "uid", "metadata.")
        if uid:
            return uid
        return "\x00".join((kind, text(meta, "namespace", "metadata."),
                            text(meta, "name", "metadata.")))

    def _reduce(self, resource: str, raw: dict[str, Any]) -> None:
        fleet = self.fleet
        if resource == "nodes":
            node = node_of(raw)
            fleet.nodes[node.name] = node
        elif resource == "pods":
            pod = pod_of(raw)
            if pod is not None:
                fleet.pods.append(pod)
                return
            usage = usage_of(raw)
            if usage is not None:
                fleet.load.setdefault(usage.node, Load()).add(usage.requests)
        elif resource == "resourceslices":
            fleet.slices.append(slice_of(raw))
        elif resource == "resourceclaims":
            claim = claim_of(raw)
            fleet.claims[(claim.namespace, claim.name)] = claim
        elif resource == "deviceclasses":
            found = device_class_of(raw)
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
    reader = Reader(fleet)
    for resource, path in READS:
        try:
            for page in lister.pages(
                    path, resource,
                    field_selector=UNFINISHED if resource == "pods" else "",
                    label_selector=node_selector if resource == "nodes" else ""):
                for raw in page:
                    reader.take(resource, raw)
        except ApiError as exc:
            if exc.status == 400 and resource == "nodes":
                raise ConfigError(f"--selector {node_selector}: {one_line(str(exc))}") from exc
            fleet.incomplete.append(_refused(resource, exc))
        else:
            if resource == "deviceclasses":
                fleet.classes_read = True
    if node_selector:
        fleet.pods = [p for p in fleet.pods if not p.node or p.node in fleet.nodes]
        fleet.load = {n: load for n, load in fleet.load.items() if n in fleet.nodes}
    return fleet


SAMPLE = "@sample"
"""``--from @sample``: the small fleet shipped with gfd (docs/fleet.md shows its summary)."""
SAMPLE_FILE = "data/fleet-sample.json"
KINDS = {"Node": "nodes", "Pod": "pods", "ResourceSlice": "resourceslices",
         "ResourceClaim": "resourceclaims", "DeviceClass": "deviceclasses"}


_LIST_DEPTH = 4
"""How deep Lists may nest in a dump (a List of Lists, as some bundles hold); deeper is no
dump of kubectl's."""


def _objects(doc: Any, depth: int = 0,
             extra: frozenset[str] = frozenset()) -> Iterator[tuple[str, Any]]:
    """(resource, object) of every Node, Pod, ResourceSlice, ResourceClaim and DeviceClass in
    a document (a List, a list, or one object); ("", object) for an item whose ``kind`` is not
    a string; ("+Kind", object) for an object of one of the ``extra`` kinds."""
    if depth > _LIST_DEPTH:
        return
    if isinstance(doc, dict) and isinstance(doc.get("items"), list):
        for item in doc["items"]:
            yield from _objects(item, depth + 1, extra)
    elif isinstance(doc, dict):
        kind = doc.get("kind")
        if not isinstance(kind, str) and kind is not None:
            yield "", doc
        elif kind in KINDS:
            yield KINDS[kind], doc
        elif kind in extra:
            yield f"+{kind}", doc
    elif isinstance(doc, list):
        for item in doc:
            yield from _objects(item, depth + 1, extra)


HINT = ("give the output of `kubectl get nodes,pods,resourceslices,resourceclaims,"
        "deviceclasses -A -o json`")


def _decode(data: bytes, name: str) -> str:
    """The dump's text: UTF-8 (a BOM dropped) or UTF-16 (PowerShell's ``>`` writes it, with a
    BOM); anything else named for what it looks like."""
    if data.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        raise ConfigError(f"--from {name}: UTF-32 text: convert it to UTF-8 first "
                          "(iconv -f UTF-32 -t UTF-8)")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"--from {name}: starts as UTF-16 but is not: "
                              f"{one_line(str(exc))}") from exc
    if data.startswith(b"\x1f\x8b"):
        raise ConfigError(f"--from {name}: gzip-compressed: unpack it first (gunzip)")
    if data.startswith((b"PK\x03\x04", b"BZh", b"\xfd7zXZ", b"(\xb5/\xfd")):
        raise ConfigError(f"--from {name}: an archive or compressed file (zip, bzip2, xz or "
                          "zstd): unpack it first")
    if len(data) >= 4 and data[1:4:2] == b"\x00\x00" and data[0:4:2] != b"\x00\x00":
        return _decode(b"\xff\xfe" + data, name)  # UTF-16 LE written without a BOM
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--from {name}: not UTF-8 or UTF-16 text ({exc.reason} at byte "
                          f"{exc.start}): {HINT}") from exc


class _Digits(str):
    """An integer in a dump too long to be one the API server holds: kept as its digits (a
    reduction then names the field), never converted."""

    __slots__ = ()


def _integer(digits: str) -> int | str:
    return int(digits) if len(digits) <= 24 else _Digits(digits)


_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")
"""A ``\\uD800``-style escape of half a surrogate pair: Go's decoder (and so the API server)
reads it as U+FFFD (``encoding/json``: invalid surrogates "are replaced by the Unicode
replacement character"); Python's would keep a character no output can encode."""


def _documents(text: str, name: str) -> Iterator[Any]:
    if "\\u" in text:
        text = _LONE_SURROGATE.sub(r"\\ufffd", text)
    try:
        if text.lstrip().startswith(("{", "[")):
            decoder = json.JSONDecoder(parse_int=_integer)
            at = 0
            while True:
                while at < len(text) and text[at].isspace():
                    at += 1
                if at >= len(text):
                    return
                try:
                    doc, at = decoder.raw_decode(text, at)
                except ValueError as exc:
                    raise ConfigError(f"--from {name}: not JSON at character {at}: {exc} "
                                      f"({HINT})") from exc
                yield doc
            return
        import yaml

        try:
            yield from yaml.safe_load_all(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--from {name}: neither JSON nor YAML: "
                              f"{one_line(str(exc))}") from exc
    except RecursionError as exc:
        raise ConfigError(f"--from {name}: nested too deeply to be a dump ({HINT})") from exc


def _read(path: str, stdin: IO[str] | None) -> str:
    if path == SAMPLE:
        from importlib.resources import files

        return files("gfd").joinpath(SAMPLE_FILE).read_text(encoding="utf-8")
    if path == "-":
        if stdin is None:
            raise ConfigError("--from -: no standard input")
        buffer = getattr(stdin, "buffer", None)
        if buffer is None:
            return stdin.read()
        return _decode(buffer.read(), "-")
    try:
        return _decode(Path(path).read_bytes(), path)
    except OSError as exc:
        raise ConfigError(f"--from {path}: cannot read it: {one_line(str(exc))}") from exc


def from_dump(path: str, *, node_selector: str = "", stdin: IO[str] | None = None,
              keep: Callable[[dict[str, Any]], None] | None = None,
              keep_kinds: frozenset[str] = frozenset()) -> Fleet:
    """The fleet a dump holds; ``path`` ``-`` is standard input. A dump holds what it holds:
    a kind it lacks is listed as incomplete. ``keep`` is handed every Pod and ResourceClaim
    as it is, and every object of ``keep_kinds`` (``gfd why`` keeps its pod and its
    ResourceClaimTemplates)."""
    if node_selector:
        raise ConfigError("--selector filters the nodes the API server lists; with --from, "
                          "leave it out (or cut the dump with `kubectl get nodes -l ...`)")
    fleet = _empty(f"file {path}")
    reader = Reader(fleet)
    seen: set[str] = set()
    unnamed = 0
    for doc in _documents(_read(path, stdin), path):
        for resource, raw in _objects(doc, extra=keep_kinds):
            if not resource:
                unnamed += 1
                fleet.skipped.append(f"{ident('object', raw, unnamed)}: kind: not a string")
                continue
            if resource.startswith("+"):
                if keep is not None:
                    keep(raw)
                continue
            if keep is not None and resource in ("pods", "resourceclaims"):
                keep(raw)
            seen.add(resource)
            reader.take(resource, raw)
    if not seen:
        raise ConfigError(f"--from {path}: no Node, Pod, ResourceSlice, ResourceClaim or "
                          f"DeviceClass in it ({HINT})")
    for resource in ("nodes", "pods"):  # an empty kind leaves no trace in a dump: only
        if resource not in seen:        # a cluster without nodes or pods is not one
            fleet.incomplete.append(f"{resource}: none in {path} (was it dumped?)")
    fleet.classes_read = "deviceclasses" in seen
    return fleet
