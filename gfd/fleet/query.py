"""Where a pod fits, as it is asked: the selector's filters as ``gfd fleet``'s options give
them, or as ``/fleet``'s query parameters (``?product=H100&count=2``, the options' names
without their dashes), parsed by the selector's own parser (``gfd.selector.parse``) into its
one value, with the label set and the DRA driver's gates the counting needs beside it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from gfd.errors import ConfigError
from gfd.labelers.options import LABEL_SETS
from gfd.selector import Filters, Options, parse
from gfd.selector.claims import parse_gates

OPTIONS = ("product", "min_memory", "mig_profile", "shared", "dedicated", "renamed", "family",
           "min_compute", "count", "dra")
"""The selector's options that say what a pod asks (``gfd.selector.Options``' fields less
``name``, which only names a printed template)."""
EXTRA = ("label_set", "feature_gates")
"""Beside them: which labels the nodes carry, and the DRA driver's gates."""
PARAMETERS = tuple(name.replace("_", "-") for name in (*OPTIONS, *EXTRA))
"""``/fleet``'s query parameters for where a pod fits, spelled as the options are."""
_DEFAULTS = {f.name: f.default for f in fields(Options)} | {"label_set": "extended",
                                                           "feature_gates": ""}
_TRUE, _FALSE = ("", "true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True, slots=True, kw_only=True)
class Asked:
    filters: Filters
    label_set: str
    gates: dict[str, bool]


def parse_filters(params: Mapping[str, Any]) -> Asked | None:
    """The filters the options give (by option name; None, False, "" or the default: not
    given), or None when none is given."""
    params = dict(params)
    label_set = params.pop("label_set", None) or "extended"
    gates_text = params.pop("feature_gates", None) or ""
    given = {k: v for k, v in params.items()
             if v is not None and v is not False and v != "" and v != _DEFAULTS.get(k)}
    if not given:
        if gates_text:
            raise ConfigError("--feature-gates goes with --dra and the filters of a pod "
                              "(where it fits)")
        return None
    f = parse(Options(**{k: v for k, v in params.items() if v is not None}))
    if gates_text and not f.dra:
        raise ConfigError("--feature-gates goes with --dra: the DRA driver's gates change "
                          "what its devices publish")
    return Asked(filters=f, label_set=label_set, gates=parse_gates(gates_text) if f.dra else {})


def from_query(query: Mapping[str, Sequence[str]]) -> Asked | None:
    """The filters ``/fleet``'s query parameters give (``min-memory=40960``, ``shared`` or
    ``shared=true``), each at most once; a parameter that is no filter is left to the
    caller. A value that is not one (``count=two``) is a ConfigError naming it."""
    params: dict[str, Any] = {}
    for key, values in query.items():
        name = key.replace("-", "_")
        if name not in OPTIONS and name not in EXTRA:
            continue
        if len(values) != 1:
            raise ConfigError(f"{key}: given {len(values)} times (once at most)")
        params[name] = _value(key, name, values[0])
    return parse_filters(params)


def _value(key: str, name: str, text: str) -> Any:
    default = _DEFAULTS[name]
    if isinstance(default, bool):
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ConfigError(f"{key}={text}: true or false")
    if name in ("min_memory", "count"):
        if not text.isdigit():
            raise ConfigError(f"{key}={text}: a whole number")
        return int(text)
    if name == "label_set" and text not in LABEL_SETS:
        raise ConfigError(f"{key}={text}: one of {', '.join(LABEL_SETS)}")
    return text
