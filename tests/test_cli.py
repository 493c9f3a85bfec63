"""The command line run in process: the config file through it (sharing labels, GFD's
precedence flag/env > file > default, clear exit-2 errors that publish nothing), every
command's output, and errors mapped to exit codes (0 ok, 1 runtime, 2 usage or config)."""

from __future__ import annotations

import json
import logging
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from fakes.apiserver import FakeApiServer

from gfd import __version__
from gfd.cli import cli
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.snapshot import Gpu, ResourceManager, load_snapshot

T4_SHARED = """
version: v1
sharing:
  timeSlicing:
    renameByDefault: {rename}
    resources:
      - name: nvidia.com/gpu
        replicas: 4
"""
ENV_NAMES = ("GFD_MIG_STRATEGY", "MIG_STRATEGY", "GFD_NO_TIMESTAMP", "GFD_CONFIG_FILE",
             "CONFIG_FILE", "GFD_RESOURCE_MANAGER", "GFD_PLUGINS_REGISTRY",
             "GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR", "GFD_ONESHOT",
             "GFD_SLEEP_INTERVAL", "GFD_OUTPUT_FILE", "GFD_LABEL_SET")


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    clean = dict.fromkeys(ENV_NAMES)
    runner = CliRunner()
    result = runner.invoke(cli, list(args), env={**clean, **(env or {})})
    labels = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return result.exit_code, labels, result.stderr


def config(tmp_path: Path, text: str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# The simulated T4 node carries its own sharing config; an explicit --config-file replaces it.
def test_time_slicing_t4_gets_shared_product_and_replicas(tmp_path: Path) -> None:
    cfg = config(tmp_path, T4_SHARED.format(rename="false"))
    code, labels, err = run("labels", "--simulate", "t4-time-sliced", "--config-file", cfg)
    assert code == 0, err
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/mps.capable"] == "false"
    assert labels["nvidia.com/gpu.memory.per-replica"] == "3840"


def test_rename_by_default_drops_the_shared_suffix(tmp_path: Path) -> None:
    cfg = config(tmp_path, T4_SHARED.format(rename="true"))
    code, labels, _ = run("labels", "--simulate", "t4-time-sliced", "--config-file", cfg)
    assert code == 0
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["nvidia.com/gpu.replicas"] == "4"


def test_mps_sharing_sets_strategy_and_mps_capable(tmp_path: Path) -> None:
    cfg = config(tmp_path, T4_SHARED.format(rename="false").replace("timeSlicing", "mps"))
    code, labels, _ = run("labels", "--simulate", "t4-time-sliced", "--config-file", cfg)
    assert code == 0
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert labels["nvidia.com/mps.capable"] == "true"
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"


def test_mps_on_a_mig_node_is_refused_with_exit_2(tmp_path: Path) -> None:
    cfg = config(tmp_path, T4_SHARED.format(rename="false").replace("timeSlicing", "mps"))
    code, labels, err = run("labels", "--simulate", "dgx-a100-mig-mixed", "--mig-strategy",
                            "mixed", "--config-file", cfg)
    assert code == 2 and labels == {}
    assert "MPS" in err and len(err.strip().splitlines()) == 1


def test_time_sliced_mig_profiles_under_mixed(tmp_path: Path) -> None:
    cfg = config(tmp_path, """
sharing:
  timeSlicing:
    resources:
      - {name: nvidia.com/mig-1g.5gb, replicas: 2}
""")
    code, labels, _ = run("labels", "--simulate", "dgx-a100-mig-mixed", "--mig-strategy",
                          "mixed", "--config-file", cfg)
    assert code == 0
    assert labels["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"
    assert labels["nvidia.com/mig-1g.5gb.replicas"] == "2"
    assert labels["nvidia.com/mig-1g.5gb.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/mig-1g.5gb.memory.per-replica"] == "2432"
    assert labels["nvidia.com/mig-3g.20gb.replicas"] == "1"


@pytest.mark.parametrize("text, field", [
    ("sharing: {timeSlicing: {resources: [{name: nvidia.com/gpu, replicas: 1}]}}",
     "sharing.timeSlicing.resources[0].replicas: must be >= 2, got 1"),
    ("flags: {migStrategy: bogus}", "flags.migStrategy"),
    ("flags: {gfd: {sleepInterval: soon}}", "flags.gfd.sleepInterval"),
    ("version: v2", "version"),
    ("{not yaml: [", "not valid YAML or JSON"),
], ids=["replicas-1", "bad-strategy", "bad-duration", "bad-version", "malformed"])
def test_an_invalid_config_exits_2_with_one_line_naming_the_field(tmp_path: Path, text: str,
                                                                  field: str) -> None:
    cfg = config(tmp_path, text)
    code, labels, err = run("labels", "--simulate", "hgx-h100", "--config-file", cfg)
    assert code == 2 and labels == {}
    assert field in err and cfg in err
    assert len(err.strip().splitlines()) == 1


def test_an_invalid_config_publishes_nothing_in_run(tmp_path: Path) -> None:
    cfg = config(tmp_path, "flags: {migStrategy: bogus}")
    out = tmp_path / "gfd"
    code, _, _ = run("run", "--simulate", "hgx-h100", "--oneshot", "-o", str(out),
                     "--config-file", cfg)
    assert code == 2 and not out.exists()


# GFD's precedence per setting: explicit flag > environment variable > config file > default.
FILE = "flags: {migStrategy: single, gfd: {noTimestamp: true}}"


@pytest.mark.parametrize("args, env, strategy", [
    ([], {}, "none"),                                              # default
    (["--config-file", "{cfg}"], {}, "single"),                    # file beats default
    (["--config-file", "{cfg}", "--mig-strategy", "mixed"], {}, "mixed"),   # flag beats file
    (["--config-file", "{cfg}"], {"MIG_STRATEGY": "mixed"}, "mixed"),       # env beats file
    (["--mig-strategy", "none"], {"GFD_MIG_STRATEGY": "mixed"}, "none"),    # flag beats env
    ([], {"CONFIG_FILE": "{cfg}"}, "single"),                      # file named by env
    ([], {"GFD_MIG_STRATEGY": "mixed", "MIG_STRATEGY": "single"}, "mixed"),  # GFD_ first
], ids=["default", "file", "flag>file", "env>file", "flag>env", "CONFIG_FILE", "GFD_-first"])
def test_precedence_table(tmp_path: Path, args: list[str], env: dict[str, str],
                          strategy: str) -> None:
    cfg = config(tmp_path, FILE)
    args = [a.replace("{cfg}", cfg) for a in args]
    env = {k: v.replace("{cfg}", cfg) for k, v in env.items()}
    code, labels, err = run("labels", "--simulate", "dgx-a100-mig-single", "-o", "text",
                            *args, env=env)
    assert code == 0, err
    assert labels.get("nvidia.com/mig.strategy", "none") == strategy


def test_file_sets_no_timestamp_unless_a_flag_says_otherwise(tmp_path: Path) -> None:
    cfg = config(tmp_path, FILE)
    _, labels, _ = run("labels", "--simulate", "hgx-h100", "--config-file", cfg)
    assert "nvidia.com/gfd.timestamp" not in labels
    _, labels, _ = run("labels", "--simulate", "hgx-h100", "--config-file", cfg,
                       "--no-timestamp=false")
    assert labels["nvidia.com/gfd.timestamp"].isdigit()


@pytest.mark.parametrize("value, expected", [("true", False), ("false", True), ("1", False)])
def test_gfd_style_booleans_from_the_environment(value: str, expected: bool) -> None:
    _, labels, _ = run("labels", "--simulate", "hgx-h100", env={"GFD_NO_TIMESTAMP": value})
    assert ("nvidia.com/gfd.timestamp" in labels) is expected


def test_json_output_is_the_same_labels() -> None:
    runner = CliRunner()
    text = runner.invoke(cli, ["labels", "--simulate", "hgx-h100", "--no-timestamp"]).stdout
    data = runner.invoke(cli, ["labels", "--simulate", "hgx-h100", "--no-timestamp",
                               "-o", "json"]).stdout
    assert json.loads(data) == dict(line.split("=", 1) for line in text.splitlines())


def test_unknown_simulation_lists_the_names() -> None:
    code, _, err = run("labels", "--simulate", "bogus")
    assert code == 2 and "hgx-h100" in err and "t4-time-sliced" in err


def test_a_kubeconfig_that_is_not_yaml_exits_2_with_one_line(tmp_path: Path) -> None:
    kubeconfig = config(tmp_path, "clusters: [1, 2\n", name="kubeconfig")
    code, _, err = run("diff", "--simulate", "hgx-h100", "--sink", "node", "--node-name", "n1",
                       "--kubeconfig", kubeconfig)
    assert code == 2
    assert err.startswith("gfd: error: cannot load Kubernetes credentials from " + kubeconfig)
    assert len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- the commands


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={**dict.fromkeys(ENV_NAMES), **(env or {})})


def test_version_prints_the_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout.strip() == __version__


def test_snapshot_prints_json_that_labels_reproduce(tmp_path: Path) -> None:
    result = invoke("snapshot", "--simulate", "hgx-h100")
    assert result.exit_code == 0, result.stderr
    snap = load_snapshot(result.stdout, source="test")
    assert snap.gpus == simulate("hgx-h100").snapshot.gpus
    path = tmp_path / "node.json"
    path.write_text(result.stdout)
    from_file = invoke("labels", "--snapshot", str(path), "--no-timestamp")
    simulated = invoke("labels", "--simulate", "hgx-h100", "--no-timestamp")
    assert from_file.exit_code == 0 and from_file.stdout == simulated.stdout


@pytest.mark.parametrize("machine", sorted(SIMULATIONS))
def test_a_snapshot_replays_to_the_same_labels_from_json_and_from_yaml(
        tmp_path: Path, machine: str) -> None:
    """`gfd snapshot -o yaml > s.yaml; gfd labels --snapshot s.yaml`, as with JSON: both
    forms of every simulated machine give the same snapshot and the same labels."""
    files = {}
    for fmt in ("json", "yaml"):
        printed = invoke("snapshot", "--simulate", machine, "-o", fmt)
        assert printed.exit_code == 0, printed.stderr
        files[fmt] = tmp_path / f"s.{fmt}"
        files[fmt].write_text(printed.stdout)
    assert not files["yaml"].read_text().startswith("{")
    labels = {}
    for fmt, path in files.items():
        for strategy in ("none", "mixed"):
            result = invoke("labels", "--snapshot", str(path), "--no-timestamp",
                            "--mig-strategy", strategy, "-o", "json")
            assert result.exit_code == 0, (fmt, result.stderr)
            labels[fmt, strategy] = json.loads(result.stdout)
    assert labels["json", "none"] == labels["yaml", "none"]
    assert labels["json", "mixed"] == labels["yaml", "mixed"]
    assert labels["yaml", "none"] and labels["yaml", "mixed"]  # (some labels: the no-GPU node
    # gets the driver-less ones)
    loaded = [load_snapshot(p.read_text(), source="f") for p in files.values()]
    assert loaded[0] == loaded[1]


def test_snapshot_dash_reads_standard_input_as_kubectl_f_dash_does() -> None:
    """`gfd snapshot -o yaml | gfd labels --snapshot -`: the labels of the machine itself."""
    printed = invoke("snapshot", "--simulate", "h100-mig", "-o", "yaml")
    piped = CliRunner().invoke(cli, ["labels", "--snapshot", "-", "--no-timestamp"],
                               input=printed.stdout, env=dict.fromkeys(ENV_NAMES))
    simulated = invoke("labels", "--simulate", "h100-mig", "--no-timestamp")
    assert piped.exit_code == 0, piped.stderr
    assert piped.stdout == simulated.stdout and "nvidia.com/gpu.count=" in piped.stdout
    empty = CliRunner().invoke(cli, ["labels", "--snapshot", "-"], input="",
                               env=dict.fromkeys(ENV_NAMES))
    assert empty.exit_code == 2
    assert empty.stderr.splitlines() == [
        "gfd: error: snapshot on standard input: snapshot: empty, so not a snapshot (write one "
        "with `gfd snapshot > FILE`)"]


def test_a_missing_snapshot_file_says_where_it_was_asked_for(tmp_path: Path) -> None:
    result = invoke("labels", "--snapshot", str(tmp_path / "none.yaml"))
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].endswith(
        "(check --snapshot / GFD_SNAPSHOT; write one with `gfd snapshot > FILE`, or give - for "
        "standard input)")


def test_a_yaml_snapshot_that_is_wrong_is_one_line_naming_the_field_exit_2(
        tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    printed = invoke("snapshot", "--simulate", "hgx-h100", "-o", "yaml")
    path.write_text(printed.stdout.replace("index: 0\n", "index: zero\n", 1))
    result = invoke("labels", "--snapshot", str(path))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"gfd: error: snapshot file {path}: snapshot.gpus[0].index: expected int, got "
        "'zero'"]


def test_explain_prints_value_source_raw_rules_and_set() -> None:
    result = invoke("explain", "gpu.product", "--simulate", "hgx-h100",
                    "--resource-manager", "device-plugin")
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3",
        "  source: nvmlDeviceGetName",
        "  raw:    NVIDIA H100 80GB HBM3",
        "  rule 1: sanitise: keep [A-Za-z0-9-_. ], join words with '-'",
        "  set:    compat (computed in gfd/labelers/gpu.py)",
        "  resource manager: device-plugin (--resource-manager device-plugin)",
    ]


def test_explain_under_dra_says_what_the_label_means_there_and_what_it_leaves_out() -> None:
    result = invoke("explain", "gpu.product", "--simulate", "t4-time-sliced",
                    "--resource-manager", "dra")
    assert result.stdout.splitlines()[0] == "nvidia.com/gpu.product=Tesla-T4"
    assert "  under dra: the primary model's name: never `-SHARED` or `-MIG-...` (`gpu` only)" \
        in result.stdout.splitlines()
    assert result.stdout.splitlines()[-2:] == [
        "  per device: `gfd devices` (each GPU and MIG device as DRA claims select it: "
        "attributes, capacities)",
        "  resource manager: dra (--resource-manager dra)"]
    driver = invoke("explain", "cuda.driver.major", "--simulate", "t4-time-sliced",
                    "--resource-manager", "dra")
    assert driver.exit_code == 0 and "gfd devices" not in driver.stdout
    gone = invoke("explain", "gpu.replicas", "--simulate", "t4-time-sliced",
                  "--resource-manager", "dra")
    assert gone.exit_code == 1
    assert ("gpu.replicas is not a label on this machine; it is not published under resource "
            "manager dra (--resource-manager dra)") in gone.stderr


def test_a_simulated_or_recorded_machine_says_which_manager_it_assumed_not_the_hosts(
        tmp_path: Path) -> None:
    """This host's kubelet says nothing about a simulated or recorded machine: ``auto``
    assumes its manager (a snapshot's: the one recorded with it) and says how to choose the
    other, in one line, whatever this host's /var/lib/kubelet holds."""
    code, _, err = run("labels", "--simulate", "hgx-h100")
    assert code == 0 and err == ("resource manager: device-plugin (assumed for a simulated "
                                 "machine; --resource-manager dra for the DRA driver's labels)\n")
    recorded = simulate("hgx-h100").snapshot
    dra = tmp_path / "dra.json"
    dra.write_text(replace(recorded, resource_manager=ResourceManager(
        name="dra", evidence="--resource-manager dra")).to_json())
    code, labels, err = run("labels", "--snapshot", str(dra))
    assert code == 0 and labels["nvidia.com/gpu.present"] == "true"
    assert err == ("resource manager: dra (as the snapshot recorded it; --resource-manager "
                   "device-plugin for the device plugin's labels)\n")
    explained = invoke("explain", "gpu.count", "--snapshot", str(dra))
    assert explained.stdout.splitlines()[-1] == (
        "  resource manager: dra (as the snapshot recorded it; --resource-manager "
        "device-plugin for the device plugin's labels)")
    older = tmp_path / "older.json"  # recorded before gfd recorded the manager
    data = json.loads(recorded.to_json())
    del data["resource_manager"]
    older.write_text(json.dumps(data))
    assert run("labels", "--snapshot", str(older))[2] == (
        "resource manager: device-plugin (assumed: the snapshot records none; "
        "--resource-manager dra for the DRA driver's labels)\n")
    for args in (("features",), ("explain", "gpu.count"), ("labels",)):
        for machine in (("--simulate", "hgx-h100"), ("--snapshot", str(older))):
            result = invoke(*args, *machine)
            assert result.exit_code == 0 and "kubelet" not in result.output, (args, machine)


def test_labels_says_on_stderr_which_resource_manager_they_are_for(tmp_path: Path) -> None:
    code, labels, err = run("labels", "--simulate", "hgx-h100",
                            "--plugins-registry", str(tmp_path))
    assert code == 0 and "nvidia.com/gpu.present" not in labels
    assert err == f"resource manager: device-plugin (no sign of DRA: no {tmp_path}/" \
                  "gpu.nvidia.com-reg.sock)\n"
    os.mknod(tmp_path / "gpu.nvidia.com-reg.sock", stat.S_IFSOCK | 0o600)
    code, labels, err = run("labels", "--simulate", "hgx-h100", env={
        "GFD_PLUGINS_REGISTRY": str(tmp_path)})
    assert code == 0 and labels["nvidia.com/gpu.present"] == "true"
    assert err.startswith("resource manager: dra (the NVIDIA DRA kubelet plugin is registered")


def test_explain_of_an_unknown_key_suggests_close_ones_and_exits_1() -> None:
    result = invoke("explain", "gpu.prodct", "--simulate", "hgx-h100")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("gfd: error: nvidia.com/gpu.prodct is not a label on this "
                                    "machine (did you mean nvidia.com/gpu.product")


def test_explain_of_a_label_this_machine_lacks_says_when_it_is_present() -> None:
    result = invoke("explain", "mig.strategy", "--simulate", "hgx-h100")
    assert result.exit_code == 1
    assert "is not a label on this machine; it is present when:" in result.stderr


def test_explain_says_when_a_label_is_not_published(tmp_path: Path) -> None:
    data = json.loads(simulate("hgx-h100").snapshot.to_json())
    data["driver_version"] = "550.54.-15"
    path = tmp_path / "node.json"
    path.write_text(json.dumps(data))
    result = invoke("explain", "cuda.driver.rev", "--snapshot", str(path))
    assert result.exit_code == 0
    assert result.stdout.splitlines()[0] == "nvidia.com/cuda.driver.rev=-15"
    assert "  NOT PUBLISHED: label nvidia.com/cuda.driver.rev='-15'" in result.stdout


def test_diff_shows_what_run_would_write_then_in_sync_after_it(tmp_path: Path) -> None:
    out = str(tmp_path / "gfd")
    before = invoke("diff", "--simulate", "hgx-h100", "--output-file", out)
    assert before.exit_code == 1
    assert "+ nvidia.com/gpu.count=8" in before.stdout.splitlines()
    assert before.stderr.strip().endswith(f"~0 -0 at feature file {out}")
    assert invoke("run", "--simulate", "hgx-h100", "-o", out, "--oneshot").exit_code == 0
    after = invoke("diff", "--simulate", "hgx-h100", "--output-file", out)
    assert after.exit_code == 0 and after.stdout == ""
    assert after.stderr.startswith("in sync: ")
    assert after.stderr.strip().endswith(f" labels at feature file {out}")


def test_diff_lists_changed_and_removed_labels(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    out.write_text("nvidia.com/gpu.count=4\nnvidia.com/gone=yes\n")
    result = invoke("diff", "--simulate", "hgx-h100", "--output-file", str(out),
                    "--no-timestamp")
    lines = result.stdout.splitlines()
    assert "~ nvidia.com/gpu.count: 4 -> 8" in lines and "- nvidia.com/gone=yes" in lines
    assert result.exit_code == 1


def test_diff_at_the_node_shows_a_label_another_writer_overwrote_as_changed(
        tmp_path: Path) -> None:
    """Regression: an overwrite by another field manager moves the key's ownership, and diff
    compared only with the keys gfd still owned: it showed ``+ key=value``."""
    with FakeApiServer() as server:
        server.add_node("n1", labels={"team": "ml"})
        node = ("--simulate", "hgx-h100", "--sink", "node", "--node-name", "n1",
                "--no-timestamp", "--kubeconfig",
                str(server.write_kubeconfig(tmp_path / "kubeconfig")))
        assert invoke("run", *node, "--oneshot").exit_code == 0
        server.set_label("n1", "nvidia.com/gpu.product", "hand-edited", manager="kubectl")
        result = invoke("diff", *node)
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "~ nvidia.com/gpu.product: hand-edited -> NVIDIA-H100-80GB-HBM3"]
    assert result.stderr.strip() == "+0 ~1 -0 at Node n1"


def test_prune_removes_gfds_file_and_lists_the_labels(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    out.write_text("nvidia.com/gpu.count=8\nnvidia.com/gpu.family=hopper\n")
    result = invoke("prune", "--simulate", "hgx-h100", "-o", str(out))
    assert result.exit_code == 0 and not out.exists()
    assert result.stdout.splitlines() == ["- nvidia.com/gpu.count", "- nvidia.com/gpu.family"]
    assert result.stderr.strip() == f"pruned 2 labels at feature file {out}"
    again = invoke("prune", "--simulate", "hgx-h100", "-o", str(out))
    assert again.exit_code == 0
    assert again.stderr.strip() == f"nothing to prune at feature file {out}"


def test_run_oneshot_to_stdout_prints_the_labels_once() -> None:
    result = invoke("run", "--simulate", "hgx-h100", "--oneshot", "-o", "-", "--no-timestamp")
    assert result.exit_code == 0
    assert result.stdout == invoke("labels", "--simulate", "hgx-h100", "--no-timestamp").stdout


# ----------------------------------------------------------------------------- exit codes


@pytest.mark.parametrize("args, env, code, message", [
    (["labels", "--simulate", "hgx-h100", "--mig-strategy", "bogus"], {}, 2,
     "must be one of none, single, mixed, got 'bogus'"),
    (["labels", "--simulate", "hgx-h100"], {"GFD_MIG_STRATEGY": "bogus"}, 2,
     "gfd: error: GFD_MIG_STRATEGY (the environment's --mig-strategy): must be one of"),
    (["run", "--simulate", "hgx-h100", "--metrics-port", "99999"], {}, 2,
     "must be 0..65535, got 99999"),
    (["labels", "--simulate", "hgx-h100", "--snapshot", "/x.json"], {}, 2,
     "gfd: error: --simulate and --snapshot cannot be used together"),
    (["labels", "--snapshot", "/nonexistent/node.json"], {}, 2,
     "gfd: error: snapshot file /nonexistent/node.json: No such file or directory"),
    (["diff", "--simulate", "hgx-h100", "--sink", "node"], {}, 2,
     "gfd: error: --node-name / NODE_NAME is required"),
    (["frobnicate"], {}, 2, "No such command 'frobnicate'"),
], ids=["bad-flag-value", "bad-env-value", "port-out-of-range", "two-sources",
        "missing-snapshot", "api-sink-without-node-name", "unknown-command"])
def test_usage_and_config_errors_exit_2_runtime_errors_exit_1(
        args: list[str], env: dict[str, str], code: int, message: str) -> None:
    result = invoke(*args, env=env)
    assert result.exit_code == code
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("flag, timestamped", [
    ("--no-timestamp", False), ("--no-timestamp=true", False), ("--no-timestamp=false", True),
], ids=["bare", "true", "false"])
def test_a_boolean_flag_alone_means_true_and_takes_a_value_as_gfd_does(flag: str,
                                                                       timestamped: bool) -> None:
    result = invoke("labels", "--simulate", "hgx-h100", flag)
    assert ("nvidia.com/gfd.timestamp=" in result.stdout) is timestamped


def test_features_prints_the_nodefeatures_features_as_yaml_json_or_text() -> None:
    import yaml as _yaml

    shown = invoke("features", "--simulate", "dgx-a100-mig-mixed")
    assert shown.exit_code == 0, shown.output
    doc = _yaml.safe_load(shown.stdout)
    gpus = [e["attributes"] for e in doc["instances"]["nvidia.gpu"]["elements"]]
    assert [g["index"] for g in gpus] == [str(i) for i in range(8)]
    assert {g["family"] for g in gpus} == {"ampere"}
    migs = [e["attributes"] for e in doc["instances"]["nvidia.mig"]["elements"]]
    assert migs and all(m["parent"] in {g["index"] for g in gpus} for m in migs)
    assert set(doc["attributes"]["nvidia.driver"]["elements"]) == {"version", "cuda"}
    as_json = invoke("features", "--simulate", "dgx-a100-mig-mixed", "-o", "json")
    assert as_json.exit_code == 0 and json.loads(as_json.stdout) == doc
    text = invoke("features", "--simulate", "dgx-a100-mig-mixed", "-o", "text")
    lines = text.stdout.splitlines()
    assert lines == sorted(lines) and "nvidia.gpu[0].family=ampere" in lines
    assert len(lines) == sum(len(g) for g in gpus) + sum(len(m) for m in migs) + 2


def test_features_of_a_node_without_gpus_are_the_drivers_alone() -> None:
    shown = invoke("features", "--simulate", "no-gpu", "-o", "json")
    assert shown.exit_code == 0, shown.output
    doc = json.loads(shown.stdout)
    assert doc["instances"] == {} and doc["flags"] == {}
    assert list(doc["attributes"]) == ["nvidia.driver"]


def test_diff_at_a_label_only_sink_shows_no_features(tmp_path: Path) -> None:
    out = str(tmp_path / "gfd")
    before = invoke("diff", "--simulate", "hgx-h100", "--output-file", out)
    assert before.exit_code == 1
    assert not [ln for ln in before.stdout.splitlines() if " feature " in ln]
    assert "features:" not in before.stderr


def test_devices_prints_the_drivers_view_as_yaml_or_json() -> None:
    import yaml as _yaml
    from click.testing import CliRunner as _Runner

    from gfd.cli import cli as _cli

    runner = _Runner()
    out = runner.invoke(_cli, ["devices", "--simulate", "mixed-a100-a10"])
    assert out.exit_code == 0, out.output
    doc = _yaml.safe_load(out.output)
    assert doc["driver"] == "gpu.nvidia.com"
    assert [d["name"] for d in doc["devices"]] == ["gpu-0", "gpu-1", "gpu-2"]
    assert doc["devices"][2]["attributes"]["productName"] == {"string": "NVIDIA A10"}
    as_json = runner.invoke(_cli, ["devices", "--simulate", "mixed-a100-a10", "-o", "json"])
    assert as_json.exit_code == 0 and json.loads(as_json.output) == doc


def test_devices_follows_the_drivers_gates_and_says_when_its_plugin_would_not_start(
        tmp_path: Path) -> None:
    from click.testing import CliRunner as _Runner

    from gfd import dra
    from gfd.cli import Exit
    from gfd.cli import cli as _cli
    runner = _Runner()
    help_text = runner.invoke(_cli, ["devices", "--help"]).output
    assert f"release {dra.RELEASE}" in help_text and "--feature-gates" in help_text
    dynamic = runner.invoke(_cli, ["devices", "--simulate", "h100-mig", "-o", "json",
                                   "--feature-gates", "DynamicMIG=true"])
    assert dynamic.exit_code == 0, dynamic.output
    doc = json.loads(dynamic.output)
    assert doc["featureGates"] == {"DynamicMIG": True} and len(doc["devices"]) == 52
    both = runner.invoke(_cli, ["devices", "--simulate", "h100-mig", "--feature-gates",
                                "DynamicMIG=true,PassthroughSupport=true"])
    assert both.exit_code == Exit.NOT_STARTED == 3
    assert both.stderr == ("the plugin would not start: feature gate DynamicMIG is currently "
                           "mutually exclusive with PassthroughSupport\n")
    snap = simulate("hgx-h100").snapshot
    lost = replace(snap, gpus=(*snap.gpus[:7], Gpu(index=7, error="GPU is lost")))
    path = tmp_path / "lost.json"
    path.write_text(lost.to_json())
    out = runner.invoke(_cli, ["devices", "--snapshot", str(path)])
    assert out.exit_code == 3
    assert out.stderr == "the plugin would not start: error visiting device 7: GPU is lost\n"
    bad = runner.invoke(_cli, ["devices", "--simulate", "h100-mig", "--feature-gates", "MIG=on"])
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1
    assert "--feature-gates: unrecognized feature gate 'MIG=on'" in bad.stderr


def test_selector_dra_prints_a_template_and_a_complete_pod() -> None:
    import yaml as _yaml
    from click.testing import CliRunner as _Runner

    from gfd.cli import cli as _cli

    out = _Runner().invoke(_cli, ["selector", "--dra", "--product", "A10", "--count", "2",
                                  "--name", "a10"])
    assert out.exit_code == 0, out.output
    template, pod = list(_yaml.safe_load_all(out.output))
    assert template["kind"] == "ResourceClaimTemplate"
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2
    assert pod["kind"] == "Pod"
    assert pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "a10"
    bad = _Runner().invoke(_cli, ["selector", "--product", "A10", "--name", "a10"])
    assert bad.exit_code == 2 and "--dra" in bad.output


@pytest.mark.parametrize("machine, strategy, module, source", [
    ("dgx-a100-mig-mixed", "none", "gpu", "nvmlDeviceGetCount, nvmlDeviceGetHandleByIndex "
     "(each GPU), nvmlDeviceGetName (its model)"),
    ("dgx-a100-mig-single", "single", "mig", "nvmlDeviceGetMaxMigDeviceCount, "
     "nvmlDeviceGetMigDeviceHandleByIndex (each MIG device of each MIG-enabled GPU), "
     "nvmlDeviceGetGpuInstanceId and nvmlDeviceGetComputeInstanceId (its profile)"),
], ids=["gpus", "mig-single"])
def test_explain_gpu_count_gives_its_true_source_rule_and_relation_to_devices(
        machine: str, strategy: str, module: str, source: str) -> None:
    """It named nvmlDeviceGetName, gave no rule, and guessed 'gpu.py or mig.py'; nothing
    explained gpu.count=8 next to gpu.devices.full=4 on a MIG-mixed node."""
    logger = logging.getLogger("gfd")
    saved = (logger.handlers[:], logger.level, logger.propagate)  # explain sets "error"
    try:
        result = invoke("explain", "gpu.count", "--simulate", machine, "--mig-strategy",
                        strategy, "--resource-manager", "device-plugin")
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[1] == f"  source: {source}"
    assert any(line.startswith("  rule 1: ") for line in lines)
    assert any("gpu.devices.full counts the GPUs a pod can get whole (healthy, MIG off)" in line
               for line in lines)
    assert f"  set:    compat (computed in gfd/labelers/{module}.py)" in lines
    assert " or " not in next(line for line in lines if line.startswith("  set:"))
