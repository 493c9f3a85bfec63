"""Monitoring: gfd's alerts run under ``promtool test rules`` over series gfd's own metrics
code exports (driven the way the agent loop drives it, scraped minute by minute), the
dashboard and the rules name only exported metrics, every alert has its runbook, and the
chart and the manifests carry the same rules and dashboard.

promtool comes from Debian's ``prometheus`` package (.ci/run installs it); without it the
promtool tests skip with one line, and fail under GFD_REQUIRE_PROMTOOL=1 (CI).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from gfd.metrics import Health, Metrics

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts/gfd/files/prometheus-rules.yaml"
DASHBOARD = ROOT / "charts/gfd/files/grafana-dashboard.json"
MANIFESTS = ROOT / "manifests/components/monitoring"
RUNBOOKS = ROOT / "docs/monitoring.md"
TARGET = {"namespace": "gfd", "pod": "gfd-x7k2p", "node": "gpu-node-1", "job": "gfd/gfd",
          "instance": "10.0.3.7:8080"}
"""The labels a PodMonitor scrape adds to every series (node from the pod's node)."""
PROMQL_WORDS = {"sum", "by", "without", "rate", "increase", "time", "max_over_time", "and",
                "on", "or", "histogram_quantile", "count", "le", "label_values", "changes",
                "max", "min", "avg", "ignoring", "group_left", "offset", "bool", "unless"}


# -- what gfd exports ---------------------------------------------------------------------


class Run:
    """A Metrics fed minute by minute as the agent loop feeds it, scraped after each minute
    into the series promtool reads."""

    def __init__(self, *, stuck_after: float = 120) -> None:
        self.now = 0.0
        self.metrics = Metrics(version="0.1.0")
        self.health = Health(stuck_after=stuck_after, clock=lambda: self.now)
        self.metrics.follow(self.health)
        self.samples: dict[str, list[str]] = {}
        self.minutes = 0

    def healthy_cycle(self, *, gpus: int = 8, unhealthy: int = 0) -> None:
        m = self.metrics
        self.health.cycle_started()
        m.discovery(0.05)
        m.cycle("unchanged", 0.06)
        m.published(40, added=0, changed=0, removed=0, when=self.now)
        m.gpus({"NVIDIA A100-SXM4-40GB": gpus} if gpus else {})
        m.nvml_up(True)
        m.unhealthy(unhealthy)
        m.degraded({})
        self.health.cycle_finished()

    def failed_cycle(self, kind: str) -> None:
        self.health.cycle_started()
        self.metrics.error(kind)
        self.metrics.cycle("error", 0.2)
        self.health.cycle_finished()

    def minute(self, action: Callable[[Run], None], count: int = 1) -> None:
        for _ in range(count):
            action(self)
            self._scrape()
            self.now += 60
            self.minutes += 1

    def _scrape(self) -> None:
        for family in text_string_to_metric_families(self.metrics.render().decode()):
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                labels = {**sample.labels, **TARGET}
                key = sample.name + "{" + ",".join(
                    f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
                values = self.samples.setdefault(key, ["_"] * self.minutes)
                values.append(repr(float(sample.value)))
        for values in self.samples.values():
            values.extend(["_"] * (self.minutes + 1 - len(values)))

    def input_series(self) -> list[dict[str, str]]:
        return [{"series": k, "values": " ".join(v)} for k, v in sorted(self.samples.items())]


def exported() -> dict[str, set[str]]:
    """Every series name gfd exports (counters with _total, histograms' _bucket/_sum/_count)
    and the label names each carries, from a Metrics driven through every method."""
    def everything(run: Run) -> None:
        run.healthy_cycle()
        m = run.metrics
        m.rejected("invalid-value")
        m.error("publish")
        m.api_request("patch", "200")
        m.degraded({("memory", "held"): 1})
        m.event("nvml", "xid")
        m.event_handled("nvml", 0.2)
        m.drift_repaired("api")
        m.watch_reconnect("timeout")
        m.kube_event("GpuLost", "created")

    run = Run()
    run.minute(everything)
    names: dict[str, set[str]] = {}
    for key in run.samples:
        name, labels = key.split("{", 1)
        names.setdefault(name, set()).update(re.findall(r'(\w+)="', labels))
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (gfd_*: gfd's own)."""
    return set(re.findall(r"\bgfd_[a-z_]+\b", expr))


def matchers(expr: str) -> list[tuple[str, str]]:
    """(metric, label) for each label matcher in ``metric{label=...}``."""
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
    for var in board["templating"]["list"]:
        if var.get("type") == "query":
            queries.append(var["definition"])
    return queries


# -- the names: rules, dashboard, runbooks ------------------------------------------------


def test_every_rule_reads_only_series_and_labels_gfd_exports() -> None:
    names = exported()
    for rule in rules():
        used = metric_names(rule["expr"])
        assert used, rule["alert"]
        assert used <= names.keys(), f"{rule['alert']}: {used - names.keys()} not exported"
        for metric, label in matchers(rule["expr"]):
            assert label in names[metric], f"{rule['alert']}: {metric} has no label {label}"


def test_every_dashboard_query_names_only_metrics_gfd_exports() -> None:
    names = exported()
    queries = dashboard_queries()
    assert len(queries) >= 10
    for query in queries:
        used = metric_names(query)
        assert used, f"a query that reads no gfd metric: {query}"
        assert used <= names.keys(), f"{query}: {used - names.keys()} not exported"
        for metric, label in matchers(query):
            assert label in names[metric] | {"node"}, f"{query}: {metric} has no {label}"
        words = set(re.findall(r"\b[a-z_]+\b(?=\s*\()", query))
        assert words <= PROMQL_WORDS, f"{query}: unknown functions {words - PROMQL_WORDS}"


def test_the_checks_see_a_metric_gfd_does_not_export() -> None:
    names = exported()
    assert not metric_names("rate(gfd_cycle_total[5m])") <= names.keys()
    assert "gfd_cycles_total" in names and "result" in names["gfd_cycles_total"]


def test_every_alert_has_a_runbook_section_its_url_points_at() -> None:
    text = RUNBOOKS.read_text()
    anchors = {re.sub(r"[^a-z0-9-]", "", h.strip().lower().replace(" ", "-"))
               for h in re.findall(r"^###? (.+)$", text, re.M)}
    for rule in rules():
        url = rule["annotations"]["runbook_url"]
        assert url.endswith("docs/monitoring.md#" + rule["alert"].lower()), url
        assert rule["alert"].lower() in anchors, f"no runbook section for {rule['alert']}"


def test_the_manifests_carry_the_charts_rules_and_dashboard() -> None:
    docs = {d["kind"]: d for p in MANIFESTS.glob("*.yaml") if p.name != "kustomization.yaml"
            for d in yaml.safe_load_all(p.read_text()) if d}
    hint = "copy charts/gfd/files/ into manifests/components/monitoring/ (see its header)"
    assert docs["PrometheusRule"]["spec"] == yaml.safe_load(RULES.read_text()), hint
    cm = docs["ConfigMap"]
    assert json.loads(cm["data"]["gfd.json"]) == json.loads(DASHBOARD.read_text()), hint
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    pod_monitor = docs["PodMonitor"]["spec"]["podMetricsEndpoints"][0]
    daemonset = yaml.safe_load((ROOT / "manifests/base/daemonset.yaml").read_text())
    ports = daemonset["spec"]["template"]["spec"]["containers"][0]["ports"]
    assert pod_monitor["port"] in {p["name"] for p in ports}


# -- promtool -----------------------------------------------------------------------------


def promtool() -> str:
    found = shutil.which("promtool")
    if found:
        return found
    if os.environ.get("GFD_REQUIRE_PROMTOOL") == "1":
        pytest.fail("promtool is required (GFD_REQUIRE_PROMTOOL=1): apt-get install prometheus")
    pytest.skip("no promtool (Debian: apt-get install prometheus)")


def alert(name: str, severity: str, labels: dict[str, str], summary: str,
          description: str) -> dict[str, Any]:
    return {"exp_labels": {"severity": severity, **labels},
            "exp_annotations": {
                "summary": summary, "description": description,
                "runbook_url": "https://github.com/gfd-project/gfd/blob/main/docs/monitoring.md#"
                               + name.lower()}}


ALL = [rule["alert"] for rule in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]]
NODE = {"node": "gpu-node-1"}
PUBLISHER = {"namespace": "gfd", "pod": "gfd-x7k2p", "node": "gpu-node-1"}


def promtool_test(tmp_path: Path, run: Run, at: str, firing: dict[str, list[dict[str, Any]]]
                  ) -> subprocess.CompletedProcess[str]:
    shutil.copy(RULES, tmp_path / "rules.yaml")
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": run.input_series(),
        "alert_rule_test": [{"eval_time": at, "alertname": name,
                             "exp_alerts": firing.get(name, [])} for name in ALL]}]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    return subprocess.run([promtool(), "test", "rules", "test.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def check(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_healthy_agent_raises_no_alert(tmp_path: Path) -> None:
    run = Run()
    run.minute(Run.healthy_cycle, 90)
    check(promtool_test(tmp_path, run, "85m", {}))


def test_publishing_that_keeps_failing_raises_publish_failing_then_not_published(
        tmp_path: Path) -> None:
    run = Run()
    run.minute(Run.healthy_cycle, 10)
    run.minute(lambda r: r.failed_cycle("publish"), 40)
    check(promtool_test(tmp_path, run, "45m", {
        "GfdPublishFailing": [alert(
            "GfdPublishFailing", "warning", PUBLISHER,
            "gfd cannot publish GPU labels on gpu-node-1",
            "Publishing to the feature file, the NodeFeature or the Node has failed for 15 "
            "minutes; the pod's log and the node's LabelPublishFailing Event say why.")],
        "GfdLabelsNotPublished": [alert(
            "GfdLabelsNotPublished", "warning", TARGET,
            "gfd has not published GPU labels on gpu-node-1 for 15 minutes",
            "The node keeps its last good labels, which may no longer match its GPUs.")],
    }))


def test_a_lost_gpu_raises_gpu_unhealthy_and_gpu_lost(tmp_path: Path) -> None:
    run = Run()
    run.minute(Run.healthy_cycle, 30)
    run.minute(lambda r: r.healthy_cycle(gpus=7, unhealthy=1), 15)
    check(promtool_test(tmp_path, run, "44m", {
        "GfdGpuUnhealthy": [alert(
            "GfdGpuUnhealthy", "critical", TARGET,
            "1 GPU(s) on gpu-node-1 are lost or unhealthy",
            "NVML answered a fatal error (GPU is lost) or a critical Xid: such GPUs are left "
            "out of the resource labels and counted in nvidia.com/gpu.unhealthy.")],
        "GfdGpuLost": [alert(
            "GfdGpuLost", "critical", NODE, "GPUs on gpu-node-1 are gone",
            "The node shows fewer healthy GPUs than it did in the last 6 hours, while NVML "
            "answers.")],
    }))


def test_a_gpu_gone_from_nvml_without_an_error_raises_gpu_lost_alone(tmp_path: Path) -> None:
    run = Run()
    run.minute(Run.healthy_cycle, 30)
    run.minute(lambda r: r.healthy_cycle(gpus=0), 15)  # the node's only model is gone
    check(promtool_test(tmp_path, run, "44m", {
        "GfdGpuLost": [alert(
            "GfdGpuLost", "critical", NODE, "GPUs on gpu-node-1 are gone",
            "The node shows fewer healthy GPUs than it did in the last 6 hours, while NVML "
            "answers.")],
    }))


def test_nvml_down_and_degraded_facts_are_told_apart(tmp_path: Path) -> None:
    run = Run()

    def degraded(r: Run) -> None:
        r.healthy_cycle()
        r.metrics.degraded({("memory", "held"): 2})

    def nvml_down(r: Run) -> None:
        degraded(r)
        r.metrics.nvml_up(False)

    run.minute(degraded, 40)
    run.minute(nvml_down, 15)
    check(promtool_test(tmp_path, run, "54m", {
        "GfdNvmlDown": [alert(
            "GfdNvmlDown", "warning", TARGET, "NVML does not answer gfd on gpu-node-1",
            "gfd cannot read the GPUs through NVML; the node's GPU labels are the last good "
            "ones or none.")],
        "GfdFactsDegraded": [alert(
            "GfdFactsDegraded", "info", {**PUBLISHER, "fact": "memory", "state": "held"},
            "NVML cannot give memory on gpu-node-1",
            "GPUs have not answered memory for 30 minutes (held: held keeps the last good "
            "value, unknown leaves its labels out).")],
    }))


def test_a_writer_fighting_gfd_raises_labels_fought(tmp_path: Path) -> None:
    run = Run()

    def fought(r: Run) -> None:
        r.healthy_cycle()
        r.metrics.drift_repaired("api")

    run.minute(Run.healthy_cycle, 10)
    run.minute(fought, 10)
    check(promtool_test(tmp_path, run, "19m", {
        "GfdLabelsFought": [alert(
            "GfdLabelsFought", "warning", {**PUBLISHER, "target": "api"},
            "Something keeps rewriting gfd's labels on gpu-node-1",
            "gfd repaired its labels at the api target more than 5 times in an hour: another "
            "writer (a second gfd or GFD, a script, an operator) is fighting it.")],
    }))


STUCK = alert(
    "GfdAgentStuck", "warning", TARGET,
    "A gfd cycle on gpu-node-1 has run past --stuck-after for 2 minutes",
    "A hung NVML call or a stuck request; /healthz fails past --stuck-after, and the liveness "
    "probe has not had the kubelet restart the container.")


def hang(run: Run, minutes: int) -> None:
    """A hung NVML call: a cycle that runs ``minutes`` scrapes (0 s, 60 s, ...), then ends."""
    run.health.cycle_started()
    run.minute(lambda r: None, minutes)
    run.health.cycle_finished()


def test_a_cycle_that_never_ends_raises_agent_stuck(tmp_path: Path) -> None:
    run = Run()
    run.minute(Run.healthy_cycle, 10)
    hang(run, 10)
    check(promtool_test(tmp_path, run, "19m", {"GfdAgentStuck": [STUCK]}))


def test_agent_stuck_follows_a_longer_stuck_after(tmp_path: Path) -> None:
    """--stuck-after 10m: a cycle of 8 minutes, which 120 s would call stuck, is not; one
    that passes 10 minutes is, 2 minutes later (scraped at 11 minutes, firing at 13)."""
    run = Run(stuck_after=600)
    run.minute(Run.healthy_cycle, 10)
    hang(run, 9)  # minutes 10-18: 0 s ... 480 s
    run.minute(Run.healthy_cycle, 5)
    hang(run, 16)  # minutes 24-39: 0 s ... 900 s
    for at in ("18m", "21m", "36m"):  # 480 s; between the hangs; 720 s, pending 1 minute
        check(promtool_test(tmp_path, run, at, {}))
    check(promtool_test(tmp_path, run, "37m", {"GfdAgentStuck": [STUCK]}))


def test_agent_stuck_follows_a_shorter_stuck_after(tmp_path: Path) -> None:
    """--stuck-after 30s: a cycle past 30 s for 2 minutes fires at 3 minutes, where the old
    fixed 120 s would have waited for 5."""
    run = Run(stuck_after=30)
    run.minute(Run.healthy_cycle, 10)
    hang(run, 5)  # minutes 10-14: 0 s ... 240 s
    check(promtool_test(tmp_path, run, "12m", {}))
    check(promtool_test(tmp_path, run, "13m", {"GfdAgentStuck": [STUCK]}))


def test_promtool_fails_an_alert_that_does_not_fire(tmp_path: Path) -> None:
    """The checks above can fail: expecting an alert a healthy agent does not raise."""
    run = Run()
    run.minute(Run.healthy_cycle, 30)
    result = promtool_test(tmp_path, run, "25m", {"GfdGpuUnhealthy": [alert(
        "GfdGpuUnhealthy", "critical", TARGET, "x", "y")]})
    assert result.returncode != 0 and "GfdGpuUnhealthy" in result.stdout + result.stderr
