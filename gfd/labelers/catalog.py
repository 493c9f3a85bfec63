"""The label reference: every label gfd can emit, gathered from the area modules.

Each module under ``gfd/labelers/`` declares the labels it computes in a ``LABELS`` tuple
of LabelDoc, next to the code. This module only gathers them, in a fixed order, and names
each entry's module after the module(s) listing it. ``docs/labels.md`` is generated from
the result (``gfd docs``), ``gfd explain`` looks keys up in it, the pipeline's compat
filter drops its ``extended`` keys and its resource-manager filter the keys documented
for another manager, and a test checks that every label the labelers
produce on every simulated machine is described here.

How each resource manager shapes the label set is data too: one row per manager in
``MANAGER_RULES`` (the resources a key's ``<R>`` names, whether the device plugin's options
apply), read by the resource-manager filter here and by the pipeline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
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


@dataclass(frozen=True, slots=True, kw_only=True)
class ManagerRules:
    """How a resource manager shapes the label set (beside each label's ``managers``)."""

    manager: str
    """One of ``snapshot.RESOURCE_MANAGERS``."""
    resources: tuple[str, ...]
    """What a key's ``<R>`` names under it: the resources it hands out."""
    device_plugin_options: bool
    """Whether the device plugin's sharing config and MIG strategy shape the labels."""


MANAGER_RULES: tuple[ManagerRules, ...] = (
    ManagerRules(manager="device-plugin", resources=("gpu", "mig-<profile>"),
                 device_plugin_options=True),
    # The DRA driver hands out whole GPUs and MIG devices as devices of one resource-less
    # driver: its labels speak of ``gpu`` only, and the device plugin's config is not its.
    ManagerRules(manager="dra", resources=("gpu",), device_plugin_options=False),
)
"""The label-set rules of each resource manager, one row each."""


def rules(manager: str) -> ManagerRules:
    """The row of ``MANAGER_RULES`` for this resource manager (KeyError: none)."""
    for row in MANAGER_RULES:
        if row.manager == manager:
            return row
    raise KeyError(manager)


# In a key pattern ``<model>`` stands for any model part and ``<profile>`` for any MIG
# profile, and ``<R>`` for any resource a manager hands out, so a key the code builds from
# odd NVML names still finds its entry (and its set).
_NAMES = ((re.escape("<model>"), r".*"), (re.escape("<profile>"), r".+"))


def _names(text: str) -> str:
    for placeholder, pattern in _NAMES:
        text = text.replace(placeholder, pattern)
    return text


_RESOURCES = tuple(dict.fromkeys(r for row in MANAGER_RULES for r in row.resources))
_ANY_RESOURCE = "(?:" + "|".join(_names(r) for r in _RESOURCES) + ")"  # (?:gpu|mig-.+)


def _pattern(doc_key: str) -> str:
    text = _names(re.escape(doc_key).replace(re.escape("<R>"), _ANY_RESOURCE))
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
    """The labels documented for other managers, and the ``<R>`` keys of resources this
    manager does not hand out."""
    parts = [_pattern(doc.key) for doc in LABELS if manager not in doc.managers]
    others = [r for r in _RESOURCES if r not in rules(manager).resources]
    parts += [_pattern(doc.key.replace("<R>", resource))
              for resource in others for doc in LABELS if "<R>" in doc.key]
    return re.compile("|".join(parts) or "(?!)", re.DOTALL)


EXCLUDED_KEYS: dict[str, re.Pattern[str]] = {m: _excluded(m) for m in RESOURCE_MANAGERS}
"""Per resource manager: matches (``fullmatch``) every full key not published under it (a
manager without its row in ``MANAGER_RULES`` fails here, at import)."""


def describe(key: str) -> LabelDoc | None:
    """The catalogue entry that documents a full label key, if any."""
    for pattern, doc in _MATCHERS:
        if re.fullmatch(pattern, key, re.DOTALL):
            return doc
    return None
