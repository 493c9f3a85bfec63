"""gfd fleet --serve's monitoring: its alerts fire and clear under ``promtool test rules``
over series gfd's own fleet metrics export (views of small fleets, scraped minute by minute),
the rules and the dashboard name only what it exports, every alert has its runbook in
docs/fleet.md and a description naming the kind or node, and the chart and
manifests/fleet/monitoring carry the same rules and dashboard.

promtool comes from Debian's ``prometheus`` package (.ci/run installs it); without it the
promtool tests skip, and fail under GFD_REQUIRE_PROMTOOL=1 (CI)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.fleetviews import A100, H100, L40S, dump, node, pod, view_of
from prometheus_client.parser import text_string_to_metric_families

from gfd.fleet.health import Collection, ViewHealth
from gfd.fleet.view import View
from gfd.metrics.fleetmetrics import FAMILIES, figures, render

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts/gfd/files/fleet-prometheus-rules.yaml"
DASHBOARD = ROOT / "charts/gfd/files/fleet-grafana-dashboard.json"
MANIFESTS = ROOT / "manifests/fleet/monitoring"
RUNBOOKS = ROOT / "docs/fleet.md"
TARGET = {"namespace": "gfd", "pod": "gfd-fleet-6d9f8-x7k2p", "job": "gfd/gfd-fleet",
          "instance": "10.0.3.9:8080"}
"""The labels a PodMonitor scrape adds to every series."""
KIND_LABELS = ("model", "memory", "mig_profile", "sharing", "resource", "manager")
PROMQL_WORDS = {"sum", "by", "max", "min", "and", "or", "on", "ignoring", "time",
                "increase", "label_values", "unless", "bool", "count"}
START = 1767225600.0
"""The fleet's pods were made then (helpers.fleetviews.CREATED): minute 0."""


def exported() -> dict[str, set[str]]:
    """Every series name the fleet's /metrics carries, with its labels."""
    out: dict[str, set[str]] = {}
    for f in FAMILIES:
        name = f.name + "_total" if f.kind == "counter" else f.name
        out[name] = set(f.labels)
    return out


def metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\bgfd_[a-z_]+\b", expr))


def matchers(expr: str) -> list[tuple[str, str]]:
    out = []
    for metric, body in re.findall(r"\b(gfd_[a-z_]+)\{([^}]*)\}", expr):
        out += [(metric, label) for label in re.findall(r"(\w+)\s*[=!~]", body)]
    return out


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]
    return queries


def grouping_labels(expr: str) -> set[str]:
    return {label.strip() for group in re.findall(r"\b(?:by|on|ignoring)\s*\(([^)]*)\)", expr)
            for label in group.split(",") if label.strip()}


# -- names, runbooks, copies --------------------------------------------------------------


def test_every_rule_reads_only_series_and_labels_gfd_exports() -> None:
    names = exported()
    for rule in rules():
        used = metric_names(rule["expr"])
        assert used and used <= names.keys(), (rule["alert"], used - names.keys())
        for metric, label in matchers(rule["expr"]):
            assert label in names[metric], f"{rule['alert']}: {metric} has no label {label}"
        labels = set().union(*(names[m] for m in used))
        assert grouping_labels(rule["expr"]) <= labels, rule["alert"]


def test_every_dashboard_query_names_only_metrics_gfd_exports() -> None:
    names = exported()
    queries = dashboard_queries()
    assert len(queries) >= 15
    for query in queries:
        used = metric_names(query)
        assert used and used <= names.keys(), (query, used - names.keys())
        for metric, label in matchers(query):
            assert label in names[metric], f"{query}: {metric} has no {label}"
        labels = set().union(*(names[m] for m in used))
        assert grouping_labels(query) <= labels, query
        words = set(re.findall(r"\b[a-z_]+\b(?=\s*\()", query))
        assert words <= PROMQL_WORDS, f"{query}: unknown functions {words - PROMQL_WORDS}"


def test_the_dashboard_shows_capacity_free_against_pending_fragmentation_findings_health(
        ) -> None:
    queries = " ".join(dashboard_queries())
    for needed in ('state="total"', 'state="free"', 'state="pending"',
                   "gfd_fleet_largest_free_block", "gfd_fleet_largest_pending_request",
                   "gfd_fleet_findings", "gfd_fleet_complete", "gfd_fleet_collection_refused",
                   "gfd_fleet_watch_restarts_total"):
        assert needed in queries, needed


def test_every_alert_has_a_runbook_a_summary_and_a_description_naming_the_kind_or_node(
        ) -> None:
    text = RUNBOOKS.read_text()
    anchors = {re.sub(r"[^a-z0-9-]", "", h.strip().lower().replace(" ", "-"))
               for h in re.findall(r"^#{2,4} (.+)$", text, re.M)}
    for rule in rules():
        notes = rule["annotations"]
        url = notes["runbook_url"]
        assert url.endswith("docs/fleet.md#" + rule["alert"].lower()), url
        assert rule["alert"].lower() in anchors, f"no runbook section for {rule['alert']}"
        assert notes["summary"] and notes["description"]
        assert re.search(r"\$labels\.(model|node|pod)", notes["description"]), rule["alert"]


def test_the_manifests_carry_the_charts_rules_and_dashboard() -> None:
    docs = {d["kind"]: d for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml"
            for d in yaml.safe_load_all(p.read_text()) if d}
    hint = "copy charts/gfd/files/fleet-* into manifests/fleet/monitoring/ (see its header)"
    assert docs["PrometheusRule"]["spec"] == yaml.safe_load(RULES.read_text()), hint
    cm = docs["ConfigMap"]
    assert json.loads(cm["data"]["gfd-fleet.json"]) == json.loads(DASHBOARD.read_text()), hint
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    endpoint = docs["PodMonitor"]["spec"]["podMetricsEndpoints"][0]
    deployment = yaml.safe_load((ROOT / "manifests/fleet/serve/deployment.yaml").read_text())
    ports = deployment["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert endpoint["port"] in {p["name"] for p in ports}
    assert docs["PodMonitor"]["spec"]["selector"]["matchLabels"] == deployment["spec"][
        "selector"]["matchLabels"]


# -- promtool ----------------------------------------------------------------------------


def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    if os.environ.get("GFD_REQUIRE_PROMTOOL") == "1":
        pytest.fail("promtool is required (GFD_REQUIRE_PROMTOOL=1): apt-get install prometheus")
    pytest.skip("no promtool (Debian: apt-get install prometheus)")


class Run:
    """Views of a fleet, one a minute, scraped (as ``--serve`` renders them) into the
    series promtool reads."""

    def __init__(self, *, node_findings: bool = False) -> None:
        self.node_findings = node_findings
        self.samples: dict[str, list[str]] = {}
        self.minutes = 0

    def minute(self, view: View, count: int = 1) -> None:
        figs = figures(view)
        for _ in range(count):
            text, _ = render(figs, now=START + 60 * self.minutes, version="0.1.0",
                             node_findings=self.node_findings)
            for family in text_string_to_metric_families(text.decode()):
                for s in family.samples:
                    labels = {**s.labels, **TARGET}
                    key = s.name + "{" + ",".join(
                        f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
                    values = self.samples.setdefault(key, ["_"] * self.minutes)
                    values.append(repr(float(s.value)))
            self.minutes += 1
            for values in self.samples.values():
                values.extend(["_"] * (self.minutes - len(values)))

    def input_series(self) -> list[dict[str, str]]:
        return [{"series": k, "values": " ".join(v)} for k, v in sorted(self.samples.items())]


ALL = [r["alert"] for r in rules()]


def promtool_test(tmp_path: Path, run: Run, at: str, firing: dict[str, list[dict[str, Any]]]
                  ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "rules.yaml").write_text(RULES.read_text())
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": run.input_series(),
        "alert_rule_test": [{"eval_time": at, "alertname": name,
                             "exp_alerts": firing.get(name, [])} for name in ALL]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    return subprocess.run([promtool(), "test", "rules", "test.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def check(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr


def alert(name: str, labels: dict[str, str], summary: str, description: str) -> dict[str, Any]:
    labels = {k: v for k, v in labels.items() if v}  # an empty label is no label
    return {"exp_labels": {"severity": "warning", **TARGET, **labels},
            "exp_annotations": {
                "summary": summary, "description": description,
                "runbook_url": "https://github.com/gfd-project/gfd/blob/main/docs/fleet.md#"
                               + name.lower()}}


def kind(model: tuple[str, int], state: str | None = None) -> dict[str, str]:
    labels = {"model": model[0], "memory": str(model[1]), "mig_profile": "", "sharing": "none",
              "resource": "nvidia.com/gpu", "manager": "device-plugin"}
    return {**labels, "state": state} if state else labels


def healthy() -> list[dict[str, Any]]:
    return [node("h100-1", H100, 8), node("h100-2", H100, 8), pod("a", 8, node="h100-1"),
            node("a100-1", A100, 4), node("a100-2", A100, 4), pod("c", 2, node="a100-1"),
            pod("d", 2, node="a100-2"), node("l40s-1", L40S, 4)]


def with_objects(*objects: dict[str, Any]) -> View:
    return view_of(dump([*healthy(), *objects]))


def test_a_healthy_fleet_raises_no_alert(tmp_path: Path) -> None:
    run = Run(node_findings=True)
    run.minute(with_objects(), 60)
    check(promtool_test(tmp_path, run, "55m", {}))


SHORT = alert(
    "GfdFleetGpuPodsPending", kind(H100),
    "GPU pods have waited 30 minutes for NVIDIA-H100-80GB-HBM3 (nvidia.com/gpu)",
    "Unscheduled pods ask 12 units of NVIDIA-H100-80GB-HBM3 (nvidia.com/gpu, device-plugin, "
    "sharing none), more than the kind has free, and have for 30 minutes.")


def test_pods_that_ask_more_than_their_kind_has_free_for_30_minutes_raise_pending(
        tmp_path: Path) -> None:
    run = Run()
    run.minute(with_objects(), 5)
    waiting = with_objects(pod("w1", 8, product=H100[0]), pod("w2", 4, product=H100[0]))
    run.minute(waiting, 40)  # minutes 5-44: 12 asked, 8 free
    run.minute(with_objects(pod("w1", 8, node="h100-2")), 20)  # bound, w2 deleted
    check(promtool_test(tmp_path, run, "30m", {}))  # pending for 25 minutes: not yet
    check(promtool_test(tmp_path, run, "40m", {"GfdFleetGpuPodsPending": [SHORT]}))
    check(promtool_test(tmp_path, run, "50m", {}))


FRAGMENTED = alert(
    "GfdFleetFragmented", kind(A100),
    "NVIDIA-A100-SXM4-80GB (nvidia.com/gpu) is fragmented: enough free units, no node "
    "with enough",
    "A pending pod asks 3 units of NVIDIA-A100-SXM4-80GB (nvidia.com/gpu, device-plugin): "
    "the kind has that many free, but no one node has them (gfd_fleet_largest_free_block), "
    "for 15 minutes.")


def test_a_pod_that_fits_the_kind_but_no_node_raises_fragmented_until_it_binds(
        tmp_path: Path) -> None:
    run = Run()
    run.minute(with_objects(), 5)
    run.minute(with_objects(pod("w", 3, product=A100[0])), 25)  # 4 free, 2 a node
    run.minute(with_objects(pod("e", 2, node="a100-1", created="2026-01-01T00:30:00Z"),
                            pod("w", 3, product=A100[0])), 5)  # still 2 free: short, not
    run.minute(with_objects(), 10)                             # fragmented; then it ran
    check(promtool_test(tmp_path, run, "15m", {}))
    check(promtool_test(tmp_path, run, "25m", {"GfdFleetFragmented": [FRAGMENTED]}))
    check(promtool_test(tmp_path, run, "33m", {}))
    check(promtool_test(tmp_path, run, "44m", {}))


def lost_a_gpu() -> View:
    objects = healthy()
    objects[-1] = node("l40s-1", L40S, 3, labelled_gpus=4)
    return view_of(dump(objects))


@pytest.mark.parametrize("node_findings", [True, False], ids=["per-node", "by-check"])
def test_a_finding_for_15_minutes_raises_finding_naming_the_node_where_it_can(
        tmp_path: Path, node_findings: bool) -> None:
    run = Run(node_findings=node_findings)
    run.minute(with_objects(), 5)
    run.minute(lost_a_gpu(), 20)
    run.minute(with_objects(), 10)
    if node_findings:
        labels = {"check": "device-plugin-units", "node": "l40s-1"}
        summary = "gfd fleet --check: device-plugin-units on l40s-1"
        who = "Node l40s-1"
    else:
        labels, summary, who = ({"check": "device-plugin-units"},
                                "gfd fleet --check: device-plugin-units", "1 node(s)")
    found = alert("GfdFleetFinding", labels, summary,
                  f"{who}: gfd fleet --check has found device-plugin-units for 15 minutes: "
                  "the node's labels disagree with what the scheduler sees (`gfd fleet "
                  "--check` names each node and where to look).")
    check(promtool_test(tmp_path, run, "15m", {}))
    check(promtool_test(tmp_path, run, "22m", {"GfdFleetFinding": [found]}))
    check(promtool_test(tmp_path, run, "30m", {}))


def test_a_view_incomplete_for_10_minutes_raises_view_incomplete_until_it_is_whole(
        tmp_path: Path) -> None:
    whole = with_objects()
    broken = replace(whole, health=ViewHealth(collections=tuple(
        replace(c, refused="watch pods: forbidden") if c.name == "pods" else c
        for c in whole.health.collections), last_change=whole.health.last_change))
    waiting = replace(whole, health=ViewHealth(collections=tuple(
        Collection(name=c.name) for c in whole.health.collections)))
    run = Run()
    run.minute(waiting, 3)  # starting: nothing read yet
    run.minute(whole, 10)
    run.minute(broken, 15)
    run.minute(whole, 10)
    incomplete = alert(
        "GfdFleetViewIncomplete", {},
        "gfd fleet --serve in gfd has served an incomplete view for 10 minutes",
        "A collection is refused, failing or not yet read (gfd_fleet_collection_refused, "
        "gfd_fleet_collection_synced; /readyz and the pod's log name it): "
        "gfd-fleet-6d9f8-x7k2p serves the last known figures, which may be wrong.")
    check(promtool_test(tmp_path, run, "10m", {}))
    check(promtool_test(tmp_path, run, "20m", {}))
    check(promtool_test(tmp_path, run, "26m", {"GfdFleetViewIncomplete": [incomplete]}))
    check(promtool_test(tmp_path, run, "35m", {}))


def test_promtool_fails_an_alert_that_does_not_fire(tmp_path: Path) -> None:
    """The checks above can fail: expecting an alert a healthy fleet does not raise."""
    run = Run()
    run.minute(with_objects(), 40)
    result = promtool_test(tmp_path, run, "35m", {"GfdFleetGpuPodsPending": [SHORT]})
    assert result.returncode != 0 and "GfdFleetGpuPodsPending" in result.stdout + result.stderr

