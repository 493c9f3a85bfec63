"""The NFD NodeFeature sink: object ``nvidia-features-for-<node>`` whose ``spec.labels`` nfd-master
turns into Node labels. Owned by the DaemonSet (never the Pod), written only on change,
conflict-safe, and free in steady state (no request unless labels change or a resync is due).

gfd writes only what it owns there -- ``spec.labels``, the features named ``nvidia.*`` in
``spec.features`` (per-GPU facts for NodeFeatureRules, ``gfd.features``), the
``nfd.node.kubernetes.io/node-name`` label, its mark (``app.kubernetes.io/managed-by: gfd``)
and its DaemonSet owner reference -- and keeps everything else the object holds (others'
labels, annotations, owners, features of other names):
each write is a read-modify-write PUT of the last object read, a 409 re-reads. Those verbs
(get, create, update) are all the GPU Operator's Role grants: no patch, no apply, no delete.

A label value the API server rejects (422 naming it) keeps its published value in the same
write -- sent again even when it is the rejected value, so a transient rejection deletes
nothing -- and is tried again with backoff; a key is left out only when the server rejects
its published value too (as the Node sink does).

An object of that name that is someone else's -- its controller is not gfd's DaemonSet, as
with NVIDIA's GFD, which uses the same name -- is never written, and ``prune`` deletes only an
object gfd wrote (its mark, or gfd's DaemonSet as controller).
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

from gfd.backoff import backoff
from gfd.errors import ApiError, ApiSinkError, Refused
from gfd.features import Features, flatten
from gfd.logs import Once
from gfd.sinks.base import Change, PublishResult, diff
from gfd.sinks.drift import Watched
from gfd.sinks.node import REJECTED_RETRY_CAP, REJECTED_RETRY_START, offending_keys
from gfd.sinks.objectwatch import Reason, WatchApi
from gfd.sinks.ownwrites import OwnWrites
from gfd.sinks.retry import Retry
from gfd.triggers import Fire

log = logging.getLogger(__name__)

API_VERSION = "nfd.k8s-sigs.io/v1alpha1"
NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gfd"
CONFLICT_RETRIES = 5


class NodeFeatureApi(Protocol):
    def get_nodefeature(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def create_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def replace_nodefeature(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def delete_nodefeature(self, namespace: str, name: str, *, uid: str = "") -> bool: ...
    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


def object_name(node: str) -> str:
    return f"nvidia-features-for-{node}"


def owner_references(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The DaemonSet that controls the pod, as an ownerReference; never the pod itself."""
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == "DaemonSet" and ref.get("apiVersion", "").startswith("apps/"):
            return [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ref["name"],
                     "uid": ref["uid"], "controller": True, "blockOwnerDeletion": False}]
    return []


EMPTY_FEATURES: dict[str, Any] = {}
"""``spec.features`` when gfd is given none (GFD's: an empty object)."""
FEATURE_KINDS = ("attributes", "flags", "instances")
OWNED_FEATURE_PREFIX = "nvidia."
"""Features gfd owns in its object: those named ``nvidia.*`` (``nvidia.gpu`` ...)."""


def merged_features(stored: Any, features: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` features with gfd's (``nvidia.*``) replaced by ``features`` (pure)."""
    base = stored if isinstance(stored, dict) else {}
    out: dict[str, Any] = {}
    for kind in FEATURE_KINDS:
        stored_kind = base.get(kind)
        theirs: dict[str, Any] = stored_kind if isinstance(stored_kind, dict) else {}
        mine = features.get(kind) or {}
        merged = {k: copy.deepcopy(v) for k, v in theirs.items()
                  if not k.startswith(OWNED_FEATURE_PREFIX)}
        merged.update(copy.deepcopy(dict(mine)))
        if merged or kind in base or kind in features:
            out[kind] = dict(sorted(merged.items()))
    return out


def owned_features(stored: Any) -> dict[str, Any]:
    """gfd's part of stored features: the ``nvidia.*`` names, empty kinds dropped."""
    base = stored if isinstance(stored, dict) else {}
    out = {}
    for kind in FEATURE_KINDS:
        value = base.get(kind)
        mine = {k: v for k, v in value.items() if k.startswith(OWNED_FEATURE_PREFIX)} \
            if isinstance(value, dict) else {}
        if mine:
            out[kind] = mine
    return out


def build(node: str, namespace: str, labels: dict[str, str],
          owners: list[dict[str, Any]],
          features: Mapping[str, Any] = EMPTY_FEATURES) -> dict[str, Any]:
    """The NodeFeature object for these labels and features (pure)."""
    metadata: dict[str, Any] = {"name": object_name(node), "namespace": namespace,
                                "labels": {NODE_NAME_LABEL: node, MANAGED_BY_LABEL: MANAGED_BY}}
    if owners:
        metadata["ownerReferences"] = owners
    return {"apiVersion": API_VERSION, "kind": "NodeFeature", "metadata": metadata,
            "spec": {"features": merged_features({}, features),
                     "labels": dict(sorted(labels.items()))}}


def _is_daemonset(ref: dict[str, Any], owner: dict[str, Any]) -> bool:
    """``ref`` names the DaemonSet ``owner`` names (any uid: the same DaemonSet re-created)."""
    return bool(ref.get("kind") == "DaemonSet" and str(ref.get("apiVersion", "")).startswith(
        "apps/") and ref.get("name") == owner["name"])


def _controller(obj: dict[str, Any]) -> dict[str, Any] | None:
    refs = obj.get("metadata", {}).get("ownerReferences") or []
    return next((r for r in refs if isinstance(r, dict) and r.get("controller")), None)


def marked(obj: dict[str, Any]) -> bool:
    """The object carries gfd's mark (gfd wrote it)."""
    labels = obj.get("metadata", {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY)


def foreign_owner(obj: dict[str, Any], owners: list[dict[str, Any]]) -> str:
    """Who the object belongs to when that is not gfd (``Kind/name`` of its controller), else
    "". gfd's own: controlled by gfd's DaemonSet, or -- when gfd does not know its DaemonSet --
    marked by gfd. An object without a controller belongs to nobody: gfd may write it."""
    controller = _controller(obj)
    if controller is None:
        return ""
    if owners and _is_daemonset(controller, owners[0]):
        return ""
    if not owners and marked(obj):
        return ""
    return f"{controller.get('kind', '?')}/{controller.get('name', '?')}"


def updated(current: dict[str, Any], node: str, labels: dict[str, str],
            owners: list[dict[str, Any]],
            features: Mapping[str, Any] = EMPTY_FEATURES) -> dict[str, Any]:
    """``current`` with gfd's parts set and everything else kept (pure): the body of a
    read-modify-write PUT (its resourceVersion and uid are its preconditions)."""
    obj = copy.deepcopy(current)
    meta = obj.setdefault("metadata", {})
    meta.pop("managedFields", None)  # the server keeps its own record
    meta["labels"] = {**(meta.get("labels") or {}), NODE_NAME_LABEL: node,
                      MANAGED_BY_LABEL: MANAGED_BY}
    if owners:
        mine = owners[0]
        refs = [r for r in meta.get("ownerReferences") or []
                if not (_is_daemonset(r, mine) and r.get("uid") != mine["uid"])]
        if not any(_is_daemonset(r, mine) for r in refs):
            refs.append(mine)
        meta["ownerReferences"] = refs
    spec: dict[str, Any] = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
    obj["spec"] = {**spec, "features": merged_features(spec.get("features"), features),
                   "labels": dict(sorted(labels.items()))}
    return obj


def _same_features(stored: Any, wanted: Mapping[str, Any]) -> bool:
    """gfd's features in ``stored`` are ``wanted``'s (empty kinds count as absent)."""
    return owned_features(stored) == owned_features(wanted)


def _in_sync(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Writing ``wanted`` (``updated(current, ...)``) would change nothing gfd owns."""
    meta, want = current.get("metadata", {}), wanted["metadata"]
    spec = current.get("spec") or {}
    return bool(
        spec.get("labels") == wanted["spec"]["labels"]
        and _same_features(spec.get("features"), wanted["spec"]["features"])
        and meta.get("labels") == want.get("labels")
        and (meta.get("ownerReferences") or []) == (want.get("ownerReferences") or [])
    )


@dataclass(slots=True)
class NodeFeatureSink:
    """Publishes to the NodeFeature object. Costs no request while labels are unchanged; the
    loop's resync duty calls ``refresh()`` so the next publish re-reads it (heals drift)."""

    api: NodeFeatureApi
    node: str
    namespace: str = "default"
    pod_name: str = ""
    retry: Retry = field(default_factory=Retry)
    name: str = "nodefeature"
    _owners: list[dict[str, Any]] | None = field(default=None, init=False)
    _labels: dict[str, str] | None = field(default=None, init=False)
    _features: dict[str, Any] = field(default_factory=dict, init=False)
    """The features of the last write (compared like the labels: written only on change)."""
    _current: dict[str, Any] | None = field(default=None, init=False)
    """The object as the server last answered it: the base of the next write."""
    _stale: bool = field(default=False, init=False)
    watch_api: WatchApi | None = None
    """Where to watch the object (``gfd.kube.Kube``); None: no watch, drift heals at resync."""
    on_reconnect: Callable[[Reason], None] | None = None
    clock: Callable[[], float] = time.monotonic
    _watched: Watched = field(default_factory=Watched, init=False)
    _sending: dict[str, str] | None = field(default=None, init=False)
    """The labels of the write in flight (its own echo from the watch is no drift)."""
    _sending_features: dict[str, Any] | None = field(default=None, init=False)
    _synced: float = field(default=float("-inf"), init=False)
    _own: OwnWrites = field(default_factory=OwnWrites, init=False)
    """gfd's writes, so that the watch's reads that raced one, and their echo, are no drift."""
    _wanted: dict[str, str] | None = field(default=None, init=False)
    """The labels of the last publish (``_labels``: what was written, rejected values kept
    at their published ones)."""
    _held: dict[str, tuple[str, float, int]] = field(default_factory=dict, init=False)
    """Rejected values: key -> (value, when to try it again, rejections in a row)."""
    _read_labels: dict[str, str] | None = field(default=None, init=False)
    """The object's labels as this publish read them (None: not read)."""
    _once: Once = field(default_factory=lambda: Once(log), init=False)

    def refresh(self) -> None:
        """Re-read the object at the next publish even if labels are unchanged (the resync
        duty). With a healthy watch on it, drift is repaired as it happens: only every
        ``WATCHED_RESYNC`` then, as a safety net."""
        if self._watched.resync_due(self.clock() - self._synced):
            self._stale = True

    def watch(self, fire: Fire) -> None:
        """Watch the object: deleted, or its labels changed by someone else, it fires an
        ``api`` trigger, and the cycle it starts writes it again."""
        if self.watch_api is not None:
            self._watched.start(fire, self.watch_api, "nodefeature", object_name(self.node),
                                namespace=self.namespace, target=self._what,
                                on_change=self._seen, action=self._drifted,
                                on_reconnect=self.on_reconnect, on_list=self._own.listing)

    def _seen(self, obj: dict[str, Any] | None) -> None:
        """On the watch thread: does the object still hold what gfd wrote?"""
        if self._own.raced():
            return  # read before or while gfd wrote: that write repairs what it shows
        published, sending = self._labels, self._sending
        if not self._watched.active or (published is None and sending is None):
            return  # nothing published yet (or pruned)
        if obj is None:
            self._watched.report("deleted", f"{self._what} was deleted")
            return
        if self._own.echo(obj):
            return  # gfd's own write
        spec = obj.get("spec") or {}
        labels = dict(spec.get("labels") or {})
        if labels not in (published, sending):
            self._watched.report("changed", f"{self._what}: its labels were changed by "
                                            "someone else")
        elif labels == published and not any(
                _same_features(spec.get("features"), f)
                for f in (self._features, self._sending_features) if f is not None):
            self._watched.report("changed", f"{self._what}: its features were changed by "
                                            "someone else")

    def _drifted(self) -> None:
        """On the loop's thread: read the object again and write it at the next publish."""
        log.info("%s drifted from what gfd wrote; writing it again", self._what)
        self._stale = True

    def close(self) -> None:
        self._watched.close()
        self.api.close()

    @property
    def where(self) -> str:
        return self._what

    @property
    def _what(self) -> str:
        return f"NodeFeature {self.namespace}/{object_name(self.node)}"

    def _resolve_owners(self) -> list[dict[str, Any]]:
        """The DaemonSet owner, looked up once; a failed lookup is retried next time."""
        if self._owners is not None:
            return self._owners
        if not self.pod_name:  # (publish says so: diff and prune need no owner)
            self._owners = []
            return self._owners
        try:
            pod = self.retry.run(lambda: self.api.get_pod(self.namespace, self.pod_name))
        except ApiError as exc:
            if exc.status not in (403, 404):
                raise  # transient: publish nothing now, look again next cycle
            log.warning("cannot look up pod %s for the NodeFeature owner: %s", self.pod_name,
                        exc)
            self._owners = []
            return self._owners
        self._owners = owner_references(pod)
        if not self._owners:
            log.warning("pod %s is not owned by a DaemonSet: NodeFeature left without an owner",
                        self.pod_name)
        return self._owners

    def _refusal(self, obj: dict[str, Any], owners: list[dict[str, Any]]) -> str:
        """Why gfd must not write ``obj`` (one line), or "" when it may."""
        owner = foreign_owner(obj, owners)
        if not owner:
            return ""
        mine = (f"gfd's DaemonSet {owners[0]['name']}" if owners
                else "gfd (whose DaemonSet is unknown: set POD_NAME)")
        return (f"{self._what} belongs to {owner} (its controller), not to {mine}: another "
                "agent publishes it (NVIDIA's GFD uses this name); uninstall it, or run gfd "
                "in another namespace (--namespace / NAMESPACE)")

    def _read(self) -> dict[str, Any] | None:
        return self.retry.run(
            lambda: self.api.get_nodefeature(self.namespace, object_name(self.node)))

    def _published_spec(self) -> dict[str, Any]:
        """The object's spec as the server holds it now ({} without one); another's refused."""
        current = self._read()
        if current is not None:
            refusal = self._refusal(current, self._resolve_owners())
            if refusal:
                raise ApiSinkError(refusal)
        spec = (current or {}).get("spec")
        return spec if isinstance(spec, dict) else {}

    def published(self, also: Collection[str] = ()) -> dict[str, str]:
        return dict(self._published_spec().get("labels") or {})

    def published_features(self) -> dict[str, str] | None:
        return flatten(owned_features(self._published_spec().get("features")))

    def publish(self, labels: dict[str, str], *,
                features: Features | None = None) -> PublishResult:
        wanted = features.to_api() if features is not None else dict(EMPTY_FEATURES)
        now = self.clock()
        due = any(retry_at <= now for _, retry_at, _ in self._held.values())
        if (self._wanted == labels and self._features == wanted and not self._stale
                and not due):
            return PublishResult(written=False)
        owners = self._resolve_owners()
        if not self.pod_name:
            self._once.warning("POD_NAME is not set: the NodeFeature gets no owner and stays "
                               "after an uninstall (set POD_NAME from the downward API)",
                               key="no POD_NAME")
        if self._stale or self._labels is None:
            self._synced = now
        known = self._labels is not None and not self._stale
        current = self._current if known else None
        old = dict(self._labels or {})  # what the object holds, as far as gfd knows
        sent = self._compose(labels, old, now)
        rejected: set[str] = set()
        self._read_labels = None
        try:
            with self._own.writing():
                for attempt in range(3):  # the wanted values, their fallbacks, then without them
                    self._sending, self._sending_features = dict(sent), wanted
                    try:
                        result = self._write(sent, owners, current, old, wanted)
                        break
                    except ApiError as exc:
                        bad = offending_keys(exc, sent) if exc.status == 422 else set()
                        if not bad or attempt == 2:
                            raise
                        published = (self._read_labels if self._read_labels is not None
                                     else old)
                        for key in sorted(bad):
                            self._hold(key, sent, labels, published.get(key), now, exc,
                                       again=key in rejected)
                        rejected |= bad
                        current = self._current if known else None
        finally:
            self._sending = self._sending_features = None
        self._wanted = dict(labels)
        for key in [k for k, (value, _, _) in self._held.items() if sent.get(k) == value]:
            del self._held[key]  # what went through is no longer held
        if not rejected:
            return result
        return replace(result, rejected=tuple(sorted(rejected)))

    def _compose(self, labels: dict[str, str], old: dict[str, str],
                 now: float) -> dict[str, str]:
        """``labels``, with each held key at its published value until its retry is due."""
        sent = dict(labels)
        for key, (value, retry_at, _) in list(self._held.items()):
            if labels.get(key) != value:
                del self._held[key]  # gfd no longer wants the rejected value
            elif retry_at > now:
                if key in old:
                    sent[key] = old[key]
                else:
                    sent.pop(key)
        return sent

    def _hold(self, key: str, sent: dict[str, str], labels: dict[str, str],
              previous: str | None, now: float, exc: ApiError, *, again: bool) -> None:
        """As the Node sink's: a rejected value is replaced by the published one (even when
        it is the same value: a transient rejection deletes nothing); that rejected too
        (``again``), the key is left out. The wanted value is tried again with backoff."""
        value = sent[key]
        if not again and labels.get(key) == value:
            _, _, failures = self._held.get(key, (value, 0.0, 0))
            delay = backoff(failures + 1, REJECTED_RETRY_CAP, start=REJECTED_RETRY_START)
            self._held[key] = (value, now + delay, failures + 1)
            if previous is not None:
                sent[key] = previous
                keeping = ("sending its published value again" if previous == value
                           else f"keeping its published value {previous!r}")
            else:
                sent.pop(key)
                keeping = "leaving it out"
            self._once.error("API server rejected label %s=%s on %s: %s; %s, trying it again "
                             "later", key, value, self._what, exc, keeping,
                             key=f"rejected {key}={value}")
        else:
            sent.pop(key)
            self._once.error("API server rejected label %s=%s on %s too: %s; leaving it out",
                             key, value, self._what, exc, key=f"rejected {key}={value}")

    def _write(self, labels: dict[str, str], owners: list[dict[str, Any]],
               current: dict[str, Any] | None, old: dict[str, str],
               features: dict[str, Any]) -> PublishResult:
        for _ in range(CONFLICT_RETRIES):  # one request per attempt
            try:
                if current is not None:  # a read-modify-write of the last object read
                    stored = self.retry.run(partial(
                        self.api.replace_nodefeature, self.namespace,
                        updated(current, self.node, labels, owners, features)))
                    return self._done(labels, features, stored, diff(old, labels),
                                      before=current)
                current = self._read()
                if current is None:
                    if self._current is not None:
                        log.info("%s was deleted: creating it again", self._what)
                    self._read_labels = {}
                    stored = self.retry.run(lambda: self.api.create_nodefeature(
                        self.namespace,
                        build(self.node, self.namespace, labels, owners, features)))
                    return self._done(labels, features, stored, diff({}, labels), before={})
                refusal = self._refusal(current, owners)
                if refusal:
                    self._current = None
                    raise ApiSinkError(refusal)
                old = dict((current.get("spec") or {}).get("labels") or {})
                self._read_labels = old
                if _in_sync(current, updated(current, self.node, labels, owners, features)):
                    self._remember(labels, features, current)
                    return PublishResult(written=False, change=diff(old, labels))
            except ApiError as exc:
                if exc.status == 404 and not exc.resource_missing and current is not None:
                    # deleted behind gfd's back: read again, which creates it anew
                    log.debug("%s: not found at update: re-reading", self._what)
                elif exc.status == 409:  # changed, deleted (uid precondition) or created
                    log.debug("%s: conflict (%s): re-reading", self._what, exc.reason)
                else:
                    raise
                current = None
        raise ApiSinkError(f"{self._what}: still conflicting after {CONFLICT_RETRIES} attempts")

    def _remember(self, labels: dict[str, str], features: dict[str, Any],
                  stored: dict[str, Any]) -> None:
        self._own.wrote(stored)
        self._labels = dict(labels)
        self._features = features
        self._current = stored
        self._stale = False
        self._watched.published()

    def _done(self, labels: dict[str, str], features: dict[str, Any], stored: dict[str, Any],
              change: Change, *, before: dict[str, Any]) -> PublishResult:
        """A write went through: remember it; what changed in the labels and, from the
        object ``before`` it, in gfd's features."""
        self._remember(labels, features, stored)
        was = flatten(owned_features((before.get("spec") or {}).get("features")))
        return PublishResult(written=True, change=change,
                             features=diff(was, flatten(owned_features(features))))

    def prune(self) -> PublishResult:
        """Delete the object if gfd wrote it (its mark, or gfd's DaemonSet as controller);
        another's, or one with neither (it may be GFD's), is left, refused with one line."""
        current = self._read()
        self._labels = self._current = self._wanted = None
        self._held.clear()
        if current is None:
            return PublishResult(written=False)
        owners = self._resolve_owners()
        old = dict((current.get("spec") or {}).get("labels") or {})
        refusal = self._refusal(current, owners)
        controller = _controller(current)
        ours = bool(owners and controller is not None and _is_daemonset(controller, owners[0]))
        if refusal or not (marked(current) or ours):
            raise Refused(f"{self._what} left in place: " + (
                refusal.removeprefix(f"{self._what} ") or (
                "gfd's mark (label app.kubernetes.io/managed-by=gfd) is not on it and gfd's "
                "DaemonSet does not control it, so gfd may not have written it; gfd prune "
                "removes only what gfd wrote (delete it yourself if it is no longer wanted)")))
        uid = str(current.get("metadata", {}).get("uid") or "")
        removed = self.retry.run(lambda: self.api.delete_nodefeature(
            self.namespace, object_name(self.node), uid=uid))
        return PublishResult(written=removed, change=diff(old, {}) if removed else Change())
