"""`gpu-feature-discovery`: GFD v0.20's command line, environment and defaults, the process
name GFD's config-manager looks for, and the fallback for GFD's static manifests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fakes import profiles
from fakes.fakenvml import subprocess_env
from fakes.sysfs import gpu_tree
from helpers.machines import node
from helpers.paths import DATA
from helpers.process import config_manager_lookup, wait_for

from gfd.config import TABLE, Part, Settings
from gfd.errors import ConfigError
from gfd.gpu_feature_discovery import GFD_DEFAULTS, NAME, Command, flags, help_text, parse
from gfd.sinks.featurefile import parse as parse_file

BIN = Path(sys.executable).parent / NAME
ENV_PREFIXES = ("GFD_", "MIG_STRATEGY", "FAIL_ON_INIT_ERROR", "CONFIG_FILE", "NODE_NAME",
                "NAMESPACE", "POD_NAME", "KUBECONFIG", "USE_NODE_FEATURE_API",
                "DEVICE_DISCOVERY_STRATEGY")


def explicit(*argv: str, **env: str) -> dict[str, Any]:
    return parse(list(argv), env).explicit


# ----------------------------------------------------------------------------- Go flag syntax


@pytest.mark.parametrize("argv", [
    ["-oneshot"], ["--oneshot"], ["-oneshot=true"], ["--oneshot=True"], ["-oneshot=1"],
    ["-oneshot=t"], ["-oneshot=T"], ["-oneshot=TRUE"],
], ids=lambda a: a[0])
def test_a_boolean_flag_is_true_without_a_value_or_with_gos_true_spellings(
        argv: list[str]) -> None:
    assert explicit(*argv) == {"oneshot": True}


@pytest.mark.parametrize("value", ["false", "False", "FALSE", "f", "F", "0"])
def test_gos_false_spellings(value: str) -> None:
    assert explicit(f"-fail-on-init-error={value}") == {"fail_on_init_error": False}


@pytest.mark.parametrize("argv", [
    ["-mig-strategy=mixed"], ["--mig-strategy=mixed"], ["-mig-strategy", "mixed"],
    ["--mig-strategy", "mixed"],
], ids=" ".join)
def test_a_value_flag_takes_equals_or_the_next_argument(argv: list[str]) -> None:
    assert explicit(*argv) == {"mig_strategy": "mixed"}


@pytest.mark.parametrize("argv, name, value", [
    (["-o", "/x"], "output_file", "/x"),
    (["--output=/x"], "output_file", "/x"),
    (["-output-file="], "output_file", "-"),  # "" is standard output, as in GFD
    (["-container-driver-root", "/d"], "driver_root_ctr_path", "/d"),
    (["-sleep-interval=90s"], "sleep_interval", 90.0),
    (["-sleep-interval", "infinite"], "sleep_interval", None),
    (["-sleep-interval=60"], "sleep_interval", 60.0),  # whole seconds, as the chart may pass
    (["-kube-api-qps=2.5"], "kube_api_qps", 2.5),
    (["-node-name", "n1"], "node_name", "n1"),
    (["-device-discovery-strategy=vfio"], "device_discovery_strategy", "vfio"),
    (["--metrics-port=8080"], "metrics_port", 8080),  # gfd's own settings, GFD syntax
], ids=lambda v: v if isinstance(v, str) else None)
def test_aliases_and_typed_values(argv: list[str], name: str, value: Any) -> None:
    assert explicit(*argv) == {name: value}


def test_oneshot_single_dash_is_not_a_short_option_with_a_value() -> None:
    """`-oneshot` is the flag oneshot (Go), not `-o neshot` (POSIX short options)."""
    assert explicit("-oneshot", "-output-file", "/F") == {"oneshot": True, "output_file": "/F"}


def test_flags_end_at_the_first_argument_that_is_not_one() -> None:
    command = parse(["-oneshot", "false", "-mig-strategy=mixed"], {})
    assert command == Command(explicit={"oneshot": True},
                              ignored=("false", "-mig-strategy=mixed"))
    assert parse(["--", "-oneshot"], {}).ignored == ("-oneshot",)


@pytest.mark.parametrize("argv, message", [
    (["-bogus"], "flag provided but not defined: -bogus"),
    (["-mig-strategy"], "flag needs an argument: -mig-strategy"),
    (["---oneshot"], "bad flag syntax: ---oneshot"),
    (["-=x"], "bad flag syntax: -=x"),
    (["-oneshot=yes"], "invalid boolean value 'yes' for flag -oneshot"),
    (["-mig-strategy=both"], "invalid value 'both' for flag -mig-strategy: must be one of"),
    (["-sleep-interval=soon"], "invalid value 'soon' for flag -sleep-interval"),
    (["-kube-api-burst=x"], "invalid value 'x' for flag -kube-api-burst: must be an integer"),
], ids=lambda v: v[0] if isinstance(v, list) else None)
def test_a_bad_command_line_is_one_clear_error(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(argv, {})
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("argv, what", [
    (["-h"], "help"), (["--help"], "help"), (["-help"], "help"),
    (["-v"], "version"), (["--version"], "version"),
])
def test_help_and_version(argv: list[str], what: str) -> None:
    command = parse(argv, {})
    assert getattr(command, what) is True


def test_help_all_is_help_in_full() -> None:
    assert parse(["--help-all"], {}) == Command(help=True, help_all=True)
    assert parse(["-help-all"], {}).help_all is True


def test_help_fits_one_screen_names_every_flag_and_ends_with_the_way_to_see_all() -> None:
    """GFD's flags each with a brief, their GFD default and variables; gfd's own by group;
    GFD's that do nothing named as ignored; every spelling of every flag is there."""
    short = help_text()
    lines = short.splitlines()
    assert len(lines) <= 45 and max(len(line) for line in lines) <= 80, len(lines)
    assert lines[-1] == f"Every flag in full: {NAME} --help-all"
    text = " ".join(short.split())
    spellings = {("-" if len(n) == 1 else "--") + n: e for n, e in flags().items()}
    for spelling, entry in spellings.items():
        assert f"{spelling} " in text or f"{spelling}," in text, spelling
        if entry.spec.gfd and entry.spec.part is not Part.NONE:
            assert " ".join((entry.spec.brief or entry.spec.help).split()) in text, spelling
            assert all(f"${v}" in text for v in entry.spec.env), spelling
    ignored = text.split(" ignored ")[1].split(" Every flag")[0]
    assert {e.name for e in TABLE if e.spec.part is Part.NONE} == {
        spellings[s.strip(",.")].name for s in ignored.split()}


def test_help_all_gives_every_flag_in_full_on_one_line_each_as_gfd_prints_it() -> None:
    full = help_text(full=True)
    for entry in TABLE:
        line = next(x for x in full.splitlines() if x.startswith(f"   {entry.flag}")
                    or x.startswith(f"   --{entry.spec.gfd[0] if entry.spec.gfd else '?'}"))
        assert entry.spec.help in line and all(f"${v}" in line for v in entry.spec.env)


def test_every_gfd_flag_is_accepted() -> None:
    gfd_flags = {"mig-strategy", "fail-on-init-error", "oneshot", "no-timestamp",
                 "sleep-interval", "output-file", "output", "o", "machine-type-file",
                 "config-file", "use-node-feature-api", "device-discovery-strategy",
                 "driver-root-ctr-path", "container-driver-root", "kubeconfig", "kube-api-qps",
                 "kube-api-burst", "namespace", "node-name", "pod-name"}
    assert gfd_flags <= set(flags())


# ----------------------------------------------------------------------------- environment


@pytest.mark.parametrize("argv, env, name, value", [
    ([], {"GFD_MIG_STRATEGY": "mixed", "MIG_STRATEGY": "single"}, "mig_strategy", "mixed"),
    ([], {"MIG_STRATEGY": "single"}, "mig_strategy", "single"),
    (["-mig-strategy=none"], {"GFD_MIG_STRATEGY": "mixed"}, "mig_strategy", "none"),
    ([], {"GFD_FAIL_ON_INIT_ERROR": ""}, "fail_on_init_error", False),  # empty bool: false
    ([], {"GFD_FAIL_ON_INIT_ERROR": "", "FAIL_ON_INIT_ERROR": "true"}, "fail_on_init_error",
     False),  # the first variable set wins, even when empty
    ([], {"GFD_OUTPUT_FILE": ""}, "output_file", "-"),  # empty text: "" = standard output
    ([], {"GFD_SLEEP_INTERVAL": "30s"}, "sleep_interval", 30.0),
    ([], {"GFD_SLEEP_INTERVAL": "120"}, "sleep_interval", 120.0),
    ([], {"USE_NODE_FEATURE_API": "false"}, "use_node_feature_api", False),
    ([], {"NODE_NAME": "gpu-1", "NAMESPACE": "gpu-operator"}, "namespace", "gpu-operator"),
], ids=lambda v: None)
def test_environment_fills_what_the_command_line_did_not(
        argv: list[str], env: dict[str, str], name: str, value: Any) -> None:
    assert explicit(*argv, **env)[name] == value


def test_an_empty_duration_or_number_variable_is_ignored() -> None:
    assert explicit(GFD_SLEEP_INTERVAL="", KUBE_API_QPS="") == {}


def test_a_bad_variable_names_itself() -> None:
    with pytest.raises(ConfigError, match=r"\$GFD_ONESHOT"):
        parse([], {"GFD_ONESHOT": "sometimes"})


def test_gfds_defaults() -> None:
    assert GFD_DEFAULTS.sleep_interval == 60.0 and GFD_DEFAULTS.use_node_feature_api
    assert GFD_DEFAULTS.expiry == 0 and GFD_DEFAULTS.label_set == "compat"
    assert GFD_DEFAULTS.fail_on_init_error and GFD_DEFAULTS.mig_strategy == "none"


def test_gfds_contract_is_the_device_plugin_unless_told_otherwise() -> None:
    assert GFD_DEFAULTS.resource_manager == "device-plugin"
    assert Settings().resource_manager == "auto"
    command = parse(["--resource-manager=dra"], {})
    assert command.explicit["resource_manager"] == "dra"
    assert parse([], {"GFD_RESOURCE_MANAGER": "auto"}).explicit["resource_manager"] == "auto"


# ----------------------------------------------------------------------------- processes


def gfd_env(tmp: Path, lib: Path | None, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    return subprocess_env(lib, tmp / "profile.txt", base) | extra


def test_oneshot_go_style_writes_the_file_once_with_no_lapsing_expiry(
        tmp_path: Path, fake_nvml_lib: Path) -> None:
    _, profile, sysfs, dmi = node(tmp_path, "dgx_a100_layout")
    out = tmp_path / "F"
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
    result = subprocess.run(
        [str(BIN), "-oneshot", "-output-file", str(out), "-no-timestamp", "-mig-strategy=mixed",
         "-machine-type-file", str(dmi), "--sysfs-root", str(sysfs), "--nvidia-smi=/nonexistent"],
        env=subprocess_env(fake_nvml_lib, profile, env), capture_output=True, text=True,
        timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    labels, expires = parse_file(out.read_text())
    assert expires is None
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    golden = DATA / "golden/nvml/dgx_a100_layout__mixed__compat.labels"
    assert labels == parse_file(golden.read_text())[0], "GFD's labels for this layout"
    assert "nvidia.com/gpu.heterogeneous" not in labels, "GFD's label set by default"
    assert "NODE_NAME is not set" in result.stderr


def test_node_feature_api_asked_for_without_a_node_name_is_a_usage_error(
        tmp_path: Path) -> None:
    result = subprocess.run([str(BIN), "-oneshot", "--simulate", "hgx-h100"],
                            env=gfd_env(tmp_path, None, USE_NODE_FEATURE_API="true"),
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(f"{NAME}: error: --node-name")


def test_an_unknown_flag_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = subprocess.run([str(BIN), "-bogus"], env=gfd_env(tmp_path, None),
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2
    assert result.stderr == f"{NAME}: error: flag provided but not defined: -bogus (see {NAME} " \
                            "--help)\n"




def test_the_config_manager_finds_it_by_argv0_and_its_sighup_reloads(
        tmp_path: Path, fake_nvml_lib: Path) -> None:
    profiles.dgx_a100_layout().write(tmp_path / "profile.txt")
    cfg = tmp_path / "config.yaml"
    cfg.write_text("flags: {migStrategy: none}")
    out = tmp_path / "features.d" / "gfd"
    out.parent.mkdir()
    env = gfd_env(tmp_path, fake_nvml_lib, CONFIG_FILE=str(cfg), GFD_SLEEP_INTERVAL="1h",
                  GFD_OUTPUT_FILE=str(out))
    log = (tmp_path / "log").open("w")
    proc = subprocess.Popen(
        [str(BIN), "-sysfs-root", str(gpu_tree(tmp_path / "sys", [])), "-machine-type-file",
         str(tmp_path / "dmi")], env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_for(lambda: out.exists())
        assert proc.pid in config_manager_lookup(NAME)
        assert "nvidia.com/mig.strategy" not in parse_file(out.read_text())[0]
        cfg.write_text("flags: {migStrategy: mixed}")
        for pid in config_manager_lookup(NAME):
            os.kill(pid, signal.SIGHUP)
        wait_for(lambda: parse_file(out.read_text())[0].get("nvidia.com/mig.strategy")
                 == "mixed", timeout=5)
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=15)
        log.close()
    assert code == 0
    assert parse_file(out.read_text())[0], "labels left in place on exit"


def test_an_empty_output_file_flag_prints_the_labels(tmp_path: Path) -> None:
    result = subprocess.run([str(BIN), "-oneshot", "-output-file=", "--simulate", "hgx-h100",
                             "-no-timestamp"], env=gfd_env(tmp_path, None),
                            capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 0, result.stderr
    assert "nvidia.com/gpu.count=8" in result.stdout.splitlines()
