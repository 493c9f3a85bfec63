"""A view and its source: a static source hands out its one view, and a waiter for a later
generation is woken by ``stop`` (the server shutting down), never by a change that cannot
come."""

from __future__ import annotations

import threading

from gfd.fleet.count import count
from gfd.fleet.health import Collection, ViewHealth
from gfd.fleet.model import Fleet
from gfd.fleet.view import StaticSource, View


def view() -> View:
    f = Fleet(nodes={}, pods=[], slices=[], claims={}, incomplete=[])
    return View(fleet=f, counted=count(f), findings=(),
                health=ViewHealth(collections=(Collection(name="nodes", synced=True),)),
                generation=0)


def test_a_static_source_reads_its_one_view() -> None:
    v = view()
    source = StaticSource(v)
    with source.read() as got:
        assert got is v


def test_a_wait_for_an_older_generation_returns_at_once() -> None:
    assert StaticSource(view()).wait(after=-1, timeout=3600) == 0


def test_a_waiter_for_a_change_that_cannot_come_is_woken_by_stop() -> None:
    source = StaticSource(view())
    got: list[int] = []
    waiter = threading.Thread(target=lambda: got.append(source.wait(after=0, timeout=3600)))
    waiter.start()
    source.stop()
    waiter.join(timeout=60)
    assert not waiter.is_alive() and got == [0]


def test_one_read_is_every_collection_synced_and_a_refused_list_refused() -> None:
    from gfd.fleet.view import COLLECTIONS, one_read

    f = Fleet(nodes={}, pods=[], slices=[], claims={},
              incomplete=["list pods: forbidden (grant `list` on pods cluster-wide)",
                          "resourceclaims: none in x.json (was it dumped?)"])
    v = one_read(f, count(f), (), when=1767225600.0)
    assert [c.name for c in v.health.collections] == list(COLLECTIONS)
    assert all(c.synced for c in v.health.collections) and v.health.ready
    refused = {c.name: c.refused for c in v.health.collections if c.refused}
    assert refused == {"pods": f.incomplete[0], "resourceclaims": f.incomplete[1]}
    assert not v.health.complete and v.health.last_change == 1767225600.0
    assert v.generation == 0
