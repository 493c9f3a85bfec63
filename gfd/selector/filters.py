"""``gfd selector``'s options parsed once into one ``Filters`` value (every rendering, labels or
DRA claim, is written from it); contradictions and unsatisfiable filters refused in one line."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gfd import dra
from gfd.errors import ConfigError, show
from gfd.facts.family import FAMILIES
from gfd.selector.models import Product, families, resolve

_PROFILE = re.compile(r"(?:([0-9]+)c\.)?([0-9]+)g\.([0-9]+)gb((?:[.+-][a-z][a-z.]*)?)")
_COMPUTE = re.compile(r"([0-9]+)\.([0-9]+)")

MIG_FAMILIES = ("ampere", "hopper", "blackwell", "rubin")
"""Families with MIG-capable GPUs (A100/A30, H100/H200/GH200, B200/GB200, ...)."""

FAMILY_COMPUTE: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "tesla": ((1, 0), (1, 99)), "fermi": ((2, 0), (2, 99)), "kepler": ((3, 0), (3, 99)),
    "maxwell": ((5, 0), (5, 99)), "pascal": ((6, 0), (6, 99)), "volta": ((7, 0), (7, 4)),
    "turing": ((7, 5), (7, 99)), "ampere": ((8, 0), (8, 8)), "ada-lovelace": ((8, 9), (8, 9)),
    "hopper": ((9, 0), (9, 99)), "blackwell": ((10, 0), (12, 99)), "rubin": ((13, 0), (13, 99)),
}
"""``gpu.family`` -> the lowest and highest compute capability it is derived from (GFD's
table): what a ``--family`` and ``--min-compute`` pair can both hold for."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """The selector's options as given on the command line (None: not given)."""

    product: str = ""
    min_memory: int | None = None
    mig_profile: str = ""
    shared: bool = False
    dedicated: bool = False
    renamed: bool = False
    family: str = ""
    min_compute: str = ""
    count: int = 1
    dra: bool = False
    name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    """What the workload asks of every unit it may be given; each rendering is written from
    this value alone."""

    product: Product | None = None
    min_memory: int | None = None
    """MiB."""
    mig_profile: str = ""
    """As gfd's labels and the device plugin's resources spell it: ``1g.10gb.me``."""
    shared: bool | None = None
    """True: a shared (time-sliced / MPS) unit; False: a dedicated one; None: either."""
    renamed: bool = False
    """The device plugin renames shared resources (``renameByDefault``): ``<name>.shared``."""
    family: str = ""
    min_compute: tuple[int, int] | None = None
    count: int = 1
    dra: bool = False
    name: str = ""
    """--dra: the ResourceClaimTemplate's name (defaulted from the filters)."""
    warnings: tuple[str, ...] = ()
    """Lines for stderr: what was resolved loosely or narrowed."""

    @property
    def driver_profile(self) -> str:
        """The MIG profile as the DRA driver's ``profile`` attribute spells it (``1g.10gb+me``)."""
        head, _, tail = self.mig_profile.partition("gb")
        return f"{head}gb" + (f"+{tail[1:]}" if tail.startswith(".") else tail)

    @property
    def resource(self) -> str:
        """The extended resource the pod must request (device-plugin nodes)."""
        name = f"nvidia.com/mig-{self.mig_profile}" if self.mig_profile else "nvidia.com/gpu"
        return f"{name}.shared" if self.renamed else name

    @property
    def any_model_filter(self) -> bool:
        return bool(self.product or self.min_memory is not None or self.family
                    or self.min_compute)


_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _profile(text: str, dra: bool) -> str:
    match = _PROFILE.fullmatch(text)
    if not match:
        raise ConfigError(f"--mig-profile {show(text)}: not a MIG profile such as 1g.10gb, "
                          "1c.3g.20gb or 1g.10gb.me")
    if dra and match.group(1):
        raise ConfigError(f"--mig-profile {show(text)}: the DRA driver publishes only MIG "
                          "devices whose compute instance is the whole GPU instance (such as "
                          "3g.20gb), not compute-instance profiles")
    return text.replace("+", ".")  # GFD's and the device plugin's spelling of go-nvlib's name


def _compute(text: str) -> tuple[int, int]:
    match = _COMPUTE.fullmatch(text)
    if not match:
        raise ConfigError(f"--min-compute {show(text)}: write MAJOR.MINOR, e.g. 8.0")
    return int(match.group(1)), int(match.group(2))


def parse(o: Options) -> Filters:
    """The options checked, resolved and cross-checked (a ConfigError naming the fix)."""
    if o.shared and o.dedicated:
        raise ConfigError("--shared and --dedicated contradict each other: pass one of them")
    if o.renamed and o.dedicated:
        raise ConfigError("--renamed names a shared resource (<name>.shared): it contradicts "
                          "--dedicated")
    shared: bool | None = True if o.shared or o.renamed else False if o.dedicated else None
    warnings: list[str] = []
    product = None
    profile = ""
    if o.product:
        text = o.product
        if "-MIG-" in text:  # an exact MIG product value: NVIDIA-A100-SXM4-40GB-MIG-1g.5gb
            text, _, tail = text.partition("-MIG-")
            shared_tail = tail.upper().endswith("-SHARED")
            given = tail[: -len("-SHARED")] if shared_tail else tail
            if o.mig_profile and o.mig_profile != given:
                raise ConfigError(f"--product {show(o.product)} names MIG profile {given} but "
                                  f"--mig-profile is {o.mig_profile}: pass one of them")
            profile = _profile(given, o.dra)
            text += "-SHARED" if shared_tail else ""
        product = resolve(text)
        if product.shared:
            if o.dedicated:
                raise ConfigError(f"--product {show(o.product)} is a shared resource's value "
                                  "(-SHARED): it contradicts --dedicated")
            if o.renamed:
                raise ConfigError(f"--product {show(o.product)}: a renamed shared resource "
                                  "carries no -SHARED suffix; drop --renamed or the suffix")
            shared = True
        if not product.known:
            warnings.append(
                f"warning: --product {show(o.product)}: no GPU model gfd knows (PCI IDs "
                f"database and NVML names) has these words; matching gpu.product="
                f"{product.values[0]} exactly (see `gfd labels` on the node)")
    if o.mig_profile and not profile:
        profile = _profile(o.mig_profile, o.dra)
    if o.min_memory is not None and o.min_memory <= 0:
        raise ConfigError(f"--min-memory {o.min_memory}: must be a positive number of MiB")
    if o.family and o.family not in FAMILIES:
        raise ConfigError(f"--family {show(o.family)}: must be one of {', '.join(FAMILIES)}")
    compute = _compute(o.min_compute) if o.min_compute else None
    if o.count < 1:
        raise ConfigError(f"--count {o.count}: ask for at least 1 device")
    f = Filters(product=product, min_memory=o.min_memory, mig_profile=profile, shared=shared,
                renamed=o.renamed, family=o.family, min_compute=compute, count=o.count,
                dra=o.dra, warnings=tuple(warnings))
    if not (f.any_model_filter or f.mig_profile or f.shared is not None):
        raise ConfigError("no constraint given: pass at least one of --product, --min-memory, "
                          "--mig-profile, --shared/--dedicated, --family, --min-compute")
    _cross_check(f)
    if o.dra:
        return _for_dra(f, o)
    if o.name is not None:
        raise ConfigError("--name goes with --dra (the ResourceClaimTemplate's name)")
    if f.count > 1 and f.shared is True:
        raise ConfigError(f"--count {f.count} --shared: the device plugin refuses a request for "
                          "more than one shared unit under failRequestsGreaterThanOne (MPS's "
                          "default), which no label shows, and two time-sliced units may be "
                          "one GPU: ask for 1")
    if f.count > 1 and f.shared is None:
        return replace(f, shared=False, warnings=(*f.warnings, (
            f"narrowed: --count {f.count} asks for dedicated GPUs (gpu.replicas=1): a request "
            "for several shared units may be refused or get one GPU twice")))
    return f


def _cross_check(f: Filters) -> None:
    """Refuse filters no GPU can satisfy together."""
    models = families(f.product) if f.product else set()
    shown = f"--product {show(f.product.query)}" if f.product else ""
    if f.family and models and f.family not in models:
        raise ConfigError(f"{shown} --family {f.family}: no such model is {f.family} "
                          f"(they are {', '.join(sorted(models))}): drop one of them")
    allowed = {f.family} if f.family else models
    if f.min_compute and allowed:
        highest = max(FAMILY_COMPUTE[m][1] for m in allowed)
        if f.min_compute > highest:
            what = f"--family {f.family}" if f.family else shown
            raise ConfigError(f"{what} --min-compute {f.min_compute[0]}.{f.min_compute[1]}: "
                              f"no such GPU has that compute capability (at most "
                              f"{highest[0]}.{highest[1]})")
    if f.mig_profile:
        if allowed and not allowed & set(MIG_FAMILIES):
            raise ConfigError(f"--mig-profile {f.mig_profile}: {', '.join(sorted(allowed))} "
                              "GPUs have no MIG (Ampere A100/A30, Hopper, Blackwell do)")
        match = _PROFILE.fullmatch(f.mig_profile)
        size = int(match.group(3)) if match else 0
        if match and f.min_memory is not None and f.min_memory > size * 1024:
            raise ConfigError(f"--mig-profile {f.mig_profile} --min-memory {f.min_memory}: a "
                              f"{size} GB slice holds at most {size * 1024} MiB")


def _for_dra(f: Filters, o: Options) -> Filters:
    if f.shared is not None:
        raise ConfigError("--shared/--dedicated/--renamed describe device-plugin sharing; a "
                          "DRA claim is always its own device: leave them out with --dra")
    if f.family and f.family not in dra.FAMILY_ARCHITECTURES:
        raise ConfigError(f"--family {show(f.family)}: with --dra one of "
                          f"{', '.join(dra.FAMILY_ARCHITECTURES)} (the architectures the DRA "
                          "driver publishes)")
    name = o.name
    if name is None:
        name = "mig-" + f.mig_profile.replace(".", "") if f.mig_profile else "gpu"
    if len(name) > 253 or not _NAME.fullmatch(name):
        raise ConfigError(f"--name {show(name)}: a ResourceClaimTemplate name is lower case "
                          "letters, digits, '-' and '.' (RFC 1123), at most 253 characters")
    return replace(f, name=name)
