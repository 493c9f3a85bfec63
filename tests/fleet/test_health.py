"""A view is complete only while every collection is synced and none is refused, and ready
once every first LIST is in (docs/fleet.md, "--serve": /readyz and gfd_fleet_complete)."""

from __future__ import annotations

from gfd.fleet.health import Collection, ViewHealth

NAMES = ("nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses")


def test_a_view_of_synced_collections_is_complete_and_ready() -> None:
    h = ViewHealth(collections=tuple(Collection(name=n, synced=True) for n in NAMES))
    assert h.complete and h.ready


def test_a_collection_not_yet_listed_makes_the_view_neither_complete_nor_ready() -> None:
    h = ViewHealth(collections=(*(Collection(name=n, synced=True) for n in NAMES[1:]),
                                Collection(name="nodes")))
    assert not h.complete and not h.ready


def test_a_refused_collection_makes_the_view_incomplete_but_it_stays_ready() -> None:
    h = ViewHealth(collections=(*(Collection(name=n, synced=True) for n in NAMES[1:]),
                                Collection(name="nodes", synced=True,
                                           refused="watch nodes: forbidden")))
    assert not h.complete and h.ready


def test_a_view_of_nothing_is_neither() -> None:
    assert not ViewHealth(collections=()).complete and not ViewHealth(collections=()).ready
