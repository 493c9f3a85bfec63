"""The MIG layout: each MIG device's profile name (NVML's, else GFD's eighths rule), and
whether the layout can be told at all -- a MIG mode or MIG devices NVML did not give leave
the MIG labels out rather than guessed (docs/nvml-errors.md)."""

from __future__ import annotations

from gfd.facts.gpus import counted
from gfd.snapshot import Gpu, MigDevice, Snapshot


def mode_unknown(gpus: tuple[Gpu, ...] | list[Gpu]) -> list[int]:
    """GPUs whose MIG mode NVML could not give (and no earlier read knew)."""
    return [g.index for g in gpus if g.error is None and g.unknown("mig_mode")]


def profile_name(mig: MigDevice, parent: Gpu) -> tuple[str, tuple[str, ...]] | None:
    """The resource-style profile name (``1g.5gb``, ``1c.3g.20gb``, ``1g.10gb.me``).

    From NVML's profile name with ``MIG `` dropped and ``+`` turned into ``.`` (as the
    device plugin names resources); without one, GFD's eighths rule on memory, which needs
    the parent GPU's memory: None when that is unknown (no name is guessed).
    """
    if mig.profile_name:
        name = mig.profile_name.removeprefix("MIG ").strip().replace("+", ".")
        return name, ("NVML profile name without 'MIG ', '+' -> '.' (device plugin naming)",)
    total = parent.memory_total_bytes or 0
    if total <= 0:
        return None
    # ceil(memory * 8 / total) eighths, then floor(eighths / 8 * ceil(total GiB) + 1/2) GB,
    # in integers (exact, as GFD's rule is).
    eighths = -(-mig.memory_mib * 1048576 * 8 // total)
    gb = (eighths * -(-total // 2**30) + 4) // 8
    g, c = mig.gi_slices, mig.ci_slices
    name = f"{g}g.{gb}gb" if c == g else f"{c}c.{g}g.{gb}gb"
    return name, ("no NVML profile name: GFD's eighths rule on memory and slice counts",)


def layout_unknown(snapshot: Snapshot) -> str:
    """Why the MIG layout cannot be told ("" when it can): a GPU's MIG mode or MIG devices
    unknown, or a MIG device whose profile cannot be named. MIG labels are then left out,
    never computed from what is missing."""
    for gpu in sorted(counted(snapshot), key=lambda g: g.index):
        if gpu.error is not None:
            continue
        if gpu.unknown("mig_mode"):
            return f"the MIG mode of GPU {gpu.index} is unknown"
        if gpu.mig_enabled and gpu.unknown("mig_devices"):
            return f"the MIG devices of GPU {gpu.index} are unknown"
        if gpu.mig_enabled:
            for mig in gpu.mig_devices:
                if profile_name(mig, gpu) is None:
                    return (f"MIG device {mig.index} of GPU {gpu.index} has no NVML profile name "
                            "and the GPU's memory is unknown")
    return ""
