"""Which GPUs count, which are healthy, and how they group by model: the primary model by a
fixed rule (most GPUs, then most memory, then name), so nothing flaps on a mixed node."""

from __future__ import annotations

from dataclasses import dataclass

from gfd.snapshot import Gpu, Snapshot

# go-nvlib's default enumeration skips these (a DGX's display adapter is not a compute GPU).
DISPLAY_ONLY = frozenset({"DGX Display", "NVIDIA DGX Display"})


@dataclass(frozen=True, slots=True)
class ModelGroup:
    """The healthy GPUs of one model (exact NVML name), ordered by index."""

    name: str
    gpus: tuple[Gpu, ...]

    @property
    def first(self) -> Gpu:
        return self.gpus[0]

    @property
    def memory_mib(self) -> int:
        return max((g.memory_mib or 0) for g in self.gpus)


def counted(snapshot: Snapshot) -> tuple[Gpu, ...]:
    """Every GPU gfd counts, healthy or not (display-only adapters excluded)."""
    return tuple(g for g in snapshot.gpus if g.name not in DISPLAY_ONLY or g.error)


def healthy(snapshot: Snapshot) -> tuple[Gpu, ...]:
    """Counted GPUs that answered NVML without a fatal error."""
    return tuple(g for g in counted(snapshot) if g.error is None)


def unhealthy(snapshot: Snapshot) -> tuple[Gpu, ...]:
    """Counted GPUs NVML lost (a fatal error)."""
    return tuple(g for g in counted(snapshot) if g.error is not None)


def has_gpus(snapshot: Snapshot) -> bool:
    """GFD writes node-level GPU labels only when NVML works and at least one GPU exists."""
    return snapshot.nvml_available and bool(counted(snapshot))


def model_groups(snapshot: Snapshot) -> tuple[ModelGroup, ...]:
    """Healthy GPUs grouped by model, primary model first.

    The primary model is the one with the most GPUs, then the most memory, then the
    name in alphabetical order: a fixed rule, so labels never flap on mixed nodes
    (GFD picks at random each cycle).
    """
    by_name: dict[str, list[Gpu]] = {}
    for gpu in sorted(healthy(snapshot), key=lambda g: g.index):
        by_name.setdefault(gpu.name, []).append(gpu)
    groups = [ModelGroup(name, tuple(gpus)) for name, gpus in by_name.items()]
    groups.sort(key=lambda grp: (-len(grp.gpus), -grp.memory_mib, grp.name))
    return tuple(groups)


PRIMARY_RULE = "primary model: most GPUs, then most memory, then name"
