"""The pod ``gfd why`` explains, read from a Pod or from the pod template of a workload
(Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob): the model's values of the pod
(``model.pod_of``: its GPU and other requests as the scheduler sums them, node selector and
affinity, tolerations, priority), each container's GPU requests, the pod's claims (a
ResourceClaim by name, or a ResourceClaimTemplate and the claim made from it), what the
scheduler checks that these objects cannot show (host ports, persistent volumes, inter-pod
affinity, topology spread), and the manifest itself, which a fix changes.

A workload's template has no name of its own: the pod is named after the workload. Anything
else (another kind, a template that is no pod) is refused in one line."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gfd.errors import ConfigError
from gfd.fleet.model import (
    Claim,
    Malformed,
    Pod,
    arr,
    claim_of,
    gpu_resource,
    obj,
    objs,
    pod_of,
    text,
)
from gfd.fleet.requests import RequestError, pod_requests

TEMPLATE_AT: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
"""Where each kind keeps the pod it makes."""
CLAIM_KINDS = ("ResourceClaim", "ResourceClaimTemplate")
PERSISTENT = ("persistentVolumeClaim", "ephemeral", "csi", "gcePersistentDisk",
              "awsElasticBlockStore", "azureDisk", "azureFile", "cinder", "iscsi", "rbd", "nfs",
              "fc", "flexVolume", "flocker", "glusterfs", "photonPersistentDisk",
              "portworxVolume", "quobyte", "scaleIO", "storageos", "vsphereVolume", "cephfs")
"""Volume sources the scheduler's volume plugins check against nodes (binding, limits,
zones, restrictions); configMap, secret, emptyDir, projected, downwardAPI, hostPath and image
volumes need nothing of a node that they check."""
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True, slots=True, kw_only=True)
class PodClaim:
    """One entry of ``spec.resourceClaims``."""

    name: str
    claim: str = ""
    """The ResourceClaim: the one named, or the one made from the template
    (``status.resourceClaimStatuses``; "" while none was made)."""
    template: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Container:
    name: str
    kind: str
    """``container``, ``init`` or ``sidecar`` (an init container with ``restartPolicy:
    Always``)."""
    gpu: dict[str, int]
    """Its GPU resources (requests, else limits), as the scheduler holds them."""
    claims: tuple[str, ...] = ()
    """The pod claims (``resources.claims[].name``) it uses."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Subject:
    pod: Pod
    kind: str
    """The kind of the manifest (``Pod``, ``Deployment``...)."""
    manifest: dict[str, Any]
    """The object as given (a fix is a change of it)."""
    containers: tuple[Container, ...] = ()
    pod_claims: tuple[PodClaim, ...] = ()
    not_judged: tuple[tuple[str, str], ...] = ()
    """(scheduler plugin, what of the pod it checks that gfd does not), in filter order."""
    phase: str = ""
    gated: bool = False
    scheduler: str = DEFAULT_SCHEDULER
    given: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """(kind, name) -> the ResourceClaims and ResourceClaimTemplates given with the pod (a
    file): they stand for the cluster's."""
    fetched: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """(kind, name) -> the pod's ResourceClaims and ResourceClaimTemplates as read from the
    cluster (what a fix to one of them starts from)."""

    @property
    def namespace(self) -> str:
        return self.pod.namespace

    @property
    def name(self) -> str:
        return self.pod.name

    @property
    def spec(self) -> dict[str, Any]:
        """The pod spec inside the manifest."""
        return pod_spec(self.manifest, self.kind)

    def raw(self, kind: str, name: str) -> dict[str, Any] | None:
        """A ResourceClaim or ResourceClaimTemplate of the pod as given, else as fetched."""
        return self.given.get((kind, name)) or self.fetched.get((kind, name))


def template_of(manifest: dict[str, Any], kind: str) -> dict[str, Any]:
    """The pod (or pod template) inside a manifest of ``kind``."""
    at: dict[str, Any] = manifest
    for key in TEMPLATE_AT[kind]:
        value = at.get(key)
        if not isinstance(value, dict):
            raise ConfigError(f"{kind} {_name(manifest)}: no pod template at "
                              f"{'.'.join(TEMPLATE_AT[kind])}")
        at = value
    return at


def pod_spec(manifest: dict[str, Any], kind: str) -> dict[str, Any]:
    spec = template_of(manifest, kind).get("spec")
    return spec if isinstance(spec, dict) else {}


def _name(raw: dict[str, Any]) -> str:
    meta = raw.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) and name else "(unnamed)"


def _containers(spec: dict[str, Any]) -> tuple[Container, ...]:
    out = []
    for key, kind in (("initContainers", "init"), ("containers", "container")):
        for i, c in enumerate(objs(spec, key, "spec.")):
            where = f"spec.{key}[{i}]."
            sort = "sidecar" if kind == "init" and c.get("restartPolicy") == "Always" else kind
            try:
                gpu = pod_requests({"containers": [c]}, keep=gpu_resource)
            except RequestError as exc:
                raise Malformed(exc.where.replace("spec.containers[0]", where[:-1]),
                                exc.problem) from None
            names = tuple(text(r, "name", f"{where}resources.claims[].")
                          for r in objs(obj(c, "resources", where), "claims", f"{where}resources."))
            out.append(Container(name=text(c, "name", where), kind=sort, gpu=gpu, claims=names))
    return tuple(out)


def _not_judged(spec: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for key in ("initContainers", "containers"):
        for c in objs(spec, key, "spec."):
            for port in objs(c, "ports", f"spec.{key}[]."):
                host = port.get("hostPort")
                if isinstance(host, int) and host > 0:
                    out.append(("NodePorts", f"host port {host}/{port.get('protocol') or 'TCP'}"))
    volumes = [v for v in objs(spec, "volumes", "spec.") if any(k in v for k in PERSISTENT)]
    if volumes:
        names = ", ".join(text(v, "name", "spec.volumes[].") for v in volumes)
        out.append(("VolumeRestrictions", f"volumes {names} (binding, limits, zones)"))
    spread = [c for c in objs(spec, "topologySpreadConstraints", "spec.")
              if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"]
    if spread:
        keys = ", ".join(sorted({text(c, "topologyKey", "spec.topologySpreadConstraints[].")
                                 for c in spread}))
        out.append(("PodTopologySpread", f"topology spread over {keys}"))
    affinity = obj(spec, "affinity", "spec.")
    for key in ("podAffinity", "podAntiAffinity"):
        if arr(obj(affinity, key, "spec.affinity."), "requiredDuringSchedulingIgnoredDuring"
               "Execution", f"spec.affinity.{key}."):
            out.append(("InterPodAffinity", f"required {key}"))
    return tuple(out)


def read(manifest: dict[str, Any], *, namespace: str = "",
         given: Iterable[dict[str, Any]] = (),
         fetched: Iterable[dict[str, Any]] = ()) -> Subject:
    """The subject a manifest (a Pod or a workload) describes; ``namespace`` where the
    manifest names none; ``given``: ResourceClaims and ResourceClaimTemplates given with it;
    ``fetched``: the cluster's. ConfigError for a kind that makes no pod; Malformed for a field
    of the wrong type."""
    kind = manifest.get("kind")
    if kind not in TEMPLATE_AT:
        raise ConfigError(f"{kind or 'an object without a kind'} {_name(manifest)}: not a Pod "
                          f"or a workload ({', '.join(TEMPLATE_AT)})")
    meta = obj(manifest, "metadata", "")
    template = template_of(manifest, kind)
    pod_raw = copy.deepcopy(template) if kind == "Pod" else {
        "metadata": {**obj(template, "metadata", ""), "name": text(meta, "name", "metadata."),
                     "namespace": text(meta, "namespace", "metadata.")},
        "spec": copy.deepcopy(obj(template, "spec", ""))}
    pod_meta = pod_raw.setdefault("metadata", {})
    if not isinstance(pod_meta, dict):
        raise Malformed("metadata", "not an object")
    pod_meta["namespace"] = pod_meta.get("namespace") or namespace or "default"
    pod = pod_of(pod_raw, always=True)
    assert pod is not None
    spec = obj(pod_raw, "spec", "")
    status = obj(pod_raw, "status", "")
    made = {text(s, "name", "status.resourceClaimStatuses[]."):
            text(s, "resourceClaimName", "status.resourceClaimStatuses[].")
            for s in objs(status, "resourceClaimStatuses", "status.")}
    pod_claims = []
    for i, ref in enumerate(objs(spec, "resourceClaims", "spec.")):
        where = f"spec.resourceClaims[{i}]."
        name = text(ref, "name", where)
        claim, templ = text(ref, "resourceClaimName", where), text(ref, "resourceClaimTemplateName",
                                                                 where)
        pod_claims.append(PodClaim(name=name, claim=claim or made.get(name, ""), template=templ))

    def keyed(objects: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
        return {(str(o.get("kind")), _name(o)): o for o in objects
                if o.get("kind") in CLAIM_KINDS}

    return Subject(pod=pod, kind=str(kind), manifest=manifest, containers=_containers(spec),
                   pod_claims=tuple(pod_claims), not_judged=_not_judged(spec),
                   phase=text(status, "phase", "status."), gated=pod.gated,
                   scheduler=text(spec, "schedulerName", "spec.", DEFAULT_SCHEDULER),
                   given=keyed(given), fetched=keyed(fetched))


def with_manifest(subject: Subject, manifest: dict[str, Any],
                  objects: Iterable[dict[str, Any]] = ()) -> Subject:
    """The subject read again from a changed manifest, with changed claims or templates
    standing for the ones given or fetched."""
    given = {**subject.given, **{(str(o.get("kind")), _name(o)): o for o in objects}}
    return read(manifest, namespace=subject.namespace, given=given.values(),
                fetched=subject.fetched.values())


def claim_from(raw: dict[str, Any], namespace: str, name: str) -> Claim:
    """The claim a ResourceClaim manifest, or a ResourceClaimTemplate (its ``spec.spec``, as
    the resourceclaim controller copies it), describes, as not yet allocated when it is a
    template or carries no status."""
    if raw.get("kind") == "ResourceClaimTemplate":
        spec = obj(obj(raw, "spec", ""), "spec", "spec.")
        raw = {"metadata": {"namespace": namespace, "name": name}, "spec": spec}
    else:
        meta = {**obj(raw, "metadata", ""), "namespace": namespace}
        raw = {**raw, "metadata": meta}
    return claim_of(raw)


def from_pod(pod: Pod) -> Subject:
    """The subject of a pod as the fleet holds it (``gfd fleet --pending``): its model values
    and the claims named in its status; no manifest (no fix), and what the fleet does not
    keep of a pod (ports, volumes) unknown."""
    return Subject(pod=pod, kind="Pod", manifest={},
                   pod_claims=tuple(PodClaim(name=c, claim=c) for c in pod.claims))
