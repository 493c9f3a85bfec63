"""``gpu.clique``: ``<cluster UUID>.<clique id>`` when every fabric-attached GPU agrees; none,
with a warning, when they disagree (docs/gfd-compatibility.md, "Fabric clique")."""

from __future__ import annotations

import pytest
from helpers.builders import CLUSTER, P, fabric, gpu, labelling, labels, snapshot, unknown

from gfd.labelers.clique import attached, clique
from gfd.labelers.options import LabelOptions


def test_clique_when_every_attached_gpu_agrees() -> None:
    snap = snapshot(*(gpu(i, fabric=fabric()) for i in range(4)))
    assert labels(snap)["gpu.clique"] == f"{CLUSTER}.1"


def test_clique_ignores_gpus_that_are_not_attached() -> None:
    snap = snapshot(gpu(0, fabric=fabric(clique=7)), gpu(1, fabric=None),
                    gpu(2, fabric=fabric(state="in-progress", clique=3)))
    assert labels(snap)["gpu.clique"] == f"{CLUSTER}.7"


NOT_ATTACHED = [
    ("state-not-completed", fabric(state="in-progress")),
    ("state-not-started", fabric(state="not-started")),
    ("state-not-supported", fabric(state="not-supported")),
    ("status-not-success", fabric(ok=False)),
    ("zero-cluster-uuid", fabric(cluster="00000000-0000-0000-0000-000000000000")),
    ("no-fabric", None),
]


@pytest.mark.parametrize("fab", [f for _, f in NOT_ATTACHED], ids=[i for i, _ in NOT_ATTACHED])
def test_no_clique_when_no_gpu_is_attached(fab: object) -> None:
    snap = snapshot(gpu(0, fabric=fab), gpu(1, fabric=fab))
    result = labelling(snap)
    assert P + "gpu.clique" not in result.labels


DISAGREE = [
    ("different-clique-id", fabric(clique=1), fabric(clique=2)),
    ("different-cluster", fabric(), fabric(cluster="11111111-2222-3333-4444-555555555555")),
]


@pytest.mark.parametrize(("f0", "f1"), [(a, b) for _, a, b in DISAGREE],
                         ids=[i for i, _, _ in DISAGREE])
def test_disagreeing_cliques_give_no_label_and_a_warning(f0: object, f1: object) -> None:
    result = labelling(snapshot(gpu(0, fabric=f0), gpu(1, fabric=f1)))
    assert P + "gpu.clique" not in result.labels
    assert result.warnings
    assert any("clique" in w.lower() for w in result.warnings)


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


@pytest.mark.parametrize("fab, yes", [(f, False) for _, f in NOT_ATTACHED] + [(fabric(), True)],
                         ids=[*(i for i, _ in NOT_ATTACHED), "attached"])
def test_attached_means_completed_successful_and_a_nonzero_cluster(fab: object,
                                                                   yes: bool) -> None:
    assert attached(fab) is yes  # type: ignore[arg-type]


def test_a_lost_gpus_fabric_still_counts() -> None:
    snap = snapshot(gpu(0, fabric=fabric(clique=1)), gpu(1, fabric=fabric(clique=2),
                                                          error="GPU is lost"))
    assert clique(snap, LabelOptions()).labels == {}


def test_clique_is_left_out_when_a_gpus_fabric_isunknown() -> None:
    snap = snapshot(gpu(0, fabric=fabric()), gpu(1, degraded=unknown("fabric")))
    assert "gpu.clique" not in labels(snap)
