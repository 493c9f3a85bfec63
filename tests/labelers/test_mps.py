"""``mps.capable``: true when the sharing config is MPS; MPS with a MIG-enabled GPU is a config
error (docs/gfd-compatibility.md, "Sharing")."""

from __future__ import annotations

import pytest
from helpers.builders import gpu, labelling, labels, mig, mig_gpu, mps, snapshot

from gfd.errors import ConfigError


@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_mps_with_a_mig_enabled_gpu_is_a_config_error(strategy: str) -> None:
    snap = snapshot(gpu(0), mig_gpu(1, (mig(0),)))
    with pytest.raises(ConfigError):
        labelling(snap, strategy=strategy, sharing=mps(4))


def test_mps_with_mig_capable_but_disabled_gpus_is_fine() -> None:
    snap = snapshot(gpu(0, mig_capable=True, mig_enabled=False))
    assert labels(snap, sharing=mps(4))["mps.capable"] == "true"
