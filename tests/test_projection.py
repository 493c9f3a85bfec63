"""One snapshot's projection: the labels and the features computed together from the same
snapshot and options, as the loop publishes them and a reload candidate is checked on."""

from __future__ import annotations

import pytest
from helpers.builders import gpu, snapshot

from gfd.errors import DiscoveryError
from gfd.features import Features, node_features
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.projection import Projection, project
from gfd.readers.simulate import SIMULATIONS, simulate


@pytest.mark.parametrize("machine", sorted(SIMULATIONS))
def test_the_projection_is_the_labels_and_the_features_of_one_snapshot(machine: str) -> None:
    snap = simulate(machine).snapshot
    options = LabelOptions(timestamp=1_790_000_000)
    projection = project(snap, options)
    assert isinstance(projection, Projection) and isinstance(projection.features, Features)
    assert projection.labelling == compute_labels(snap, options)
    assert projection.labels == projection.labelling.labels
    assert projection.features == node_features(snap)


def test_a_snapshot_that_cannot_be_labelled_has_no_projection() -> None:
    # the driver version GFD cannot split: the whole projection fails (a reload candidate
    # with it is refused), not the labels alone while its features get published
    with pytest.raises(DiscoveryError, match="does not have 2 or 3 dot-separated parts"):
        project(snapshot(gpu(0), driver="550"), LabelOptions())
