"""The config file through the CLI: sharing labels, GFD's precedence (flag/env > file > default),
and clear exit-2 errors that publish nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gfd.cli import cli

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
             "CONFIG_FILE", "GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR", "GFD_ONESHOT",
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
    ("flags: {gfd: {sleepIntervall: 10s}}", "flags.gfd.sleepIntervall: unknown field"),
    ("version: v2", "version"),
    ("{not yaml: [", "not valid YAML or JSON"),
], ids=["replicas-1", "bad-strategy", "unknown-field", "bad-version", "malformed"])
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
    code, labels, err = run("labels", "--simulate", "dgx-a100-mig-single", "--format", "text",
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
                               "--format", "json"]).stdout
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
