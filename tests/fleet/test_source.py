"""Where the fleet is read from. A dump is what ``kubectl get
nodes,pods,resourceslices,resourceclaims -A -o json`` prints (a ``List``), or ``-o yaml``,
or a stream of such documents (JSON or YAML), from a file, standard input (``-``) or the
sample shipped with gfd (``@sample``); it is read as the API server would answer (ended pods
hold nothing), and a kind it lacks is marked incomplete. Bad input is one ConfigError line
naming the file and the problem (docs/fleet.md: exit 2, "one line naming the problem").

The API server is read by paginated LISTs (a stand-in lister here: no network): pods with
the field selector that leaves ended ones out, nodes with ``-l``; a LIST refused is one
line in ``incomplete`` and the rest is still read.

Untrusted input (issue 38): an object the API server could not hold (a field of the wrong
type) is skipped and named on one line, and the rest is counted (exit 3); an object listed
twice (two overlapping Lists) is counted once; a node's quantity beyond what the scheduler
holds leaves that resource of that node out and is named on stderr; a dump in UTF-16
(PowerShell's ``>``) or UTF-8 with a byte-order mark reads as its UTF-8 text, and other bytes
are one line naming what they are; hostile text (deep nesting, YAML aliases that hold
themselves or multiply, lone surrogates) is an answer or one line, never a traceback. The
counts expected are worked out by hand in helpers/fleetdump.py."""

from __future__ import annotations

import codecs
import copy
import gzip
import io
import json
import math
import re
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import fleetdump, fleetsample, placement

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


# ------------------------------------------------------------------- malformed objects
#
# docs/fleet.md reads a dump "as it would live": every object the API server could hold is
# counted, and one it could not (a field of the wrong type) is skipped and named, one line
# each: "<Kind> <namespace>/<name>: <field path>: <why>" (<name> alone for a cluster-scoped
# object, #<index> for one without a name), in the JSON document's top-level `skipped` and on
# stderr as "skipped: <line>"; the answer is then marked incomplete (exit 3). The rest is
# counted as if the skipped object were not there (helpers/fleetdump.py works it out by hand).


@dataclass(frozen=True)
class Bad:
    """One malformed object: the field at ``path`` of the object ``target`` (or an item
    added, ``target`` "") replaced by ``value``; the skipped line names it as ``ref`` (a
    regular expression) and ``path``, and its reason starts with ``why``."""

    id: str
    target: str
    path: str
    value: Any
    ref: str
    why: str = ""
    shows: str = ""
    """Text the reason must hold (the value, as the contract's example shows it)."""

    def items(self) -> list[Obj]:
        items = fleetdump.objects()
        if not self.target:
            return [*items, self.value]
        return fleetdump.damaged(items, self.target, self.path, self.value)

    @property
    def broken(self) -> tuple[str, ...]:
        return (self.target,) if self.target else ()


def lit(text: str) -> str:
    return re.escape(text)


POD0, POD1, WAIT = lit("Pod team/train-0"), lit("Pod team/train-1"), lit("Pod team/wait-0")
SLICE, NODE2 = lit("ResourceSlice gpu-node-1-xyz"), lit("Node gpu-node-2")
CLAIM0, CLAIM1 = lit("ResourceClaim team/claim-0"), lit("ResourceClaim team/claim-1")
ALLOCATION = "status.allocation"
REQUEST = "spec.devices.requests[0].exactly"
AFFINITY = ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchExpressions[0]")


def stray(kind: Any) -> Obj:
    """A Node-like item whose ``kind`` is not a string."""
    return {"apiVersion": "v1", "kind": kind, "metadata": {"name": "gpu-node-9", "uid": "u-9"},
            "status": {"allocatable": {fleetdump.GPU: "8"}}}


ISSUE_38 = [  # the twelve dumps of issue 38 ("8 of 12 malformed dumps end in a traceback")
    Bad("kind-a-list", "", "kind", stray(["Node"]), r".*\bgpu-node-9"),
    Bad("pod-status-a-list", "train-0", "status", [{"phase": "Running"}], POD0,
        "not an object"),
    Bad("pod-status-a-string", "train-0", "status", "Running", POD0, "not an object"),
    Bad("slice-generation-abc", "gpu-node-1-xyz", "spec.pool.generation", "abc", SLICE,
        "not an integer", '("abc")'),
    Bad("slice-generation-1e400", "gpu-node-1-xyz", "spec.pool.generation", math.inf, SLICE,
        "not an integer"),
    Bad("slice-count-a-list", "gpu-node-1-xyz", "spec.pool.resourceSliceCount", [1], SLICE,
        "not an integer"),
    Bad("claim-count-two", "claim-1", f"{REQUEST}.count", "two", CLAIM1, "not an integer"),
    Bad("allocation-values-a-map", "claim-0",
        f"{ALLOCATION}.nodeSelector.nodeSelectorTerms[0].matchFields[0].values",
        {"0": "gpu-node-1"}, CLAIM0, "not a list"),
    Bad("kind-a-number", "", "kind", stray(7), r".*\bgpu-node-9"),
    Bad("node-metadata-a-string", "gpu-node-2", "metadata", "gpu-node-2", r"Node #\d+",
        "not an object"),
    Bad("pod-containers-a-string", "train-1", "spec.containers", "main", POD1, "not a list"),
    Bad("claim-results-a-map", "claim-0", f"{ALLOCATION}.devices.results",
        {"gpu": {"driver": "gpu.nvidia.com", "pool": "gpu-node-1", "device": "gpu-0"}},
        CLAIM0, "not a list"),
]

MORE = [  # the other fields gfd/fleet/model.py reads, each given a value of the wrong type
    Bad("node-label-a-map", "gpu-node-2", "metadata.labels[nvidia.com/gpu.count]", {"n": 4},
        NODE2, "not a string"),
    Bad("node-labels-a-list", "gpu-node-2", "metadata.labels", ["nvidia.com/gpu.count=4"],
        NODE2, "not an object"),
    Bad("node-name-a-list", "gpu-node-2", "metadata.name", ["gpu-node-2"], r"Node #\d+"),
    Bad("node-taint-effect-a-list", "gpu-node-2", "spec.taints[0].effect", ["NoSchedule"],
        NODE2, "not a string"),
    Bad("node-taints-a-map", "gpu-node-2", "spec.taints", {"nvidia.com/gpu": "NoSchedule"},
        NODE2, "not a list"),
    Bad("node-unschedulable-a-string", "gpu-node-2", "spec.unschedulable", "false", NODE2),
    Bad("node-allocatable-a-list", "gpu-node-2", "status.allocatable", [{"nvidia.com/gpu": 4}],
        NODE2, "not an object"),
    Bad("node-gpus-a-list", "gpu-node-2", "status.allocatable[nvidia.com/gpu]", ["4"], NODE2),
    Bad("node-conditions-a-map", "gpu-node-2", "status.conditions", {"Ready": "True"}, NODE2,
        "not a list"),
    Bad("node-condition-a-string", "gpu-node-2", "status.conditions[1]", "Ready", NODE2,
        "not an object"),
    Bad("pod-name-a-list", "train-1", "metadata.name", ["train-1"], r"Pod \S*#\d+"),
    Bad("pod-phase-a-list", "train-0", "status.phase", ["Running"], POD0, "not a string"),
    Bad("pod-node-a-map", "train-1", "spec.nodeName", {"name": "gpu-node-0"}, POD1,
        "not a string"),
    Bad("pod-container-a-string", "train-1", "spec.containers[0]", "main", POD1,
        "not an object"),
    Bad("pod-limits-a-list", "train-1", "spec.containers[0].resources.limits",
        [{"nvidia.com/gpu": "1"}], POD1, "not an object"),
    Bad("pod-gpus-a-map", "train-1", "spec.containers[0].resources.requests[nvidia.com/gpu]",
        {"value": "1"}, POD1),
    Bad("pod-selector-value-a-number", "wait-0", "spec.nodeSelector[nvidia.com/gpu.product]",
        100, WAIT, "not a string"),
    Bad("pod-selector-a-list", "wait-0", "spec.nodeSelector", ["nvidia.com/gpu.product"], WAIT,
        "not an object"),
    Bad("pod-affinity-values-a-string", "wait-0", f"{AFFINITY}.values", "3", WAIT, "not a list"),
    Bad("pod-affinity-terms-a-map", "wait-0",
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms", {"matchExpressions": []}, WAIT, "not a list"),
    Bad("pod-tolerations-a-string", "wait-0", "spec.tolerations", "nvidia.com/gpu", WAIT,
        "not a list"),
    Bad("pod-claims-a-map", "dra-0", "spec.resourceClaims", {"gpu": "claim-0"},
        lit("Pod team/dra-0"), "not a list"),
    Bad("slice-devices-a-map", "gpu-node-1-xyz", "spec.devices", {"gpu-0": {}}, SLICE,
        "not a list"),
    Bad("slice-device-a-string", "gpu-node-1-xyz", "spec.devices[1]", "gpu-1", SLICE,
        "not an object"),
    Bad("slice-device-name-a-number", "gpu-node-1-xyz", "spec.devices[0].name", 0, SLICE,
        "not a string"),
    Bad("slice-attributes-a-list", "gpu-node-1-xyz", "spec.devices[0].attributes",
        [{"type": "gpu"}], SLICE, "not an object"),
    Bad("slice-memory-a-list", "gpu-node-1-xyz", "spec.devices[0].capacity.memory.value",
        ["81559Mi"], SLICE),
    Bad("slice-pool-a-string", "gpu-node-1-xyz", "spec.pool", "gpu-node-1", SLICE,
        "not an object"),
    Bad("slice-generation-a-fraction", "gpu-node-1-xyz", "spec.pool.generation", 1.5, SLICE,
        "not an integer"),
    Bad("slice-generation-true", "gpu-node-1-xyz", "spec.pool.generation", True, SLICE,
        "not an integer"),
    Bad("slice-generation-beyond-int64", "gpu-node-1-xyz", "spec.pool.generation", 2**63,
        SLICE),
    Bad("slice-count-a-string", "gpu-node-1-xyz", "spec.pool.resourceSliceCount", "1", SLICE,
        "not an integer"),
    Bad("slice-driver-a-map", "gpu-node-1-xyz", "spec.driver", {"name": "gpu.nvidia.com"},
        SLICE, "not a string"),
    Bad("claim-result-device-a-number", "claim-0", f"{ALLOCATION}.devices.results[0].device",
        0, CLAIM0, "not a string"),
    Bad("claim-result-a-string", "claim-0", f"{ALLOCATION}.devices.results[0]", "gpu-0",
        CLAIM0, "not an object"),
    Bad("claim-count-1e400", "claim-1", f"{REQUEST}.count", math.inf, CLAIM1,
        "not an integer"),
    Bad("claim-requests-a-map", "claim-1", "spec.devices.requests", {"gpu": {}}, CLAIM1,
        "not a list"),
    Bad("claim-class-a-list", "claim-1", f"{REQUEST}.deviceClassName", ["gpu.nvidia.com"],
        CLAIM1, "not a string"),
    Bad("claim-selectors-a-string", "claim-1", f"{REQUEST}.selectors", "device.driver", CLAIM1,
        "not a list"),
]


def normal(path: str) -> str:
    """A field path with list indices left out and map keys dotted, so that
    ``spec.taints[0].effect``, ``spec.taints[].effect`` and ``status.allocatable.nvidia.com/gpu``
    / ``status.allocatable[nvidia.com/gpu]`` compare equal."""
    path = re.sub(r"\[\d*\]", "[]", path)
    return re.sub(r"\[([^\]]+)\]", r".\1", path)


def assert_named(line: str, bad: Bad) -> None:
    assert isinstance(line, str) and "\n" not in line, repr(line)
    found = re.fullmatch(rf"(?:{bad.ref}): (?P<path>\S+): (?P<why>.+)", line)
    assert found, f"{line!r} does not name {bad.ref} and a field"
    assert normal(found["path"]) == normal(bad.path), line
    assert found["why"].startswith(bad.why), line
    assert bad.shows in found["why"], line


def run_dump(tmp_path: Path, text: str | bytes, *args: str,
             name: str = "dump.json") -> tuple[int, str, str]:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    code, out, err, escaped = fleetdump.fleet("--from", str(path), *args)
    assert escaped is None, "".join(traceback.format_exception(escaped))
    return code, out, err


@pytest.mark.parametrize("bad", ISSUE_38 + MORE, ids=[b.id for b in ISSUE_38 + MORE])
def test_a_malformed_object_is_skipped_and_named_and_the_rest_is_counted(
        tmp_path: Path, bad: Bad) -> None:
    code, out, err = run_dump(tmp_path, fleetdump.json_text(fleetdump.as_list(bad.items())),
                              "-o", "json")
    assert code == 3, err
    doc = json.loads(out)
    assert doc["complete"] is False
    skipped = doc.get("skipped", [])
    assert len(skipped) == 1, skipped
    line = skipped[0]
    assert_named(line, bad)
    assert f"skipped: {line}" in err.splitlines()
    assert fleetdump.node_rows(doc) == fleetdump.rows(without=bad.broken)


def test_every_malformed_object_is_named_once(tmp_path: Path) -> None:
    """Three malformed objects in one dump: three lines, each naming its own object."""
    items = fleetdump.damaged(fleetdump.objects(), "train-0", "status", "Running")
    items = fleetdump.damaged(items, "gpu-node-1-xyz", "spec.pool.generation", "abc")
    items = fleetdump.damaged(items, "claim-1", f"{REQUEST}.count", "two")
    code, out, err = run_dump(tmp_path, fleetdump.json_text(fleetdump.as_list(items)),
                              "-o", "json")
    assert code == 3
    doc = json.loads(out)
    assert sorted(line.split(":")[0] for line in doc["skipped"]) == [
        "Pod team/train-0", "ResourceClaim team/claim-1", "ResourceSlice gpu-node-1-xyz"]
    assert [line for line in err.splitlines() if line.startswith("skipped: ")] == [
        f"skipped: {line}" for line in doc["skipped"]]
    assert fleetdump.node_rows(doc) == fleetdump.rows(
        without=("train-0", "gpu-node-1-xyz", "claim-1"))


@pytest.mark.parametrize("value", ["Running\nnow", "a\rb", "x\u2028y", "\x85", "\x1e0"],
                         ids=["LF", "CR", "LINE SEPARATOR", "NEL", "RS"])
def test_a_skipped_line_is_one_line_whatever_the_value_it_shows(tmp_path: Path,
                                                                value: str) -> None:
    items = fleetdump.damaged(fleetdump.objects(), "train-0", "status", value)
    code, out, err = run_dump(tmp_path, fleetdump.json_text(fleetdump.as_list(items)),
                              "-o", "json")
    assert code == 3
    skipped = json.loads(out)["skipped"]
    assert len(skipped) == 1 and len(skipped[0].splitlines()) == 1, skipped
    assert skipped[0].startswith("Pod team/train-0: status: not an object")
    assert f"skipped: {skipped[0]}" in err.splitlines()


def test_a_malformed_object_in_a_yaml_dump_is_skipped_the_same_way(tmp_path: Path) -> None:
    items = fleetdump.damaged(fleetdump.objects(), "train-0", "status", [{"phase": "Running"}])
    code, out, _ = run_dump(tmp_path, yaml.safe_dump(fleetdump.as_list(items)), "-o", "json",
                            name="dump.yaml")
    assert code == 3
    doc = json.loads(out)
    assert [line.split(": ")[:2] for line in doc["skipped"]] == [["Pod team/train-0", "status"]]
    assert fleetdump.node_rows(doc) == fleetdump.rows(without=("train-0",))


def test_a_malformed_object_in_a_list_is_skipped_and_the_rest_is_read() -> None:
    """docs/fleet.md, Reads: each LIST page is reduced as it arrives; a malformed object in it
    is skipped and named like one in a dump."""
    good, bad = fleetdump.gpu_pod("train-0", "gpu-a", 2), fleetdump.gpu_pod("train-1", "gpu-a", 1)
    bad["status"] = "Running"
    lister = Lister({"nodes": [[node("gpu-a")]], "pods": [[good, bad]]})
    f = live(lister)  # type: ignore[arg-type]
    assert [p.name for p in f.pods] == ["train-0"]
    assert [line.split(": ")[:2] for line in f.skipped] == [["Pod team/train-1", "status"]]


def test_a_list_restarted_after_an_expired_token_counts_each_object_once() -> None:
    """docs/fleet.md, Reads: "an expired token restarts the collection once": the pods read
    before the restart come again after it."""
    first = fleetdump.gpu_pod("train-0", "gpu-a", 2)
    lister = Lister({"nodes": [[node("gpu-a")]],
                     "pods": [[first], [copy.deepcopy(first), fleetdump.gpu_pod(
                         "train-1", "gpu-a", 1)]]})
    f = live(lister)  # type: ignore[arg-type]
    assert sorted(p.name for p in f.pods) == ["train-0", "train-1"]


def test_a_document_that_holds_no_object_is_one_line_and_exit_2(tmp_path: Path) -> None:
    code, out, err = run_dump(tmp_path, json.dumps([1, "a", None, [2.5]]), "-o", "json")
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "dump.json" in err


def test_a_stray_document_beside_a_list_is_no_usage_error(tmp_path: Path) -> None:
    text = "\n".join([fleetdump.json_text(fleetdump.as_list(fleetdump.objects())),
                      json.dumps("a note"), json.dumps(42)])
    code, out, err = run_dump(tmp_path, text, "-o", "json")
    assert code in (0, 3), err
    assert fleetdump.node_rows(json.loads(out)) == fleetdump.rows()


# ------------------------------------------------- quantities the scheduler cannot hold
#
# kube-scheduler holds each allocatable resource as an int64 (pkg/scheduler/framework/
# types.go, Resource.Add: `rQuant.Value()`, `MilliValue()` for cpu), which overflows for a
# value beyond it (apimachinery resource/scale_int.go, scaledValue: "The final result might
# overflow"); the API server stores such a value (quantity_test.go, TestParseQuantity:
# "9223372036854775808", "10E" re-serialize as themselves). gfd leaves that resource of that
# node out of the counts, says so on one stderr line naming the node, the resource and the
# value (a `quantity` finding with --check), and counts the other nodes (exit 0).


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value", ["1e99999", "9223372036854775808", "10E",
                                   "9223372036854775807.1"])
def test_a_node_whose_gpus_the_scheduler_cannot_hold_is_left_out_and_named(
        tmp_path: Path, value: str) -> None:
    items = fleetdump.objects()
    for field in ("allocatable", "capacity"):
        fleetdump.find(items, "gpu-node-2")["status"][field][fleetdump.GPU] = value
    text = fleetdump.json_text(fleetdump.as_list(items))
    code, out, err = run_dump(tmp_path, text, "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["complete"] is True and doc.get("skipped", []) == []
    assert fleetdump.node_rows(doc) == fleetdump.rows(without=("gpu-node-2",))
    said = [line for line in err.splitlines() if "gpu-node-2" in line]
    assert len(said) == 1 and fleetdump.GPU in said[0] and value in said[0], err
    code, out, _ = run_dump(tmp_path, text, "-o", "json", "--check")
    assert code == 1
    found = [f for f in json.loads(out)["findings"] if f["check"] == "quantity"]
    assert [f["node"] for f in found] == ["gpu-node-2"]
    assert fleetdump.GPU in found[0]["message"]


def test_the_largest_value_the_scheduler_holds_is_counted(tmp_path: Path) -> None:
    items = fleetdump.objects()
    for field in ("allocatable", "capacity"):
        fleetdump.find(items, "gpu-node-2")["status"][field][fleetdump.GPU] = \
            "9223372036854775807"
    code, out, err = run_dump(tmp_path, fleetdump.json_text(fleetdump.as_list(items)),
                              "-o", "json")
    assert code == 0, err
    # TOTAL is allocatable; FREE is what one-unit pods can still get, each taking one of the
    # node's 110 pod slots (allocatable `pods`, none bound there: "Too many pods",
    # noderesources/fit.go)
    assert fleetdump.node_rows(json.loads(out))[("gpu-node-2", fleetdump.GPU)] == (
        2**63 - 1, 0, 110, 1)


# ------------------------------------------------------------------- repeated objects
#
# Support bundles often hold two overlapping Lists: an object listed twice is one object (the
# same metadata.uid; without one, the same kind, namespace and name), counted once.


def test_a_pool_whose_slice_is_listed_twice_is_complete_and_its_devices_free(
        tmp_path: Path) -> None:
    items = [i for i in fleetdump.objects() if i["metadata"]["name"] != "claim-0"]
    items.append(copy.deepcopy(fleetdump.find(items, "gpu-node-1-xyz")))
    code, out, err = run_dump(tmp_path, fleetdump.json_text(fleetdump.as_list(items)),
                              "-o", "json")
    assert code == 0, err
    # the pool's one slice (resourceSliceCount 1) publishes gpu-0 and gpu-1, no claim holds
    # either: both are free
    assert fleetdump.node_rows(json.loads(out))[("gpu-node-1", fleetdump.DRA_CLASS)] == (
        2, 0, 2, 0)
    assert len(from_dump(str(tmp_path / "dump.json")).slices) == 1


@pytest.mark.parametrize("uids", [True, False], ids=["by uid", "by kind, namespace and name"])
def test_two_overlapping_lists_count_each_object_once(tmp_path: Path, uids: bool) -> None:
    items = fleetdump.objects(uids=uids)
    text = "\n".join(fleetdump.json_text(fleetdump.as_list(part))
                     for part in (items[:8], copy.deepcopy(items[2:])))
    code, out, err = run_dump(tmp_path, text, "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["complete"] is True and doc.get("skipped", []) == []
    assert fleetdump.node_rows(doc) == fleetdump.rows()
    f = from_dump(str(tmp_path / "dump.json"))
    assert sorted(p.name for p in f.pods) == ["dra-0", "train-0", "train-1", "wait-0"]
    assert len(f.slices) == 1


@pytest.mark.parametrize("uids", [True, False], ids=["by uid", "by kind, namespace and name"])
def test_a_pod_listed_twice_holds_its_gpus_once(tmp_path: Path, uids: bool) -> None:
    items = fleetdump.objects(uids=uids)
    items.append(copy.deepcopy(fleetdump.find(items, "train-0")))
    code, out, _ = run_dump(tmp_path, fleetdump.json_text(fleetdump.as_list(items)), "-o",
                            "json")
    assert code == 0
    assert fleetdump.node_rows(json.loads(out)) == fleetdump.rows()


def test_pods_of_one_name_in_two_namespaces_are_two_pods(tmp_path: Path) -> None:
    items = fleetdump.objects(uids=False)
    items.append(fleetdump.gpu_pod("train-0", "gpu-node-0", 2, namespace="other"))
    items[-1]["metadata"].pop("uid")
    code, out, _ = run_dump(tmp_path, fleetdump.json_text(fleetdump.as_list(items)), "-o",
                            "json")
    assert code == 0
    # team/train-0 (2) + team/train-1 (1) + other/train-0 (2) on gpu-node-0's 8
    assert fleetdump.node_rows(json.loads(out))[("gpu-node-0", fleetdump.GPU)] == (8, 5, 3, 1)


def test_objects_of_two_kinds_that_share_a_name_are_both_read(tmp_path: Path) -> None:
    items = fleetdump.objects(uids=False)
    same = fleetdump.pending_claim("train-0")
    same["metadata"].pop("uid")
    items.append(same)
    path = tmp_path / "dump.json"
    path.write_text(fleetdump.json_text(fleetdump.as_list(items)))
    f = from_dump(str(path))
    assert ("team", "train-0") in f.claims and "train-0" in [p.name for p in f.pods]


# ----------------------------------------------------------------------------- encodings
#
# PowerShell 5's `>` writes UTF-16 LE with a byte-order mark, and Windows editors often save
# UTF-8 with one: such a dump reads as its UTF-8 text does. Bytes that are no text gfd reads
# are one line naming what was found (exit 2), never "compressed?" for a UTF-16 file.

TEXT_FORMS = {"json": lambda items: fleetdump.json_text(fleetdump.as_list(items)),
              "yaml": lambda items: yaml.safe_dump(fleetdump.as_list(items))}
READ = {
    "UTF-16 LE with a BOM (PowerShell's >)": lambda t: codecs.BOM_UTF16_LE + t.encode("utf-16-le"),
    "UTF-8 with a BOM": lambda t: codecs.BOM_UTF8 + t.encode("utf-8"),
}
READ_OR_NAMED = {
    "UTF-16 BE with a BOM": lambda t: codecs.BOM_UTF16_BE + t.encode("utf-16-be"),
    "UTF-16 LE without a BOM": lambda t: t.encode("utf-16-le"),
}


def _without_source(out: str) -> dict[str, Any]:
    return {k: v for k, v in json.loads(out).items() if k != "source"}


@pytest.mark.parametrize("form", TEXT_FORMS)
@pytest.mark.parametrize("encoding", READ)
def test_a_dump_with_a_byte_order_mark_reads_as_its_utf8_text(
        tmp_path: Path, encoding: str, form: str) -> None:
    text = TEXT_FORMS[form](fleetdump.objects())
    code, plain, _ = run_dump(tmp_path, text, "-o", "json", name=f"plain.{form}")
    assert code == 0 and fleetdump.node_rows(json.loads(plain)) == fleetdump.rows()
    code, out, err = run_dump(tmp_path, READ[encoding](text), "-o", "json", name=f"bom.{form}")
    assert "compressed?" not in err
    assert code == 0, err
    assert _without_source(out) == _without_source(plain)


@pytest.mark.parametrize("encoding", READ_OR_NAMED)
def test_other_utf16_is_read_or_named_for_what_it_is(tmp_path: Path, encoding: str) -> None:
    text = TEXT_FORMS["json"](fleetdump.objects())
    code, out, err = run_dump(tmp_path, READ_OR_NAMED[encoding](text), "-o", "json")
    assert "compressed?" not in err
    if code == 2:
        assert len(err.splitlines()) == 1 and "UTF-16" in err and "dump.json" in err, err
    else:
        assert code == 0, err
        assert fleetdump.node_rows(json.loads(out)) == fleetdump.rows()


NOT_TEXT = {
    "UTF-32 LE with a BOM": (lambda t: codecs.BOM_UTF32_LE + t.encode("utf-32-le"), "UTF-32"),
    "UTF-32 BE with a BOM": (lambda t: codecs.BOM_UTF32_BE + t.encode("utf-32-be"), "UTF-32"),
    "gzip": (lambda t: gzip.compress(t.encode()), "gzip"),
    "a PNG image": (lambda t: b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00", "text"),
}


@pytest.mark.parametrize("what", NOT_TEXT)
def test_bytes_that_are_no_text_gfd_reads_are_one_line_naming_what_was_found(
        tmp_path: Path, what: str) -> None:
    encode, named = NOT_TEXT[what]
    code, out, err = run_dump(tmp_path, encode(TEXT_FORMS["json"](fleetdump.objects())),
                              "-o", "json")
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "dump.json" in err, err
    assert named.lower() in err.lower(), err


# ------------------------------------------------------------------------ hostile text


def test_a_string_holding_a_lone_surrogate_escape_never_breaks_the_output(
        tmp_path: Path) -> None:
    """JSON may spell a lone UTF-16 surrogate ("\\ud800"); Go's decoder, and so the API
    server, reads it as U+FFFD (encoding/json: invalid surrogates "are replaced by the Unicode
    replacement character"). gfd reads it so, or skips the object: either way every output
    form prints."""
    items = fleetdump.objects()
    fleetdump.find(items, "gpu-node-2")["metadata"]["name"] = "gpu-node-2-\ud800"
    text = fleetdump.json_text(fleetdump.as_list(items))
    assert "\\ud800" in text
    for args in (["-o", "json"], ["-o", "wide"], ["--nodes"], ["-o", "yaml"]):
        code, out, err = run_dump(tmp_path, text, *args)
        assert code in (0, 3), err
        out.encode("utf-8")
    doc = json.loads(run_dump(tmp_path, text, "-o", "json")[1])
    names = {node for node, _ in fleetdump.node_rows(doc)}
    assert "gpu-node-2-\ufffd" in names or any("#" in s or "gpu-node-2" in s
                                               for s in doc.get("skipped", []))


def test_a_deeply_nested_dump_is_one_line_never_a_traceback(tmp_path: Path) -> None:
    """Like tests/fuzz/test_fuzz_snapshot.py's: 100 000 nested arrays are bad input, one line
    (or that item skipped); never a RecursionError."""
    items: list[Any] = fleetdump.objects()
    text = fleetdump.json_text(fleetdump.as_list(items))
    text = text.replace('"items": [', '"items": [' + "[" * 100_000 + "]" * 100_000 + ",", 1)
    code, out, err = run_dump(tmp_path, text, "-o", "json")
    if code == 2:
        assert len(err.splitlines()) == 1 and "dump.json" in err, err
    else:
        assert code in (0, 3), err
        assert fleetdump.node_rows(json.loads(out)) == fleetdump.rows()


def test_deeply_nested_yaml_is_one_line_never_a_traceback(tmp_path: Path) -> None:
    text = yaml.safe_dump(fleetdump.as_list(fleetdump.objects())) + \
        "---\n" + "[" * 20_000 + "]" * 20_000 + "\n"
    code, out, err = run_dump(tmp_path, text, "-o", "json", name="dump.yaml")
    if code == 2:
        assert len(err.splitlines()) == 1 and "dump.yaml" in err, err
    else:
        assert code in (0, 3), err
        assert fleetdump.node_rows(json.loads(out)) == fleetdump.rows()


def test_a_yaml_list_that_holds_itself_is_one_line(tmp_path: Path) -> None:
    code, out, err = run_dump(tmp_path, "kind: List\nitems: &a [*a]\n", "-o", "json",
                              name="dump.yaml")
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and "dump.yaml" in err, err


def test_a_yaml_object_that_holds_itself_is_read(tmp_path: Path) -> None:
    items = fleetdump.objects()
    node2 = fleetdump.find(items, "gpu-node-2")
    node2["spec"]["extra"] = node2  # an unknown field gfd does not read: kubectl drops it
    text = yaml.safe_dump(fleetdump.as_list(items))
    assert "*id001" in text
    code, out, err = run_dump(tmp_path, text, "-o", "json", name="dump.yaml")
    assert code == 0, err
    assert fleetdump.node_rows(json.loads(out)) == fleetdump.rows()


@pytest.mark.timeout(20)
def test_a_yaml_alias_bomb_is_refused_or_read_promptly(tmp_path: Path) -> None:
    """Nine aliases of nine aliases... of one Node: 43 million references. Kubernetes' YAML
    reader refuses such a document ("excessive aliasing"); gfd refuses it on one line or
    reads the one Node once, within the test's timeout."""
    text = ("a0: &a0 [{kind: Node, metadata: {name: gpu-node-0}, "
            "status: {allocatable: {nvidia.com/gpu: '8'}}}]\n")
    for i in range(1, 9):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n"
    text += "kind: List\nitems: *a8\n"
    code, out, err = run_dump(tmp_path, text, "-o", "json", name="dump.yaml")
    if code == 2:
        assert len(err.splitlines()) == 1 and "dump.yaml" in err, err
    else:
        assert code == 3, err  # no pods in it
        assert [(r["node"], r["total"]) for r in json.loads(out)["nodes"]] == [
            ("gpu-node-0", 8)]
