"""The fleet's metrics: every family of ``FAMILIES`` exported with its labels, the figures
the count gives (units by state, nodes by state, the largest free block, the pending pods
and the oldest's age, the findings by check, per node only when asked), the view's health,
a kind's series apart from every other kind's, OpenMetrics where asked, and ``promtool check
metrics`` clean."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import replace

import pytest
from helpers.fleetviews import A100, H100, L40S, dump, node, pod, view_of
from prometheus_client.parser import text_string_to_metric_families

from gfd.fleet.checks import CHECKS
from gfd.fleet.health import Collection, ViewHealth
from gfd.fleet.kinds import Kind
from gfd.metrics.fleetmetrics import FAMILIES, figures, kind_labels, render

NOW = 1767225600.0 + 3600
"""An hour after the pods were made (helpers.fleetviews.CREATED)."""


def scenario() -> list[dict[str, object]]:
    """H100: 1 of 16 free, a pod asking 4 (short); A100: 4 free, 2 a node, a pod asking 3
    (fragmented); L40S: its labels say 4, the device plugin 3 (a finding)."""
    return [node("h100-1", H100, 8), node("h100-2", H100, 8), pod("a", 8, node="h100-1"),
            pod("b", 7, node="h100-2"), pod("wants-h100", 4, product=H100[0]),
            node("a100-1", A100, 4), node("a100-2", A100, 4), pod("c", 2, node="a100-1"),
            pod("d", 2, node="a100-2"),
            pod("wants-a100", 3, product=A100[0], created="2026-01-01T00:30:00Z"),
            node("l40s-1", L40S, 3, labelled_gpus=4)]


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def kind(model: str, extra: tuple[tuple[str, str], ...] = ()) -> tuple[tuple[str, str], ...]:
    memory = {H100[0]: H100[1], A100[0]: A100[1], L40S[0]: L40S[1]}[model]
    return tuple(sorted({"model": model, "memory": str(memory), "mig_profile": "",
                         "sharing": "none", "resource": "nvidia.com/gpu",
                         "manager": "device-plugin", **dict(extra)}.items()))


def scrape(*, node_findings: bool = False, health: ViewHealth | None = None) -> str:
    figs = figures(view_of(dump(scenario()), health=health))
    body, content_type = render(figs, now=NOW, version="9.9.9", node_findings=node_findings)
    assert content_type.startswith("text/plain; version=0.0.4")
    return body.decode()


def test_the_units_nodes_blocks_and_pending_pods_are_the_counts() -> None:
    got = samples(scrape())
    h100, a100 = kind(H100[0]), kind(A100[0])
    for state, value in (("total", 16), ("allocated", 15), ("free", 1), ("pending", 4),
                         ("unschedulable", 0)):
        assert got[("gfd_fleet_units", kind(H100[0], (("state", state),)))] == value, state
    assert got[("gfd_fleet_units", kind(A100[0], (("state", "free"),)))] == 4
    assert got[("gfd_fleet_nodes", kind(H100[0], (("state", "ready"),)))] == 2
    assert got[("gfd_fleet_nodes", kind(H100[0], (("state", "cordoned"),)))] == 0
    assert got[("gfd_fleet_largest_free_block", h100)] == 1
    assert got[("gfd_fleet_largest_free_block", a100)] == 2
    assert got[("gfd_fleet_pending_pods", h100)] == 1
    assert got[("gfd_fleet_largest_pending_request", a100)] == 3
    assert got[("gfd_fleet_oldest_pending_pod_age_seconds", h100)] == 3600
    assert got[("gfd_fleet_oldest_pending_pod_age_seconds", a100)] == 1800
    assert got[("gfd_fleet_oldest_pending_pod_age_seconds", kind(L40S[0]))] == 0
    assert got[("gfd_fleet_pending_gpu_pods", ())] == 2
    assert got[("gfd_fleet_oldest_pending_gpu_pod_age_seconds", ())] == 3600


def test_the_findings_are_counted_by_check_and_per_node_only_when_asked() -> None:
    got = samples(scrape())
    assert got[("gfd_fleet_findings", (("check", "device-plugin-units"),))] == 1
    assert all(("gfd_fleet_findings", (("check", c),)) in got for c in CHECKS)
    assert sum(v for (name, _), v in got.items() if name == "gfd_fleet_findings") == 1
    assert not [k for k in got if k[0] == "gfd_fleet_node_findings"]
    per_node = samples(scrape(node_findings=True))
    assert [(k[1], v) for k, v in per_node.items() if k[0] == "gfd_fleet_node_findings"] == [
        ((("check", "device-plugin-units"), ("node", "l40s-1")), 1)]


def test_the_views_health_per_collection_and_as_a_whole() -> None:
    got = samples(scrape())
    assert got[("gfd_fleet_complete", ())] == 1
    assert got[("gfd_fleet_last_change_timestamp_seconds", ())] == 1767225600.0
    assert got[("gfd_fleet_collection_synced", (("collection", "pods"),))] == 1
    assert got[("gfd_build_info", (("version", "9.9.9"),))] == 1
    refused = ViewHealth(collections=(
        Collection(name="nodes", synced=True, restarts=3, relists=1),
        Collection(name="pods", synced=True, refused="watch pods: forbidden")),
        last_change=5.0)
    got = samples(scrape(health=refused))
    assert got[("gfd_fleet_complete", ())] == 0
    assert got[("gfd_fleet_collection_refused", (("collection", "pods"),))] == 1
    assert got[("gfd_fleet_collection_refused", (("collection", "nodes"),))] == 0
    assert got[("gfd_fleet_watch_restarts_total", (("collection", "nodes"),))] == 3
    assert got[("gfd_fleet_relists_total", (("collection", "nodes"),))] == 1


def test_a_fleet_with_a_skipped_object_is_not_complete() -> None:
    broken = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x", "namespace": "ml"},
              "spec": [], "status": {}}
    view = view_of(dump([*scenario(), broken]))
    assert view.fleet.skipped and not figures(view).complete


def test_every_family_is_exported_with_its_labels() -> None:
    text = scrape(node_findings=True)
    found = {f.name: f for f in text_string_to_metric_families(text)}
    for family in FAMILIES:
        assert family.name in found, family.name
        assert found[family.name].type == family.kind
        for s in found[family.name].samples:
            assert set(s.labels) == set(family.labels), (family.name, s.labels)


def test_no_two_kinds_share_a_series() -> None:
    """Two kinds that differ only in their replicas (time-slicing x4 and x2) or memory
    being known are two series."""
    def k(**kw: object) -> Kind:
        base: dict[str, object] = dict(manager="device-plugin", model="Tesla-T4",
                                       memory=15360, mig_profile="",
                                       sharing="time-slicing", replicas=4,
                                       resource="nvidia.com/gpu")
        return Kind(**{**base, **kw})  # type: ignore[arg-type]

    kinds = [k(), k(replicas=2), k(sharing="none", replicas=1), k(memory=None)]
    assert len({kind_labels(x) for x in kinds}) == len(kinds)
    assert kind_labels(k())[3] == "time-slicingx4" and kind_labels(k(memory=None))[1] == ""


def test_openmetrics_where_the_scraper_asks() -> None:
    figs = figures(view_of(dump(scenario())))
    body, content_type = render(figs, now=NOW, version="9.9.9",
                                accept="application/openmetrics-text; version=1.0.0")
    assert content_type.startswith("application/openmetrics-text")
    text = body.decode()
    assert text.endswith("# EOF\n") and "gfd_fleet_watch_restarts_total{" in text


def test_the_figures_are_the_views_alone_and_the_ages_move_with_the_clock() -> None:
    view = view_of(dump(scenario()))
    figs = figures(view)
    assert figs == figures(replace(view))
    later, _ = render(figs, now=NOW + 60, version="x")
    assert samples(later.decode())[("gfd_fleet_pending_gpu_pods", ())] == 2
    assert samples(later.decode())[(
        "gfd_fleet_oldest_pending_gpu_pod_age_seconds", ())] == 3660


def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    if os.environ.get("GFD_REQUIRE_PROMTOOL") == "1":
        pytest.fail("promtool is required (GFD_REQUIRE_PROMTOOL=1): apt-get install prometheus")
    pytest.skip("no promtool (Debian: apt-get install prometheus)")


@pytest.mark.parametrize("node_findings", [False, True])
def test_promtool_check_metrics_is_clean(node_findings: bool) -> None:
    result = subprocess.run([promtool(), "check", "metrics"], input=scrape(
        node_findings=node_findings), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_a_count_without_its_index_gives_the_same_figures() -> None:
    """A count kept incrementally may hold no ``Index``: the pending pods are the same."""
    view = view_of(dump(scenario()))
    bare = replace(view, counted=replace(view.counted, index=None))
    assert figures(bare) == figures(view)
