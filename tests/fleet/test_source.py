"""Where the fleet is read from. A dump is what ``kubectl get
nodes,pods,resourceslices,resourceclaims -A -o json`` prints (a ``List``), or ``-o yaml``,
or a stream of such documents (JSON or YAML), from a file, standard input (``-``) or the
sample shipped with gfd (``@sample``); it is read as the API server would answer (ended pods
hold nothing), and a kind it lacks is marked incomplete. Bad input is one ConfigError line
naming the file and the problem (docs/fleet.md: exit 2, "one line naming the problem").

The API server is read by paginated LISTs (a stand-in lister here: no network): pods with
the field selector that leaves ended ones out, nodes with ``-l``; a LIST refused is one
line in ``incomplete`` and the rest is still read."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import fleetsample, placement

from gfd.errors import ApiError, ConfigError
from gfd.fleet import source
from gfd.fleet.source import from_dump, live

GPU = "nvidia.com/gpu"
Obj = dict[str, Any]


def node(name: str, gpus: int = 8) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "nvidia.com/gpu.count": str(gpus)}},
            "status": {"allocatable": {GPU: str(gpus), "pods": "110"},
                       "capacity": {GPU: str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, node_name: str = "", phase: str = "Running", gpus: int = 1) -> Obj:
    spec: Obj = {"containers": [{"name": "main", "resources": {"limits": {GPU: str(gpus)}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": spec, "status": {"phase": phase}}


def resource_slice(node_name: str) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node_name}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}]}}


def claim(name: str) -> Obj:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "ml"}, "spec": {}, "status": {}}


OBJECTS = [node("gpu-a"), node("gpu-b", 4), pod("running", "gpu-a"),
           pod("done", "gpu-a", "Succeeded", 8), pod("waiting", "", "Pending"),
           resource_slice("dra-1"), claim("c1"),
           {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ignored"}}]


def as_list(objects: list[Obj]) -> Obj:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
            "items": objects}


def summary(f: Any) -> tuple[Any, ...]:
    return (sorted(f.nodes), sorted(p.name for p in f.pods), len(f.slices),
            sorted(f.claims), f.incomplete)


EXPECTED: tuple[Any, ...] = (["gpu-a", "gpu-b"], ["running", "waiting"], 1, [("ml", "c1")], [])

FORMS = {
    "a JSON List": lambda: json.dumps(as_list(OBJECTS), indent=2),
    "a YAML List": lambda: yaml.safe_dump(as_list(OBJECTS)),
    "a YAML stream": lambda: yaml.safe_dump_all(OBJECTS),
    "a YAML stream of Lists": lambda: yaml.safe_dump_all([as_list(OBJECTS[:3]),
                                                         as_list(OBJECTS[3:])]),
    "JSON documents one after another": lambda: "\n".join(
        json.dumps(as_list(OBJECTS[i:i + 2]), indent=1) for i in range(0, len(OBJECTS), 2)),
    "a JSON array": lambda: json.dumps(OBJECTS),
}


@pytest.mark.parametrize("form", FORMS)
def test_a_dump_is_read_in_any_form_kubectl_prints(form: str, tmp_path: Path) -> None:
    path = tmp_path / "dump"
    path.write_text(FORMS[form]())
    f = from_dump(str(path))
    assert summary(f) == EXPECTED
    assert f.source == f"file {path}"
    assert f.nodes["gpu-b"].allocatable == {GPU: 4, "pods": 110}


def test_standard_input_is_read_for_a_dash() -> None:
    f = from_dump("-", stdin=io.StringIO(json.dumps(as_list(OBJECTS))))
    assert summary(f) == EXPECTED


def test_a_dump_without_pods_says_so() -> None:
    f = from_dump("-", stdin=io.StringIO(json.dumps(as_list([node("gpu-a")]))))
    assert list(f.nodes) == ["gpu-a"]
    assert len(f.incomplete) == 1 and f.incomplete[0].startswith("pods:")


def test_a_dump_of_pods_alone_lacks_nodes() -> None:
    f = from_dump("-", stdin=io.StringIO(json.dumps(as_list([pod("p", "gpu-a")]))))
    assert [line.split(":")[0] for line in f.incomplete] == ["nodes"]


def test_a_dump_whose_pods_all_ended_is_complete() -> None:
    f = from_dump("-", stdin=io.StringIO(json.dumps(as_list(
        [node("gpu-a"), pod("done", "gpu-a", "Succeeded")]))))
    assert f.pods == [] and f.incomplete == []


def test_the_shipped_sample_is_the_fleet_the_helper_describes() -> None:
    f = from_dump(source.SAMPLE)
    plugin = {name: (machine, strategy, sharing)
              for name, machine, strategy, sharing, _ in fleetsample.DEVICE_PLUGIN_NODES}
    dra_nodes = {name for name, _, _ in fleetsample.DRA_NODES}
    assert set(f.nodes) == set(plugin) | dra_nodes
    machines = placement.machines()
    for name, (machine, strategy, sharing) in plugin.items():
        units = placement.units(machines[machine], strategy, placement.SHARING[sharing],
                                "device-plugin")
        assert f.nodes[name].allocatable == {"cpu": 64000, "pods": 110,
                                             **{r: len(u) for r, u in units.items()}}, name
    assert {s.node for s in f.slices} == dra_nodes
    assert f.claims and f.pods and f.incomplete == []
    assert f.source == "file @sample"


# ------------------------------------------------------------------------------ bad input


def bad(tmp_path: Path, name: str, content: bytes | None) -> str:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    return str(path)


BAD: list[tuple[str, bytes | None, str]] = [
    ("missing.json", None, "cannot read it"),
    ("truncated.json", b'{"kind": "List", "items": [', "not JSON"),
    ("broken.json", b'{"kind": "Node"}{"kind": ', "not JSON"),
    ("broken.yaml", b"kind: Node\nmetadata: {name: [a\n", "neither JSON nor YAML"),
    ("empty.json", b"", "no Node, Pod, ResourceSlice, ResourceClaim or DeviceClass"),
    ("configmaps.json", json.dumps(as_list([OBJECTS[-1]])).encode(),
     "no Node, Pod, ResourceSlice, ResourceClaim or DeviceClass"),
    ("scalar.yaml", b"just some text\n",
     "no Node, Pod, ResourceSlice, ResourceClaim or DeviceClass"),
]


@pytest.mark.parametrize("name, content, problem", BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_naming_the_file_and_the_problem(
        tmp_path: Path, name: str, content: bytes | None, problem: str) -> None:
    path = bad(tmp_path, name, content)
    with pytest.raises(ConfigError) as caught:
        from_dump(path)
    message = str(caught.value)
    assert "\n" not in message
    assert path in message and problem in message


def test_a_directory_is_not_a_dump(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        from_dump(str(tmp_path))
    assert "cannot read it" in str(caught.value) and "\n" not in str(caught.value)


def test_a_file_that_is_not_text_is_one_line(tmp_path: Path) -> None:
    path = bad(tmp_path, "bundle.json.gz", b"\x1f\x8b\x08\x00\xff\xfe binary")
    with pytest.raises(ConfigError) as caught:
        from_dump(path)
    assert path in str(caught.value) and "\n" not in str(caught.value)


def test_a_node_selector_does_not_go_with_a_dump() -> None:
    with pytest.raises(ConfigError) as caught:
        from_dump("-", node_selector="pool=gpu", stdin=io.StringIO("{}"))
    assert "--selector" in str(caught.value) and "\n" not in str(caught.value)


def test_a_dash_without_standard_input_is_refused() -> None:
    with pytest.raises(ConfigError, match="no standard input"):
        from_dump("-")


# ------------------------------------------------------------------------------ the API


class Lister:
    """Stands in for gfd.kube.lists.Lister: each collection's pages, or the ApiError its
    LIST answers; it records what was asked."""

    server = "https://10.0.0.1:6443"

    def __init__(self, pages: dict[str, list[list[Obj]] | ApiError]) -> None:
        self.answers = pages
        self.asked: list[tuple[str, str, str, str]] = []

    def pages(self, path: str, what: str, *, field_selector: str = "",
              label_selector: str = "") -> Iterator[list[Obj]]:
        self.asked.append((path, what, field_selector, label_selector))
        answer = self.answers.get(what, [])
        if isinstance(answer, ApiError):
            raise answer
        yield from answer


def test_the_api_server_is_read_page_by_page() -> None:
    lister = Lister({"nodes": [[node("gpu-a")], [node("gpu-b")]],
                     "pods": [[pod("running", "gpu-a")], [pod("waiting")]],
                     "resourceslices": [[resource_slice("dra-1")]],
                     "resourceclaims": [[claim("c1")]]})
    f = live(lister)  # type: ignore[arg-type]
    assert summary(f) == EXPECTED
    assert f.source == Lister.server and not f.selected
    assert [(what, fs, ls) for _, what, fs, ls in lister.asked] == [
        ("nodes", "", ""), ("pods", "status.phase!=Succeeded,status.phase!=Failed", ""),
        ("resourceslices", "", ""), ("resourceclaims", "", ""), ("deviceclasses", "", "")]
    assert {p for p, *_ in lister.asked} == {
        "/api/v1/nodes", "/api/v1/pods", "/apis/resource.k8s.io/v1/resourceslices",
        "/apis/resource.k8s.io/v1/resourceclaims", "/apis/resource.k8s.io/v1/deviceclasses"}


def test_a_refused_list_is_one_line_and_the_rest_is_read() -> None:
    lister = Lister({"nodes": [[node("gpu-a")]], "pods": [[pod("running", "gpu-a")]],
                     "resourceslices": ApiError("the server could not find the requested\n"
                                                "resource", status=404),
                     "resourceclaims": ApiError("resourceclaims is forbidden: User "
                                                "\"x\" cannot list", status=403)})
    f = live(lister)  # type: ignore[arg-type]
    assert sorted(f.nodes) == ["gpu-a"] and [p.name for p in f.pods] == ["running"]
    assert len(f.incomplete) == 2
    assert all("\n" not in line for line in f.incomplete)
    slices_line, claims_line = f.incomplete
    assert slices_line.startswith("list resourceslices:") and "DRA" in slices_line
    assert claims_line.startswith("list resourceclaims:") and "forbidden" in claims_line


def test_a_node_selector_reads_those_nodes_and_the_pods_bound_to_them() -> None:
    lister = Lister({"nodes": [[node("gpu-a")]],
                     "pods": [[pod("here", "gpu-a"), pod("elsewhere", "gpu-z"),
                               pod("waiting")]]})
    f = live(lister, node_selector="pool=gpu")  # type: ignore[arg-type]
    assert f.selected
    assert sorted(p.name for p in f.pods) == ["here", "waiting"]
    assert lister.asked[0][1:] == ("nodes", "", "pool=gpu")
    assert all(ls == "" for _, what, _, ls in lister.asked if what != "nodes")


def test_a_node_selector_the_api_server_rejects_is_a_usage_error() -> None:
    lister = Lister({"nodes": ApiError("unable to parse requirement: found '=',\nexpected",
                                       status=400)})
    with pytest.raises(ConfigError) as caught:
        live(lister, node_selector="pool==")  # type: ignore[arg-type]
    assert "--selector pool==" in str(caught.value) and "\n" not in str(caught.value)


def test_a_dump_hands_on_its_pods_claims_and_the_kinds_asked_as_they_are() -> None:
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "t", "namespace": "ml"}, "spec": {"spec": {}}}
    kept: list[dict[str, Any]] = []
    f = from_dump("-", stdin=io.StringIO(json.dumps(as_list([*OBJECTS, template]))),
                  keep=kept.append, keep_kinds=frozenset({"ResourceClaimTemplate"}))
    assert summary(f) == EXPECTED
    kinds = [o["kind"] for o in kept]
    assert kinds.count("ResourceClaimTemplate") == 1
    assert kinds.count("Pod") == sum(o["kind"] == "Pod" for o in OBJECTS)
