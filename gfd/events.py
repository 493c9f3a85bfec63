"""Kubernetes Events on the Node: what gfd saw change (its labels, a GPU lost or back, a MIG
reconfiguration, publishing failing or recovered), recorded as core/v1 Events the way
client-go's event recorder and node-problem-detector record them.

Three parts, each testable alone:

* :func:`gpu_events` and :func:`label_event` (pure): what changed between two snapshots or
  in one publish, as :class:`NodeEvent` values.
* :class:`Recorder` (an injected clock, no I/O): client-go's ``EventCorrelator``. More than
  ``AGGREGATE_MAX`` events of one reason with different messages within
  ``AGGREGATE_WINDOW`` fold into one "(combined from similar events)" Event; a repeat is a
  PATCH of the existing Event's ``count`` and ``lastTimestamp``; each reason gets a burst
  of ``BURST`` requests, then one every ``REFILL`` seconds, so a flapping GPU cannot flood
  the API server. It turns each event into a create or a patch, or nothing.
* :class:`Sender`: a thread and a bounded queue between the loop and the API server, so
  sending never blocks or fails a label cycle; a failure is logged once and counted. Where
  the Events go to the API server the sink publishes to, they share its backoff
  (:class:`Answers`): after a request fails for a while (no answer, 5xx, 429) nothing more
  is sent until one of the sink's own requests -- paced by the agent's backoff -- is
  answered again; an outage costs no Event request beyond the first.

:class:`NodeEvents` ties them to the agent loop (``parts.EventRecorder``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from gfd.backoff import backoff
from gfd.errors import ApiError
from gfd.logs import Once
from gfd.sinks.base import Change
from gfd.snapshot import Gpu, Snapshot

log = logging.getLogger(__name__)

NAMESPACE = "default"
"""Where Events about a Node go (a Node has no namespace): node-problem-detector's and the
kubelet's choice, so ``kubectl describe node`` and event pipelines find them."""
COMPONENT = "gfd"
"""``source.component`` and ``reportingComponent`` of every Event."""

BURST = 25
"""Requests per reason before throttling starts (client-go's spam filter burst)."""
REFILL = 300.0
"""Seconds per further request per reason once the burst is spent (client-go: 5 minutes)."""
AGGREGATE_MAX = 10
"""Distinct messages of one reason within ``AGGREGATE_WINDOW`` before they fold into one."""
AGGREGATE_WINDOW = 600.0
"""Seconds (client-go: 10 minutes)."""
COMBINED = "(combined from similar events): "
CACHE = 256
"""Events remembered for counting repeats (least recently seen forgotten first)."""
MESSAGE_MAX = 1024
"""Bytes of an Event's message (events.k8s.io/v1's ``note`` limit; core/v1 takes more)."""
QUEUE = 64
"""Requests waiting to be sent; more are dropped (and counted) rather than held."""
MAX_AGE = 900.0
"""Seconds a request is retried before it is dropped (an API outage longer than this)."""
RETRY_CAP = 60.0
"""Longest pause between retries of a failing request."""
CLOSE_GRACE = 5.0
"""Seconds ``Sender.close`` gives the queued requests (gfd stopping: the last Events)."""

EventType = Literal["Normal", "Warning"]

# Reasons (UpperCamelCase, like node-problem-detector's).
LABELS_CHANGED = "GpuLabelsChanged"
GPU_LOST = "GpuLost"
GPU_UNHEALTHY = "GpuUnhealthy"
GPU_RECOVERED = "GpuRecovered"
MIG_RECONFIGURED = "MigReconfigured"
PUBLISH_FAILING = "LabelPublishFailing"
PUBLISH_RECOVERED = "LabelPublishRecovered"
REASONS: tuple[tuple[str, EventType, str], ...] = (
    (LABELS_CHANGED, "Normal", "gfd's labels on the node changed (what was added, changed "
                               "and removed)"),
    (GPU_LOST, "Warning", "a GPU is gone: NVML no longer lists it, or answers 'GPU is lost'"),
    (GPU_UNHEALTHY, "Warning", "a GPU answered a fatal error or a critical Xid"),
    (GPU_RECOVERED, "Normal", "a lost or unhealthy GPU is back and healthy"),
    (MIG_RECONFIGURED, "Normal", "a GPU's MIG mode or MIG devices changed"),
    (PUBLISH_FAILING, "Warning", "gfd cannot publish its labels (the last good ones stay)"),
    (PUBLISH_RECOVERED, "Normal", "gfd publishes its labels again"),
)
"""Every reason gfd records, its type and what it means (for the docs)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeEvent:
    """One thing worth an Event on the Node."""

    type: EventType
    reason: str
    message: str


# -- what changed (pure) ------------------------------------------------------------------


def _clip(text: str, limit: int = MESSAGE_MAX) -> str:
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", "ignore") + "..."


def label_event(change: Change, labels: Mapping[str, str],
                before: Mapping[str, str]) -> NodeEvent | None:
    """``GpuLabelsChanged`` for a publish that changed something, None when nothing changed.
    The message says how many were added, changed and removed, then each key (with its new
    value, or old -> new), as many as fit within ``MESSAGE_MAX`` bytes and "and N more"."""
    if change.empty:
        return None
    head = (f"{len(change.added)} added, {len(change.changed)} changed, "
            f"{len(change.removed)} removed:")
    items = ([f"+{k}={labels.get(k, '')}" for k in change.added]
             + [f"~{k}={before.get(k, '')}->{labels.get(k, '')}" for k in change.changed]
             + [f"-{k}" for k in change.removed])
    message = head
    for n, item in enumerate(items):
        rest = len(items) - n - 1
        tail = f" ... and {rest} more" if rest else ""
        candidate = f"{message} {item}"
        if len((candidate + tail).encode()) > MESSAGE_MAX:
            message = _clip(f"{message} ... and {len(items) - n} more")
            break
        message = candidate
    return NodeEvent(type="Normal", reason=LABELS_CHANGED, message=message)


def _gpu_key(gpu: Gpu) -> str:
    return gpu.uuid or gpu.pci_bus_id or f"index {gpu.index}"


def _gpu_name(gpu: Gpu) -> str:
    what = f"GPU {gpu.index}"
    if gpu.name:
        what += f" ({gpu.name}"
        what += f", {gpu.uuid})" if gpu.uuid else ")"
    elif gpu.uuid:
        what += f" ({gpu.uuid})"
    return what


def _lost(error: str) -> bool:
    return "lost" in error.lower()


def _mig_layout(gpu: Gpu) -> str:
    if not gpu.mig_enabled:
        return "MIG disabled"
    counts: dict[str, int] = {}
    for device in gpu.mig_devices:
        name = device.profile_name.removeprefix("MIG ") or "unnamed"
        counts[name] = counts.get(name, 0) + 1
    layout = ", ".join(f"{n}x {p}" for p, n in sorted(counts.items()))
    return f"MIG enabled, {len(gpu.mig_devices)} devices" + (f" ({layout})" if layout else "")


def gpu_events(before: Snapshot | None, after: Snapshot) -> list[NodeEvent]:
    """GPUs lost, unhealthy, back, or MIG-reconfigured going from ``before`` to ``after``.

    ``before`` None (gfd's first read): only GPUs already unhealthy. A read in which NVML
    did not answer says nothing about the GPUs and gives no event (the caller keeps the
    earlier snapshot to compare the next one with)."""
    if not after.nvml_available:
        return []
    events: list[NodeEvent] = []
    now = {_gpu_key(g): g for g in after.gpus}
    if before is None or not before.nvml_available:
        for gpu in after.gpus:
            if gpu.error is not None:
                events.append(_unhealthy(gpu, gpu.error))
        return events
    pairs = _pair(before.gpus, after.gpus)
    for old in sorted(before.gpus, key=lambda g: g.index):
        new = pairs.get(_gpu_key(old))
        if new is None:
            if old.error is None or not _lost(old.error):
                events.append(NodeEvent(
                    type="Warning", reason=GPU_LOST,
                    message=f"{_gpu_name(old)} is gone: NVML no longer lists it "
                            f"({len(after.gpus)} of {len(before.gpus)} GPUs left)"))
            continue
        if new.error is not None and new.error != old.error:
            events.append(_unhealthy(new, new.error))
        elif new.error is None and old.error is not None:
            events.append(NodeEvent(type="Normal", reason=GPU_RECOVERED,
                                    message=f"{_gpu_name(new)} is healthy again"))
        elif new.error is None and _mig_layout(old) != _mig_layout(new):
            events.append(NodeEvent(
                type="Normal", reason=MIG_RECONFIGURED,
                message=f"{_gpu_name(new)}: {_mig_layout(old)} -> {_mig_layout(new)}"))
    paired = {_gpu_key(g) for g in pairs.values()}
    for key, new in sorted(now.items(), key=lambda kv: kv[1].index):
        if key not in paired:
            if new.error is not None:
                events.append(_unhealthy(new, new.error))
            else:
                events.append(NodeEvent(type="Normal", reason=GPU_RECOVERED,
                                        message=f"{_gpu_name(new)} is back "
                                                f"({len(after.gpus)} GPUs)"))
    return events


def _pair(before: tuple[Gpu, ...], after: tuple[Gpu, ...]) -> dict[str, Gpu]:
    """Each earlier GPU's key -> the same GPU now: by uuid, else PCI bus id, else index (a
    lost GPU may answer neither uuid nor bus id)."""
    pairs: dict[str, Gpu] = {}
    free = list(after)
    for match in (lambda g: g.uuid, lambda g: g.pci_bus_id, lambda g: f"#{g.index}"):
        for old in before:
            if _gpu_key(old) in pairs or not match(old):
                continue
            new = next((g for g in free if match(g) == match(old)), None)
            if new is not None:
                pairs[_gpu_key(old)] = new
                free.remove(new)
    return pairs


def _unhealthy(gpu: Gpu, error: str) -> NodeEvent:
    reason = GPU_LOST if _lost(error) else GPU_UNHEALTHY
    return NodeEvent(type="Warning", reason=reason,
                     message=_clip(f"{_gpu_name(gpu)}: {error}; it is left out of the "
                                   "resource labels and counted in gpu.unhealthy"))


# -- client-go's correlator (an injected clock, no I/O) ----------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """What the recorder asks the API server for: create an Event, or patch one."""

    verb: Literal["create", "patch"]
    name: str
    reason: str
    body: dict[str, Any]
    """The whole Event for a create; ``count``, ``lastTimestamp`` and ``message`` for a
    patch. ``involvedObject.uid`` is filled in by the sender."""
    recreate: dict[str, Any] | None = None
    """For a patch: the whole Event with the new count, created when the patch finds it
    gone (Events expire after an hour)."""
    queued: float = 0.0
    """Monotonic time it was made (a request older than ``MAX_AGE`` is dropped)."""


@dataclass(slots=True)
class _Seen:
    name: str
    count: int
    created: dict[str, Any]
    """The Event as created: a patch that finds it gone (expired) creates it again."""


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float


def _stamp(wall: float) -> str:
    return datetime.fromtimestamp(wall, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class Recorder:
    """client-go's EventCorrelator for one Node: aggregation, counting, throttling."""

    node: str
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    burst: int = BURST
    refill: float = REFILL
    _similar: dict[str, tuple[float, set[str]]] = field(default_factory=dict, init=False)
    _seen: OrderedDict[tuple[str, str, str], _Seen] = field(
        default_factory=OrderedDict, init=False)
    _buckets: dict[str, _Bucket] = field(default_factory=dict, init=False)
    _serial: int = field(default=0, init=False)

    def record(self, event: NodeEvent) -> Request | None:
        """The request for this event, or None when its reason is throttled (it is still
        counted: the next request for it carries the count)."""
        now, wall = self.clock(), self.wall()
        event = self._aggregate(event, now)
        request = self._observe(event, wall)
        if not self._allow(event.reason, now):
            return None
        return replace(request, queued=now)

    def _aggregate(self, event: NodeEvent, now: float) -> NodeEvent:
        """More than AGGREGATE_MAX distinct messages of one reason and type within the
        window: one combined event (its key leaves the message out)."""
        key = f"{event.type}/{event.reason}"
        started, messages = self._similar.get(key, (now, set()))
        if now - started > AGGREGATE_WINDOW:
            started, messages = now, set()
        messages.add(event.message)
        self._similar[key] = (started, messages)
        if len(messages) <= AGGREGATE_MAX:
            return event
        return replace(event, message=_clip(COMBINED + event.message))

    def _observe(self, event: NodeEvent, wall: float) -> Request:
        """A new Event, or a patch counting a repeat of one already recorded."""
        combined = event.message.startswith(COMBINED)
        key = (event.type, event.reason, "" if combined else event.message)
        stamp = _stamp(wall)
        seen = self._seen.get(key)
        if seen is not None:
            self._seen.move_to_end(key)
            seen.count += 1
            patch = {"count": seen.count, "lastTimestamp": stamp, "message": event.message}
            return Request(verb="patch", name=seen.name, reason=event.reason, body=patch,
                           recreate={**seen.created, **patch})
        self._serial += 1
        # client-go names an Event <object>.<unix nanoseconds in hex>; the serial keeps two
        # events of one nanosecond apart
        name = f"{self.node}.{int(wall * 1e9) + self._serial:x}"
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": self.node},
            "reason": event.reason, "message": event.message, "type": event.type,
            "source": {"component": COMPONENT, "host": self.node},
            "reportingComponent": COMPONENT, "reportingInstance": self.node,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        self._seen[key] = _Seen(name=name, count=1, created=body)
        while len(self._seen) > CACHE:
            self._seen.popitem(last=False)
        return Request(verb="create", name=name, reason=event.reason, body=body)

    def _allow(self, reason: str, now: float) -> bool:
        """A token bucket per reason: ``burst`` at once, then one per ``refill`` seconds."""
        bucket = self._buckets.get(reason)
        if bucket is None:
            bucket = self._buckets[reason] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) / self.refill)
        bucket.stamp = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True


# -- sending ------------------------------------------------------------------------------


class EventApi(Protocol):
    """What sending Events needs of the API server (``kube.Kube``)."""

    def get_node(self, name: str) -> dict[str, Any]: ...

    def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def patch_event(self, namespace: str, name: str,
                    patch: dict[str, Any]) -> dict[str, Any]: ...


Report = Callable[[str, str], None]
"""``(reason, result)`` for metrics: created, patched, throttled, dropped, failed."""


def answered(code: str) -> bool:
    """The API server took the request (an HTTP status below 500, not 429): it is up."""
    return code.isdigit() and int(code) < 500 and code != "429"


class Answers:
    """The requests the API server answered through the client the Events share with the
    sink (fed by ``Kube``'s ``on_request``, on any thread): a failing Event waits for the next
    one, so Events retry on the sink's backoff, not a clock of their own."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._count = 0
        self._woken = False

    def seen(self, verb: str, code: str) -> None:
        """``Kube``'s ``on_request``: one request finished with ``code``."""
        if answered(code):
            with self._cond:
                self._count += 1
                self._cond.notify_all()

    def mark(self) -> int:
        """How many were answered so far (before an attempt: what to wait beyond)."""
        with self._cond:
            return self._count

    def wait_beyond(self, mark: int) -> None:
        """Until a request is answered after ``mark`` was taken, or :meth:`wake`."""
        with self._cond:
            self._cond.wait_for(lambda: self._count > mark or self._woken)

    def wake(self) -> None:
        """Stop every wait for good (the sender is closing)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()


class Sender:
    """One thread sending the recorder's requests from a bounded queue.

    ``put`` never blocks: a full queue drops the request (logged once, counted). A request
    the API server refuses for good (403, 422...) is dropped at once; one that fails for
    a while (no connection, 5xx, 429) is tried again -- with ``answers`` (the sink's client),
    once the sink's next request is answered; without, with a backoff of its own -- and
    dropped (counted) once older than ``MAX_AGE``. A patch whose Event is gone (404: Events
    expire after an hour) creates it again."""

    def __init__(self, api: EventApi, node: str, *, report: Report | None = None,
                 clock: Callable[[], float] = time.monotonic, size: int = QUEUE,
                 answers: Answers | None = None,
                 node_uid: Callable[[], str] | None = None) -> None:
        self._api = api
        self._known_uid = node_uid
        """Where the Node's uid is known without a request (the Node sink's last read; the
        node's name in a mode that may not read Nodes); "" from it: read the Node."""
        self._node = node
        self._report = report
        self._clock = clock
        self._answers = answers
        self._given_up = False
        """Closing, and a request failed for want of the API server: drop the rest."""
        self._queue: queue.Queue[Request | None] = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._closing = False
        self._uid = ""
        self._errors = Once(log)
        self._thread = threading.Thread(target=self._run, name="gfd-events", daemon=True)
        self._thread.start()

    def put(self, request: Request) -> None:
        try:
            self._queue.put_nowait(request)
        except queue.Full:
            self._errors.warning("Event %s not recorded: %d Events already wait to be sent "
                                 "(the API server is slow or unreachable)", request.reason,
                                 self._queue.maxsize, key="full")
            self._count(request.reason, "dropped")

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued request is sent or given up (for tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._queue.unfinished_tasks

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """Send what is queued (each request tried once more at most) for up to ``grace``
        seconds, then stop."""
        self._closing = True
        if self._answers is not None:
            self._answers.wake()
        try:
            self._queue.put(None, timeout=grace)
        except queue.Full:
            pass
        self._thread.join(timeout=grace)
        self._stop.set()
        self._thread.join(timeout=1.0)

    def _count(self, reason: str, result: str) -> None:
        if self._report is not None:
            self._report(reason, result)

    def _run(self) -> None:
        while not self._stop.is_set():
            request = self._queue.get()
            try:
                if request is None:
                    return
                self._send(request)
            finally:
                self._queue.task_done()

    def _node_uid(self) -> str:
        """The Node's uid; its name where gfd may not read the Node (as the kubelet records
        its own Events): ``kubectl describe node`` finds Events under either. Known
        without a request where the sink read the Node (``node_uid``)."""
        known = self._known_uid() if self._known_uid is not None else ""
        if known:
            return known
        if not self._uid:
            try:
                uid = self._api.get_node(self._node).get("metadata", {}).get("uid")
                self._uid = str(uid or self._node)
            except ApiError as exc:
                if exc.status is None or exc.retriable:
                    raise
                self._uid = self._node
        return self._uid

    def _send(self, request: Request) -> None:
        failures = 0
        while not self._stop.is_set():
            # a retry (after it waited for the API server) that came too late: dropped
            if self._given_up or (failures and self._clock() - request.queued > MAX_AGE):
                self._errors.warning("Event %s not recorded: the API server did not take it "
                                     "in time", request.reason, key="late")
                self._count(request.reason, "dropped")
                return
            try:
                self._attempt(request)
                if self._errors.reset():
                    log.info("Events are recorded again")
                return
            except ApiError as exc:
                # taken after the failure: this attempt's own answered requests (the Node's
                # uid) are no sign the API server takes Events again
                mark = self._answers.mark() if self._answers is not None else 0
                failures += 1
                self._errors.warning("cannot record Event %s on node %s: %s", request.reason,
                                     self._node, exc, key="send")
                transient = exc.status is None or exc.retriable
                if not transient or self._closing:
                    self._given_up = self._closing and transient
                    self._count(request.reason, "failed")
                    return
                if self._answers is not None:  # the sink's backoff paces the next try
                    self._answers.wait_beyond(mark)
                else:
                    self._stop.wait(backoff(failures, RETRY_CAP))

    def _attempt(self, request: Request) -> None:
        uid = self._node_uid()
        if request.verb == "patch":
            try:
                self._api.patch_event(NAMESPACE, request.name, request.body)
                self._count(request.reason, "patched")
                return
            except ApiError as exc:
                if exc.status != 404:
                    raise
            assert request.recreate is not None
            create = request.recreate
        else:
            create = request.body
        create = {**create, "involvedObject": {**create["involvedObject"], "uid": uid}}
        try:
            self._api.create_event(NAMESPACE, create)
        except ApiError as exc:
            if exc.status != 409:  # already there: a retry whose first try got through
                raise
        self._count(request.reason, "created")


# -- the agent's recorder -------------------------------------------------------------------


class Sending(Protocol):
    def put(self, request: Request) -> None: ...
    def close(self) -> None: ...


class NodeEvents:
    """What the agent loop reports to (``parts.EventRecorder``): each cycle's snapshot and
    label change, and each failure; records the Events they call for."""

    def __init__(self, recorder: Recorder, sender: Sending, *,
                 report: Report | None = None) -> None:
        self._recorder = recorder
        self._sender = sender
        self._report = report
        self._before: Snapshot | None = None
        self._labels: dict[str, str] = {}
        self._failing = False

    def published(self, snapshot: Snapshot, labels: Mapping[str, str], change: Change) -> None:
        """A cycle published (or found unchanged) ``labels`` read from ``snapshot``."""
        events = []
        if self._failing:
            self._failing = False
            events.append(NodeEvent(type="Normal", reason=PUBLISH_RECOVERED,
                                    message="labels are published again"))
        events += gpu_events(self._before, snapshot)
        # the target's own old values where the sink read them (the first change too)
        labelled = label_event(change, labels, {**self._labels, **dict(change.previous)})
        if labelled is not None:
            events.append(labelled)
        if snapshot.nvml_available or self._before is None:
            self._before = snapshot
        self._labels = dict(labels)
        for event in events:
            self.record(event)

    def failed(self, kind: str, message: str) -> None:
        """A cycle failed; ``kind`` publish: the labels could not be published."""
        if kind != "publish" or self._failing:
            return
        self._failing = True
        self.record(NodeEvent(type="Warning", reason=PUBLISH_FAILING,
                              message=_clip(f"cannot publish labels (the last good ones "
                                            f"stay): {message}")))

    def record(self, event: NodeEvent) -> None:
        request = self._recorder.record(event)
        if request is None:
            if self._report is not None:
                self._report(event.reason, "throttled")
            return
        self._sender.put(request)

    def close(self) -> None:
        self._sender.close()
