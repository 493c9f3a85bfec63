"""Build a nodeSelector or node-affinity stanza from workload constraints (``gfd selector``).

Pure: constraints in, a dict ready for YAML out. Constraints that no gfd label can
express are refused with the reason (a ConfigError).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gfd.errors import ConfigError, show
from gfd.labelers.family import FAMILIES
from gfd.labelers.naming import sanitise

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
