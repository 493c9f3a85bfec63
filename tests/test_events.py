"""Events on the Node: what changed (pure), client-go's correlator with an injected clock,
and the sender over the real client against the fake API server."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.timing import Clock

from gfd.errors import ApiError
from gfd.events import (
    AGGREGATE_MAX,
    BURST,
    COMBINED,
    MESSAGE_MAX,
    REFILL,
    Answers,
    NodeEvent,
    NodeEvents,
    Recorder,
    Request,
    Sender,
    gpu_events,
    label_event,
)
from gfd.kube import Kube
from gfd.sinks.base import Change, diff
from tests.fakes.apiserver import FakeApiServer
from tests.helpers.builders import A100_1G5, A100_3G20, gpu, mig_gpu, migs, snapshot
from tests.helpers.process import wait_for


def _reasons(events: list[NodeEvent]) -> list[tuple[str, str]]:
    return [(e.type, e.reason) for e in events]


# -- what changed -------------------------------------------------------------------------


def test_label_event_lists_added_changed_and_removed_with_values() -> None:
    before = {"nvidia.com/gpu.count": "8", "nvidia.com/mig.strategy": "none",
              "nvidia.com/gpu.product": "A100"}
    after = {"nvidia.com/gpu.count": "7", "nvidia.com/mig.strategy": "none",
             "nvidia.com/gpu.unhealthy": "1"}
    event = label_event(diff(before, after), after, before)
    assert event is not None
    assert (event.type, event.reason) == ("Normal", "GpuLabelsChanged")
    assert event.message == ("1 added, 1 changed, 1 removed: +nvidia.com/gpu.unhealthy=1 "
                             "~nvidia.com/gpu.count=8->7 -nvidia.com/gpu.product")


def test_label_event_is_none_when_nothing_changed() -> None:
    assert label_event(Change(), {"a": "b"}, {"a": "b"}) is None


def test_label_event_message_stays_within_the_limit_and_says_how_many_more() -> None:
    after = {f"nvidia.com/gpu.key-{i:03d}": "v" * 40 for i in range(200)}
    event = label_event(diff({}, after), after, {})
    assert event is not None
    assert len(event.message.encode()) <= MESSAGE_MAX
    assert event.message.startswith("200 added, 0 changed, 0 removed: +nvidia.com/gpu.key-000=")
    shown = event.message.count("+nvidia.com/gpu.key-")
    assert 0 < shown < 200
    assert event.message.endswith(f"... and {200 - shown} more")


def test_a_gpu_gone_from_nvml_is_a_warning_gpu_lost() -> None:
    before = snapshot(gpu(0), gpu(1))
    events = gpu_events(before, snapshot(gpu(0)))
    assert _reasons(events) == [("Warning", "GpuLost")]
    assert "GPU 1 (NVIDIA A100-SXM4-40GB, GPU-00000001) is gone" in events[0].message
    assert "1 of 2 GPUs left" in events[0].message


def test_a_gpu_answering_gpu_is_lost_is_gpu_lost_and_an_xid_is_gpu_unhealthy() -> None:
    before = snapshot(gpu(0), gpu(1))
    after = snapshot(gpu(0, error="GPU is lost"),
                     gpu(1, error="Xid 79: GPU has fallen off the bus"))
    events = gpu_events(before, after)
    assert _reasons(events) == [("Warning", "GpuLost"), ("Warning", "GpuUnhealthy")]
    assert "GPU 1" in events[1].message and "Xid 79" in events[1].message


def test_a_gpu_that_returns_is_normal_gpu_recovered() -> None:
    lost = snapshot(gpu(0, error="GPU is lost"), gpu(1))
    assert _reasons(gpu_events(lost, snapshot(gpu(0), gpu(1)))) == [("Normal", "GpuRecovered")]
    gone = snapshot(gpu(1))
    events = gpu_events(gone, snapshot(gpu(0), gpu(1)))
    assert _reasons(events) == [("Normal", "GpuRecovered")]
    assert "GPU 0" in events[0].message and "is back" in events[0].message


def test_a_mig_reconfiguration_names_the_layouts() -> None:
    before = snapshot(mig_gpu(0, migs(7, **A100_1G5)))
    after = snapshot(mig_gpu(0, migs(2, **A100_3G20)))
    events = gpu_events(before, after)
    assert _reasons(events) == [("Normal", "MigReconfigured")]
    assert events[0].message.endswith(
        "MIG enabled, 7 devices (7x 1g.5gb) -> MIG enabled, 2 devices (2x 3g.20gb)")
    disabled = snapshot(gpu(0, mig_capable=True))
    assert "-> MIG disabled" in gpu_events(after, disabled)[0].message


def test_the_first_read_reports_only_gpus_already_unhealthy() -> None:
    assert gpu_events(None, snapshot(gpu(0), gpu(1))) == []
    events = gpu_events(None, snapshot(gpu(0), gpu(1, error="GPU is lost")))
    assert _reasons(events) == [("Warning", "GpuLost")]


def test_a_read_without_nvml_says_nothing_about_the_gpus() -> None:
    down = dataclasses.replace(snapshot(), nvml_available=False)
    assert gpu_events(snapshot(gpu(0)), down) == []


def test_an_unchanged_node_gives_no_event() -> None:
    assert gpu_events(snapshot(gpu(0), gpu(1)), snapshot(gpu(0), gpu(1))) == []


# -- the correlator -----------------------------------------------------------------------

LOST = NodeEvent(type="Warning", reason="GpuLost", message="GPU 1 is gone")


def test_the_first_event_is_a_create_on_the_node_as_node_problem_detector_records() -> None:
    request = Recorder("node-a", clock=Clock(), wall=lambda: 1_700_000_000.5).record(LOST)
    assert request is not None and request.verb == "create"
    body = request.body
    assert body["metadata"]["namespace"] == "default"
    assert body["metadata"]["name"].startswith("node-a.")
    assert body["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}
    assert body["source"] == {"component": "gfd", "host": "node-a"}
    assert (body["type"], body["reason"], body["message"], body["count"]) == (
        "Warning", "GpuLost", "GPU 1 is gone", 1)
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2023-11-14T22:13:20Z"


def test_a_repeat_patches_the_count_of_the_same_event() -> None:
    clock = Clock()
    recorder = Recorder("node-a", clock=clock, wall=lambda: 1_700_000_000.0 + clock.now)
    first = recorder.record(LOST)
    clock.now += 30
    second = recorder.record(LOST)
    assert first is not None and second is not None
    assert second.verb == "patch" and second.name == first.body["metadata"]["name"]
    assert second.body == {"count": 2, "lastTimestamp": "2023-11-14T22:30:30Z",
                           "message": "GPU 1 is gone"}
    assert second.recreate is not None and second.recreate["count"] == 2
    assert second.recreate["firstTimestamp"] == first.body["firstTimestamp"]


def test_each_reason_gets_a_burst_then_one_request_per_refill_interval() -> None:
    clock = Clock()
    recorder = Recorder("node-a", clock=clock)
    sent = [recorder.record(LOST) for _ in range(BURST + 20)]
    assert sum(r is not None for r in sent) == BURST
    other = NodeEvent(type="Normal", reason="GpuRecovered", message="GPU 1 is back")
    assert recorder.record(other) is not None  # another reason has its own bucket
    clock.now += REFILL / 2
    assert recorder.record(LOST) is None
    clock.now += REFILL / 2
    allowed = recorder.record(LOST)
    assert allowed is not None and allowed.verb == "patch"
    # throttled repeats were counted: the allowed patch carries the true count
    assert allowed.body["count"] == BURST + 20 + 2
    assert recorder.record(LOST) is None


def test_more_than_ten_similar_messages_fold_into_one_combined_event() -> None:
    clock = Clock()
    recorder = Recorder("node-a", clock=clock)
    requests = []
    for i in range(AGGREGATE_MAX + 5):
        clock.now += 1
        requests.append(recorder.record(NodeEvent(type="Normal", reason="GpuLabelsChanged",
                                                  message=f"change {i}")))
    assert all(r is not None for r in requests)
    distinct = [r for r in requests[:AGGREGATE_MAX] if r is not None]
    assert [r.verb for r in distinct] == ["create"] * AGGREGATE_MAX
    folded = [r for r in requests[AGGREGATE_MAX:] if r is not None]
    assert folded[0].verb == "create"
    assert folded[0].body["message"] == COMBINED + f"change {AGGREGATE_MAX}"
    assert [r.verb for r in folded[1:]] == ["patch"] * 4
    assert {r.name for r in folded} == {folded[0].name}
    assert folded[-1].body["message"] == COMBINED + f"change {AGGREGATE_MAX + 4}"
    assert folded[-1].body["count"] == 5


def test_similar_messages_are_no_longer_folded_after_the_window() -> None:
    clock = Clock()
    recorder = Recorder("node-a", clock=clock)
    for i in range(AGGREGATE_MAX + 1):
        recorder.record(NodeEvent(type="Normal", reason="GpuLabelsChanged", message=f"c{i}"))
    clock.now += 601
    request = recorder.record(NodeEvent(type="Normal", reason="GpuLabelsChanged",
                                        message="fresh"))
    assert request is not None and request.body["message"] == "fresh"


# -- NodeEvents: the loop's side ----------------------------------------------------------


class Collect:
    def __init__(self) -> None:
        self.requests: list[Request] = []

    def put(self, request: Request) -> None:
        self.requests.append(request)

    def close(self) -> None:
        pass


def test_publishing_failing_is_one_warning_until_it_recovers() -> None:
    out, counted = Collect(), []
    events = NodeEvents(Recorder("node-a", clock=Clock()), out,
                        report=lambda reason, result: counted.append((reason, result)))
    for _ in range(5):
        events.failed("publish", "patch node node-a: HTTP 503 ServiceUnavailable")
    events.failed("discovery", "NVML: driver not loaded")
    labels = {"nvidia.com/gpu.count": "1"}
    events.published(snapshot(gpu(0)), labels, diff({}, labels))
    events.published(snapshot(gpu(0)), labels, Change())
    got = [(r.body["type"], r.body["reason"]) for r in out.requests]
    assert got == [("Warning", "LabelPublishFailing"), ("Normal", "LabelPublishRecovered"),
                   ("Normal", "GpuLabelsChanged")]
    assert "HTTP 503" in out.requests[0].body["message"]
    assert counted == []


def test_a_flapping_gpu_is_throttled_and_counted() -> None:
    out, counted = Collect(), []
    clock = Clock()
    events = NodeEvents(Recorder("node-a", clock=clock), out,
                        report=lambda reason, result: counted.append((reason, result)))
    good, bad = snapshot(gpu(0), gpu(1)), snapshot(gpu(0), gpu(1, error="GPU is lost"))
    events.published(good, {}, Change())
    for _ in range(100):
        clock.now += 0.3
        events.published(bad, {}, Change())
        clock.now += 0.3
        events.published(good, {}, Change())
    assert len(out.requests) == 2 * BURST
    assert {r.body.get("reason") for r in out.requests if r.verb == "create"} == {
        "GpuLost", "GpuRecovered"}
    assert sum(r.verb == "create" for r in out.requests) == 2
    assert counted.count(("GpuLost", "throttled")) == 100 - BURST


# -- the sender, over the real client -----------------------------------------------------


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[FakeApiServer, Kube]]:
    with FakeApiServer() as server:
        server.add_node("node-a")
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0)
        yield server, kube
        kube.close()


def _send(kube: Kube, *requests: Request, report: Any = None) -> None:
    sender = Sender(kube, "node-a", report=report)
    for request in requests:
        sender.put(request)
    assert sender.flush()
    sender.close()


def test_sender_creates_then_patches_the_event_with_the_nodes_uid(
        api: tuple[FakeApiServer, Kube]) -> None:
    server, kube = api
    recorder, counted = Recorder("node-a"), []
    _send(kube, *(r for r in (recorder.record(LOST), recorder.record(LOST)) if r),
          report=lambda reason, result: counted.append(result))
    [event] = server.events("default")
    uid = server.node("node-a")["metadata"]["uid"]
    assert event["involvedObject"]["uid"] == uid
    assert (event["reason"], event["count"]) == ("GpuLost", 2)
    assert counted == ["created", "patched"]


def test_sender_uses_the_node_name_as_uid_where_it_may_not_read_the_node(
        api: tuple[FakeApiServer, Kube]) -> None:
    server, kube = api
    server.forbid("get", "nodes")
    request = Recorder("node-a").record(LOST)
    assert request is not None
    _send(kube, request)
    [event] = server.events("default")
    assert event["involvedObject"]["uid"] == "node-a"


def test_a_patch_of_an_expired_event_creates_it_again(api: tuple[FakeApiServer, Kube]) -> None:
    server, kube = api
    recorder = Recorder("node-a")
    recorder.record(LOST)  # its create never reached the server
    patch = recorder.record(LOST)
    assert patch is not None and patch.verb == "patch"
    _send(kube, patch)
    [event] = server.events("default")
    assert (event["count"], event["metadata"]["name"]) == (2, patch.name)


def test_a_refused_event_is_dropped_once_and_counted(api: tuple[FakeApiServer, Kube],
                                                     caplog: pytest.LogCaptureFixture) -> None:
    server, kube = api
    server.forbid("create", "events")
    recorder, counted = Recorder("node-a"), []
    requests = [r for r in (recorder.record(LOST), recorder.record(
        NodeEvent(type="Normal", reason="GpuRecovered", message="back"))) if r]
    _send(kube, *requests, report=lambda reason, result: counted.append((reason, result)))
    assert counted == [("GpuLost", "failed"), ("GpuRecovered", "failed")]
    assert server.events() == []
    warnings = [r for r in caplog.records if "cannot record Event" in r.getMessage()]
    assert len(warnings) == 1 and "forbidden" in warnings[0].getMessage()


def test_a_transient_failure_is_retried(api: tuple[FakeApiServer, Kube]) -> None:
    server, kube = api
    server.inject(503, 1, method="POST", path_contains="/events")
    request = Recorder("node-a").record(LOST)
    assert request is not None
    _send(kube, request)
    assert [e["reason"] for e in server.events()] == ["GpuLost"]


class Stuck:
    """An API whose every request waits until released."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()

    def get_node(self, name: str) -> dict[str, Any]:
        self.release.wait(5)
        raise ApiError("gone", status=404)

    def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return body

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return patch


def test_a_full_queue_drops_without_blocking() -> None:
    api, counted = Stuck(), []
    sender = Sender(api, "node-a", size=2,
                    report=lambda reason, result: counted.append((reason, result)))
    recorder = Recorder("node-a", clock=Clock())
    for i in range(6):
        request = recorder.record(NodeEvent(type="Warning", reason="GpuLost", message=f"{i}"))
        assert request is not None
        sender.put(request)
    assert ("GpuLost", "dropped") in counted
    assert counted.count(("GpuLost", "dropped")) >= 3
    api.release.set()
    assert sender.flush()
    sender.close()


def test_with_the_sinks_answers_a_failing_event_waits_for_the_sinks_next_answer(
        tmp_path: Path) -> None:
    """Events share the sink's backoff: after a 503, no Event request until a request of
    the client they share with the sink is answered again (then the Event goes out)."""
    with FakeApiServer() as server:
        server.add_node("node-a")
        answers = Answers()
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
                    on_request=answers.seen)
        sender = Sender(kube, "node-a", answers=answers)
        try:
            server.inject(503, None, path_contains="/events")
            request = Recorder("node-a").record(LOST)
            assert request is not None
            sender.put(request)
            wait_for(lambda: server.count("POST", path_contains="/events") == 1)
            assert not sender.flush(timeout=0.5), "parked, not given up"
            assert server.count("POST", path_contains="/events") == 1, "no retry of its own"
            server.clear_faults()
            kube.get_node("node-a")  # the sink's next request, answered
            assert sender.flush(timeout=10)
            assert [e["reason"] for e in server.events()] == ["GpuLost"]
            assert server.count("POST", path_contains="/events") == 2
        finally:
            sender.close()
            kube.close()


def test_closing_during_an_outage_tries_once_and_drops_the_rest_in_bounded_time(
        tmp_path: Path) -> None:
    """A one-shot exiting while the API server refuses work: one more try, the rest dropped
    and counted, and close() returns at once (bounded by its grace either way)."""
    with FakeApiServer() as server:
        server.add_node("node-a")
        answers, counted = Answers(), []
        kube = Kube(kubeconfig=str(server.write_kubeconfig(tmp_path / "kubeconfig")), qps=0,
                    on_request=answers.seen)
        sender = Sender(kube, "node-a", answers=answers,
                        report=lambda reason, result: counted.append(result))
        server.inject(503, None)
        recorder = Recorder("node-a")  # the sender's clock: monotonic time
        for i in range(5):
            request = recorder.record(NodeEvent(type="Warning", reason="GpuLost",
                                                message=f"{i}"))
            assert request is not None
            sender.put(request)
        wait_for(lambda: server.count() >= 1)
        started = time.monotonic()
        sender.close(grace=30)  # returns once the queue is handled, not after the grace
        took = time.monotonic() - started
        kube.close()
    assert took < 15, took
    assert counted.count("failed") == 1 and counted.count("dropped") == 4, counted
