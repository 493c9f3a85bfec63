"""``mps.capable``: true when MPS sharing is configured and no GPU has MIG enabled."""

from __future__ import annotations

from gfd.errors import ConfigError
from gfd.facts.gpus import counted
from gfd.labelers.base import Label, LabelDoc, Result, key
from gfd.labelers.options import LabelOptions
from gfd.snapshot import Snapshot

MPS_WITH_MIG = (
    "MPS sharing is not supported for MIG devices: GPU(s) {gpus} have MIG enabled; "
    "remove sharing.mps from the config or disable MIG"
)

LABELS: tuple[LabelDoc, ...] = (
    LabelDoc(key="mps.capable", value="`true` / `false`", example="false",
             source="config: sharing.mps", when="GPUs present", set="compat",
             managers=("device-plugin",)),
)


def check_mps_with_mig(snapshot: Snapshot, options: LabelOptions) -> None:
    """MPS configured while a GPU has MIG enabled is a config error (as in GFD)."""
    if options.sharing.strategy != "mps":
        return
    enabled = [str(g.index) for g in counted(snapshot) if g.mig_enabled]
    if enabled:
        raise ConfigError(MPS_WITH_MIG.format(gpus=", ".join(enabled)))


def mps_capable(snapshot: Snapshot, options: LabelOptions, /) -> Result:
    check_mps_with_mig(snapshot, options)
    capable = options.sharing.strategy == "mps"
    return Result({key("mps.capable"): Label(
        value="true" if capable else "false",
        source=options.sharing.source or "no sharing config",
        rules=("configuration, not hardware: true when the active sharing strategy is MPS",),
    )})
