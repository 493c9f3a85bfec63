"""The image's entrypoint run the way each deployment path's pod spec runs it: the GPU
Operator's, NVIDIA's device-plugin Helm chart's, GFD's static DaemonSet and Job
(tests/data/deployments/) -- command, args, env and mounts as written, as the image's
default user, over the fake NVML (tests/fakes/pods.py emulates the container).

Each asserts what GFD v0.20 would publish there (the golden label files, derived from GFD's
rules), at the place GFD would publish it, and for the Operator and the chart that GFD's
config-manager finds the process by argv[0] and its SIGHUP reloads the config.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes import pods
from fakes.apiserver import FakeApiServer, self_signed
from fakes.fakenvml import Machine
from fakes.sysfs import config_space, gpu_tree, pci_device
from helpers.machines import MACHINES
from helpers.paths import DATA
from helpers.process import config_manager_lookup, wait_for

from gfd.sinks.featurefile import parse

DEPLOYMENTS = DATA / "deployments"
GOLDEN = DATA / "golden" / "nvml"
FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"
TIMESTAMP = "nvidia.com/gfd.timestamp"
TIME_SLICED = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
               "      - name: nvidia.com/gpu\n        replicas: 4\n")


@pytest.fixture(scope="module")
def emulation() -> None:
    reason = pods.unavailable()
    if reason:
        pytest.skip(f"cannot emulate a container here: {reason}")


def golden(name: str, **extra: str) -> dict[str, str]:
    labels = parse((GOLDEN / f"{name}.labels").read_text())[0]
    return {**labels, **extra}


class Node:
    """A GPU node for one pod: its host directories, its GPUs (fake NVML) and its API."""

    def __init__(self, tmp: Path, machine_name: str, nvml_lib: Path, *,
                 vgpu: tuple[str, str] | None = None) -> None:
        self.nvml_lib = nvml_lib
        build, dmi, pci_class = MACHINES[machine_name]
        self.machine: Machine = build()
        self.profile = self.machine.write(tmp / "profile.txt")
        sysfs = gpu_tree(tmp / "host-sys", [], pci_class=pci_class)
        for gpu in self.machine.resolve():
            pci_device(sysfs, gpu.pci_bus_id, pci_class=pci_class,
                       config=config_space(vgpu=vgpu))
        dmi_file = sysfs / "class" / "dmi" / "id" / "product_name"
        dmi_file.parent.mkdir(parents=True)
        dmi_file.write_text(dmi)
        self.features_d = tmp / "host-features.d"
        self.features_d.mkdir()
        self.host = pods.Host(tmp=tmp, paths={"/sys": sysfs, FEATURES_D: self.features_d})
        self.server: FakeApiServer | None = None

    @property
    def feature_file(self) -> Path:
        return self.features_d / "gfd"

    def api(self, downward: pods.Downward, *, forbidden: list[tuple[str, str]]) -> FakeApiServer:
        """An HTTPS API server with this node, gfd's pod (owned by a DaemonSet) and the RBAC
        the deployment grants (everything else forbidden)."""
        server = FakeApiServer(tls=self_signed(self.host.tmp)).start()
        server.add_node(downward.node, labels={"kubernetes.io/hostname": downward.node})
        server.add_pod(downward.namespace, downward.pod, owner_daemonset="gpu-feature-discovery",
                       node_name=downward.node)
        for verb, resource in forbidden:
            server.forbid(verb, resource)
        sa = server.write_service_account(self.host.tmp / "serviceaccount",
                                          namespace=downward.namespace)
        self.host.api = (server.port, sa)
        self.server = server
        return server

    def nodefeature_labels(self, downward: pods.Downward) -> dict[str, str]:
        assert self.server is not None
        obj = self.server.nodefeature(downward.namespace, f"nvidia-features-for-{downward.node}")
        return dict((obj or {}).get("spec", {}).get("labels", {}))


@pytest.fixture
def running() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def start(node: Node, workload: str, container: str, procs: list[subprocess.Popen[bytes]], *,
          downward: pods.Downward, extra_env: dict[str, str] | None = None,
          ) -> subprocess.Popen[bytes]:
    doc = pods.load_workload(DEPLOYMENTS / f"{workload}.yaml")
    runtime = {"LD_LIBRARY_PATH": str(node.nvml_lib),
               "FAKE_NVML_PROFILE": str(node.profile)}
    proc = pods.start(doc, container, host=node.host, downward=downward, runtime_env=runtime,
                      extra_env=extra_env, log=node.host.tmp / f"{container}.log")
    procs.append(proc)
    return proc


def log_of(node: Node, container: str) -> str:
    return (node.host.tmp / f"{container}.log").read_text(errors="replace")


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError("no Uid line")


def without_timestamp(labels: dict[str, str]) -> dict[str, str]:
    assert labels[TIMESTAMP].isdigit(), "GFD writes gfd.timestamp by default"
    return {k: v for k, v in labels.items() if k != TIMESTAMP}


def test_pods_are_emulated_with_the_specs_argv0_as_root(
        emulation: None, tmp_path: Path, fake_nvml_lib: Path,
        running: list[subprocess.Popen[bytes]]) -> None:
    """Sanity of the emulation itself: argv[0] as the pod spec writes it, uid 0 (the image's
    default user), the container sees its volumes, the host's /etc is untouched."""
    host_had_features_d = Path(FEATURES_D).exists()
    node = Node(tmp_path, "hgx_h100", fake_nvml_lib)
    proc = start(node, "static-daemonset", "gpu-feature-discovery", running,
                 downward=pods.Downward(), extra_env={"GFD_SLEEP_INTERVAL": "1h"})
    wait_for(lambda: node.feature_file.exists(), timeout=20)
    assert uid_of(proc.pid) == 0
    assert proc.pid in config_manager_lookup("gpu-feature-discovery")
    assert Path(FEATURES_D).exists() is host_had_features_d, "the host's /etc is untouched"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


# ----------------------------------------------------------------------------- the GPU Operator

OPERATOR_RBAC_DENIES = [  # its Role: nodefeatures get/list/create/update; pods get; nodes read
    ("patch", "nodefeatures"), ("delete", "nodefeatures"), ("watch", "nodefeatures"),
    ("create", "nodes"), ("update", "nodes"), ("patch", "nodes"), ("delete", "nodes"),
    ("list", "pods"), ("watch", "pods"), ("create", "pods"), ("update", "pods"),
    ("patch", "pods"), ("delete", "pods"),
]


def test_gpu_operator_publishes_gfds_labels_as_a_nodefeature_and_reloads_on_sighup(
        emulation: None, tmp_path: Path, fake_nvml_lib: Path,
        running: list[subprocess.Popen[bytes]]) -> None:
    downward = pods.Downward(namespace="gpu-operator")
    node = Node(tmp_path, "hgx_h100", fake_nvml_lib)
    node.host.add_config_map("device-plugin-config", default="version: v1\n", ts4=TIME_SLICED)
    node.host.select_config("default")  # the config-manager init container's work
    server = node.api(downward, forbidden=OPERATOR_RBAC_DENIES)
    try:
        proc = start(node, "gpu-operator", "gpu-feature-discovery", running, downward=downward)
        wait_for(lambda: node.nodefeature_labels(downward) != {}, timeout=20)
        labels = node.nodefeature_labels(downward)
        # MIG_STRATEGY=single on GPUs without MIG: GFD's none labels plus mig.strategy
        assert without_timestamp(labels) == golden("hgx_h100__none__compat",
                                                   **{"nvidia.com/mig.strategy": "single"})
        assert not node.feature_file.exists(), "NodeFeature mode writes no file"
        obj = server.nodefeature(downward.namespace, f"nvidia-features-for-{downward.node}")
        assert obj is not None
        assert [o["kind"] for o in obj["metadata"]["ownerReferences"]] == ["DaemonSet"]

        # the config-manager sidecar: re-point the symlink, find gfd by argv[0], SIGHUP it
        node.host.select_config("ts4")
        targets = config_manager_lookup("gpu-feature-discovery")
        assert proc.pid in targets
        os.kill(proc.pid, signal.SIGHUP)
        wait_for(lambda: node.nodefeature_labels(downward).get("nvidia.com/gpu.replicas")
                 == "4", timeout=10)
        labels = node.nodefeature_labels(downward)
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
        assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert node.nodefeature_labels(downward)["nvidia.com/gpu.replicas"] == "4", (
            "labels stay after exit")
    finally:
        server.stop()
    assert "Traceback" not in log_of(node, "gpu-feature-discovery")


def test_gpu_operator_on_openshift_writes_the_feature_file_with_vgpu_labels(
        emulation: None, tmp_path: Path, fake_nvml_lib: Path,
        running: list[subprocess.Popen[bytes]]) -> None:
    """USE_NODE_FEATURE_API=false (the Operator sets it on OpenShift): the feature file in the
    features.d hostPath, GFD's labels including the vgpu.* labels the Operator reads (root
    reads the whole PCI config space), no expiry (GFD's file has none)."""
    node = Node(tmp_path, "hgx_h100", fake_nvml_lib, vgpu=("550.54.16", "r550_40"))
    node.host.add_config_map("device-plugin-config", default="version: v1\n")
    node.host.select_config("default")
    proc = start(node, "gpu-operator", "gpu-feature-discovery", running,
                 downward=pods.Downward(), extra_env={"USE_NODE_FEATURE_API": "false"})
    wait_for(lambda: node.feature_file.exists(), timeout=20)
    labels, expires = parse(node.feature_file.read_text())
    assert expires is None
    assert without_timestamp(labels) == golden(
        "hgx_h100__none__compat", **{"nvidia.com/mig.strategy": "single",
                                     "nvidia.com/vgpu.present": "true",
                                     "nvidia.com/vgpu.host-driver-version": "550.54.16",
                                     "nvidia.com/vgpu.host-driver-branch": "r550_40"})
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert node.feature_file.exists(), "never deleted on exit (GFD deletes it)"


# --------------------------------------------------------------- the device plugin's chart

CHART_RBAC_DENIES = [  # its ClusterRole: nodefeatures get/list/watch/create/update; pods get
    ("patch", "nodefeatures"), ("delete", "nodefeatures"),
    ("create", "nodes"), ("update", "nodes"), ("patch", "nodes"), ("delete", "nodes"),
    ("list", "pods"), ("create", "pods"), ("update", "pods"), ("patch", "pods"),
    ("delete", "pods"),
]


def test_device_plugin_chart_publishes_mixed_mig_labels_as_a_nodefeature(
        emulation: None, tmp_path: Path, fake_nvml_lib: Path,
        running: list[subprocess.Popen[bytes]]) -> None:
    downward = pods.Downward(namespace="nvidia-device-plugin",
                             pod="nvdp-nvidia-device-plugin-gpu-feature-discovery-q9zt4")
    node = Node(tmp_path, "dgx_a100_layout", fake_nvml_lib)
    node.host.add_config_map("nvdp-nvidia-device-plugin-configs", default="version: v1\n")
    node.host.select_config("default")
    server = node.api(downward, forbidden=CHART_RBAC_DENIES)
    try:
        proc = start(node, "device-plugin-chart", "gpu-feature-discovery-ctr", running,
                     downward=downward)
        wait_for(lambda: node.nodefeature_labels(downward) != {}, timeout=20)
        assert without_timestamp(node.nodefeature_labels(downward)) == golden(
            "dgx_a100_layout__mixed__compat")
        assert proc.pid in config_manager_lookup("gpu-feature-discovery")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        server.stop()


# ------------------------------------------------------------------ GFD's static manifests


def test_static_daemonset_without_node_name_writes_the_feature_file(
        emulation: None, tmp_path: Path, fake_nvml_lib: Path,
        running: list[subprocess.Popen[bytes]]) -> None:
    """GFD v0.20 exits here ('required flag node-name not set'): gfd writes the feature file
    the manifest mounts, and says why."""
    node = Node(tmp_path, "hgx_h100", fake_nvml_lib)
    proc = start(node, "static-daemonset", "gpu-feature-discovery", running,
                 downward=pods.Downward())
    wait_for(lambda: node.feature_file.exists(), timeout=20)
    labels, expires = parse(node.feature_file.read_text())
    assert expires is None
    assert without_timestamp(labels) == golden("hgx_h100__none__compat")
    assert proc.poll() is None, "keeps running"
    wait_for(lambda: "NODE_NAME is not set" in log_of(node, "gpu-feature-discovery"))
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0


def test_static_oneshot_job_labels_once_and_exits_zero(
        emulation: None, tmp_path: Path, fake_nvml_lib: Path,
        running: list[subprocess.Popen[bytes]]) -> None:
    node = Node(tmp_path, "t4x4", fake_nvml_lib)
    proc = start(node, "static-job", "gpu-feature-discovery", running, downward=pods.Downward())
    assert proc.wait(timeout=30) == 0, log_of(node, "gpu-feature-discovery")
    labels, expires = parse(node.feature_file.read_text())
    assert expires is None, "nothing refreshes a one-shot's file: it must not lapse"
    assert without_timestamp(labels) == golden("t4x4__none__compat")
