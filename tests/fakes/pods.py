"""Run one container of a pod spec the way the kubelet and the container runtime would,
without a container engine: the command and args as written (argv[0] too), the env with
the downward API resolved, the volumes mounted at their mountPaths, the image's own
environment and entrypoint (read from the Dockerfile), as the image's default user (root).
``pod_init.py`` builds the container's root in a private mount namespace and execs.

What stands in for what:

* the image is this checkout's virtualenv, where gfd is installed (the Dockerfile's
  ``/usr/bin/gpu-feature-discovery`` link is made inside the container's /usr);
* the NVIDIA container runtime's injection of ``libnvidia-ml.so.1`` is the fake NVML
  library (``LD_LIBRARY_PATH`` and ``FAKE_NVML_PROFILE``, the only variables not from the
  pod spec, the image or the kubelet);
* hostPath, emptyDir and configMap volumes are directories under the test's tmp_path;
* in-cluster API credentials: the kubelet's ``KUBERNETES_SERVICE_HOST``/``PORT`` and a
  service-account volume for a fake API server serving HTTPS.

``podman_run`` turns the same pod spec, through the same parsing, into the ``podman run``
that starts it from the real image (tests/image/), with the securityContext applied.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from helpers.dockerfile import final_stage

POD_INIT = Path(__file__).with_name("pod_init.py")
DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class Downward:
    """What the downward API and the kubelet fill in."""

    node: str = "gpu-node-1"
    namespace: str = "gpu-operator"
    pod: str = "gpu-feature-discovery-x7k2p"

    def field(self, path: str) -> str:
        return {"spec.nodeName": self.node, "metadata.namespace": self.namespace,
                "metadata.name": self.pod}[path]


@dataclass
class Host:
    """The node: a directory per hostPath, emptyDir and configMap volume, and the API."""

    tmp: Path
    paths: dict[str, Path] = field(default_factory=dict)
    """hostPath path -> directory standing in for it."""
    config_maps: dict[str, Path] = field(default_factory=dict)
    api: tuple[int, Path] | None = None
    """(HTTPS port of the fake API server, service-account directory)."""

    def empty_dir(self, name: str) -> Path:
        directory = self.tmp / "emptydir" / name
        directory.mkdir(parents=True, exist_ok=True)
        return directory

    def add_config_map(self, name: str, **files: str) -> None:
        """A ConfigMap ``name`` holding these keys, for the pod's configMap volumes."""
        directory = self.tmp / "configmap" / name
        directory.mkdir(parents=True)
        for key, text in files.items():
            (directory / key).write_text(text)
        self.config_maps[name] = directory

    def select_config(self, key: str) -> None:
        """What GFD's config-manager does: /config/config.yaml -> /available-configs/<key>,
        swapped in whole by a rename."""
        link = self.empty_dir("config") / "config.yaml"
        tmp = link.with_name(".config.yaml.new")
        tmp.symlink_to(f"/available-configs/{key}")
        tmp.replace(link)


def load_workload(path: Path) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return dict(doc)


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc["spec"]["template"]["spec"])


def container(doc: dict[str, Any], name: str) -> dict[str, Any]:
    """The container (or init container) ``name`` of the workload's pod spec."""
    spec = pod_spec(doc)
    for c in [*spec["containers"], *(spec.get("initContainers") or [])]:
        if c["name"] == name:
            return dict(c)
    raise KeyError(name)


def init_containers_of_image(doc: dict[str, Any], name: str) -> list[str]:
    """The init containers that run the same image as container ``name``, in order: gfd's
    own (the kubelet runs each to completion first). Others, from other images (the GPU
    Operator's config-manager), are the test's to stand in for."""
    image = container(doc, name).get("image")
    return [c["name"] for c in pod_spec(doc).get("initContainers") or []
            if c.get("image") == image]


def image_env() -> dict[str, str]:
    env = {}
    for keyword, rest in final_stage():
        if keyword == "ENV":
            env.update(tok.split("=", 1) for tok in shlex.split(rest) if "=" in tok)
    return env


def image_entrypoint() -> list[str]:
    entries = [rest for keyword, rest in final_stage() if keyword == "ENTRYPOINT"]
    return list(json.loads(entries[-1]))


def container_env(c: dict[str, Any], downward: Downward) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in c.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
        else:
            env[item["name"]] = downward.field(item["valueFrom"]["fieldRef"]["fieldPath"])
    return env


def mounts(doc: dict[str, Any], c: dict[str, Any], host: Host) -> list[dict[str, Any]]:
    volumes = {v["name"]: v for v in pod_spec(doc).get("volumes") or []}
    out = []
    for m in c.get("volumeMounts") or []:
        volume = volumes[m["name"]]
        if "hostPath" in volume:
            source = host.paths[volume["hostPath"]["path"]]
        elif "emptyDir" in volume:
            source = host.empty_dir(m["name"])
        elif "configMap" in volume:
            source = host.config_maps[volume["configMap"]["name"]]
        else:
            raise ValueError(f"volume {m['name']}: unsupported source")
        out.append({"source": str(source), "target": m["mountPath"],
                    "read_only": bool(m.get("readOnly"))})
    if host.api is not None:
        out.append({"source": str(host.api[1]), "target": SERVICE_ACCOUNT, "read_only": True})
    return out


def unavailable() -> str | None:
    """Why pods cannot be emulated here (no mount namespace, overlay or chroot), or None."""
    try:
        result = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "--", sys.executable, "-c",
             "import subprocess; subprocess.run(['mount', '-t', 'tmpfs', 'tmpfs', '/mnt'], "
             "check=True)"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare: {exc}"
    if result.returncode != 0:
        return f"no private mount namespace here: {result.stderr.strip()[-200:]}"
    return None


def start(doc: dict[str, Any], name: str, *, host: Host, downward: Downward,
          runtime_env: dict[str, str], extra_env: dict[str, str] | None = None,
          log: Path) -> subprocess.Popen[bytes]:
    """Start container ``name`` of workload ``doc`` as its pod spec says; returns the process
    (its pid is the container's main process)."""
    c = container(doc, name)
    argv = [*(c.get("command") or image_entrypoint()), *(c.get("args") or [])]
    venv_bin = str(Path(sys.executable).parent)
    env = {"PATH": f"{venv_bin}:{DEBIAN_PATH}", "HOSTNAME": downward.pod, "HOME": "/root",
           **image_env(), **container_env(c, downward), **runtime_env, **(extra_env or {})}
    if host.api is not None:
        env |= {"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(host.api[0])}
    plan = {
        "root": str(host.tmp / "root"),
        "argv": argv,
        "env": env,
        "mounts": mounts(doc, c, host),
        "links": [{"path": "/usr/bin/gpu-feature-discovery",
                   "target": f"{venv_bin}/gpu-feature-discovery"}],
    }
    plan_file = host.tmp / f"plan-{name}.json"
    plan_file.write_text(json.dumps(plan, indent=2))
    with log.open("wb") as out:
        return subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--", sys.executable,
             str(POD_INIT), str(plan_file)], stdout=out, stderr=subprocess.STDOUT,
            env={"PATH": os.environ.get("PATH", DEBIAN_PATH)})


# ------------------------------------------------------------- the real image, with podman

NVML_IN_IMAGE = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
"""Where the NVIDIA container toolkit bind-mounts the host's NVML in a Debian-based image."""
FAKE_NVML_PROFILE = "/run/fake-nvml/profile.txt"
PODMAN = ("podman", "--runtime", "runc")
"""runc: crun fails on hybrid cgroups (TESTING.md, "The image, built and run")."""
RLIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")
"""Within the host's: root here lacks CAP_SYS_RESOURCE to raise them."""


def security(doc: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """The securityContext as container-runtime options: the container's fields over the
    pod's (user, group), then capabilities, privilege escalation and a read-only root. A
    read-only root gets no tmpfs of podman's own (the kubelet adds none)."""
    pod = pod_spec(doc).get("securityContext") or {}
    ctx = c.get("securityContext") or {}
    out: list[str] = []
    user = ctx.get("runAsUser", pod.get("runAsUser"))
    group = ctx.get("runAsGroup", pod.get("runAsGroup"))
    if user is not None:
        out += ["--user", f"{user}:{group if group is not None else 0}"]
    supplemental = pod.get("supplementalGroups") or []
    if pod.get("fsGroup") is not None:
        supplemental = [*supplemental, pod["fsGroup"]]
    out += [arg for g in supplemental for arg in ("--group-add", str(g))]
    caps = ctx.get("capabilities") or {}
    out += [arg for cap in caps.get("drop") or [] for arg in ("--cap-drop", cap)]
    out += [arg for cap in caps.get("add") or [] for arg in ("--cap-add", cap)]
    if ctx.get("privileged"):
        out.append("--privileged")
    if ctx.get("allowPrivilegeEscalation") is False:
        out += ["--security-opt", "no-new-privileges"]
    if ctx.get("readOnlyRootFilesystem"):
        out += ["--read-only", "--read-only-tmpfs=false"]
    return out


def podman_run(doc: dict[str, Any], name: str, *, image: str, host: Host, downward: Downward,
               nvml_lib: Path, nvml_profile: Path, container_name: str,
               extra_env: dict[str, str] | None = None) -> list[str]:
    """``podman run`` for container ``name`` of workload ``doc``, derived from its pod spec as
    the kubelet would start it: command as the entrypoint and args after the image (or the
    image's own entrypoint), env with the downward API resolved, volumes, securityContext,
    the pod's name as hostname, the node's network (so the API server on the host's
    loopback is reachable); plus NVML as the NVIDIA container toolkit injects it (the fake
    library bind-mounted into the image's library directory, and its machine description)."""
    c = container(doc, name)
    argv = [*PODMAN, "run", "--name", container_name, *RLIMITS, "--network", "host",
            "--hostname", downward.pod, *security(doc, c)]
    if c.get("command"):
        argv += ["--entrypoint", json.dumps(c["command"])]
    env = {**container_env(c, downward), "FAKE_NVML_PROFILE": FAKE_NVML_PROFILE,
           **(extra_env or {})}
    if host.api is not None:
        env |= {"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                "KUBERNETES_SERVICE_PORT": str(host.api[0])}
    argv += [arg for key, value in env.items() for arg in ("--env", f"{key}={value}")]
    volumes = [*mounts(doc, c, host),
               {"source": str(nvml_lib / "libnvidia-ml.so.1"), "target": NVML_IN_IMAGE,
                "read_only": True},
               {"source": str(nvml_profile), "target": FAKE_NVML_PROFILE, "read_only": True}]
    for v in volumes:
        if v["target"] == "/sys":  # where the runtime mounts the container's cgroup tree
            (Path(v["source"]) / "fs" / "cgroup").mkdir(parents=True, exist_ok=True)
        argv += ["--volume", f"{v['source']}:{v['target']}:{'ro' if v['read_only'] else 'rw'}"]
    return [*argv, image, *(c.get("args") or [])]
