"""The metrics on a private registry: every family named and documented, known label values
from zero, two instances apart, and what each agent event records."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gfd.metrics.health import Health
from gfd.metrics.registry import FAMILIES, Metrics


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample in render(), keyed by (name, sorted labels)."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


def test_build_info_carries_the_version() -> None:
    m = Metrics(version="1.2.3")
    assert value(m, "gfd_build_info", version="1.2.3") == 1.0


def test_known_cycle_results_and_change_kinds_start_at_zero() -> None:
    m = Metrics(version="x")
    for result in ("published", "unchanged", "error"):
        assert value(m, "gfd_cycles_total", result=result) == 0.0
    for kind in ("added", "changed", "removed"):
        assert value(m, "gfd_label_changes_total", kind=kind) == 0.0


def test_cycle_counts_by_result_and_observes_duration() -> None:
    m = Metrics(version="x")
    m.cycle("published", 0.2)
    m.cycle("unchanged", 0.003)
    m.cycle("unchanged", 40.0)
    assert value(m, "gfd_cycles_total", result="published") == 1.0
    assert value(m, "gfd_cycles_total", result="unchanged") == 2.0
    assert value(m, "gfd_cycles_total", result="error") == 0.0
    assert value(m, "gfd_cycle_duration_seconds_count") == 3.0
    assert value(m, "gfd_cycle_duration_seconds_sum") == pytest.approx(40.203)
    assert value(m, "gfd_cycle_duration_seconds_bucket", le="0.001") == 0.0
    assert value(m, "gfd_cycle_duration_seconds_bucket", le="0.005") == 1.0
    assert value(m, "gfd_cycle_duration_seconds_bucket", le="0.25") == 2.0
    assert value(m, "gfd_cycle_duration_seconds_bucket", le="30.0") == 2.0
    assert value(m, "gfd_cycle_duration_seconds_bucket", le="+Inf") == 3.0


def test_discovery_observes_duration() -> None:
    m = Metrics(version="x")
    m.discovery(0.04)
    assert value(m, "gfd_discovery_duration_seconds_count") == 1.0
    assert value(m, "gfd_discovery_duration_seconds_sum") == pytest.approx(0.04)
    assert value(m, "gfd_discovery_duration_seconds_bucket", le="0.025") == 0.0
    assert value(m, "gfd_discovery_duration_seconds_bucket", le="0.05") == 1.0


def test_published_sets_label_count_changes_and_timestamp() -> None:
    m = Metrics(version="x")
    m.published(30, added=30, changed=0, removed=0, when=1_700_000_000.0)
    m.published(29, added=1, changed=2, removed=2, when=1_700_000_060.5)
    assert value(m, "gfd_labels_published") == 29.0
    assert value(m, "gfd_label_changes_total", kind="added") == 31.0
    assert value(m, "gfd_label_changes_total", kind="changed") == 2.0
    assert value(m, "gfd_label_changes_total", kind="removed") == 2.0
    assert value(m, "gfd_last_publish_timestamp_seconds") == 1_700_000_060.5


def test_rejected_counts_by_reason() -> None:
    m = Metrics(version="x")
    m.rejected("value-too-long")
    m.rejected("value-too-long", 3)
    m.rejected("bad-key", 2)
    assert value(m, "gfd_labels_rejected_total", reason="value-too-long") == 4.0
    assert value(m, "gfd_labels_rejected_total", reason="bad-key") == 2.0


def test_error_counts_by_kind() -> None:
    m = Metrics(version="x")
    m.error("discovery")
    m.error("publish")
    m.error("publish")
    assert value(m, "gfd_errors_total", kind="discovery") == 1.0
    assert value(m, "gfd_errors_total", kind="publish") == 2.0
    assert value(m, "gfd_errors_total", kind="config") is None


def test_api_request_counts_by_verb_and_code() -> None:
    m = Metrics(version="x")
    m.api_request("get", "200")
    m.api_request("patch", "409")
    m.api_request("patch", "409")
    m.api_request("patch", "error")
    assert value(m, "gfd_api_requests_total", verb="get", code="200") == 1.0
    assert value(m, "gfd_api_requests_total", verb="patch", code="409") == 2.0
    assert value(m, "gfd_api_requests_total", verb="patch", code="error") == 1.0


def test_gpus_sets_counts_by_model() -> None:
    m = Metrics(version="x")
    m.gpus({"NVIDIA-H100-80GB-HBM3": 8, "NVIDIA-A100-SXM4-40GB": 2})
    assert value(m, "gfd_gpus", model="NVIDIA-H100-80GB-HBM3") == 8.0
    assert value(m, "gfd_gpus", model="NVIDIA-A100-SXM4-40GB") == 2.0


def test_gpus_removes_models_no_longer_present() -> None:
    m = Metrics(version="x")
    m.gpus({"NVIDIA-H100-80GB-HBM3": 8, "NVIDIA-A100-SXM4-40GB": 2})
    m.gpus({"NVIDIA-H100-80GB-HBM3": 7})
    assert value(m, "gfd_gpus", model="NVIDIA-H100-80GB-HBM3") == 7.0
    assert value(m, "gfd_gpus", model="NVIDIA-A100-SXM4-40GB") is None
    m.gpus({})
    assert not [key for key in samples(m) if key[0] == "gfd_gpus"]


def test_the_resource_manager_is_one_series_per_manager_with_one_set() -> None:
    m = Metrics(version="test")
    m.resource_manager("dra")
    assert value(m, "gfd_resource_manager", manager="dra") == 1.0
    assert value(m, "gfd_resource_manager", manager="device-plugin") == 0.0
    m.resource_manager("device-plugin")
    assert value(m, "gfd_resource_manager", manager="dra") == 0.0
    assert value(m, "gfd_resource_manager", manager="device-plugin") == 1.0


def test_nvml_up_is_one_or_zero() -> None:
    m = Metrics(version="x")
    m.nvml_up(True)
    assert value(m, "gfd_nvml_up") == 1.0
    m.nvml_up(False)
    assert value(m, "gfd_nvml_up") == 0.0


def test_two_instances_do_not_share_state() -> None:
    a = Metrics(version="a")
    b = Metrics(version="b")
    a.cycle("published", 0.1)
    a.gpus({"Tesla-T4": 1})
    assert value(a, "gfd_cycles_total", result="published") == 1.0
    assert value(b, "gfd_cycles_total", result="published") == 0.0
    assert value(b, "gfd_gpus", model="Tesla-T4") is None
    assert value(b, "gfd_build_info", version="a") is None
    assert value(b, "gfd_build_info", version="b") == 1.0


def test_every_family_has_help_text() -> None:
    m = Metrics(version="x")
    families = list(text_string_to_metric_families(m.render().decode()))
    gfd_families = [f for f in families if f.name.startswith("gfd_")]
    assert len(gfd_families) == len(families) >= 12
    assert all(f.documentation for f in families)


def test_watcher_deaths_are_counted_by_watcher_from_zero() -> None:
    metrics = Metrics(version="9.9.9")
    metrics.watcher_died("config")
    families = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
    counts = {s.labels["watcher"]: s.value for s in families["gfd_watcher_failures"].samples
              if s.name == "gfd_watcher_failures_total"}
    assert counts == {"nvml": 0.0, "config": 1.0, "output": 0.0, "api": 0.0, "registry": 0.0}


def test_unhealthy_gpus_and_the_running_cycle_are_exported() -> None:
    now = [100.0]
    metrics, health = Metrics(version="1.2.3"), Health(stuck_after=60, clock=lambda: now[0])
    metrics.follow(health)
    metrics.unhealthy(2)
    health.cycle_started()
    now[0] += 42.5
    text = metrics.render().decode()
    assert "gfd_gpus_unhealthy 2.0" in text
    assert "gfd_cycle_running_seconds 42.5" in text
    health.cycle_finished()
    assert "gfd_cycle_running_seconds 0.0" in metrics.render().decode()


def test_kube_events_are_counted_by_reason_and_result() -> None:
    metrics = Metrics(version="1.2.3")
    metrics.kube_event("GpuLost", "created")
    metrics.kube_event("GpuLost", "throttled")
    metrics.kube_event("GpuLost", "throttled")
    text = metrics.render().decode()
    assert 'gfd_kube_events_total{reason="GpuLost",result="throttled"} 2.0' in text
    assert 'gfd_kube_events_total{reason="GpuLost",result="created"} 1.0' in text


def test_the_stuck_after_limit_is_exported_where_healthz_fails() -> None:
    """The alert compares gfd_cycle_running_seconds with gfd_stuck_after_seconds: the gauge is
    the limit /healthz uses, so the two pass it at the same moment."""
    now = [100.0]
    metrics, health = Metrics(version="1.2.3"), Health(stuck_after=45, clock=lambda: now[0])
    metrics.follow(health)
    assert health.stuck_after == 45
    assert value(metrics, "gfd_stuck_after_seconds") == 45.0
    health.cycle_started()
    now[0] += 45
    assert value(metrics, "gfd_cycle_running_seconds") == 45.0
    assert health.live() == (True, "ok")
    now[0] += 1
    assert value(metrics, "gfd_cycle_running_seconds") == 46.0
    assert health.live() == (False, "cycle running for 46s (limit 45s)")


def test_every_family_of_the_table_is_exported_in_its_order_with_its_kind_and_help() -> None:
    families = [f for f in text_string_to_metric_families(Metrics(version="x").render().decode())
                if not f.name.endswith("_created")]  # the client's own, one per counter
    assert [(f.name, f.type, f.documentation) for f in families] == [
        (f.name, f.kind, f.help) for f in FAMILIES]

