"""The MIG layout: profile names (NVML's, else GFD's eighths rule on the
parent's memory) and whether the layout can be told -- a MIG mode or MIG devices NVML did not
give, or a profile that cannot be named, make it unknown (docs/nvml-errors.md)."""

from __future__ import annotations

import pytest
from helpers.builders import A100_40_BYTES, gpu, mig, mig_gpu, migs, snapshot, unknown

from gfd.facts.mig import layout_unknown, mode_unknown, profile_name


@pytest.mark.parametrize("gpus, why", [
    ((gpu(0), mig_gpu(1, migs(7))), ""),
    ((gpu(0), gpu(1, degraded=unknown("mig_mode", held=True))), ""),
    ((gpu(0), gpu(1, degraded=unknown("mig_mode"))), "the MIG mode of GPU 1 is unknown"),
    ((mig_gpu(0, (), degraded=unknown("mig_devices")),), "the MIG devices of GPU 0 are unknown"),
    ((mig_gpu(0, (mig(0, profile=""),), memory=None),),
     "MIG device 0 of GPU 0 has no NVML profile name and the GPU's memory is unknown"),
    ((gpu(0, degraded=unknown("mig_mode"), error="GPU is lost"),), ""),  # lost: not counted
], ids=["known", "held", "mode-unknown", "devices-unknown", "unnameable", "lost"])
def test_when_the_mig_layout_can_be_told(gpus: tuple, why: str) -> None:
    assert layout_unknown(snapshot(*gpus)) == why


def test_mode_unknown_lists_the_gpus() -> None:
    gpus = (gpu(0), gpu(1, degraded=unknown("mig_mode")),
            gpu(2, degraded=unknown("mig_mode", held=True)))
    assert mode_unknown(gpus) == [1]


def test_no_profile_name_is_guessed_without_the_parents_memory() -> None:
    device = mig(0, profile="", memory=4864, gi=1, ci=1)
    assert profile_name(device, gpu(memory=None)) is None
    named = profile_name(device, gpu(memory=A100_40_BYTES))
    assert named is not None and named[0] == "1g.5gb"
