"""`gfd run` with the API sinks as a real process against the local fake API server:
startup cost, no request in steady state, exactly one write per change, `gfd diff`/`prune`
(what would change, another writer's edit, prune of gfd's own and never of an object of the
same name gfd did not write). Each runs on the real kube-apiserver too (tests/realapi), as
the ServiceAccount with the RBAC of manifests/overlays/<sink>."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import profiles
from fakes.apiserver import FakeApiServer
from helpers.process import free_port, gfd_command, http, metric, wait_for
from helpers.realserver import gfd_node_server, on_both

NODE = "gpu-node-1"
NS = "gfd"
FEATURE = f"nvidia-features-for-{NODE}"
PRODUCT = "nvidia.com/gpu.product"
MANAGED_BY = "app.kubernetes.io/managed-by"


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeApiServer]:
    with gfd_node_server(request, NODE, NS, {"team": "ml"}) as srv:
        yield srv


def command(tmp: Path, server: FakeApiServer, lib: Path, *args: str) -> tuple[list[str],
                                                                               dict[str, str]]:
    return gfd_command(tmp, lib, *args, env={
        "NODE_NAME": NODE, "NAMESPACE": NS, "POD_NAME": "gfd-abcde",
        "KUBECONFIG": str(server.write_kubeconfig(tmp / "kubeconfig"))})


def runner(tmp: Path, server: FakeApiServer, lib: Path
           ) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``gfd(*args)``: one gfd command run to its end as a process (``command``'s env)."""

    def gfd(*args: str) -> subprocess.CompletedProcess[str]:
        argv, env = command(tmp, server, lib, *args)
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                              check=False)

    return gfd


def last(stderr: str) -> str:
    """The command's own last line (the log's warnings about this machine come before)."""
    return stderr.strip().splitlines()[-1]


@pytest.mark.parametrize(("server", "sink"), [
    ("fake", "node"), ("fake", "nodefeature"),
    ("real:node", "node"),
    ("real:nodefeature", "nodefeature")], indirect=["server"])
def test_steady_state_is_free_and_a_change_is_one_write(sink: str, tmp_path: Path,
                                                        server: FakeApiServer,
                                                        fake_nvml_lib: Path) -> None:
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    port = free_port()
    # the publishing requests alone (Events on the Node: e2e/test_node_events.py)
    argv, env = command(tmp_path, server, fake_nvml_lib, "run", "--sink", sink,
                        "--sleep-interval", "20ms", "--metrics-port", str(port),
                        "--events=false")
    log = (tmp_path / "agent.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: http(port, "/readyz")[0] == 200)
        wait_for(lambda: server.open_watches == 1)  # the watch on what gfd publishes
        requests = server.requests
        # Node: GET, apply, LIST; NodeFeature: the pod (its owner), GET, create, LIST -- and
        # no phantom repair: the watch's first read and gfd's first write are no drift
        start = 3 if sink == "node" else 4
        # --resource-manager auto: and one LIST of the node's gpu.nvidia.com ResourceSlices
        slices = [r for r in requests if r.path.endswith("/resourceslices")]
        assert [r.query["fieldSelector"] for r in slices] == [
            f"spec.nodeName={NODE},spec.driver=gpu.nvidia.com"]
        assert len([r for r in requests if not r.watch and r not in slices]) == start, [
            (r.method, r.path) for r in requests]
        assert len([r for r in requests if r.watch]) == 1
        time.sleep(0.3)
        assert len(server.requests) == start + 1 + len(slices), [(r.method, r.path)
                                                                 for r in server.requests]
        agent_log = (tmp_path / "agent.log").read_text()
        assert "again" not in agent_log, agent_log
        server.clear_log()
        # 100 cycles: 2-5 s on a quiet machine, several times that on a loaded one
        wait_for(lambda: metric(http(port, "/metrics")[1],
                                'gfd_cycles_total{result="unchanged"}') >= 100, timeout=180)
        assert server.count() == 0, ("no request in steady state",
                                     [(r.method, r.path, r.query, r.status)
                                      for r in server.requests])
        profiles.one_gpu_lost().write(tmp_path / "profile.txt")
        wait_for(lambda: server.count() > 0, timeout=10)
        wait_for(lambda: metric(http(port, "/metrics")[1],
                                'gfd_cycles_total{result="unchanged"}') >= 110, timeout=60)
        writes = [(r.method, r.path) for r in server.requests]
        assert len(writes) == 1 and writes[0][0] in ("PATCH", "PUT"), writes
        text = http(port, "/metrics")[1]
        assert metric(text, 'gfd_api_requests_total{code="200",verb="patch"}') + metric(
            text, 'gfd_api_requests_total{code="200",verb="update"}') >= 1
    finally:
        proc.terminate()
        code = proc.wait(timeout=15)
        log.close()
    assert code == 0
    if sink == "node":
        labels = server.labels(NODE)
        assert labels["nvidia.com/gpu.count"] == "7" and labels["team"] == "ml"
    else:
        obj = server.nodefeature(NS, f"nvidia-features-for-{NODE}")
        assert obj is not None and obj["spec"]["labels"]["nvidia.com/gpu.count"] == "7"


@on_both("nodefeature")
def test_a_nodefeature_deleted_by_hand_is_back_with_new_labels_in_the_same_cycle(
        tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path) -> None:
    """Someone deletes the NodeFeature, then the labels change: the update of the deleted
    object fails (409 to the uid precondition of a read-modify-write PUT as a kueue log shows,
    404 from kube-apiserver 1.36), gfd re-reads and creates it again within that one cycle.
    Without the watch: with it, gfd may see the deletion and repair it before the labels
    change (a loaded machine delays the profile write), and no update of a deleted object
    would be tried."""
    name = f"nvidia-features-for-{NODE}"
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    port = free_port()
    argv, env = command(tmp_path, server, fake_nvml_lib, "run", "--sink", "nodefeature",
                        "--watch=false", "--sleep-interval", "50ms", "--metrics-port", str(port))
    log = (tmp_path / "agent.log").open("w")
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: http(port, "/readyz")[0] == 200)
        server.delete_nodefeature(NS, name)
        server.clear_log()
        profiles.one_gpu_lost().write(tmp_path / "profile.txt")
        wait_for(lambda: (server.nodefeature(NS, name) or {}).get("spec", {}).get(
            "labels", {}).get("nvidia.com/gpu.count") == "7", timeout=10)
        failed = [(r.method, r.status) for r in server.requests if r.status >= 400]
        # kube-apiserver 1.36 answers the PUT 404, older ones 409 (the fake's answer)
        assert failed in ([("PUT", 409), ("GET", 404)], [("PUT", 404), ("GET", 404)]), failed
        text = http(port, "/metrics")[1]
        assert metric(text, 'gfd_cycles_total{result="error"}') == 0, "no failed cycle"
        owners = server.nodefeature(NS, name)["metadata"]["ownerReferences"]
        assert [(o["kind"], o["name"]) for o in owners] == [("DaemonSet", "gfd")]
    finally:
        proc.terminate()
        code = proc.wait(timeout=15)
        log.close()
    assert code == 0
    logs = (tmp_path / "agent.log").read_text()
    assert f"NodeFeature {NS}/{name} was deleted: creating it again" in logs
    assert "Traceback" not in logs


@pytest.mark.parametrize(("server", "sink"), [
    ("fake", "node"), ("fake", "nodefeature"),
    ("real:node", "node"),
    ("real:nodefeature", "nodefeature")], indirect=["server"])
def test_diff_and_prune_show_and_remove_only_what_gfd_published(
        sink: str, tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path) -> None:
    """diff: exit 1 with what would be added, exit 0 once published, a key someone else
    edited shown as changed; prune: the Node labels gfd still owns (not the one kubectl took
    over), or gfd's own NodeFeature, gone."""
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    where = f"Node {NODE}" if sink == "node" else f"NodeFeature {NS}/{FEATURE}"
    gfd = runner(tmp_path, server, fake_nvml_lib)
    listed = gfd("features", "-o", "text")
    assert listed.returncode == 0, listed.stderr
    features = dict(line.split("=", 1) for line in listed.stdout.splitlines())
    assert features["nvidia.gpu[7].product"] == "NVIDIA-H100-80GB-HBM3"
    before = gfd("diff", "--sink", sink)
    assert before.returncode == 1, before.stderr
    assert f"+ {PRODUCT}=NVIDIA-H100-80GB-HBM3" in before.stdout.splitlines()
    assert last(before.stderr).endswith(f"~0 -0 at {where}")
    feature_lines = [ln for ln in before.stdout.splitlines() if ln.startswith("+ feature ")]
    if sink == "node":  # the Node carries no features: none shown
        assert feature_lines == []
    else:  # every element gfd would write, and their count
        assert feature_lines == [f"+ feature {k}={v}" for k, v in sorted(features.items())]
        assert f"features: +{len(features)} ~0 -0 at {where}" in before.stderr
    assert gfd("run", "--sink", sink, "--oneshot").returncode == 0
    in_sync = gfd("diff", "--sink", sink)
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr
    assert in_sync.stdout == "" and last(in_sync.stderr).startswith("in sync: ")
    if sink == "nodefeature":
        assert last(in_sync.stderr).endswith(
            f"labels and {len(features)} feature elements at {where}")
    if sink == "node":
        server.set_label(NODE, PRODUCT, "hand-edited", manager="kubectl")
    else:
        obj = server.nodefeature(NS, FEATURE)
        assert obj is not None and obj["metadata"]["labels"][MANAGED_BY] == "gfd"
        server.set_nodefeature_label(NS, FEATURE, PRODUCT, "hand-edited", manager="kubectl")
    edited = gfd("diff", "--sink", sink)
    assert edited.returncode == 1
    assert edited.stdout.splitlines() == [f"~ {PRODUCT}: hand-edited -> NVIDIA-H100-80GB-HBM3"]
    assert last(edited.stderr) == f"+0 ~1 -0 at {where}"
    if sink == "nodefeature":  # a feature someone else edited: drift shown, exit 1
        server.set_nodefeature_attribute(NS, FEATURE, "nvidia.driver", "cuda", "1.0",
                                         manager="kubectl")
        drifted = gfd("diff", "--sink", sink)
        assert drifted.returncode == 1
        assert drifted.stdout.splitlines() == [
            f"~ {PRODUCT}: hand-edited -> NVIDIA-H100-80GB-HBM3",
            f"~ feature nvidia.driver.cuda: 1.0 -> {features['nvidia.driver.cuda']}"]
        assert f"features: +0 ~1 -0 at {where}" in drifted.stderr
    pruned = gfd("prune", "--sink", sink)
    assert pruned.returncode == 0, pruned.stderr
    removed = pruned.stdout.splitlines()
    assert "- nvidia.com/gpu.count" in removed
    assert last(pruned.stderr) == f"pruned {len(removed)} labels at {where}"
    if sink == "node":  # the edited key is kubectl's now (its field manager): left to it
        assert f"- {PRODUCT}" not in removed
        assert server.labels(NODE) == {"team": "ml", PRODUCT: "hand-edited"}
    else:  # the whole object was gfd's
        assert f"- {PRODUCT}" in removed
        assert server.nodefeature(NS, FEATURE) is None
        assert server.labels(NODE) == {"team": "ml"}  # no nfd-master: the Node untouched
    kept = server.labels(NODE)
    server.clear_log()
    again = gfd("prune", "--sink", sink)
    assert again.stdout == "" and server.labels(NODE) == kept
    assert [r.method for r in server.requests if r.method not in ("GET",)] == []
    if sink == "nodefeature":
        assert again.returncode == 0, again.stderr
        assert last(again.stderr) == f"nothing to prune at {where}"
    else:  # the key kubectl took over is not gfd's: refused, with one line saying whose
        assert again.returncode == 1, again.stderr
        assert last(again.stderr) == (
            f"gfd: error: Node {NODE}: labels left in place: {PRODUCT} set by kubectl, not "
            "gfd; gfd prune removes only the labels gfd applied (field manager gfd)")


@on_both("nodefeature")
@pytest.mark.parametrize("controlled", [True, False],
                         ids=["another-daemonsets", "no-owner-no-mark"])
def test_prune_keeps_a_nodefeature_of_the_same_name_gfd_did_not_write(
        controlled: bool, tmp_path: Path, server: FakeApiServer,
        fake_nvml_lib: Path) -> None:
    """NVIDIA's GFD uses the same name: its object (controlled by its DaemonSet, or with
    neither gfd's mark nor gfd's DaemonSet as controller) is left as it is, with one line;
    diff and run refuse an object another DaemonSet controls."""
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    meta: dict[str, Any] = {"name": FEATURE,
                            "labels": {"nfd.node.kubernetes.io/node-name": NODE}}
    if controlled:
        server.add_pod(NS, "gpu-feature-discovery-xyz", owner_daemonset="gpu-feature-discovery",
                       node_name=NODE)
        ds = server.daemonset(NS, "gpu-feature-discovery")
        assert ds is not None
        meta["ownerReferences"] = [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "gpu-feature-discovery",
            "uid": ds["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    server.add_nodefeature(NS, {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
                                "metadata": meta,
                                "spec": {"labels": {PRODUCT: "from-gpu-feature-discovery"}}},
                           manager="gpu-feature-discovery")
    before = server.nodefeature(NS, FEATURE)
    gfd = runner(tmp_path, server, fake_nvml_lib)
    server.clear_log()
    pruned = gfd("prune", "--use-node-feature-api")
    assert pruned.returncode == 1 and pruned.stdout == "", pruned.stderr
    reason = ("belongs to DaemonSet/gpu-feature-discovery (its controller), not to gfd's "
              "DaemonSet gfd" if controlled else "gfd's mark (label "
              "app.kubernetes.io/managed-by=gfd) is not on it and gfd's DaemonSet does not "
              "control it")
    assert last(pruned.stderr).startswith(
        f"gfd: error: NodeFeature {NS}/{FEATURE} left in place: "), pruned.stderr
    assert reason in last(pruned.stderr) and "Traceback" not in pruned.stderr
    assert server.nodefeature(NS, FEATURE) == before
    assert server.count("DELETE") == 0
    if controlled:
        for args in (("diff",), ("run", "--oneshot")):
            refused = gfd(*args, "--use-node-feature-api")
            # diff: 3, it could not look (its 1 means differences); run: 1
            assert refused.returncode == (3 if args[0] == "diff" else 1), refused.stderr
            refusal = [line for line in refused.stderr.splitlines() if "belongs to" in line]
            assert len(refusal) == 1 and refusal[0].endswith(
                "uninstall it, or run gfd in another namespace (--namespace / NAMESPACE)"), \
                refused.stderr
            assert "belongs to DaemonSet/gpu-feature-discovery (its controller)" in refusal[0]
            assert "Traceback" not in refused.stderr
        assert server.nodefeature(NS, FEATURE) == before
        # nothing written but the one-shot's LabelPublishFailing Event saying why
        assert [(r.method, r.status) for r in server.requests
                if r.method != "GET" and "/events" not in r.path] == []


@on_both("node")
def test_prune_refuses_node_labels_gfd_did_not_apply(tmp_path: Path, server: FakeApiServer,
                                                     fake_nvml_lib: Path) -> None:
    """GFD's labels on a Node (nfd-master set them) or hand-set ones: gfd never applied them,
    so prune changes nothing, exits 1 and says whose they are, in one line."""
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    server.set_label(NODE, "nvidia.com/gpu.count", "8", manager="nfd-master")
    server.set_label(NODE, PRODUCT, "NVIDIA-H100-80GB-HBM3", manager="nfd-master")
    before = server.labels(NODE)
    gfd = runner(tmp_path, server, fake_nvml_lib)
    server.clear_log()
    pruned = gfd("prune", "--sink", "node")
    assert pruned.returncode == 1 and pruned.stdout == "", pruned.stderr
    assert last(pruned.stderr) == (
        f"gfd: error: Node {NODE}: labels left in place: nvidia.com/gpu.count, {PRODUCT} set "
        "by nfd-master, not gfd; gfd prune removes only the labels gfd applied (field "
        "manager gfd)")
    assert server.labels(NODE) == before
    assert [r.method for r in server.requests if r.method != "GET"] == []
    server.remove_label(NODE, "nvidia.com/gpu.count", manager="nfd-master")
    server.remove_label(NODE, PRODUCT, manager="nfd-master")
    nothing = gfd("prune", "--sink", "node")  # no nvidia.com label at all: nothing to do
    assert nothing.returncode == 0 and last(nothing.stderr) == (
        f"nothing to prune at Node {NODE}")


@pytest.mark.parametrize(("server", "sink"), [
    ("fake", "node"), ("fake", "nodefeature"),
    ("real:node", "node"), ("real:nodefeature", "nodefeature")], indirect=["server"])
def test_diff_exit_code_alone_tells_in_sync_differences_usage_and_could_not_look(
        sink: str, tmp_path: Path, server: FakeApiServer, fake_nvml_lib: Path) -> None:
    """kubectl diff's scheme, plus 3: 0 in sync, 1 differences, 2 usage, 3 could not look
    (no such Node, no API server), so a CI gate never takes an outage for drift."""
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    gfd = runner(tmp_path, server, fake_nvml_lib)
    differences = gfd("diff", "--sink", sink, "-o", "json")
    assert differences.returncode == 1, differences.stderr
    doc = json.loads(differences.stdout)
    assert doc["inSync"] is False and doc["target"] == sink
    assert doc["added"][PRODUCT] == "NVIDIA-H100-80GB-HBM3"
    assert gfd("run", "--sink", sink, "--oneshot").returncode == 0
    in_sync = gfd("diff", "--sink", sink, "-o", "yaml")
    assert in_sync.returncode == 0, in_sync.stderr
    assert yaml.safe_load(in_sync.stdout)["inSync"] is True
    usage = gfd("diff", "--sink", "bogus")
    assert usage.returncode == 2
    assert last(usage.stderr).startswith("gfd: error: --sink: must be one of file, ")
    assert last(usage.stderr).endswith("; see gfd diff --help")
    if sink == "node":  # (a NodeFeature for a missing node is one `gfd run` would create)
        ghost = gfd("diff", "--sink", sink, "--node-name", "no-such-node")
        assert ghost.returncode == 3, ghost.stdout + ghost.stderr
        assert last(ghost.stderr).startswith("gfd: error: ") and ghost.stdout == ""
        assert "Traceback" not in ghost.stderr
    kubeconfig = yaml.safe_load(server.write_kubeconfig(tmp_path / "kubeconfig").read_text())
    cluster = kubeconfig["clusters"][0]["cluster"]
    cluster["server"] = f"{cluster['server'].split('://')[0]}://127.0.0.1:{free_port()}"
    closed = tmp_path / "closed-kubeconfig"
    closed.write_text(yaml.safe_dump(kubeconfig))
    unreachable = gfd("diff", "--sink", sink, "--kubeconfig", str(closed))
    assert unreachable.returncode == 3, unreachable.stdout + unreachable.stderr
    assert last(unreachable.stderr).startswith("gfd: error: ")
    assert "Traceback" not in unreachable.stderr


def test_api_sinks_need_a_node_name(tmp_path: Path, server: FakeApiServer,
                                    fake_nvml_lib: Path) -> None:
    profiles.hgx_h100().write(tmp_path / "profile.txt")
    argv, env = command(tmp_path, server, fake_nvml_lib, "run", "--oneshot",
                        "--use-node-feature-api")
    env.pop("NODE_NAME")
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 2 and "NODE_NAME" in result.stderr
