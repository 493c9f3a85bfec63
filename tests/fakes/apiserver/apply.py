"""Server-side apply and field ownership: an apply body's allowed fields, each manager's
labels and annotations after an update or an apply, and the 409 for a conflict."""

from __future__ import annotations

import copy

import yaml

from .errors import ApiError, _bad_request
from .metadata import _drop_empty_maps, _now, _section
from .objects import _SECTIONS, JSON, Field, ManagerKey, Resource, _Owner, _Stored
from .validation import _check_string_map

_APPLY_META_KEYS = {"name", "labels", "annotations", "resourceVersion", "uid"}


def _parse_apply_body(body: bytes, res: Resource, name: str) -> JSON:
    """Parse an apply configuration; return its labels, annotations and resourceVersion."""
    try:
        config = yaml.safe_load(body)
    except yaml.YAMLError as err:
        raise _bad_request(f"error decoding YAML: {err}") from err
    if not isinstance(config, dict):
        raise _bad_request("error decoding YAML: the apply configuration must be an object")
    if config.get("kind") != res.kind or config.get("apiVersion") != res.api_version:
        raise _bad_request(
            f"the apply configuration must have apiVersion {res.api_version!r} and kind "
            f"{res.kind!r}"
        )
    meta = config.get("metadata") or {}
    if not isinstance(meta, dict):
        raise _bad_request("metadata must be an object")
    if meta.get("name") not in (None, name):
        raise _bad_request(
            f"the name of the object ({meta.get('name')}) does not match the name on the URL "
            f"({name})"
        )
    extra = [k for k, v in config.items() if k not in ("apiVersion", "kind", "metadata") and v]
    extra += [f"metadata.{k}" for k, v in meta.items() if k not in _APPLY_META_KEYS and v]
    if extra:
        raise _bad_request(
            "fake apiserver: server-side apply only tracks metadata.labels and "
            f"metadata.annotations; unsupported fields: {', '.join(sorted(extra))}"
        )
    out: JSON = {"resourceVersion": meta.get("resourceVersion"), "uid": meta.get("uid")}
    for section in _SECTIONS:
        _check_string_map(meta, section)
        out[section] = dict(meta.get(section) or {})
    return out


def _owners_after_update(stored: _Stored, new: JSON, manager: str) -> dict[ManagerKey, _Owner]:
    """A non-apply write takes the fields it changed; removed fields lose all owners."""
    changed: set[Field] = set()
    removed: set[Field] = set()
    for section in _SECTIONS:
        before, after = _section(stored.obj, section), _section(new, section)
        changed |= {(section, k) for k, v in after.items() if before.get(k) != v}
        removed |= {(section, k) for k in before if k not in after}
    mine = (manager, "Update")
    now = _now()
    owners: dict[ManagerKey, _Owner] = {}
    for key, owner in stored.owners.items():
        fields = owner.fields - removed
        if key != mine:
            fields -= changed
        else:
            fields |= changed
        if fields:
            owners[key] = owner if fields == owner.fields else _Owner(fields, now)
    if mine not in owners and changed:
        owners[mine] = _Owner(frozenset(changed), now)
    return owners


def _apply_ownership(
    stored: _Stored, config: JSON, manager: str, force: bool
) -> tuple[JSON, dict[ManagerKey, _Owner]]:
    """Server-side apply of labels/annotations for ``manager``.

    Applied keys become owned by the manager (shared with managers that own the
    same key with the same value); a key it applied before and now omits is
    deleted unless another manager owns it too; a key another manager owns with
    a different value is a conflict (409) unless ``force``, which takes it over.
    """
    mine: ManagerKey = (manager, "Apply")
    obj = copy.deepcopy(stored.obj)
    meta = obj["metadata"]
    applied: set[Field] = {(s, k) for s in _SECTIONS for k in config[s]}
    fields: dict[ManagerKey, set[Field]] = {k: set(o.fields) for k, o in stored.owners.items()}
    previous = fields.pop(mine, set())

    conflicts: list[tuple[ManagerKey, Field]] = []
    for section, key in sorted(applied):
        current = meta.get(section, {}).get(key)
        if current is None or current == config[section][key]:
            continue
        conflicts += [(other, (section, key)) for other, f in fields.items() if (section, key) in f]
    if conflicts and not force:
        raise _conflict_error(conflicts)
    for other, fld in conflicts:  # forced: the other managers lose these fields
        fields[other].discard(fld)

    for section in _SECTIONS:
        values = meta.setdefault(section, {})
        values.update(config[section])
        for sec, key in previous - applied:
            if sec == section and not any((sec, key) in f for f in fields.values()):
                values.pop(key, None)
    _drop_empty_maps(meta)

    if applied:
        fields[mine] = applied
    now = _now()
    owners: dict[ManagerKey, _Owner] = {}
    for who, owned in fields.items():
        if owned:
            old = stored.owners.get(who)
            unchanged = old is not None and old.fields == owned
            owners[who] = old if old is not None and unchanged else _Owner(frozenset(owned), now)
    return obj, owners


def _conflict_error(conflicts: list[tuple[ManagerKey, Field]]) -> ApiError:
    def who(key: ManagerKey) -> str:
        manager, operation = key
        return f'"{manager}" using v1' if operation == "Update" else f'"{manager}"'

    def path(f: Field) -> str:
        return f".metadata.{f[0]}.{f[1]}"

    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {who(k)}", "field": path(f)}
        for k, f in conflicts
    ]
    if len(conflicts) == 1:
        key, fld = conflicts[0]
        message = f"Apply failed with 1 conflict: conflict with {who(key)}: {path(fld)}"
    else:
        lines: list[str] = []
        for key in sorted({k for k, _ in conflicts}):
            lines.append(f"conflicts with {who(key)}:")
            lines += [f"- {path(f)}" for k, f in conflicts if k == key]
        message = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", message, {"causes": causes})


