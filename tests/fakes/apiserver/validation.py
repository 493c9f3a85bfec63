"""What the API server validates before it stores: label and annotation keys and values,
metadata maps, an Event's fields and the NodeFeature schema."""

from __future__ import annotations

import json
import re
from typing import Any

from .errors import FieldError, _bad_request, _invalid
from .objects import EVENTS, JSON

# --------------------------------------------------------------------------- label rules

_DNS1123_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = f"({_QUALIFIED_NAME})?"
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)
_TOTAL_ANNOTATION_SIZE = 256 * 1024


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    ex = " or ".join(f"'{e}'" for e in examples)
    return f"{msg} (e.g. {ex}, regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} bytes"


def qualified_name_errors(value: str) -> list[str]:
    """apimachinery ``IsQualifiedName``: the rule for label and annotation keys."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errs.append("prefix part " + _max_len(253))
            if not re.fullmatch(_DNS1123_SUBDOMAIN, prefix):
                errs.append(
                    "prefix part "
                    + _regex_error(
                        "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                        "characters, '-' or '.', and must start and end with an alphanumeric "
                        "character",
                        _DNS1123_SUBDOMAIN,
                        "example.com",
                    )
                )
    else:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len(63))
    if not re.fullmatch(_QUALIFIED_NAME, name):
        errs.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME, "MyName", "my.name", "123-abc")
        )
    return errs


def label_value_errors(value: str) -> list[str]:
    """apimachinery ``IsValidLabelValue``."""
    errs: list[str] = []
    if len(value) > 63:
        errs.append(_max_len(63))
    if not re.fullmatch(_LABEL_VALUE, value):
        errs.append(
            _regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, "
                "'-', '_' or '.', and must start and end with an alphanumeric character",
                _LABEL_VALUE,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


def _metadata_errors(meta: JSON) -> list[FieldError]:
    """``ValidateLabels`` + ``ValidateAnnotations`` on an object's metadata."""
    errors: list[FieldError] = []
    labels: dict[str, str] = meta.get("labels") or {}
    for key in sorted(labels):
        for msg in qualified_name_errors(key):
            errors.append(FieldError("metadata.labels", "FieldValueInvalid", msg, _q(key)))
        for msg in label_value_errors(labels[key]):
            errors.append(FieldError("metadata.labels", "FieldValueInvalid", msg, _q(labels[key])))
    annotations: dict[str, str] = meta.get("annotations") or {}
    for key in sorted(annotations):
        for msg in qualified_name_errors(key.lower()):
            errors.append(FieldError("metadata.annotations", "FieldValueInvalid", msg, _q(key)))
    size = sum(len(k) + len(v) for k, v in annotations.items())
    if size > _TOTAL_ANNOTATION_SIZE:
        errors.append(
            FieldError(
                "metadata.annotations",
                "FieldValueTooLong",
                f"must have at most {_TOTAL_ANNOTATION_SIZE} bytes",
            )
        )
    return errors


def _q(value: str) -> str:
    return json.dumps(value)


def _check_string_map(meta: JSON, key: str) -> None:
    """Decoding into ``map[string]string`` fails with 400 for non-strings."""
    value = meta.get(key)
    if value is None:
        return
    if not isinstance(value, dict):
        raise _bad_request(
            f"json: cannot unmarshal {_json_type(value)} into Go struct field "
            f"ObjectMeta.metadata.{key} of type map[string]string"
        )
    for v in value.values():
        if v is None:
            raise _bad_request(f"fake apiserver: null values in metadata.{key} are not supported")
        if not isinstance(v, str):
            raise _bad_request(
                f"json: cannot unmarshal {_json_type(v)} into Go struct field "
                f"ObjectMeta.metadata.{key} of type string"
            )


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string"


def _check_event(body: JSON, namespace: str) -> None:
    """The API server's legacy Event validation (core/v1): an Event about a cluster-scoped
    object (no involvedObject.namespace) lives in ``default``; reasons and the reporting
    component are at most 128 characters."""
    involved = body.get("involvedObject") if isinstance(body.get("involvedObject"), dict) else {}
    name = str((body.get("metadata") or {}).get("name", ""))
    errors = []
    obj_ns = str(involved.get("namespace") or "")
    if (not obj_ns and namespace not in ("", "default")) or (obj_ns and obj_ns != namespace):
        errors.append(FieldError("involvedObject.namespace", "FieldValueInvalid",
                                 "does not match event.namespace", _q(obj_ns)))
    for key in ("reason", "reportingComponent"):
        if len(str(body.get(key) or "")) > 128:
            errors.append(FieldError(key, "FieldValueTooLong", "must have at most 128 bytes",
                                     _q(str(body.get(key)))))
    if errors:
        raise _invalid(EVENTS, name, errors)


def _nodefeature_schema_errors(obj: JSON) -> list[FieldError]:
    """The parts of the NodeFeature CRD schema gfd can trip over."""
    spec = obj.get("spec")
    if spec is None:
        return [FieldError("spec", "FieldValueRequired", "")]
    if not isinstance(spec, dict):
        return [
            FieldError(
                "spec",
                "FieldValueInvalid",
                'spec in body must be of type object: "' + _json_type(spec) + '"',
                _q(_json_type(spec)),
            )
        ]
    errors: list[FieldError] = []
    labels = spec.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            errors.append(
                FieldError(
                    "spec.labels",
                    "FieldValueInvalid",
                    f'spec.labels in body must be of type object: "{_json_type(labels)}"',
                    _q(_json_type(labels)),
                )
            )
        else:
            for key, value in sorted(labels.items()):
                if not isinstance(value, str):
                    t = _json_type(value)
                    errors.append(
                        FieldError(
                            f"spec.labels.{key}",
                            "FieldValueInvalid",
                            f'spec.labels.{key} in body must be of type string: "{t}"',
                            _q(t),
                        )
                    )
    return errors


