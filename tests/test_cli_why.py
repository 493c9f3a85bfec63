"""``gfd why``'s command line: a pod by name (``pod/NAME`` too) in a namespace, or a manifest
with ``-f`` (``-`` standard input; a Pod, or a workload with its claims and templates), read
against the API server or ``--from`` a dump; its output forms; its one-line usage errors and
its exit codes (0 it would bind or is bound, 1 it would not, 2 usage, 3 cannot tell). The
judging is tested in tests/fleet/test_why.py, against the real scheduler in
realapi/test_why_scheduler.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from fakes.apiserver import FakeApiServer
from helpers.whyobjects import GPU, device_classes, node, pod, request, slices, template

from gfd.cli import cli

JSON = dict[str, Any]


def why(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["why", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def dump(tmp_path: Path, *objects: JSON) -> str:
    items = [node("a", "hgx-h100"), node("b", "hgx-h100", cordoned=True),
             node("d", "hgx-h100", manager="dra"), *slices("d", "hgx-h100"),
             *device_classes(), pod("holder", node_name="a", limits={GPU: 4}), *objects]
    path = tmp_path / "dump.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return str(path)


def test_a_pending_pod_exits_1_with_its_groups_and_fix(tmp_path: Path) -> None:
    where = dump(tmp_path, pod("big", limits={GPU: 9}))
    code, out, _ = why("big", "-n", "ml", "--from", where)
    assert code == 1
    assert out.startswith("pod ml/big: 0/3 nodes can take it now\n")
    assert "1 node(s) were unschedulable   (NodeUnschedulable)" in out
    assert "1 Insufficient nvidia.com/gpu   (NodeResourcesFit)" in out
    assert "1 cannot allocate all claims   (DynamicResources)" in out
    assert "fix: ask 8 nvidia.com/gpu in all" in out


def test_a_pod_that_fits_exits_0_and_a_bound_one_says_where(tmp_path: Path) -> None:
    where = dump(tmp_path, pod("small", limits={GPU: 1}))
    code, out, _ = why("pod/small", "-n", "ml", "--from", where)
    assert code == 0 and "fits on 2 of 3 nodes now" in out
    code, out, _ = why("holder", "-n", "ml", "--from", where)
    assert (code, out) == (0, "pod ml/holder: bound to node a\n")


def test_json_and_yaml_carry_the_same_why_document(tmp_path: Path) -> None:
    where = dump(tmp_path, pod("big", limits={GPU: 9}))
    _, text, _ = why("big", "-n", "ml", "--from", where, "-o", "json")
    _, other, _ = why("big", "-n", "ml", "--from", where, "-o", "yaml")
    doc = json.loads(text)
    assert yaml.safe_load(other) == doc
    assert (doc["apiVersion"], doc["kind"], doc["fits"]) == ("gfd/v1", "Why", False)
    assert sum(g["count"] for g in doc["groups"]) == doc["nodes"] == 3


def test_a_manifest_from_a_file_or_standard_input_is_judged_unapplied(tmp_path: Path) -> None:
    where = dump(tmp_path)
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "train", "namespace": "ml"},
                  "spec": {"template": {"spec": pod("x", templates=["t"])["spec"]}}}
    manifest = yaml.safe_dump_all([deployment, template("t", request(count=9))])
    (tmp_path / "train.yaml").write_text(manifest)
    code, out, _ = why("-f", str(tmp_path / "train.yaml"), "--from", where)
    assert code == 1 and out.startswith("deployment ml/train: 0/3 nodes")
    assert "claim t: from template t (no claim made yet): request gpu: 9 gpu.nvidia.com" in out
    assert "fix: ResourceClaimTemplate t: ask 8 device(s)" in out
    code, same, _ = why("-f", "-", "--from", where, stdin=manifest)
    assert (code, same) == (1, out)


def test_a_pod_that_asks_for_no_gpu_says_so(tmp_path: Path) -> None:
    where = dump(tmp_path, pod("web", limits={"cpu": "100"}))
    code, out, _ = why("web", "-n", "ml", "--from", where)
    assert code == 1
    assert "no GPU (nothing below is a GPU reason)" in out
    assert "Insufficient cpu   (NodeResourcesFit) (not a GPU reason)" in out


def test_what_gfd_cannot_judge_exits_3(tmp_path: Path) -> None:
    raw = pod("ported", limits={GPU: 1})
    raw["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 80}]
    code, out, _ = why("ported", "-n", "ml", "--from", dump(tmp_path, raw))
    assert code == 3 and "not judged here: see the scheduler's message" in out


def test_a_dump_without_nodes_is_incomplete_and_exits_3(tmp_path: Path) -> None:
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"kind": "List", "items": [pod("p", limits={GPU: 1})]}))
    code, _, err = why("p", "-n", "ml", "--from", str(path))
    assert code == 3 and "incomplete: nodes: none in" in err


@pytest.mark.parametrize(("args", "words"), [
    ((), "give a pod (gfd why NAME) or a manifest"),
    (("p", "-f", "x.yaml"), "give a pod (gfd why NAME) or a manifest"),
    (("p", "--from", "@sample", "--kubeconfig", "k"), "--from reads a dump"),
    (("missing", "-n", "ml", "--from", "@sample"), "pod ml/missing not found"),
    (("deployment/x", "--from", "@sample"), "deployment/x: not a pod"),
    (("-f", "/nonexistent.yaml", "--from", "@sample"), "-f /nonexistent.yaml: cannot read it"),
])
def test_bad_input_is_one_line_naming_it_and_exit_2(args: tuple[str, ...], words: str) -> None:
    code, _, err = why(*args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and words in err, err


@pytest.mark.parametrize(("documents", "words"), [
    ([{"kind": "ConfigMap", "metadata": {"name": "c"}}], "no Pod or workload in it (ConfigMap"),
    ([pod("a"), pod("b")], "2 pods or workloads (Pod a, Pod b): give one"),
    ([{"kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}], "no pod template at"),
])
def test_a_file_that_is_no_one_pod_or_workload_is_one_line(
        tmp_path: Path, documents: list[JSON], words: str) -> None:
    (tmp_path / "f.yaml").write_text(yaml.safe_dump_all(documents))
    code, _, err = why("-f", str(tmp_path / "f.yaml"), "--from", "@sample")
    assert code == 2 and words in err, err


def test_the_api_server_is_asked_for_the_pod_and_a_missing_one_is_named(tmp_path: Path) -> None:
    with FakeApiServer() as server:
        server.add_node("gpu-1", labels={"nvidia.com/gpu.count": "1"})
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig", namespace="team")
        code, _, err = why("train", "--kubeconfig", str(kubeconfig))
        asked = [r.path for r in server.requests if r.method == "GET"]
    assert code == 2 and "pod team/train not found" in err
    assert "/api/v1/namespaces/team/pods/train" in asked


def test_the_docs_sample_is_what_the_command_prints(tmp_path: Path) -> None:
    docs = (Path(__file__).parents[1] / "docs" / "why.md").read_text()
    manifest = docs.split("```yaml\n# train.yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "train.yaml").write_text(manifest)
    code, out, _ = why("-f", str(tmp_path / "train.yaml"), "--from", "@sample")
    assert code == 1
    assert f"$ gfd why -f train.yaml --from @sample\n{out}```" in docs
