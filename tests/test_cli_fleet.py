"""``gfd fleet``'s command line: where it reads from (the API server, ``--from`` a dump or
``-``, ``@sample``), its output forms, its one-line usage errors and its exit codes (0
printed, 1 --check found something, 2 usage, 3 incomplete). The counting is tested in
tests/fleet/, against the real scheduler in realapi/test_fleet_scheduler.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from fakes.apiserver import FakeApiServer
from helpers import fleetsample

from gfd.cli import cli


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
