"""``Filters`` rendered for the NVIDIA DRA driver (``gfd selector --dra``): a
ResourceClaimTemplate whose CEL selects exactly the devices the filters describe, over the
attributes the driver publishes under the feature gates given, and a complete example Pod that
uses it, placed by node affinity over gfd's labels of ``--resource-manager dra``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gfd import dra
from gfd.errors import ConfigError
from gfd.facts.naming import short_name
from gfd.selector.filters import Filters
from gfd.selector.labels import GPU_TAINT, PRODUCT_KEY, Term, affinity, tolerations
from gfd.selector.models import words

P = "nvidia.com/"
EXAMPLE_IMAGE = "ubuntu:24.04"
"""The example Pod's image: the driver injects the driver's tools (``nvidia-smi``) by CDI."""


def _literal(text: str) -> str:
    """A CEL single-quoted string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _regex_text(text: str) -> str:
    """``text`` (lower case) for an RE2 pattern, ``-`` standing for a space or a ``-``
    (sanitise's word joint), other punctuation as a one-character class."""
    out = []
    for ch in text.lower():
        out.append("[- ]" if ch == "-" else ch if ch.isalnum() else f"[{ch}]")
    return "".join(out)


def _word_regex(word: str) -> str:
    """An RE2 that finds ``word`` as a whole word of a lower-cased NVML name."""
    return f"(^|[- ]){_regex_text(word)}($|[- ])"


def device_type(f: Filters) -> str:
    return "mig" if f.mig_profile else "gpu"


Gates = dict[str, bool]
"""The driver's feature gates as ``dra.parse_gates`` reads ``--feature-gates``."""


def _use(kind: str, name: str, f: Filters, gates: Gates | None, why: str) -> str:
    """CEL for one attribute or capacity, refused when the driver does not publish it on this
    device type under these gates."""
    typ = device_type(f)
    attributes, capacities = dra.published_names(typ, gates)
    if name not in (attributes if kind == "attribute" else capacities):
        on = ", ".join(sorted(g for g, v in (gates or {}).items() if v and not dra.GATES[g]))
        raise ConfigError(f"{why}: the DRA driver publishes no {name} {kind} on {typ} devices "
                          f"under {on or 'its default feature gates'}")
    return dra.attribute(name) if kind == "attribute" else dra.capacity(name)


def _dynamic(gates: Gates | None) -> bool:
    return bool((gates or {}).get(dra.DYNAMIC_MIG))


def cel(f: Filters, gates: Gates | None = None, uuid: str = "") -> list[str]:
    """One CEL expression per filter, over the driver's attributes and capacities (each holds
    for exactly the devices the filter describes)."""
    out = []
    if f.product:
        name = _use("attribute", dra.PRODUCT_NAME, f, gates, "--product")
        if f.product.exact:
            out.append(f"{name}.lowerAscii().matches("
                       f"{_literal('^' + _regex_text(f.product.values[0]) + '$')})")
        else:
            wanted = sorted(set(words(f.product.query)))
            out.append(" && ".join(f"{name}.lowerAscii().matches({_literal(_word_regex(w))})"
                                   for w in wanted))
    if f.mig_profile:
        out.append(f"{_use('attribute', dra.PROFILE, f, gates, '--mig-profile')} == "
                   f"{_literal(f.driver_profile)}")
    if uuid:
        own = uuid.startswith("MIG-") or not f.mig_profile
        attr = dra.UUID if own else dra.PARENT_UUID
        if uuid.startswith("MIG-") and not f.mig_profile:
            raise ConfigError(f"--uuid {uuid}: a MIG device's UUID needs --mig-profile")
        out.append(f"{_use('attribute', attr, f, gates, f'--uuid {uuid}')} == {_literal(uuid)}")
    if f.min_memory is not None:
        out.append(f"{_use('capacity', dra.MEMORY, f, gates, '--min-memory')}"
                   f".compareTo(quantity('{f.min_memory}Mi')) >= 0")
    if f.family:
        out.append(f"{_use('attribute', dra.ARCHITECTURE, f, gates, '--family')} == "
                   f"{_literal(dra.FAMILY_ARCHITECTURES[f.family])}")
    if f.min_compute is not None:
        major, minor = f.min_compute
        out.append(f"{_use('attribute', dra.CUDA_COMPUTE_CAPABILITY, f, gates, '--min-compute')}"
                   f".compareTo(semver('{major}.{minor}.0')) >= 0")
    return out


def requirements(f: Filters, label_set: str = "extended",
                 gates: Gates | None = None) -> list[Term]:
    """OR-ed terms of AND-ed requirements over the labels of ``--resource-manager dra``: a
    necessary condition for the node to have a matching device (a node of several models
    included). The compat label set has no model inventory: there only ``gpu.present`` and
    ``mig.capable`` say anything, and the claim's CEL does the rest."""
    base: Term = [(f"{P}gpu.present", "In", ("true",))]
    if f.mig_profile:
        base.append((f"{P}mig.capable", "In", ("true",)))
        if label_set == "extended" and not _dynamic(gates):
            base.append((f"{P}mig.enabled.count", "Gt", ("0",)))
    if label_set == "compat":
        return [base]
    primary: list[Term] = [[]]
    if f.min_memory is not None:
        primary[0].append((f"{P}gpu.memory", "Gt", (str(f.min_memory - 1),)))
    if f.family:
        primary[0].append((f"{P}gpu.family", "In", (f.family,)))
    if f.min_compute is not None:
        major, minor = f.min_compute
        if minor == 0:
            primary[0].append((f"{P}gpu.compute.major", "Gt", (str(major - 1),)))
        else:
            primary = [
                [*primary[0], (f"{P}gpu.compute.major", "Gt", (str(major),))],
                [*primary[0], (f"{P}gpu.compute.major", "In", (str(major),)),
                 (f"{P}gpu.compute.minor", "Gt", (str(minor - 1),))],
            ]
    if primary != [[]]:
        primary.append([(f"{P}gpu.heterogeneous", "In", ("true",))])
    models: list[Term] = [[]]
    if f.product and f.product.exact and f.product.known:
        models = [[(P + PRODUCT_KEY + short_name(v, 63 - len(PRODUCT_KEY)), "Exists", ())]
                  for v in f.product.values]
    return [base + m + p for m in models for p in primary]


def documents(f: Filters, *, label_set: str = "extended", gates: Gates | None = None,
              uuid: str = "", tolerate: Sequence[str] = (GPU_TAINT,)) -> list[dict[str, Any]]:
    """``gfd selector --dra``: a ResourceClaimTemplate (resource.k8s.io/v1) for ``f.count``
    devices of the driver's class, and an example Pod that claims them from it, tolerating the
    taint keys ``tolerate``."""
    expressions = cel(f, gates, uuid)
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": f.name},
        "spec": {"spec": {"devices": {"requests": [{
            "name": "gpu",
            "exactly": {
                "deviceClassName": dra.device_class(device_type(f)),
                "allocationMode": "ExactCount",
                "count": f.count,
                "selectors": [{"cel": {"expression": e}} for e in expressions],
            },
        }]}}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": short_name(f"{f.name}-example", 253)},
        "spec": {
            "affinity": affinity(requirements(f, label_set, gates)),
            **({"tolerations": tolerations(tolerate)} if tolerate else {}),
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f.name}],
            "containers": [{"name": "gpu", "image": EXAMPLE_IMAGE,
                            "command": ["nvidia-smi", "-L"],
                            "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }
    return [template, pod]


def parse_gates(text: str) -> Gates:
    """``--feature-gates`` as the driver reads it; its own refusal (an unknown gate, gates it
    will not combine) as one line."""
    try:
        gates = dra.parse_gates(text)
    except ValueError as exc:
        raise ConfigError(f"--feature-gates: {exc}") from None
    conflict = dra.gate_conflict(gates)
    if conflict:
        raise ConfigError(f"--feature-gates {text}: the DRA driver would not start: {conflict}")
    return gates
