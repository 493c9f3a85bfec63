"""The Node sink: labels the Node directly with server-side apply, field manager ``gfd``.

Why server-side apply: the API server itself records, per label key, that gfd set it
(managedFields), so gfd removes exactly the keys it set and stopped producing, in the
same request that sets the new ones; labels of every other writer are never touched;
there is no read-modify-write race and no ownership annotation that someone can edit.
gfd forces conflicts, as controllers should, so it stays authoritative for its own keys.

Three rules keep it honest about what the server did:

- every apply names the Node's uid, a precondition the API server checks, so gfd never
  creates a Node (an apply creates what does not exist): a deleted Node stays deleted;
- the change gfd reports is read from the server's answer, not from what it sent: a key gfd
  drops stays while another field manager owns it too, and is not reported removed;
- a label the server rejects (422) keeps its previously published value in the same request,
  so a transient rejection deletes nothing; the rejected value is tried again later, with
  backoff, not every cycle.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any, Protocol

from gfd.backoff import backoff
from gfd.errors import ApiError, Refused
from gfd.features import Features
from gfd.logs import Once
from gfd.sinks.base import PublishResult, diff
from gfd.sinks.drift import Watched
from gfd.sinks.objectwatch import Reason, WatchApi
from gfd.sinks.ownwrites import OwnWrites
from gfd.sinks.retry import Retry
from gfd.triggers import Fire

log = logging.getLogger(__name__)

FIELD_MANAGER = "gfd"
REJECTED_RETRY_START = 60.0
"""Seconds before a label value the API server rejected is tried again (then doubling)."""
REJECTED_RETRY_CAP = 3600.0
_QUOTED = re.compile(r'"([^"]+)"')


class NodeApi(Protocol):
    def get_node(self, name: str) -> dict[str, Any]: ...
    def apply_node_labels(self, name: str, labels: dict[str, str], *,
                          field_manager: str, uid: str = "") -> dict[str, Any]: ...
    def close(self) -> None: ...


def _managed_keys(node: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(manager, operation) -> the label keys it owns, from the Node's managedFields."""
    out: dict[tuple[str, str], set[str]] = {}
    for entry in node.get("metadata", {}).get("managedFields") or []:
        fields = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {}
        keys = {k[2:] for k in fields if k.startswith("f:")}
        if keys:
            who = (str(entry.get("manager", "")), str(entry.get("operation", "")))
            out.setdefault(who, set()).update(keys)
    return out


def owned_labels(node: dict[str, Any], manager: str = FIELD_MANAGER) -> dict[str, str]:
    """The labels ``manager`` owns on a Node, from its managedFields."""
    labels: dict[str, str] = node.get("metadata", {}).get("labels") or {}
    keys = _managed_keys(node).get((manager, "Apply"), set())
    return {k: labels[k] for k in sorted(keys) if k in labels}


def co_owners(node: dict[str, Any], key: str, manager: str = FIELD_MANAGER) -> list[str]:
    """The other field managers that own label ``key`` on a Node."""
    return sorted({who for (who, op), keys in _managed_keys(node).items()
                   if key in keys and (who, op) != (manager, "Apply")})


def current_labels(node: dict[str, Any], manager: str = FIELD_MANAGER,
                   also: Collection[str] = ()) -> dict[str, str]:
    """What the Node holds now for the keys ``manager`` alone owns (what it would remove by
    dropping them) and for the keys in ``also`` (what it is about to set), whoever owns them."""
    labels: dict[str, str] = node.get("metadata", {}).get("labels") or {}
    mine = {k for k in owned_labels(node, manager) if not co_owners(node, k, manager)}
    return {k: labels[k] for k in sorted(mine | set(also)) if k in labels}


GFD_PREFIX = "nvidia.com/"
"""The label namespace GFD and gfd publish in (what prune looks for on a Node)."""


def foreign_labels(node: dict[str, Any], manager: str = FIELD_MANAGER, limit: int = 3) -> str:
    """The Node's ``nvidia.com/`` labels ``manager`` does not own, as one phrase naming a
    few and their field managers (``nvidia.com/gpu.count ... (5 labels) set by
    nfd-master``); "" when there are none."""
    labels: dict[str, str] = node.get("metadata", {}).get("labels") or {}
    mine = set(owned_labels(node, manager))
    keys = sorted(k for k in labels if k.startswith(GFD_PREFIX) and k not in mine)
    if not keys:
        return ""
    managers = sorted({who for (who, _), owned in _managed_keys(node).items()
                       if who != manager and owned & set(keys)}) or ["no field manager"]
    shown_keys = ", ".join(keys[:limit]) + (f" ... ({len(keys)} labels)"
                                            if len(keys) > limit else "")
    return f"{shown_keys} set by {', '.join(managers)}, not gfd"


def offending_keys(error: ApiError, labels: dict[str, str]) -> set[str]:
    """Label keys a 422 names (in its causes or message)."""
    text = " ".join((str(error), *error.causes))
    named = set(_QUOTED.findall(text))
    return {k for k, v in labels.items() if k in named or (v and v in named)}


def _node_replaced(error: ApiError) -> bool:
    """The uid precondition failed: the Node is gone (409) or another took its name (422)."""
    text = " ".join((str(error), *error.causes))
    return ((error.status == 409 and "uid mismatch" in text)
            or (error.status == 422 and "metadata.uid" in text))


class _NodeReplaced(Exception):
    """Internal: the apply's uid precondition failed; read the Node again."""


@dataclass(slots=True)
class _Held:
    """A label value the API server rejected, and when to try it again."""

    value: str
    fallback: str | None
    """The previously published value kept meanwhile (None: the key is left out)."""
    failures: int
    retry_at: float


@dataclass(slots=True)
class NodeSink:
    """Publishes to the Node's labels. Costs no request while labels are unchanged; the
    loop's resync duty calls ``refresh()`` so the next publish re-applies (heals drift)."""

    api: NodeApi
    node: str
    retry: Retry = field(default_factory=Retry)
    field_manager: str = FIELD_MANAGER
    name: str = "node"
    clock: Callable[[], float] = time.monotonic
    rand: Callable[[], float] = random.random
    _wanted: dict[str, str] | None = field(default=None, init=False)
    _view: dict[str, str] | None = field(default=None, init=False)
    """The labels of gfd's last apply as the server answered them (None: not read yet)."""
    _uid: str = field(default="", init=False)
    _held: dict[str, _Held] = field(default_factory=dict, init=False)
    _stale: bool = field(default=False, init=False)
    _once: Once = field(default_factory=lambda: Once(log), init=False)
    watch_api: WatchApi | None = None
    """Where to watch the Node (``gfd.kube.Kube``); None: no watch, drift heals at resync."""
    on_reconnect: Callable[[Reason], None] | None = None
    _watched: Watched = field(default_factory=Watched, init=False)
    _sending: dict[str, str] | None = field(default=None, init=False)
    """The labels of the apply in flight (its own echo from the watch is no drift)."""
    _synced: float = field(default=float("-inf"), init=False)
    _why: str = field(default="", init=False)
    _own: OwnWrites = field(default_factory=OwnWrites, init=False)
    """gfd's applies, so that the watch's reads that raced one, and their echo, are no drift."""

    def refresh(self) -> None:
        """Apply again at the next publish even if labels are unchanged (the resync duty).
        With a healthy watch on the Node, drift is repaired as it happens: only every
        ``WATCHED_RESYNC`` then, as a safety net."""
        if self._watched.resync_due(self.clock() - self._synced):
            self._stale = True

    def watch(self, fire: Fire) -> None:
        """Watch the Node: a gfd label removed or overwritten by someone else, or the Node
        re-created, fires an ``api`` trigger, and the cycle it starts applies the labels
        again (a deleted Node is never created: its successor is labelled when it appears)."""
        if self.watch_api is not None:
            self._watched.start(fire, self.watch_api, "node", self.node,
                                target=f"Node {self.node}", on_change=self._seen,
                                action=self._drifted, on_reconnect=self.on_reconnect,
                                on_list=self._own.listing)

    def _seen(self, node: dict[str, Any] | None) -> None:
        """On the watch thread: does the Node still hold what gfd applied?"""
        if self._own.raced():
            return  # read before or while gfd applied: that apply repairs what it shows
        if node is None or not self._watched.active:
            return  # gone: never re-created by gfd; a successor arrives as ADDED
        published, sending = self._view, self._sending
        if published is None and sending is None:
            return  # nothing published yet
        if self._own.echo(node):
            return  # gfd's own apply
        meta = node.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        labels: dict[str, str] = meta.get("labels") or {}
        if self._uid and uid and uid != self._uid:
            self._why = f"Node {self.node} was re-created (uid {uid})"
            self._watched.report("replaced", self._why)
            return
        matches = [want for want in (published, sending) if want is not None
                   and all(labels.get(k) == v for k, v in want.items())]
        if not matches:
            want = published if published is not None else sending or {}
            keys = sorted(k for k, v in want.items() if labels.get(k) != v)
            self._why = (f"Node {self.node}: {', '.join(keys[:5])}"
                         f"{' ...' if len(keys) > 5 else ''} changed or removed by someone else")
            self._watched.report("changed", self._why)

    def _drifted(self) -> None:
        """On the loop's thread: read the Node again and apply at the next publish."""
        log.info("%s; applying gfd's labels again", self._why or f"Node {self.node} drifted")
        self._view = None
        self._stale = True

    def close(self) -> None:
        self._watched.close()
        self.api.close()

    @property
    def where(self) -> str:
        return f"Node {self.node}"

    @property
    def uid(self) -> str:
        """The Node's uid as gfd last read or applied it ("" before; Events name it)."""
        return self._uid

    def _read(self) -> dict[str, Any]:
        node = self.retry.run(lambda: self.api.get_node(self.node))
        self._uid = str(node.get("metadata", {}).get("uid") or "")
        return node

    def published_features(self) -> dict[str, str] | None:
        return None  # labels only

    def published(self, also: Collection[str] = ()) -> dict[str, str]:
        """The Node's current values of the keys gfd alone owns and of ``also``."""
        return current_labels(self._read(), self.field_manager, also)

    def publish(self, labels: dict[str, str], *,
                features: Features | None = None) -> PublishResult:
        now = self.clock()
        due = any(held.retry_at <= now for held in self._held.values())
        if self._wanted == labels and not self._stale and not due:
            return PublishResult(written=False)
        try:
            return self._publish(labels, now)
        except _NodeReplaced:
            log.warning("Node %s was deleted or replaced: reading it again (gfd never creates "
                        "a Node)", self.node)
            self._view = None
            return self._publish(labels, now)

    def _publish(self, labels: dict[str, str], now: float) -> PublishResult:
        if self._view is None:  # first publish, or the Node changed: read what it holds
            node = self._read()
            before = current_labels(node, self.field_manager, labels)
            mine = owned_labels(node, self.field_manager)
        else:
            before, mine = dict(self._view), dict(self._view)
        sent = self._compose(labels, now)
        self._sending = dict(sent)
        try:
            with self._own.writing():
                answer, rejected = self._apply_keeping(sent, labels, mine, now)
        except (ApiError, _NodeReplaced):
            self._sending = None
            raise
        held_now = {k: h.value for k, h in self._held.items()}
        for key, value in sent.items():  # what went through is no longer held
            if held_now.get(key) == value:
                del self._held[key]
        after_labels: dict[str, str] = answer.get("metadata", {}).get("labels") or {}
        after = {k: after_labels[k] for k in sorted(set(before) | set(sent))
                 if k in after_labels}
        for key in sorted(set(before) - set(sent)):
            if key in after_labels:
                self._once.log(logging.INFO, "label %s stays on Node %s: another field "
                               "manager owns it too (%s)", key, self.node,
                               ", ".join(co_owners(answer, key, self.field_manager)) or "?",
                               key=f"kept {key}={after_labels[key]}")
        first = self._wanted is None
        self._view = {k: after_labels[k] for k in sent if k in after_labels}
        self._sending = None
        self._wanted = dict(labels)
        if self._stale or first:
            self._synced = now
        self._stale = False
        self._watched.published()
        return PublishResult(written=True, change=diff(before, after),
                             rejected=tuple(sorted(rejected)))

    def _compose(self, labels: dict[str, str], now: float) -> dict[str, str]:
        """``labels``, with each held key at its fallback until its retry is due."""
        sent = dict(labels)
        for key, held in list(self._held.items()):
            if labels.get(key) != held.value:
                del self._held[key]  # gfd no longer wants the rejected value
            elif held.retry_at > now:
                if held.fallback is None:
                    sent.pop(key)
                else:
                    sent[key] = held.fallback
        return sent

    def _apply_keeping(self, sent: dict[str, str], labels: dict[str, str],
                       mine: dict[str, str], now: float) -> tuple[dict[str, Any], set[str]]:
        """Apply ``sent`` (edited in place); a 422 naming labels puts back their previously
        published values (else leaves them out) and applies again."""
        rejected: set[str] = set()
        for _ in range(3):  # the wanted value, its fallback, then without the key
            try:
                return self._apply(sent), rejected
            except ApiError as exc:
                if exc.status != 422:
                    raise
                bad = offending_keys(exc, sent)
                if not bad:
                    raise
                for key in sorted(bad):
                    self._hold(key, sent, labels, mine.get(key), now, exc,
                               again=key in rejected)
                rejected |= bad
        return self._apply(sent), rejected

    def _hold(self, key: str, sent: dict[str, str], labels: dict[str, str],
              previous: str | None, now: float, exc: ApiError, *, again: bool) -> None:
        """``sent[key]`` was rejected: the first time in this request, send the published value
        instead -- even when it is the rejected value itself, as a transient rejection (a
        webhook that flapped) must not delete a label; ``again``: leave the key out."""
        value = sent[key]
        if not again and key in labels and value == labels[key]:  # the wanted value
            held = self._held.get(key)
            failures = held.failures + 1 if held and held.value == value else 1
            fallback = previous
            delay = backoff(failures, REJECTED_RETRY_CAP, self.rand, start=REJECTED_RETRY_START)
            self._held[key] = _Held(value, fallback, failures, now + delay)
            keeping = ("sending its published value again" if fallback == value
                       else "keeping its published value " + repr(fallback)
                       if fallback is not None else "leaving it out")
            if not self._once.error("API server rejected label %s=%s: %s; %s, trying it again "
                                    "later", key, value, exc, keeping,
                                    key=f"rejected {key}={value}"):
                log.debug("label %s=%s rejected again (%d times)", key, value, failures)
        else:  # its fallback was rejected too: leave the key out
            if key in self._held:
                self._held[key].fallback = None
            self._once.error("API server rejected label %s=%s too: %s; leaving it out", key,
                             value, exc, key=f"rejected {key}={value}")
        if self._held.get(key) is not None and self._held[key].fallback is not None:
            sent[key] = str(self._held[key].fallback)
        else:
            sent.pop(key, None)

    def _apply(self, labels: dict[str, str]) -> dict[str, Any]:
        try:
            answer = self.retry.run(lambda: self.api.apply_node_labels(
                self.node, labels, field_manager=self.field_manager, uid=self._uid))
        except ApiError as exc:
            if _node_replaced(exc):
                self._uid = ""
                raise _NodeReplaced() from exc
            raise
        meta = answer.get("metadata", {})
        self._uid = str(meta.get("uid") or self._uid)
        self._own.wrote(answer)
        return answer

    def prune(self) -> PublishResult:
        """Remove the labels gfd's field manager applied (an apply of none); a label another
        field manager owns too stays (theirs now). A Node where gfd applied nothing is not
        written: nothing to prune, or -- when it carries ``nvidia.com/`` labels others set
        (GFD through nfd-master, ``kubectl label``) -- ``Refused`` with one line."""
        for attempt in (1, 2):
            node = self._read()
            if not owned_labels(node, self.field_manager):
                others = foreign_labels(node, self.field_manager)
                if others:
                    raise Refused(f"Node {self.node}: labels left in place: {others}; gfd "
                                  "prune removes only the labels gfd applied (field manager "
                                  f"{self.field_manager})")
                return PublishResult(written=False)
            before = current_labels(node, self.field_manager)
            try:
                answer = self._apply({})
            except _NodeReplaced:
                if attempt == 2:
                    raise ApiError(f"Node {self.node} keeps being replaced: nothing pruned "
                                   "(try again)") from None
                continue
            after_labels = answer.get("metadata", {}).get("labels") or {}
            after = {k: after_labels[k] for k in before if k in after_labels}
            self._view = self._wanted = None
            self._held.clear()
            others = foreign_labels(answer, self.field_manager)
            if others:
                log.warning("Node %s: labels left in place: %s", self.node, others)
            return PublishResult(written=True, change=diff(before, after))
        raise AssertionError("unreachable")  # pragma: no cover
