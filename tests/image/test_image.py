"""The built image (``.ci/image``: the Dockerfile on podman, run by runc) as each deployment
path's pod spec runs it: the GPU Operator's, NVIDIA's device-plugin chart's, GFD's static
DaemonSet and Job (tests/data/deployments/) and gfd's own deployment, its kustomize
overlays and its rendered chart (read-only root, every capability dropped, non-root where
the sink allows). Each ``podman
run`` is derived from the pod spec by ``fakes.pods.podman_run`` -- entrypoint and args, env,
volumes, user and capabilities -- with the fake libnvidia-ml.so.1 bind-mounted into the
image's library directory as the NVIDIA container toolkit injects the host's.

Each asserts the labels GFD v0.20 (or gfd, for its own manifests) publishes there, from the
golden files (tests/data/golden/nvml), at the place it publishes them: the feature file in
the host directory, or the fake API server on the host's loopback (--network host), and
for gfd's node mode also the real kube-apiserver of the real-API tier. Also:
SIGTERM ends the daemon with status 0, ``--oneshot`` labels once and exits 0, and the
installed set is exactly the lock's and ``pip check`` clean.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml
from fakes import pods
from fakes.apiserver import FakeApiServer, self_signed
from fakes.sysfs import config_space, gpu_tree, pci_device
from helpers.controlplane import ControlPlane
from helpers.helm import install_pinned_helm
from helpers.machines import MACHINES
from helpers.paths import DATA, ROOT
from helpers.process import config_manager_lookup, wait_for
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gfd.sinks.featurefile import parse

pytestmark = pytest.mark.timeout(300)  # the first test may build the image (.ci/image)

DEPLOYMENTS = DATA / "deployments"
GOLDEN = DATA / "golden" / "nvml"
FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"
PLUGINS_REGISTRY = "/var/lib/kubelet/plugins_registry"
TIMESTAMP = "nvidia.com/gfd.timestamp"
TIME_SLICED = ("version: v1\nsharing:\n  timeSlicing:\n    resources:\n"
               "      - name: nvidia.com/gpu\n        replicas: 4\n")


def golden(name: str, **extra: str) -> dict[str, str]:
    return {**parse((GOLDEN / f"{name}.labels").read_text())[0], **extra}


def without_timestamp(labels: dict[str, str]) -> dict[str, str]:
    assert labels[TIMESTAMP].isdigit(), "GFD writes gfd.timestamp by default"
    return {k: v for k, v in labels.items() if k != TIMESTAMP}


CONTAINER_S = 180
"""Seconds a container step may take (``podman run`` to the first labels, an init container,
``podman kill`` to the exit, an inspect): podman, conmon and runc each start a process and
the container a Python program, every one of them many times slower on a loaded 2-core
machine than on a quiet one. A step ends as soon as its event happens: a passing test never
waits this long."""


class Pod:
    """One pod's container on a GPU node: the host's directories, the fake NVML machine,
    optionally the API server, and the container podman runs."""

    def __init__(self, tmp: Path, image: str, nvml_lib: Path, machine: str,
                 downward: pods.Downward, *, vgpu: tuple[str, str] | None = None) -> None:
        self.tmp, self.image, self.nvml_lib, self.downward = tmp, image, nvml_lib, downward
        tmp.mkdir(parents=True)
        build, dmi, pci_class = MACHINES[machine]
        self.profile = build().write(tmp / "profile.txt")
        sysfs = gpu_tree(tmp / "host-sys", [], pci_class=pci_class)
        for gpu in build().resolve():
            pci_device(sysfs, gpu.pci_bus_id, pci_class=pci_class, config=config_space(vgpu=vgpu))
        (sysfs / "class" / "dmi" / "id").mkdir(parents=True)
        (sysfs / "class" / "dmi" / "id" / "product_name").write_text(dmi)
        self.features_d = tmp / "host-features.d"
        self.features_d.mkdir()
        # The kubelet's plugin registry as the kubelet makes it (root, 0750), without the
        # DRA plugin: --resource-manager auto finds no sign of DRA there.
        self.plugins_registry = tmp / "host-plugins_registry"
        self.plugins_registry.mkdir(mode=0o750)
        self.host = pods.Host(tmp=tmp, paths={"/sys": sysfs, FEATURES_D: self.features_d,
                                              PLUGINS_REGISTRY: self.plugins_registry})
        self.server: FakeApiServer | None = None
        self.name = f"gfd-image-test-{uuid.uuid4().hex[:10]}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tmp / "container.log"

    def api(self, forbidden: Sequence[tuple[str, str]] = ()) -> FakeApiServer:
        server = FakeApiServer(tls=self_signed(self.tmp)).start()
        server.add_node(self.downward.node,
                        labels={"kubernetes.io/hostname": self.downward.node})
        server.add_pod(self.downward.namespace, self.downward.pod,
                       owner_daemonset="gpu-feature-discovery", node_name=self.downward.node)
        for verb, resource in forbidden:
            server.forbid(verb, resource)
        sa = server.write_service_account(self.tmp / "serviceaccount",
                                          namespace=self.downward.namespace)
        self.host.api = (server.port, sa)
        self.server = server
        return server

    def start(self, doc: dict[str, Any], container: str,
              extra_env: dict[str, str] | None = None) -> list[str]:
        """Run the pod's init containers of this image to completion, then start
        ``container``; returns its ``podman run`` command."""
        for init in pods.init_containers_of_image(doc, container):
            argv = pods.podman_run(doc, init, image=self.image, host=self.host,
                                   downward=self.downward, nvml_lib=self.nvml_lib,
                                   nvml_profile=self.profile,
                                   container_name=f"{self.name}-{init}")
            argv.insert(argv.index("run") + 1, "--rm")
            done = subprocess.run(argv,
                                  capture_output=True, text=True, timeout=CONTAINER_S, check=False)
            assert done.returncode == 0, f"init container {init}: {done.stdout}{done.stderr}"
        argv = pods.podman_run(doc, container, image=self.image, host=self.host,
                               downward=self.downward, nvml_lib=self.nvml_lib,
                               nvml_profile=self.profile, container_name=self.name,
                               extra_env=extra_env)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        return argv

    def main_pid(self) -> int:
        """The container's main process as the host sees it."""
        def running() -> bool:
            return self.inspect("{{.State.Pid}}") not in ("", "0")
        wait_for(running, timeout=CONTAINER_S)
        return int(self.inspect("{{.State.Pid}}"))

    def inspect(self, template: str) -> str:
        return subprocess.run([*pods.PODMAN, "inspect", "--format", template, self.name],
                              capture_output=True, text=True, timeout=CONTAINER_S,
                              check=False).stdout.strip()

    def terminate(self) -> int:
        """SIGTERM, as the kubelet stops a container; the container's exit status."""
        subprocess.run([*pods.PODMAN, "kill", "--signal", "TERM", self.name],
                       capture_output=True, timeout=CONTAINER_S, check=True)
        assert self.proc is not None
        return self.proc.wait(timeout=CONTAINER_S)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def feature_file(self) -> Path:
        return self.features_d / "gfd"

    def nodefeature_labels(self) -> dict[str, str]:
        assert self.server is not None
        obj = self.server.nodefeature(self.downward.namespace,
                                      f"nvidia-features-for-{self.downward.node}")
        return dict((obj or {}).get("spec", {}).get("labels", {}))

    def close(self) -> None:
        subprocess.run([*pods.PODMAN, "rm", "--force", "--time", "0", self.name],
                       capture_output=True, timeout=CONTAINER_S, check=False)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.server is not None:
            self.server.stop()


@pytest.fixture
def pod_factory(image: str, tmp_path: Path, fake_nvml_lib: Path) -> Iterator[Any]:
    made: list[Pod] = []

    def make(machine: str, downward: pods.Downward | None = None, **kw: Any) -> Pod:
        pod = Pod(tmp_path / f"pod{len(made)}", image, fake_nvml_lib, machine,
                  downward or pods.Downward(), **kw)
        made.append(pod)
        return pod

    yield make
    for pod in made:
        pod.close()


def workload(name: str) -> dict[str, Any]:
    return pods.load_workload(DEPLOYMENTS / f"{name}.yaml")


# ------------------------------------------------------------------------------- the image


def in_image(image: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*pods.PODMAN, "run", "--rm", *pods.RLIMITS, "--network", "none",
                           "--entrypoint", argv[0], image, *argv[1:]],
                          capture_output=True, text=True, timeout=CONTAINER_S, check=False)


def test_the_image_holds_exactly_the_locked_wheels_and_pip_check_is_clean(image: str) -> None:
    check = in_image(image, "pip", "check")
    assert check.returncode == 0, check.stdout + check.stderr
    freeze = in_image(image, "pip", "list", "--format", "freeze", "--path",
                      "/usr/local/lib/python3.11/dist-packages", "--path",
                      "/usr/local/lib/python3.11/site-packages")
    assert freeze.returncode == 0, freeze.stderr
    installed = {canonicalize_name(n): v for n, _, v in
                 (line.partition("==") for line in freeze.stdout.split())}
    assert installed.pop("gfd", None), "gfd's own wheel"
    locked = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line and not line.startswith((" ", "#")):
            pin = Requirement(line.rstrip("\\").strip())
            if pin.marker is None or pin.marker.evaluate({"sys_platform": "linux",
                                                           "platform_system": "Linux"}):
                locked[canonicalize_name(pin.name)] = str(pin.specifier).removeprefix("==")
    assert installed == locked


def test_the_image_runs_this_checkouts_gfd(image: str) -> None:
    """Every module of gfd/ is in the image byte for byte (a stale GFD_IMAGE, or a builder
    that reused a cached layer, fails here)."""
    listing = in_image(image, "python3", "-c",
                       "import gfd, hashlib, pathlib; root = pathlib.Path(gfd.__file__).parent; "
                       "print('\\n'.join(f'{p.relative_to(root)} '"
                       "f'{hashlib.sha256(p.read_bytes()).hexdigest()}' "
                       "for p in sorted(root.rglob('*.py'))))")
    assert listing.returncode == 0, listing.stderr
    installed = dict(line.split() for line in listing.stdout.splitlines())
    source = ROOT / "gfd"
    expected = {str(p.relative_to(source)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(source.rglob("*.py")) if "__pycache__" not in p.parts}
    assert installed == expected


# ----------------------------------------------------------------------- GFD's static files


def test_static_oneshot_job_labels_once_and_exits_zero(pod_factory: Any) -> None:
    pod = pod_factory("t4x4")
    pod.start(workload("static-job"), "gpu-feature-discovery")
    assert pod.proc.wait(timeout=CONTAINER_S) == 0, pod.output()
    labels, expires = parse(pod.feature_file.read_text())
    assert expires is None, "nothing refreshes a one-shot's file: it must not lapse"
    assert without_timestamp(labels) == golden("t4x4__none__compat")


def test_static_daemonset_runs_as_root_found_by_argv0_and_ends_on_sigterm(
        pod_factory: Any) -> None:
    pod = pod_factory("hgx_h100")
    argv = pod.start(workload("static-daemonset"), "gpu-feature-discovery")
    assert '["/usr/bin/gpu-feature-discovery"]' in argv, "the spec's command is the entrypoint"
    wait_for(lambda: pod.feature_file.exists(), timeout=CONTAINER_S)
    labels, _ = parse(pod.feature_file.read_text())
    assert without_timestamp(labels) == golden("hgx_h100__none__compat")
    pid = pod.main_pid()
    assert pid in config_manager_lookup("gpu-feature-discovery"), "named as GFD names it"
    assert pod.inspect("{{.Config.User}}") in ("", "0:0", "0"), "the image's default user"
    assert pod.terminate() == 0, pod.output()
    assert "Traceback" not in pod.output()


# ------------------------------------------------------------- the GPU Operator, the chart

OPERATOR_RBAC_DENIES = [
    ("patch", "nodefeatures"), ("delete", "nodefeatures"), ("watch", "nodefeatures"),
    ("create", "nodes"), ("update", "nodes"), ("patch", "nodes"), ("delete", "nodes"),
    ("list", "pods"), ("watch", "pods"), ("create", "pods"), ("update", "pods"),
    ("patch", "pods"), ("delete", "pods"),
]


def test_gpu_operator_publishes_a_nodefeature_and_reloads_on_config_managers_sighup(
        pod_factory: Any) -> None:
    pod = pod_factory("hgx_h100", pods.Downward(namespace="gpu-operator"))
    pod.host.add_config_map("device-plugin-config", default="version: v1\n", ts4=TIME_SLICED)
    pod.host.select_config("default")
    pod.api(OPERATOR_RBAC_DENIES)
    pod.start(workload("gpu-operator"), "gpu-feature-discovery")
    wait_for(lambda: pod.nodefeature_labels() != {}, timeout=CONTAINER_S)
    assert without_timestamp(pod.nodefeature_labels()) == golden(
        "hgx_h100__none__compat", **{"nvidia.com/mig.strategy": "single"})
    assert not pod.feature_file.exists(), "NodeFeature mode writes no file"
    # the config-manager sidecar: re-point the symlink, find gfd by argv[0], SIGHUP it
    pod.host.select_config("ts4")
    assert pod.main_pid() in config_manager_lookup("gpu-feature-discovery")
    subprocess.run([*pods.PODMAN, "kill", "--signal", "HUP", pod.name], capture_output=True,
                   timeout=CONTAINER_S, check=True)
    wait_for(lambda: pod.nodefeature_labels().get("nvidia.com/gpu.replicas") == "4",
             timeout=CONTAINER_S)
    assert pod.nodefeature_labels()["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert pod.terminate() == 0, pod.output()


def test_gpu_operator_on_openshift_writes_the_feature_file_with_vgpu_labels(
        pod_factory: Any) -> None:
    pod = pod_factory("hgx_h100", vgpu=("550.54.16", "r550_40"))
    pod.host.add_config_map("device-plugin-config", default="version: v1\n")
    pod.host.select_config("default")
    pod.start(workload("gpu-operator"), "gpu-feature-discovery",
              extra_env={"USE_NODE_FEATURE_API": "false"})
    wait_for(lambda: pod.feature_file.exists(), timeout=CONTAINER_S)
    labels, _ = parse(pod.feature_file.read_text())
    assert without_timestamp(labels) == golden(
        "hgx_h100__none__compat", **{"nvidia.com/mig.strategy": "single",
                                     "nvidia.com/vgpu.present": "true",
                                     "nvidia.com/vgpu.host-driver-version": "550.54.16",
                                     "nvidia.com/vgpu.host-driver-branch": "r550_40"})
    assert pod.terminate() == 0, pod.output()
    assert pod.feature_file.exists(), "labels stay after exit"


CHART_RBAC_DENIES = [
    ("patch", "nodefeatures"), ("delete", "nodefeatures"),
    ("create", "nodes"), ("update", "nodes"), ("patch", "nodes"), ("delete", "nodes"),
    ("list", "pods"), ("create", "pods"), ("update", "pods"), ("patch", "pods"),
    ("delete", "pods"),
]


def test_device_plugin_chart_publishes_mixed_mig_labels_as_a_nodefeature(
        pod_factory: Any) -> None:
    pod = pod_factory("dgx_a100_layout", pods.Downward(
        namespace="nvidia-device-plugin",
        pod="nvdp-nvidia-device-plugin-gpu-feature-discovery-q9zt4"))
    pod.host.add_config_map("nvdp-nvidia-device-plugin-configs", default="version: v1\n")
    pod.host.select_config("default")
    pod.api(CHART_RBAC_DENIES)
    pod.start(workload("device-plugin-chart"), "gpu-feature-discovery-ctr")
    wait_for(lambda: pod.nodefeature_labels() != {}, timeout=CONTAINER_S)
    assert without_timestamp(pod.nodefeature_labels()) == golden(
        "dgx_a100_layout__mixed__compat")
    assert pod.terminate() == 0, pod.output()


# ------------------------------------------------------------------------ gfd's manifests


def helm_unavailable(reason: str) -> NoReturn:
    if os.environ.get("GFD_REQUIRE_HELM"):
        pytest.fail(f"helm is required here (GFD_REQUIRE_HELM): {reason}")
    pytest.skip(reason)


def rendered(source: str, mode: str) -> dict[str, Any]:
    """The DaemonSet of gfd's own deployment in one mode: manifests/overlays/<mode> rendered
    by ``kubectl kustomize``, or charts/gfd by ``helm template --set mode=<mode>``."""
    if source == "chart":
        helm = shutil.which("helm") or str(install_pinned_helm(helm_unavailable))
        argv = [helm, "template", "gfd", str(ROOT / "charts" / "gfd"), "--namespace", "gfd",
                "--set", f"mode={mode}"]
    elif shutil.which("kustomize"):
        argv = ["kustomize", "build", str(ROOT / "manifests" / "overlays" / mode)]
    elif shutil.which("kubectl"):
        argv = ["kubectl", "kustomize", str(ROOT / "manifests" / "overlays" / mode)]
    else:
        pytest.skip("no kustomize (or kubectl) on PATH to render manifests/")
    text = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True).stdout
    (doc,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "DaemonSet"]
    return dict(doc)


SOURCES = ["kustomize", "chart"]


@pytest.mark.parametrize("source", SOURCES)
def test_gfds_file_mode_runs_read_only_without_capabilities(pod_factory: Any,
                                                            source: str) -> None:
    """The init container (uid 0, CHOWN alone) hands the host's root-owned features.d to
    gfd's group; gfd writes the feature file as whatever user the spec says, with no
    capability and a read-only root."""
    doc = rendered(source, "file")
    pod = pod_factory("hgx_h100", pods.Downward(namespace="gfd"))
    pod.features_d.chmod(0o755)
    argv = pod.start(doc, "gfd")
    assert "--read-only" in argv and ["--cap-drop", "ALL"] == argv[argv.index("--cap-drop"):
                                                                 argv.index("--cap-drop") + 2]
    wait_for(lambda: pod.feature_file.exists(), timeout=CONTAINER_S)
    labels, _ = parse(pod.feature_file.read_text())
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8"
    pid = pod.main_pid()
    status = Path(f"/proc/{pid}/status").read_text()
    assert "CapEff:\t0000000000000000" in status, "every capability dropped"
    ctx = pods.container(doc, "gfd")["securityContext"]
    uid = next(x for x in status.splitlines() if x.startswith("Uid:")).split()[1]
    assert int(uid) == ctx["runAsUser"]
    assert pod.feature_file.stat().st_uid == ctx["runAsUser"]
    if ctx["runAsUser"] != 0:  # handed over by the init container
        assert pod.features_d.stat().st_gid == ctx["runAsGroup"]
        assert pod.features_d.stat().st_mode & 0o7777 == 0o1775
    assert pod.inspect("{{.HostConfig.ReadonlyRootfs}}") == "true"
    assert pod.terminate() == 0, pod.output()


@pytest.mark.parametrize("source", SOURCES)
def test_gfds_node_mode_labels_the_node_as_a_non_root_user(pod_factory: Any,
                                                           source: str) -> None:
    doc = rendered(source, "node")
    pod = pod_factory("hgx_h100", pods.Downward(namespace="gfd", pod="gfd-x7k2p"))
    server = pod.api()
    pod.start(doc, "gfd")

    def labelled() -> bool:
        return "nvidia.com/gpu.product" in (server.node(pod.downward.node)["metadata"]
                                            .get("labels") or {})
    wait_for(labelled, timeout=CONTAINER_S)
    labels = server.node(pod.downward.node)["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    pid = pod.main_pid()
    uids = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines()
                if x.startswith("Uid:"))
    assert uids.split()[1:] == ["65532"] * 4, uids
    assert pod.terminate() == 0, pod.output()
    assert not list(pod.features_d.iterdir()), "the Node sink writes no file"


# ------------------------------------------------------------- the real kube-apiserver


@pytest.mark.parametrize("source", SOURCES)
def test_gfds_node_mode_labels_a_real_api_servers_node_as_the_manifests_service_account(
        pod_factory: Any, control_plane: ControlPlane, source: str) -> None:
    """The same pod on kube-apiserver 1.36 (the real-API tier's control plane): in-cluster
    credentials of the ServiceAccount of manifests/base bound to exactly the RBAC of
    manifests/overlays/node, a TokenRequest token, the server's own CA."""
    doc = rendered(source, "node")
    node = f"image-{source}-{uuid.uuid4().hex[:6]}"
    control_plane.install_rbac("node")
    control_plane.create_node(node)
    pod = pod_factory("hgx_h100", pods.Downward(namespace="gfd", node=node, pod="gfd-r8m4q"))
    sa = pod.tmp / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(control_plane.token("gfd", "gfd"))
    (sa / "ca.crt").write_bytes(control_plane.pki.ca_cert.read_bytes())
    (sa / "namespace").write_text("gfd")
    pod.host.api = (control_plane.port, sa)
    try:
        pod.start(doc, "gfd")

        def labels() -> dict[str, str]:
            obj = control_plane.get(f"/api/v1/nodes/{node}") or {}
            return dict(obj.get("metadata", {}).get("labels") or {})
        wait_for(lambda: "nvidia.com/gpu.product" in labels(), timeout=CONTAINER_S)
        published = labels()
        assert published["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert published["nvidia.com/gpu.count"] == "8"
        assert published["kubernetes.io/hostname"] == node, "the kubelet's labels stay"
        managers = {f["manager"] for f in (control_plane.get(f"/api/v1/nodes/{node}") or {})
                    ["metadata"]["managedFields"]}
        assert "gfd" in managers, managers
        assert pod.terminate() == 0, pod.output()
        assert "Traceback" not in pod.output()
    finally:
        control_plane.delete(f"/api/v1/nodes/{node}", wait=False)
