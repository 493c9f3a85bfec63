"""What the loop reports: a published cycle's outcome and what its snapshot shows about the
node, heard by the real metrics (``metrics.Metrics``) and by a recorder of the calls."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.labelers.validate import Rejection
from gfd.metrics import Metrics
from gfd.observers import rejections, report_node, report_published
from gfd.readers.simulate import simulate
from gfd.sinks.base import Change, PublishResult
from gfd.snapshot import Degraded

H100 = simulate("hgx-h100").snapshot
LABELLING = compute_labels(H100, LabelOptions())


class Recorder:
    """Records each report the way the loop makes it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        def record(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args, kwargs))
        return record


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    """One sample's value from the exposition /metrics serves (None: no such series)."""
    for line in metrics.render().decode().splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        series, _, value = line.rpartition(" ")
        wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
        if series == (f"{name}{{{wanted}}}" if labels else name):
            return float(value)
    return None


def test_a_published_cycle_reports_its_times_its_labels_and_its_change_in_that_order() -> None:
    recorder = Recorder()
    result = PublishResult(written=True, change=Change(added=("a", "b"), removed=("c",)))
    report_published(recorder, LABELLING, result, read=0.25, took=1.5, when=1_790_000_000.0)
    assert recorder.calls == [
        ("discovery", (0.25,), {}),
        ("cycle", ("published", 1.5), {}),
        ("published", (len(LABELLING.labels),),
         {"added": 2, "changed": 0, "removed": 1, "when": 1_790_000_000.0}),
    ], "no rejected label: no rejection reported"


def test_an_unwritten_target_is_reported_as_unchanged_in_the_metrics() -> None:
    metrics = Metrics(version="test")
    report_published(metrics, LABELLING, PublishResult(written=False), read=0.1, took=0.2,
                     when=1_790_000_000.0)
    assert sample(metrics, "gfd_cycles_total", result="unchanged") == 1.0
    assert sample(metrics, "gfd_labels_published") == len(LABELLING.labels)


def test_rejections_count_gfds_own_by_reason_and_the_api_servers_apart() -> None:
    rejected = (Rejection("nvidia.com/x", "bad value", "invalid-value", "x: bad"),
                Rejection("nvidia.com/y", "bad value", "invalid-value", "y: bad"),
                Rejection("bad key", "1", "invalid-key", "bad key"))
    labelling = replace(LABELLING, rejected=rejected)
    result = PublishResult(written=True, rejected=("nvidia.com/z",))
    assert rejections(labelling, result) == {"invalid-value": 2, "invalid-key": 1,
                                             "api-server": 1}
    assert rejections(LABELLING, PublishResult(written=True)) == {}


def test_the_node_report_counts_gpus_by_model_nvml_and_the_resource_manager() -> None:
    metrics = Metrics(version="test")
    report_node(metrics, H100)
    assert sample(metrics, "gfd_gpus", model="NVIDIA H100 80GB HBM3") == 8.0
    assert sample(metrics, "gfd_nvml_up") == 1.0
    assert sample(metrics, "gfd_gpus_unhealthy") == 0.0
    assert sample(metrics, "gfd_resource_manager", manager="device-plugin") == 1.0
    assert sample(metrics, "gfd_resource_manager", manager="dra") == 0.0


def test_degraded_facts_are_counted_per_fact_and_state() -> None:
    held = Degraded(fact="clocks", call="nvmlDeviceGetMaxClockInfo", error="Unknown Error",
                    held=True)
    unknown = replace(held, held=False)
    gpus = (replace(H100.gpus[0], degraded=(held,)), replace(H100.gpus[1], degraded=(held,)),
            replace(H100.gpus[2], degraded=(unknown,)), *H100.gpus[3:])
    recorder = Recorder()
    report_node(recorder, replace(H100, gpus=gpus))
    [(_, (counts,), _)] = [c for c in recorder.calls if c[0] == "degraded"]
    assert counts == {("clocks", "held"): 2, ("clocks", "unknown"): 1}
