"""``gfd fleet``'s command line: where it reads from (the API server, ``--from`` a dump or
``-``, ``@sample``), its output forms, its one-line usage errors and its exit codes (0
printed, 1 --check found something, 2 usage, 3 incomplete). The counting is tested in
tests/fleet/, against the real scheduler in realapi/test_fleet_scheduler.py."""

from __future__ import annotations

import copy
import dataclasses
import json
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from fakes.apiserver import FakeApiServer
from helpers import fleetsample

from gfd import cli_fleet
from gfd.cli import cli
from gfd.fleet import report, source
from gfd.fleet.checks import Finding
from gfd.fleet.count import count
from gfd.fleet.health import ViewHealth
from gfd.fleet.livesource import LiveSource
from gfd.fleet.model import Fleet
from gfd.fleet.view import StaticSource, View, ViewSource
from gfd.metrics import fleetserver


def fleet(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["fleet", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_the_shipped_sample_is_the_sample_the_rules_build() -> None:
    shipped = Path(__file__).parents[1] / "gfd" / "data" / "fleet-sample.json"
    assert shipped.read_text() == fleetsample.text(), (
        "rewrite it: cd tests && python -m helpers.fleetsample")


def test_the_sample_prints_one_row_per_kind_with_the_documented_columns() -> None:
    code, out, _ = fleet("--from", "@sample")
    assert code == 0
    header, *rows = out.splitlines()
    assert header.split() == ["MODEL", "MEMORY", "MIG", "SHARING", "RESOURCE", "BY", "NODES",
                              "TOTAL", "ALLOCATED", "FREE", "PENDING", "UNSCHEDULABLE"]
    assert rows and all(len(r.split()) >= 12 for r in rows)
    code, bare, _ = fleet("--from", "@sample", "--no-headers")
    assert [r.split() for r in bare.splitlines()] == [r.split() for r in rows]


def test_json_and_yaml_carry_the_same_document_and_every_count_is_an_integer() -> None:
    _, text, _ = fleet("--from", "@sample", "-o", "json")
    _, other, _ = fleet("--from", "@sample", "-o", "yaml")
    doc = json.loads(text)
    assert yaml.safe_load(other) == doc
    assert doc["apiVersion"] == "gfd/v1" and doc["kind"] == "Fleet" and doc["complete"]
    for row in doc["kinds"] + doc["nodes"]:
        assert all(isinstance(row[k], int) for k in ("total", "allocated", "free", "pending"))
        assert row["resource"]
    assert all(row["node"] for row in doc["nodes"])


def test_a_dump_on_standard_input_reads_as_the_same_file(tmp_path: Path) -> None:
    text = fleetsample.text()
    (tmp_path / "dump.json").write_text(text)
    _, from_file, _ = fleet("--from", str(tmp_path / "dump.json"), "-o", "json")
    _, from_stdin, _ = fleet("--from", "-", "-o", "json", stdin=text)
    drop = lambda d: {k: v for k, v in json.loads(d).items() if k != "source"}  # noqa: E731
    assert drop(from_file) == drop(from_stdin)


def test_check_exits_1_and_names_the_node_when_labels_disagree(tmp_path: Path) -> None:
    dump = fleetsample.build()
    node = next(i for i in dump["items"] if i["metadata"]["name"] == "hgx-h100-1")
    node["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    (tmp_path / "dump.json").write_text(json.dumps(dump))
    code, out, _ = fleet("--from", str(tmp_path / "dump.json"), "--check")
    assert code == 1
    assert "hgx-h100-1: device-plugin-units: labels say 8 nvidia.com/gpu" in out
    code, _, _ = fleet("--from", "@sample", "--check")
    assert code == 0


def test_filters_print_where_the_pod_fits_and_the_selectors_stanza() -> None:
    code, out, _ = fleet("--from", "@sample", "--product", "H100", "-o", "json")
    assert code == 0
    fits = json.loads(out)["fits"]
    assert fits["resource"] == "nvidia.com/gpu" and fits["count"] == 1
    assert fits["selector"] == yaml.safe_load(CliRunner().invoke(
        cli, ["selector", "--product", "H100"]).stdout)


@pytest.mark.parametrize(("args", "words"), [
    (("--from", "@sample", "--kubeconfig", "x"), "--from reads a dump"),
    (("--from", "@sample", "-l", "a=b"), "--selector filters the nodes"),
    (("--from", "@sample", "--shared", "--dedicated"), "--shared and --dedicated"),
    (("--from", "@sample", "--feature-gates", "DynamicMIG=true"), "--feature-gates goes with"),
    (("--from", "/nonexistent/dump.json"), "--from /nonexistent/dump.json: cannot read it"),
])
def test_bad_input_is_one_line_naming_the_problem_and_exit_2(args: tuple[str, ...],
                                                             words: str) -> None:
    code, _, err = fleet(*args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and words in err


def test_a_forbidden_list_is_one_line_and_the_rest_is_shown_marked_incomplete(
        tmp_path: Path) -> None:
    with FakeApiServer() as server:
        server.add_node("gpu-1", labels={"nvidia.com/gpu.count": "1"})
        server.forbid("list", "pods")
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        code, out, err = fleet("--kubeconfig", str(kubeconfig), "-o", "json")
    assert code == 3
    doc = json.loads(out)
    assert doc["complete"] is False
    assert any(line.startswith("list pods: forbidden") for line in doc["incomplete"])
    assert "incomplete: list pods: forbidden" in err


def test_docs_show_the_samples_summary_as_the_command_prints_it() -> None:
    _, out, _ = fleet("--from", "@sample")
    docs = (Path(__file__).parents[1] / "docs" / "fleet.md").read_text()
    assert f"$ gfd fleet --from @sample\n{out}```" in docs


def test_pending_names_each_pending_gpu_pod_with_its_largest_reason(tmp_path: Path) -> None:
    dump = fleetsample.build()
    (waiting,) = [i for i in dump["items"] if i["kind"] == "Pod" and not i["spec"].get("nodeName")]
    huge = json.loads(json.dumps(waiting))
    huge["metadata"] |= {"name": "huge"}
    huge["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "99"}}
    dump["items"].append(huge)
    (tmp_path / "dump.json").write_text(json.dumps(dump))
    code, out, _ = fleet("--from", str(tmp_path / "dump.json"), "--pending")
    assert code == 0
    lines = out.splitlines()
    table = lines[next(i for i, x in enumerate(lines) if x.startswith("POD")):]
    assert [x.split()[:3] for x in table] == [["POD", "ASKS", "WHY"],
                                              ["ml/huge", "99", "nvidia.com/gpu"],
                                              ["ml/train-2", "8", "nvidia.com/gpu"]]
    assert table[2].endswith("fits now (not yet scheduled)")
    _, text, _ = fleet("--from", str(tmp_path / "dump.json"), "--pending", "-o", "json")
    rows = {r["name"]: r for r in json.loads(text)["pending"]}
    assert rows["train-2"]["reason"] is None
    assert rows["huge"]["reason"]["count"] == max(
        g["count"] for g in json.loads(CliRunner().invoke(cli, [
            "why", "huge", "-n", "ml", "--from", str(tmp_path / "dump.json"), "-o", "json"
        ]).stdout)["groups"])


# -- --serve ------------------------------------------------------------------------------


def test_serve_serves_the_check_document_of_what_it_read_and_ends_on_sigterm_with_0() -> None:
    import urllib.request

    from helpers.fleetserve import Served

    _, printed, _ = fleet("--from", "@sample", "--check", "-o", "json")
    with Served("@sample") as served:
        with urllib.request.urlopen(served.url + "fleet?nodes=true", timeout=60) as resp:
            got = json.loads(resp.read())
        with urllib.request.urlopen(served.url + "readyz", timeout=60) as resp:
            assert resp.status == 200
        code = served.stop()
    assert code == 0, served.stderr
    assert {k: v for k, v in got.items() if k not in ("view", "notes")} == json.loads(printed)
    assert got["view"]["ready"] and got["view"]["generation"] == 0


@pytest.mark.parametrize("args, said", [
    (("--serve", ":8080", "--nodes"), "--serve :8080: leave out --nodes"),
    (("--serve", ":8080", "-o", "json", "--check"), "leave out --check, -o"),
    (("--serve", ":8080", "--product", "H100"), "/fleet's query parameters"),
    (("--node-findings",), "--node-findings goes with --serve"),
    (("--serve", "localhost:8080"), "--serve localhost:8080: 'localhost' is not an IP"),
], ids=["nodes", "output", "filters", "node-findings-alone", "a-host-name"])
def test_serve_refuses_what_shapes_one_printed_answer(args: tuple[str, ...], said: str) -> None:
    code, _, err = fleet("--from", "@sample", *args)
    assert code == 2 and said in err, err


# --------------------------------------------------------------------------- --watch, --serve


class Scripted:
    """A view source that changes as scripted: each ``wait`` moves to the next view; past
    the last, Ctrl-C."""

    def __init__(self, views: list[Any]) -> None:
        self.views = views
        self.at = 0
        self.stopped = False

    @contextmanager
    def read(self) -> Iterator[Any]:
        yield self.views[self.at]

    def wait(self, after: int, timeout: float) -> int:
        if self.at + 1 >= len(self.views):
            raise KeyboardInterrupt
        self.at += 1
        return int(self.views[self.at].generation)

    def stop(self) -> None:
        self.stopped = True


def sample_views(*changes: Callable[[Fleet], None]) -> list[View]:
    """The sample fleet, then the sample with each change made in turn."""
    views = []
    fleet = source.from_dump(source.SAMPLE)
    for generation, change in enumerate((lambda f: None, *changes)):
        change(fleet)
        counted = count(fleet)
        views.append(View(fleet=fleet, counted=counted, findings=(), generation=generation,
                          health=ViewHealth(collections=())))
        fleet = copy.deepcopy(fleet)
    return views


def cordon_first(fleet: Fleet) -> None:
    name = sorted(fleet.nodes)[0]
    fleet.nodes[name] = dataclasses.replace(fleet.nodes[name], unschedulable=True)


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[str]:
    """A kubeconfig of an API server (the scripted tests read nothing of it)."""
    with FakeApiServer() as api:
        yield str(api.write_kubeconfig(tmp_path / "kubeconfig"))


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Callable[[list[Any]], Scripted]:
    made: list[Scripted] = []

    def use(views: list[Any]) -> Scripted:
        made.append(Scripted(views))
        monkeypatch.setattr(cli_fleet, "_live_source", lambda *a, **k: made[-1])
        return made[-1]

    return use


def test_watch_prints_one_json_document_a_line_whenever_the_view_changes(
        scripted: Callable[[list[Any]], Scripted], kubeconfig: str) -> None:
    views = sample_views(lambda f: None, cordon_first)  # a generation that changes nothing
    source_ = scripted(views)
    code, out, _ = fleet("--watch", "-o", "json", "--kubeconfig", kubeconfig)
    assert code == 0 and source_.stopped  # Ctrl-C
    docs = [json.loads(line) for line in out.splitlines()]
    assert len(docs) == 2
    assert docs[0] == report.document(views[0].fleet, views[0].counted)
    assert docs[1] == report.document(views[2].fleet, views[2].counted)


def test_watch_prints_the_tables_again_after_a_blank_line(
        scripted: Callable[[list[Any]], Scripted], kubeconfig: str) -> None:
    views = sample_views(cordon_first)
    scripted(views)
    code, out, _ = fleet("--watch", "--nodes", "--kubeconfig", kubeconfig)
    first, second = (report.nodes_text(v.counted) for v in views)
    assert code == 0 and out == first + "\n" + second


def test_watch_with_check_prints_the_findings_each_time(
        scripted: Callable[[list[Any]], Scripted], kubeconfig: str) -> None:
    views = [dataclasses.replace(v, findings=(Finding(node="n", check="no-agent", message="m",
                                                      look_at="l"),)) for v in sample_views()]
    scripted(views)
    code, out, _ = fleet("--watch", "--check", "-o", "yaml", "--kubeconfig", kubeconfig)
    assert code == 0 and out.startswith("---\n")
    assert yaml.safe_load(out)["findings"] == [views[0].findings[0].to_api()]


@pytest.mark.parametrize("args, message", [
    (("--watch", "--from", "@sample"), "--watch follows the API server"),
    (("--watch", "--serve"), "give one of them"),
    (("--serve", "--product", "H100"), "query parameters"),
    (("--serve=localhost:80",), "is not an IP address"),
    (("--serve=:http",), "no port"),
    (("--serve=[::1:80",), "give HOST:PORT"),
], ids=["watch-a-dump", "watch-and-serve", "serve-filters", "serve-host", "serve-port",
        "serve-ipv6"])
def test_watch_and_serve_usage_errors_are_one_line_and_exit_2(
        args: tuple[str, ...], message: str) -> None:
    code, out, err = fleet(*args)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


class FleetServer(types.ModuleType):
    """A stand-in for gfd.metrics.fleetserver: records what it is handed, reads one view."""

    def __init__(self) -> None:
        super().__init__("gfd.metrics.fleetserver")
        self.calls: list[tuple[Any, str]] = []
        self.docs: list[dict[str, Any]] = []
        self.parse_address = fleetserver.parse_address

    def serve(self, source: ViewSource, address: str, *, node_findings: bool = False,
              announce: Any = None) -> None:
        self.calls.append((source, address))
        settled = getattr(source, "wait_settled", None)
        if settled is not None:
            assert settled(60.0)
        with source.read() as view:
            self.docs.append(report.document(view.fleet, view.counted))


def test_serve_hands_the_live_view_of_the_api_server_to_the_fleet_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server_module = FleetServer()
    monkeypatch.setitem(sys.modules, "gfd.metrics.fleetserver", server_module)
    with FakeApiServer() as api:
        api.add_node("gpu-1", labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        code, _, err = fleet("--serve", "127.0.0.1:9400", "--kubeconfig", str(kubeconfig))
        _, one_shot, _ = fleet("-o", "json", "--kubeconfig", str(kubeconfig))
    assert code == 0, err
    ((source_, address),) = server_module.calls
    assert isinstance(source_, LiveSource) and address == "127.0.0.1:9400"
    assert server_module.docs == [json.loads(one_shot)]


def test_serve_of_a_dump_serves_it_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    server_module = FleetServer()
    monkeypatch.setitem(sys.modules, "gfd.metrics.fleetserver", server_module)
    code, _, _ = fleet("--serve", "--from", "@sample")
    _, one_shot, _ = fleet("-o", "json", "--from", "@sample")
    assert code == 0
    ((source_, address),) = server_module.calls
    assert isinstance(source_, StaticSource) and address == ":8080"
    assert server_module.docs == [json.loads(one_shot)]


