"""``mps.capable``: true when the sharing config is MPS; MPS with a MIG-enabled GPU is a config
error (docs/gfd-compatibility.md, "Sharing")."""

from __future__ import annotations

import pytest
from helpers.builders import gpu, labelling, labels, mig, mig_gpu, mps, snapshot, time_slicing

from gfd.errors import ConfigError
from gfd.labelers.mps import check_mps_with_mig
from gfd.labelers.options import LabelOptions


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_mps_with_a_mig_enabled_gpu_is_a_config_error(strategy: str) -> None:
    snap = snapshot(gpu(0), mig_gpu(1, (mig(0),)))
    with pytest.raises(ConfigError):
        labelling(snap, strategy=strategy, sharing=mps(4))


def test_mps_with_mig_capable_but_disabled_gpus_is_fine() -> None:
    snap = snapshot(gpu(0, mig_capable=True, mig_enabled=False))
    assert labels(snap, sharing=mps(4))["mps.capable"] == "true"


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_the_refusal_names_every_mig_enabled_gpu() -> None:
    snap = snapshot(gpu(0), mig_gpu(1, (mig(0),)), mig_gpu(3, (mig(0),)))
    with pytest.raises(ConfigError, match=r"GPU\(s\) 1, 3 have MIG enabled"):
        check_mps_with_mig(snap, LabelOptions(sharing=mps(2)))


def test_time_slicing_with_mig_enabled_gpus_is_fine() -> None:
    check_mps_with_mig(snapshot(mig_gpu(0, (mig(0),))), LabelOptions(sharing=time_slicing(2)))
