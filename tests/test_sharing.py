"""The device plugin's sharing configuration after GFD's normalisation: no sharing by default,
and replicas looked up by full resource name (1 when the resource is not shared)."""

from __future__ import annotations

import dataclasses

import pytest

from gfd.sharing import SharedResource, Sharing

SHARED = Sharing(strategy="time-slicing", resources=(
    SharedResource(name="nvidia.com/gpu", replicas=4),
    SharedResource(name="nvidia.com/mig-1g.5gb", replicas=7)))


def test_the_default_is_no_sharing() -> None:
    sharing = Sharing()
    assert (sharing.strategy, sharing.rename_by_default, sharing.resources) == ("none", False, ())
    assert sharing.replicas("nvidia.com/gpu") == 1


@pytest.mark.parametrize("resource, replicas", [
    ("nvidia.com/gpu", 4),
    ("nvidia.com/mig-1g.5gb", 7),
    ("nvidia.com/mig-3g.20gb", 1),
    ("gpu", 1),
], ids=["full-gpus", "a-mig-profile", "an-unshared-profile", "short-name-is-not-the-name"])
def test_replicas_are_looked_up_by_full_resource_name(resource: str, replicas: int) -> None:
    assert SHARED.replicas(resource) == replicas


def test_sharing_is_frozen_data() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SHARED.strategy = "mps"  # type: ignore[misc]
    assert SHARED == Sharing(strategy="time-slicing", resources=SHARED.resources)
