"""``RealApiServer``: the state helpers and request log of ``fakes.apiserver.FakeApiServer``
over a real kube-apiserver (``helpers.controlplane.ControlPlane``), so one test can run
against both: ``@pytest.mark.parametrize("server", ["fake", "real:node"], indirect=True)``.

The real server is shared by the session, so a RealApiServer sets up and cleans up after
itself: it binds the ServiceAccount gfd/gfd to exactly one mode's RBAC from manifests/
(``write_kubeconfig`` hands out its token), and ``close()`` deletes every Node, Pod,
DaemonSet and NodeFeature the test made. Its request log is the API server's audit log of
that ServiceAccount: what gfd (and the test, through gfd's ``Kube``) asked, as the real
server answered it. The admin's own calls here, like the fake's state helpers, are not
logged.

``gfd_node_server`` seeds either server with a Node and gfd's DaemonSet Pod on it;
``kube_for`` is gfd's own ``Kube`` client over either, unthrottled."""

from __future__ import annotations

import contextlib
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes.apiserver import FakeApiServer

from gfd.kube import Kube
from helpers.controlplane import JSON, ControlPlane

NFD_PATH = "/apis/nfd.k8s-sigs.io/v1alpha1"
METHODS = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT",
           "patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETE"}


@dataclass(frozen=True)
class AuditedRequest:
    """One request from the audit log, shaped like the fake's ``RequestRecord``."""

    method: str
    path: str
    query: dict[str, str]
    status: int
    verb: str
    body: Any = None

    def json(self) -> Any:
        return self.body

    @property
    def watch(self) -> bool:
        return self.verb == "watch"

    @classmethod
    def from_event(cls, event: JSON) -> AuditedRequest:
        uri = urllib.parse.urlsplit(event["requestURI"])
        body = event.get("requestObject")
        return cls(method=METHODS.get(event["verb"], event["verb"].upper()), path=uri.path,
                   query=dict(urllib.parse.parse_qsl(uri.query)),
                   status=int(event.get("responseStatus", {}).get("code", 0)),
                   verb=event["verb"], body=body)


@dataclass
class RealApiServer:
    """See the module docstring. ``mode``: the RBAC of manifests/overlays/<mode>."""

    plane: ControlPlane
    mode: str | None
    namespace: str = "gfd"
    _nodes: set[str] = field(default_factory=set)
    _since: int = 0

    def __post_init__(self) -> None:
        self.plane.install_rbac(self.mode)
        self.plane.create_namespace(self.namespace)
        self.clear_log()

    def __enter__(self) -> RealApiServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete what the test made: NodeFeatures, Pods and DaemonSets in the namespace,
        and the Nodes it added."""
        ns = self.namespace
        for path in (f"{NFD_PATH}/namespaces/{ns}/nodefeatures",
                     f"/api/v1/namespaces/{ns}/configmaps",
                     f"/apis/apps/v1/namespaces/{ns}/daemonsets",
                     f"/api/v1/namespaces/{ns}/pods"):
            self.plane.request("DELETE", path, query={"gracePeriodSeconds": "0"},
                               expect=(200, 404))
        for name in self._nodes:
            self.plane.delete(f"/api/v1/nodes/{name}", wait=False)

    # -- credentials

    def write_kubeconfig(self, path: str | Path, *, namespace: str | None = None) -> Path:
        """A kubeconfig for the ServiceAccount gfd/gfd (context namespace: ``namespace``)."""
        written = self.plane.service_account_kubeconfig(Path(path))
        config = yaml.safe_load(written.read_text())
        context = config["contexts"][0]["context"]
        if namespace:
            context["namespace"] = namespace
        else:
            context.pop("namespace", None)
        written.write_text(yaml.safe_dump(config))
        return written

    # -- Nodes

    def add_node(self, name: str, labels: Mapping[str, str] | None = None,
                 annotations: Mapping[str, str] | None = None, *,
                 manager: str = "kubelet") -> JSON:
        self._nodes.add(name)
        return self.plane.create_node(name, labels=dict(labels or {}), annotations=annotations,
                                      manager=manager)

    def delete_node(self, name: str) -> None:
        self.plane.delete(f"/api/v1/nodes/{name}")

    def node(self, name: str) -> JSON:
        node = self.plane.get(f"/api/v1/nodes/{name}")
        if node is None:
            raise KeyError(name)
        return node

    def nodes(self) -> list[JSON]:
        listed = self.plane.get("/api/v1/nodes")
        return list(listed["items"]) if listed else []

    def labels(self, node: str) -> dict[str, str]:
        return dict(self.node(node)["metadata"].get("labels", {}))

    def set_label(self, node: str, key: str, value: str, *, manager: str = "other-actor"
                  ) -> None:
        """Another actor sets a label (an Update by ``manager``)."""
        self.plane.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {key: value}}},
                         manager=manager)

    def remove_label(self, node: str, key: str, *, manager: str = "other-actor") -> None:
        self.plane.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {key: None}}},
                         manager=manager)

    # -- Pods, DaemonSets, NodeFeatures

    def add_pod(self, namespace: str, name: str, owner_daemonset: str | None = None, *,
                node_name: str | None = None) -> JSON:
        """A Pod, and (when named) its owning DaemonSet, created if absent."""
        meta: JSON = {"name": name, "namespace": namespace,
                      "labels": {"app.kubernetes.io/name": owner_daemonset or name}}
        if owner_daemonset:
            ds = self.daemonset(namespace, owner_daemonset) or self.plane.create(
                daemonset(namespace, owner_daemonset))
            meta["ownerReferences"] = [{
                "apiVersion": "apps/v1", "kind": "DaemonSet", "name": owner_daemonset,
                "uid": ds["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
        pod: JSON = {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                     "spec": {"containers": [{"name": "gfd", "image": "gfd:test"}]}}
        if node_name:
            pod["spec"]["nodeName"] = node_name
        return self.plane.create(pod)

    def pod(self, namespace: str, name: str) -> JSON | None:
        return self.plane.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def daemonset(self, namespace: str, name: str) -> JSON | None:
        return self.plane.get(f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}")

    def nodefeature(self, namespace: str, name: str) -> JSON | None:
        return self.plane.get(f"{NFD_PATH}/namespaces/{namespace}/nodefeatures/{name}")

    def nodefeatures(self, namespace: str | None = None) -> list[JSON]:
        path = (f"{NFD_PATH}/namespaces/{namespace}/nodefeatures" if namespace
                else f"{NFD_PATH}/nodefeatures")
        listed = self.plane.get(path)
        return list(listed["items"]) if listed else []

    def add_nodefeature(self, namespace: str, obj: JSON, *, manager: str = "test-setup"
                        ) -> JSON:
        body = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
        return self.plane.create(body, manager=manager)

    def set_nodefeature_label(self, namespace: str, name: str, key: str, value: str | None,
                              *, manager: str = "other-actor") -> None:
        """Another actor edits the NodeFeature's ``spec.labels`` (a merge patch by
        ``manager``; ``value`` None removes the key); KeyError if absent."""
        if self.nodefeature(namespace, name) is None:
            raise KeyError(name)
        self.plane.patch(f"{NFD_PATH}/namespaces/{namespace}/nodefeatures/{name}",
                         {"spec": {"labels": {key: value}}}, manager=manager)

    def set_nodefeature_attribute(self, namespace: str, name: str, feature: str,
                                  element: str, value: str, *,
                                  manager: str = "other-actor") -> None:
        """Another actor edits an ``attributes`` feature's element in the NodeFeature's
        ``spec.features`` (a merge patch by ``manager``); KeyError if absent."""
        if self.nodefeature(namespace, name) is None:
            raise KeyError(name)
        self.plane.patch(f"{NFD_PATH}/namespaces/{namespace}/nodefeatures/{name}",
                         {"spec": {"features": {"attributes": {
                             feature: {"elements": {element: value}}}}}}, manager=manager)

    def delete_nodefeature(self, namespace: str, name: str) -> None:
        """Someone deletes the NodeFeature (kubectl delete); KeyError if absent."""
        if self.nodefeature(namespace, name) is None:
            raise KeyError(name)
        self.plane.delete(f"{NFD_PATH}/namespaces/{namespace}/nodefeatures/{name}")

    # -- request log (the audit log of the ServiceAccount)

    @property
    def requests(self) -> list[AuditedRequest]:
        return [AuditedRequest.from_event(e) for e in self.plane.audit_events(self._since)]

    def clear_log(self) -> None:
        self._since = self.plane.audit_offset()

    @property
    def open_watches(self) -> int:
        return self.plane.open_watches()

    @property
    def watch_requests(self) -> int:
        return sum(1 for r in self.requests if r.watch)

    def compact(self) -> str:
        """Move etcd's revision past every watched object's (an unrelated ConfigMap is
        written), then compact its history up to there: a watch resuming from what it saw
        is too old once the API server's watch cache starts again (``drop_watches``)."""
        self.plane.apply({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "realapi-history", "namespace": self.namespace},
                          "data": {"written": str(time.time())}})
        return str(self.plane.compact())

    def drop_watches(self) -> int:
        """Cut every watch as a real control plane does: the API server restarts (its watch
        cache then starts from etcd's current revision). Returns the watches it cut."""
        cut = self.open_watches
        self.plane.restart_apiserver()
        return cut

    def count(self, method: str | None = None, path_contains: str | None = None) -> int:
        return sum(1 for r in self.requests
                   if (method is None or r.method == method.upper())
                   and (path_contains is None or path_contains in r.path))


def daemonset(namespace: str, name: str) -> JSON:
    """A DaemonSet like gfd's (no controller runs: it only stands as an owner)."""
    selector = {"app.kubernetes.io/name": name}
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": selector},
                                  "spec": {"containers": [{"name": "gfd",
                                                           "image": "gfd:test"}]}}}}


def on_both(mode: str) -> pytest.MarkDecorator:
    """Run the test on the fake API server and on the real one as the ServiceAccount with
    the RBAC of manifests/overlays/<mode>; its module's ``server`` fixture calls
    ``api_server(request)``."""
    return pytest.mark.parametrize("server", ["fake", f"real:{mode}"], indirect=True)


@contextlib.contextmanager
def api_server(request: pytest.FixtureRequest) -> Iterator[FakeApiServer | RealApiServer]:
    """The server a test asked for through ``on_both`` (the fake when it did not)."""
    kind = getattr(request, "param", "fake")
    if kind == "fake":
        with FakeApiServer() as fake:
            yield fake
        return
    mode = kind.removeprefix("real:")
    with RealApiServer(request.getfixturevalue("control_plane"), mode or None) as real:
        yield real


@contextlib.contextmanager
def gfd_node_server(request: pytest.FixtureRequest, node: str, namespace: str,
                    labels: Mapping[str, str]) -> Iterator[FakeApiServer | RealApiServer]:
    """``api_server(request)`` holding Node ``node`` with ``labels`` and gfd's DaemonSet Pod
    ``gfd-abcde`` in ``namespace`` running on it (what the sinks look up at start)."""
    with api_server(request) as srv:
        srv.add_node(node, labels=dict(labels))
        srv.add_pod(namespace, "gfd-abcde", owner_daemonset="gfd", node_name=node)
        yield srv


@contextlib.contextmanager
def kube_for(server: FakeApiServer | RealApiServer, directory: Path,
             **options: Any) -> Iterator[Kube]:
    """gfd's ``Kube`` client over ``server`` (its kubeconfig written into ``directory``),
    unthrottled (``options``: Kube's other keywords), closed afterwards."""
    api = Kube(kubeconfig=str(server.write_kubeconfig(directory / "kubeconfig")), qps=0,
               **options)
    try:
        yield api
    finally:
        api.close()
