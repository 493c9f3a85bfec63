"""What the one-shot commands print, in each ``-o/--output`` format: pure functions from
their data to text (json and yaml of one document; text for people)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gfd.config import TABLE, Settings

if TYPE_CHECKING:
    from gfd.labelers.base import Label, LabelDoc
    from gfd.sinks.base import Change
    from gfd.snapshot import ResourceManager


def document(doc: Any, fmt: str) -> str:
    """A document as ``json`` (indented, sorted where the data is a mapping of labels) or
    ``yaml`` (block style, in the document's own order)."""
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    if fmt == "yaml":
        import yaml  # (only when asked: the agent's start does not load it)

        return str(yaml.safe_dump(doc, sort_keys=False))
    raise ValueError(f"not a document format: {fmt}")


def one(documents: list[Any]) -> Any:
    """Several documents as one, as kubectl prints them: the document itself when there is one,
    else a ``v1`` ``List`` of them (``kubectl apply -f -`` takes either)."""
    if len(documents) == 1:
        return documents[0]
    return {"apiVersion": "v1", "kind": "List", "items": documents}


def labels(values: Mapping[str, str], fmt: str) -> str:
    """Labels: ``text`` sorted ``key=value`` lines, ``name`` the keys alone, ``json`` and
    ``yaml`` one mapping sorted by key."""
    ordered = dict(sorted(values.items()))
    if fmt == "text":
        return "".join(f"{k}={v}\n" for k, v in ordered.items())
    if fmt == "name":
        return "".join(f"{k}\n" for k in ordered)
    return document(ordered, fmt)


_MEMORY = ("memory", "addressableMemory")
"""The capacities ``gfd devices -o text`` shows as a device's memory: a GPU's and a MIG
device's ``memory``, a passthrough device's ``addressableMemory`` (its BARs)."""


def devices_text(doc: Mapping[str, Any]) -> str:
    """``gfd devices -o text``: one line per device (name, type, product, memory: a
    passthrough device's is its ``addressableMemory``), and what is missing where a device
    cannot be described fully (one whose name cannot be told goes by its GPU)."""

    def attribute(device: Mapping[str, Any], name: str) -> str:
        value = device.get("attributes", {}).get(name, {})
        return str(next(iter(value.values()), "-")) if value else "-"

    def memory(device: Mapping[str, Any]) -> str:
        capacity = device.get("capacity", {})
        return next((str(capacity[n]["value"]) for n in _MEMORY if n in capacity), "-")

    def name(device: Mapping[str, Any]) -> str:
        return str(device["name"]) if "name" in device else f"(GPU {device['gpu']})"

    rows = [("NAME", "TYPE", "PRODUCT", "MEMORY")]
    rows += [(name(d), attribute(d, "type"), attribute(d, "productName"), memory(d))
             for d in doc["devices"]]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "   " + r[3]
             for r in rows]
    lines += [f"{name(d)}: missing {', '.join(map(str, d['missing']))}"
              for d in doc["devices"] if d.get("missing")]
    return "\n".join(lines) + "\n"


Drift = tuple[Mapping[str, str], Mapping[str, str], "Change"]
"""What is stored, what is wanted, and the change between them."""


def _changes(current: Mapping[str, str], wanted: Mapping[str, str],
             change: Change) -> dict[str, Any]:
    return {
        "added": {k: wanted[k] for k in change.added},
        "changed": {k: {"from": current[k], "to": wanted[k]} for k in change.changed},
        "removed": {k: current[k] for k in change.removed},
    }


def diff_document(current: Mapping[str, str], wanted: Mapping[str, str], change: Change, *,
                  target: str, features: Drift | None = None) -> dict[str, Any]:
    """``gfd diff``'s data: the target, whether it is in sync, each label's difference, and
    (where the target holds features: the NodeFeature) each feature element's."""
    doc: dict[str, Any] = {"target": target,
                           "inSync": change.empty and (features is None or features[2].empty),
                           **_changes(current, wanted, change)}
    if features is not None:
        doc["features"] = _changes(*features)
    return doc


def diff_text(doc: Mapping[str, Any]) -> str:
    """``+ key=value``, ``~ key: old -> new``, ``- key=value`` lines, then the same for
    feature elements (``+ feature nvidia.gpu[0].memory=...``)."""
    lines = []
    for prefix, part in (("", doc), ("feature ", doc.get("features"))):
        if part:
            lines += [f"+ {prefix}{k}={v}" for k, v in part["added"].items()]
            lines += [f"~ {prefix}{k}: {v['from']} -> {v['to']}"
                      for k, v in part["changed"].items()]
            lines += [f"- {prefix}{k}={v}" for k, v in part["removed"].items()]
    return "".join(f"{line}\n" for line in lines)


def explain_text(doc: Mapping[str, Any]) -> str:
    """``gfd explain``'s text from its document (``gfd.cli`` builds it)."""
    lines = [f"{doc['key']}={doc['value']}", f"  source: {doc['source'] or '-'}"]
    if doc.get("raw"):
        lines.append(f"  raw:    {doc['raw']}")
    lines += [f"  rule {i}: {rule}" for i, rule in enumerate(doc["rules"], 1)]
    if doc.get("set"):
        where = f" (computed in {doc['computedIn']})" if doc.get("computedIn") else ""
        lines.append(f"  set:    {doc['set']}{where}")
    if doc.get("underDra"):
        lines.append(f"  under dra: {doc['underDra']}")
    if doc.get("perDevice"):
        lines.append(f"  per device: {doc['perDevice']}")
    manager = doc["resourceManager"]
    lines.append(f"  resource manager: {manager['name']} ({manager['evidence']})")
    if doc.get("notPublished"):
        lines.append(f"  NOT PUBLISHED: {doc['notPublished']}")
    return "".join(f"{line}\n" for line in lines)


def explain_document(key: str, label: Label, doc: LabelDoc | None, manager: ResourceManager,
                     not_published: str, *, computed_in: str = "") -> dict[str, Any]:
    """``gfd explain``'s data: the label's value and provenance, its reference entry (and the
    module the pipeline says computed it), and what the resource manager changes."""
    dra = manager.name == "dra"
    return {
        "key": key, "value": label.value, "source": label.source, "raw": label.raw,
        "rules": list(label.rules), "set": doc.set if doc else "",
        "computedIn": computed_in if doc else "",
        "underDra": doc.dra if doc and dra else "",
        "perDevice": "`gfd devices` (each GPU and MIG device as DRA claims select it: "
                     "attributes, capacities)" if dra and key.startswith("nvidia.com/gpu.")
        else "",
        "resourceManager": {"name": manager.name, "evidence": manager.evidence},
        "notPublished": not_published,
    }


def settings_fields(settings: Settings) -> dict[str, Any]:
    """The merged settings as JSON values, the sharing flattened (GFD logs its merged config
    at start; ``--log-format json`` gets them as one field)."""
    data: dict[str, Any] = {e.name: getattr(settings, e.name) for e in TABLE}
    data["sharing"] = {"strategy": settings.sharing.strategy,
                       "resources": {r.name: r.replicas for r in settings.sharing.resources}}
    return data


def settings_line(settings: Settings, defaults: Settings | None = None) -> str:
    """The start log's text: the sink, then only the settings that differ from the
    defaults, as flags (the whole set is in the JSON line's fields)."""
    base = defaults or Settings()
    given = [f"{e.flag}={e.spec.kind.render(getattr(settings, e.name)) or chr(39) * 2}"
             for e in TABLE if getattr(settings, e.name) != getattr(base, e.name)]
    line = f"sink {settings.effective_sink}"
    if settings.effective_sink == "file" and settings.output_file == base.output_file:
        line += f" ({settings.output_file})"  # (else it is among the flags)
    if settings.sharing.strategy != "none":
        line += f", sharing {settings.sharing.strategy}"
    return f"{line}; " + (" ".join(given) if given else "every setting at its default")
