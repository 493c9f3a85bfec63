"""One snapshot's projection: its labels and its NodeFeature features, computed together, so
a reload candidate is checked on both and a sink publishes both from the same read."""

from __future__ import annotations

from dataclasses import dataclass

from gfd.features import Features, node_features
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import Labelling, compute_labels
from gfd.snapshot import Snapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class Projection:
    """What gfd publishes for one snapshot: the labels (with their provenance, rejections and
    warnings) and the features (``gfd.features``)."""

    labelling: Labelling
    features: Features

    @property
    def labels(self) -> dict[str, str]:
        """The valid labels, sorted by key: what gets published."""
        return self.labelling.labels


def project(snapshot: Snapshot, options: LabelOptions) -> Projection:
    """Label the snapshot and derive its features (pure)."""
    return Projection(labelling=compute_labels(snapshot, options),
                      features=node_features(snapshot))
