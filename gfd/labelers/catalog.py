"""The label reference: every label gfd can emit, gathered from the area modules.

Each module under ``gfd/labelers/`` declares the labels it computes in a ``LABELS`` tuple
of LabelDoc, next to the code. This module only gathers them, in a fixed order, and names
each entry's module after the module(s) listing it. ``docs/labels.md`` is generated from
the result (``gfd docs``), ``gfd explain`` looks keys up in it, the pipeline's compat
filter drops its ``extended`` keys and its resource-manager filter the keys documented
for another manager, and a test checks that every label the labelers
produce on every simulated machine is described here.
"""

from __future__ import annotations

import re
from dataclasses import replace
from types import ModuleType

from gfd.labelers import (
    accelerator,
    clique,
    compute_mode,
    device_counts,
    family,
    gpu,
    inventory,
    machine,
    mig,
    mode,
    mps,
    nvlink,
    power,
    resource,
    timeslice,
    timestamp,
    unhealthy,
    versions,
    vgpu,
)
from gfd.labelers.base import LabelDoc
from gfd.snapshot import RESOURCE_MANAGERS

MODULES: tuple[ModuleType, ...] = (
    timestamp, machine, versions, gpu, resource, family, mig, mps, mode, clique, vgpu,
    device_counts, inventory, accelerator, compute_mode, nvlink, power, timeslice, unhealthy,
)
"""Every module that declares ``LABELS``, in the order the reference lists them."""


def module_name(module: ModuleType) -> str:
    """``gfd.labelers.gpu`` -> ``gpu``: how a LabelDoc names the file (``labelers/gpu.py``)."""
    return module.__name__.rpartition(".")[2]


def gather(modules: tuple[ModuleType, ...]) -> tuple[LabelDoc, ...]:
    """The modules' LABELS as one catalogue: one entry per key, its ``module`` naming every
    module that lists it (``gpu / mig``); GFD's labels first, then gfd's own, each in
    module order."""
    first: dict[str, LabelDoc] = {}
    where: dict[str, list[str]] = {}
    for module in modules:
        declared: tuple[LabelDoc, ...] = module.LABELS
        for doc in declared:
            first.setdefault(doc.key, doc)
            where.setdefault(doc.key, []).append(module_name(module))
    docs = [replace(doc, module=" / ".join(where[k])) for k, doc in first.items()]
    return tuple(sorted(docs, key=lambda doc: doc.set != "compat"))


LABELS: tuple[LabelDoc, ...] = gather(MODULES)

# In a key pattern ``<R>`` stands for any resource, ``<model>`` for any model part and
# ``<profile>`` for any MIG profile, so a key the code builds from odd NVML names still finds
# its entry (and its set).
_PLACEHOLDERS = ((re.escape("<R>"), r"(?:gpu|mig-.+)"), (re.escape("<model>"), r".*"),
                 (re.escape("<profile>"), r".+"))


def _pattern(doc_key: str) -> str:
    text = re.escape(doc_key)
    for placeholder, pattern in _PLACEHOLDERS:
        text = text.replace(placeholder, pattern)
    return r"(?:nvidia\.com/" + text + ")"


def key_pattern(doc_key: str) -> re.Pattern[str]:
    """The full keys a catalogue key stands for (``<R>.count`` -> ``nvidia.com/gpu.count``,
    ``nvidia.com/mig-1g.5gb.count``, ...), to ``fullmatch``."""
    return re.compile(_pattern(doc_key), re.DOTALL)


_MATCHERS = tuple((_pattern(doc.key), doc) for doc in LABELS)
"""Each entry's full-key pattern, as text: compiled by ``describe`` on its first use (through
``re``'s cache), so a command that never explains a label never pays for 54 expressions."""

EXTENDED_KEY: re.Pattern[str] = re.compile(
    "|".join(_pattern(doc.key) for doc in LABELS if doc.set == "extended"), re.DOTALL)
"""Matches (``fullmatch``) every full key of the extended set: one regular expression, so
the compat filter costs one match per label."""


def _excluded(manager: str) -> re.Pattern[str]:
    parts = [_pattern(doc.key) for doc in LABELS if manager not in doc.managers]
    if manager == "dra":  # <R> is gpu only: mig-<profile> is a device-plugin resource
        parts += [_pattern(doc.key.replace("<R>", "mig-<model>"))
                  for doc in LABELS if "<R>" in doc.key]
    return re.compile("|".join(parts) or "(?!)", re.DOTALL)


EXCLUDED_KEYS: dict[str, re.Pattern[str]] = {m: _excluded(m) for m in RESOURCE_MANAGERS}
"""Per resource manager: matches (``fullmatch``) every full key not published under it."""


def describe(key: str) -> LabelDoc | None:
    """The catalogue entry that documents a full label key, if any."""
    for pattern, doc in _MATCHERS:
        if re.fullmatch(pattern, key, re.DOTALL):
            return doc
    return None
