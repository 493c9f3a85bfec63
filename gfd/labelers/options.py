"""LabelOptions: everything besides the snapshot that decides labels (strategy, sharing, set)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gfd.sharing import Sharing

MIG_STRATEGIES = ("none", "single", "mixed")
LABEL_SETS = ("compat", "extended")


@dataclass(frozen=True, slots=True, kw_only=True)
class LabelOptions:
    """Inputs to labelers other than the snapshot; built once by the CLI from flags and config."""

    mig_strategy: str = "none"
    """``none`` / ``single`` / ``mixed`` (GFD's --mig-strategy)."""
    sharing: Sharing = field(default_factory=Sharing)
    label_set: str = "extended"
    """``compat`` (exactly GFD's labels) or ``extended`` (plus gfd's own)."""
    timestamp: int | None = None
    """Value of ``gfd.timestamp`` (taken once at start); None with --no-timestamp."""
    accelerator_label: str | None = None
    """Extra key to mirror ``gpu.accelerator`` under (e.g. ``accelerator``)."""

    @property
    def extended(self) -> bool:
        return self.label_set == "extended"
