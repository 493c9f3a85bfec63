"""A real Prometheus (Debian's ``prometheus`` package, on loopback) scrapes ``gfd fleet
--serve`` over a fleet where every alert's condition holds (pods waiting for more than
their kind has free, a kind fragmented, a finding, an object left out of the view): each
alert's expression and each dashboard query returns series from that scrape, each alert is
pending in Prometheus' own evaluation, every gfd series it stored is one gfd documents, and
``promtool check metrics`` is clean on the scrape.

Without prometheus these skip, and fail under GFD_REQUIRE_PROMETHEUS=1 (CI)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.fleetserve import Served
from helpers.fleetviews import A100, H100, L40S, dump, node, pod
from helpers.process import free_port, wait_for

from gfd.metrics.fleetmetrics import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "charts/gfd/files/fleet-prometheus-rules.yaml"
DASHBOARD = ROOT / "charts/gfd/files/fleet-grafana-dashboard.json"
EVENTUALLY = 120.0
"""Seconds for Prometheus to start, scrape and evaluate (seconds on a quiet machine)."""


def binary(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    if os.environ.get("GFD_REQUIRE_PROMETHEUS") == "1":
        pytest.fail(f"{name} is required (GFD_REQUIRE_PROMETHEUS=1): apt-get install "
                    "prometheus")
    pytest.skip(f"no {name} (Debian: apt-get install prometheus)")


def alerting_fleet() -> dict[str, Any]:
    """H100: 1 of 16 free, 4 asked (short); A100: 4 free, 2 a node, 3 asked (fragmented);
    L40S: labels say 4, the device plugin 3 (a finding); one Pod malformed (left out: the
    view is incomplete)."""
    broken = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "broken", "namespace": "ml"}, "spec": [], "status": {}}
    return dump([node("h100-1", H100, 8), node("h100-2", H100, 8), pod("a", 8, node="h100-1"),
                 pod("b", 7, node="h100-2"), pod("wants-h100", 4, product=H100[0]),
                 node("a100-1", A100, 4), node("a100-2", A100, 4), pod("c", 2, node="a100-1"),
                 pod("d", 2, node="a100-2"), pod("wants-a100", 3, product=A100[0]),
                 node("l40s-1", L40S, 3, labelled_gpus=4), broken])


class Prometheus:
    def __init__(self, tmp: Path, target: str) -> None:
        self.port = free_port()
        (tmp / "rules.yaml").write_text(RULES.read_text())
        (tmp / "prometheus.yml").write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["rules.yaml"],
            "scrape_configs": [{"job_name": "gfd-fleet",
                                "static_configs": [{"targets": [target]}]}]}))
        self.log = (tmp / "prometheus.log").open("w")
        self._proc = subprocess.Popen(
            [binary("prometheus"), f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **query: str) -> Any:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=60) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def ready(self) -> bool:
        if self._proc.poll() is not None:
            raise AssertionError(f"prometheus exited {self._proc.returncode}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as resp:
                return resp.status == 200
        except OSError:
            return False

    def series(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=60)
        self.log.close()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Served]]:
    tmp = tmp_path_factory.mktemp("prometheus")
    binary("prometheus")
    (tmp / "fleet.json").write_text(json.dumps(alerting_fleet()))
    with Served(tmp / "fleet.json", "--node-findings") as served:
        target = served.url.removeprefix("http://").rstrip("/")
        prom = Prometheus(tmp, target)
        try:
            wait_for(prom.ready, EVENTUALLY)
            # two scrapes at least: what increase() and rate() need
            wait_for(lambda: bool(prom.series(
                'count_over_time(gfd_fleet_complete{job="gfd-fleet"}[5m]) >= 2')), EVENTUALLY)
            yield prom, served
        finally:
            prom.close()


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


@pytest.mark.parametrize("rule", rules(), ids=lambda r: r["alert"])
def test_each_alerts_expression_returns_series_from_the_scrape(
        scraped: tuple[Prometheus, Served], rule: dict[str, Any]) -> None:
    prom, _ = scraped
    assert prom.series(rule["expr"]), rule["expr"]


def test_each_alert_is_pending_in_prometheus_own_evaluation(
        scraped: tuple[Prometheus, Served]) -> None:
    prom, _ = scraped
    names = {r["alert"] for r in rules()}

    def pending() -> set[str]:
        return {a["labels"]["alertname"] for a in prom.api("alerts")["alerts"]
                if a["state"] in ("pending", "firing")}

    wait_for(lambda: pending() >= names, EVENTUALLY)
    groups = prom.api("rules")["groups"]
    assert all(r["health"] == "ok" for g in groups for r in g["rules"]), groups


def grafana_to_promql(query: str) -> str:
    """A dashboard query as Prometheus takes it: every model (``$model``), and a template
    variable's ``label_values(metric, label)`` as its metric."""
    found = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query)
    return found[1] if found else query.replace("$model", ".*")


def dashboard_queries() -> list[str]:
    board = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])] + [
        v["definition"] for v in board["templating"]["list"] if v["type"] == "query"]


@pytest.mark.parametrize("query", dashboard_queries())
def test_each_dashboard_query_returns_series_from_the_scrape(
        scraped: tuple[Prometheus, Served], query: str) -> None:
    prom, _ = scraped
    assert prom.series(grafana_to_promql(query)), query


def test_every_gfd_series_prometheus_stored_is_one_gfd_documents(
        scraped: tuple[Prometheus, Served]) -> None:
    prom, _ = scraped
    stored = {n for n in prom.api("label/__name__/values") if n.startswith("gfd_")}
    documented = {f.name + ("_total" if f.kind == "counter" else "") for f in FAMILIES}
    assert stored == documented
    text = (ROOT / "docs/fleet.md").read_text()
    assert all(f"`{name}`" in text for name in documented), [
        n for n in documented if f"`{n}`" not in text]


def test_promtool_check_metrics_is_clean_on_a_scrape(scraped: tuple[Prometheus, Served]
                                                     ) -> None:
    _, served = scraped
    with urllib.request.urlopen(served.url + "metrics", timeout=60) as resp:
        text = resp.read()
    result = subprocess.run([binary("promtool"), "check", "metrics"], input=text,
                            capture_output=True, timeout=60)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
    rules_check = subprocess.run([binary("promtool"), "check", "rules", str(RULES)],
                                 capture_output=True, text=True, timeout=60)
    assert rules_check.returncode == 0, rules_check.stdout + rules_check.stderr
