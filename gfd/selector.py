"""Build a nodeSelector or node-affinity stanza from workload constraints (``gfd selector``).

Pure: constraints in, a dict ready for YAML out. Constraints that no gfd label can
express are refused with the reason (a ConfigError).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gfd import dra
from gfd.errors import ConfigError, show
from gfd.facts.family import FAMILIES
from gfd.facts.naming import sanitise, short_name

P = "nvidia.com/"

# NVML names of NVIDIA GPUs, for --product lookups ("H100" -> every H100 model).
KNOWN_MODELS: tuple[str, ...] = (
    "NVIDIA B200", "NVIDIA B300", "NVIDIA GB200", "NVIDIA GB300", "NVIDIA GH200 480GB",
    "NVIDIA GH200 144G HBM3e", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL",
    "NVIDIA H200", "NVIDIA H200 NVL", "NVIDIA H800", "NVIDIA H20",
    "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100-PCIE-40GB",
    "NVIDIA A100 80GB PCIe", "NVIDIA A800-SXM4-80GB", "NVIDIA A10", "NVIDIA A10G",
    "NVIDIA A16", "NVIDIA A2", "NVIDIA A30", "NVIDIA A40", "NVIDIA L4", "NVIDIA L40",
    "NVIDIA L40S", "NVIDIA L20", "Tesla T4", "Tesla P4", "Tesla P40", "Tesla P100-PCIE-16GB",
    "Tesla P100-SXM2-16GB", "Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB",
    "Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB", "Tesla V100S-PCIE-32GB", "Tesla K80",
    "NVIDIA RTX A4000", "NVIDIA RTX A5000", "NVIDIA RTX A6000",
    "NVIDIA RTX 6000 Ada Generation", "NVIDIA RTX PRO 6000 Blackwell Server Edition",
    "NVIDIA GeForce RTX 3060 Laptop GPU", "NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 3090",
    "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090",
)

_PROFILE = re.compile(r"([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\.[a-z][a-z.]*)?")
_COMPUTE = re.compile(r"([0-9]+)\.([0-9]+)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Constraints:
    product: str = ""
    min_memory: int | None = None
    """MiB."""
    mig_profile: str = ""
    shared: bool | None = None
    """True: a shared (time-sliced / MPS) resource; False: a dedicated one; None: either."""
    family: str = ""
    min_compute: str = ""
    """``8.0`` style."""
    label_set: str = "extended"


Requirement = tuple[str, str, tuple[str, ...]]


def products_matching(query: str) -> tuple[str, ...]:
    """Sanitised known models whose name contains the query as whole ``-`` words."""
    words = [w.lower() for w in sanitise(query).split("-") if w]
    if not words:
        return ()
    found = []
    for model in KNOWN_MODELS:
        value = sanitise(model)
        tokens = value.lower().split("-")
        n = len(words)
        if any(tokens[i:i + n] == words for i in range(len(tokens) - n + 1)):
            found.append(value)
    return tuple(sorted(found))


def _product(c: Constraints, resource: str) -> list[Requirement]:
    matches = products_matching(c.product)
    if not matches:
        exact = sanitise(c.product)
        if "-" not in exact:
            raise ConfigError(
                f"--product {show(c.product)}: no known NVIDIA model has that word; pass the exact "
                "gpu.product value (see `gfd labels` on the node)")
        matches = (exact,)
    values: list[str] = []
    for model in matches:
        base = model + (f"-MIG-{c.mig_profile}" if c.mig_profile else "")
        values += [base] if c.shared is False else [base, f"{base}-SHARED"]
        if c.shared is True:
            values.remove(base)
    return [(f"{P}{resource}.product", "In", tuple(values))]


def requirements(c: Constraints) -> list[list[Requirement]]:
    """OR-ed terms of AND-ed requirements (node affinity's shape)."""
    if c.mig_profile and not _PROFILE.fullmatch(c.mig_profile):
        raise ConfigError(f"--mig-profile {show(c.mig_profile)}: not a MIG profile such as "
                          "1g.10gb, 1c.3g.20gb or 1g.10gb.me")
    resource = f"mig-{c.mig_profile}" if c.mig_profile else "gpu"
    reqs: list[Requirement] = []
    if c.mig_profile:
        reqs.append((f"{P}{resource}.count", "Gt", ("0",)))
    if c.product:
        reqs += _product(c, resource)
    if c.min_memory is not None:
        if c.min_memory <= 0:
            raise ConfigError(f"--min-memory {c.min_memory}: must be a positive number of MiB")
        key = (f"{P}{resource}.memory" if c.mig_profile or c.label_set == "compat"
               else f"{P}gpu.memory.min")
        reqs.append((key, "Gt", (str(c.min_memory - 1),)))
    if c.shared is True:
        reqs.append((f"{P}{resource}.replicas", "Gt", ("1",)))
    elif c.shared is False:
        reqs.append((f"{P}{resource}.replicas", "In", ("1",)))
    if c.family:
        if c.family not in FAMILIES:
            raise ConfigError(f"--family {show(c.family)}: must be one of {', '.join(FAMILIES)}")
        reqs.append((f"{P}gpu.family", "In", (c.family,)))
    if not c.min_compute:
        return [reqs]
    match = _COMPUTE.fullmatch(c.min_compute)
    if not match:
        raise ConfigError(f"--min-compute {show(c.min_compute)}: write MAJOR.MINOR, e.g. 8.0")
    major, minor = int(match.group(1)), int(match.group(2))
    if minor == 0:
        return [[*reqs, (f"{P}gpu.compute.major", "Gt", (str(major - 1),))]]
    return [
        [*reqs, (f"{P}gpu.compute.major", "Gt", (str(major),))],
        [*reqs, (f"{P}gpu.compute.major", "In", (str(major),)),
         (f"{P}gpu.compute.minor", "Gt", (str(minor - 1),))],
    ]


def stanza(c: Constraints, *, form: str = "auto") -> dict[str, Any]:
    """``{"nodeSelector": ...}`` when every requirement is one exact value (and ``form``
    allows), else ``{"affinity": {"nodeAffinity": ...}}``."""
    terms = requirements(c)
    if not any(terms[0]) and len(terms) == 1:
        raise ConfigError("no constraint given: pass at least one of --product, --min-memory, "
                          "--mig-profile, --shared/--dedicated, --family, --min-compute")
    simple = len(terms) == 1 and all(op == "In" and len(v) == 1 for _, op, v in terms[0])
    if form == "nodeSelector" and not simple:
        raise ConfigError("these constraints need node affinity (a range or a choice of "
                          "values); a nodeSelector only matches exact values: use --form "
                          "affinity")
    if simple and form != "affinity":
        return {"nodeSelector": {k: v[0] for k, _, v in terms[0]}}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": k, "operator": op, "values": list(v)}
                                  for k, op, v in term]}
            for term in terms
        ]}}}}


# ----------------------------------------------------------------------------- DRA

_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    """The selector's filters parsed once: what both renderings (node affinity over gfd's
    ``dra`` labels, CEL over the driver's attributes) are written from."""

    models: tuple[tuple[str, str], ...] = ()
    """(gpu.product value, NVML name or "" for an exact value not in gfd's model list)."""
    min_memory: int | None = None
    """MiB."""
    family: str = ""
    min_compute: tuple[int, int] | None = None
    mig_profile: str = ""
    """As the driver names it: ``1g.10gb``, ``1g.10gb+me``."""


def parse(c: Constraints) -> Filters:
    """The constraints checked and resolved for ``--dra`` (a ConfigError naming the fix)."""
    if c.shared is not None:
        raise ConfigError("--shared/--dedicated describe device-plugin sharing; a DRA claim "
                          "is always its own device: leave them out with --dra")
    models: tuple[tuple[str, str], ...] = ()
    if c.product:
        found = products_matching(c.product)
        if found:
            models = tuple((v, next(m for m in KNOWN_MODELS if sanitise(m) == v))
                           for v in found)
        else:
            exact = sanitise(c.product)
            if "-" not in exact:
                raise ConfigError(
                    f"--product {c.product!r}: no known NVIDIA model has that word; pass the "
                    "exact gpu.product value (see `gfd labels` on the node)")
            models = ((exact, ""),)
    if c.min_memory is not None and c.min_memory <= 0:
        raise ConfigError(f"--min-memory {c.min_memory}: must be a positive number of MiB")
    if c.family and c.family not in dra.FAMILY_ARCHITECTURES:
        raise ConfigError(f"--family {c.family!r}: with --dra one of "
                          f"{', '.join(dra.FAMILY_ARCHITECTURES)} (the architectures the DRA "
                          "driver publishes)")
    compute = None
    if c.min_compute:
        match = _COMPUTE.fullmatch(c.min_compute)
        if not match:
            raise ConfigError(f"--min-compute {c.min_compute!r}: write MAJOR.MINOR, e.g. 8.0")
        compute = (int(match.group(1)), int(match.group(2)))
    profile = ""
    if c.mig_profile:
        plain = c.mig_profile.replace("+", ".", 1)
        if not _PROFILE.fullmatch(plain):
            raise ConfigError(f"--mig-profile {c.mig_profile!r}: not a MIG profile such as "
                              "1g.10gb or 1g.10gb+me")
        if re.match(r"[0-9]+c\.", plain):
            raise ConfigError(f"--mig-profile {c.mig_profile!r}: the DRA driver publishes only "
                              "MIG devices whose compute instance is the whole GPU instance "
                              "(such as 3g.20gb), not compute-instance profiles")
        head, _, tail = plain.partition("gb")
        profile = f"{head}gb" + (f"+{tail[1:]}" if tail else "")
    if not (models or c.min_memory is not None or c.family or compute or profile):
        raise ConfigError("no constraint given: pass at least one of --product, --min-memory, "
                          "--mig-profile, --family, --min-compute")
    return Filters(models=models, min_memory=c.min_memory, family=c.family,
                   min_compute=compute, mig_profile=profile)


def _words_regex(value: str) -> str:
    """An anchored RE2 for an exact gpu.product value over the NVML name (lower case): each
    ``-`` of the value is a space or a ``-`` of the name (sanitise's word joint)."""
    out = []
    for ch in value.lower():
        out.append("[- ]" if ch == "-" else f"[{ch}]" if ch in "._" else ch)
    return "^" + "".join(out) + "$"


def cel(f: Filters) -> list[str]:
    """One CEL expression per filter, over the driver's attributes and capacities (each
    holds for exactly the devices the filter describes)."""
    out = []
    if f.models:
        names = [n for _, n in f.models if n]
        if names:
            listed = ", ".join("'" + n.replace("\\", "\\\\").replace("'", "\\'") + "'"
                               for n in names)
            out.append(f"{dra.attribute(dra.PRODUCT_NAME)} in [{listed}]")
        else:
            out.append(f"{dra.attribute(dra.PRODUCT_NAME)}.lowerAscii().matches("
                       f"'{_words_regex(f.models[0][0])}')")
    if f.mig_profile:
        out.append(f"{dra.attribute(dra.PROFILE)} == '{f.mig_profile}'")
    if f.min_memory is not None:
        out.append(f"{dra.capacity(dra.MEMORY)}.compareTo(quantity('{f.min_memory}Mi')) >= 0")
    if f.family:
        out.append(f"{dra.attribute(dra.ARCHITECTURE)} == "
                   f"'{dra.FAMILY_ARCHITECTURES[f.family]}'")
    if f.min_compute is not None:
        major, minor = f.min_compute
        out.append(f"{dra.attribute(dra.CUDA_COMPUTE_CAPABILITY)}"
                   f".compareTo(semver('{major}.{minor}.0')) >= 0")
    return out


def dra_requirements(f: Filters) -> list[list[Requirement]]:
    """OR-ed terms of AND-ed requirements over the labels of ``--resource-manager dra``: a
    necessary condition for the node to have a matching device (a mixed node included).

    Per-model ``gpu.product.<model>`` labels say which models a node has. Memory, family and
    compute capability have node labels for the primary model only (``gpu.memory``,
    ``gpu.family``, ``gpu.compute.*``): they are exact on a node of one model, so such a node
    must match them, while a node of several models (``gpu.heterogeneous=true``) is kept."""
    base: list[Requirement] = [(f"{P}gpu.present", "In", ("true",))]
    if f.mig_profile:
        base += [(f"{P}mig.capable", "In", ("true",)), (f"{P}mig.enabled.count", "Gt", ("0",))]
    primary: list[list[Requirement]] = [[]]
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
    models: list[list[Requirement]] = [[]]
    if f.models:
        models = [[(f"{P}gpu.product.{short_name(value, 63 - len('gpu.product.'))}",
                    "Exists", ())] for value, _ in f.models]
    return [base + m + p for m in models for p in primary]


def claim(c: Constraints, *, count: int = 1, name: str = "") -> list[dict[str, Any]]:
    """``gfd selector --dra``: a ResourceClaimTemplate (resource.k8s.io/v1) whose CEL selects
    the devices the filters describe, and the pod spec fragment that uses it with the node
    affinity for the same filters."""
    f = parse(c)
    if count < 1:
        raise ConfigError(f"--count {count}: ask for at least 1 device")
    name = name or ("mig-" + f.mig_profile.replace(".", "").replace("+", "-")
                    if f.mig_profile else "gpu")
    if len(name) > 253 or not _NAME.fullmatch(name):
        raise ConfigError(f"--name {name!r}: a ResourceClaimTemplate name is lower case "
                          "letters, digits, '-' and '.' (RFC 1123), at most 253 characters")
    device_class = dra.device_class("mig" if f.mig_profile else "gpu")
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{
            "name": "gpu",
            "exactly": {
                "deviceClassName": device_class,
                "allocationMode": "ExactCount",
                "count": count,
                "selectors": [{"cel": {"expression": e}} for e in cel(f)],
            },
        }]}}},
    }
    terms = dra_requirements(f)
    pod = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [
                    {"key": k, "operator": op, **({"values": list(v)} if v else {})}
                    for k, op, v in term]}
                for term in terms]}}},
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
    }
    return [template, pod]
