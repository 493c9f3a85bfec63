"""The command line's shape: which settings each command offers (and in which help
section), -o/--output and its deprecated spellings, click's usage errors as gfd's one line,
exit codes in help, and shell completion (in process and through bash's protocol)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.shell_completion import ShellComplete
from click.testing import CliRunner, Result
from helpers import fleetsample

from gfd.cli import cli
from gfd.cli_help import EXIT_CODES
from gfd.cli_options import OUTPUTS
from gfd.config import TABLE
from gfd.readers.simulate import SIMULATIONS

CLEAN = dict.fromkeys(e for entry in TABLE for e in entry.spec.env)


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={**CLEAN, **(env or {})})


def help_of(command: str, flag: str = "--help") -> str:
    result = CliRunner().invoke(cli, [command, flag], env=CLEAN, terminal_width=80)
    assert result.exit_code == 0, result.output
    return result.stdout


def help_all(command: str) -> str:
    return help_of(command, "--help-all")


# ----------------------------------------------------------------------------- what help offers


@pytest.mark.parametrize("flag", ["--mig-strategy", "--label-set", "--no-timestamp",
                                  "--accelerator-label", "--sink", "--oneshot"])
def test_snapshot_offers_no_setting_that_leaves_its_output_unchanged(flag: str) -> None:
    assert flag not in help_of("snapshot")


@pytest.mark.parametrize("command, absent", [
    ("labels", ["--sink", "--oneshot", "--metrics-port", "--output-file", "--pod-name"]),
    ("explain", ["--sink", "--sleep-interval", "--events"]),
    ("devices", ["--mig-strategy", "--sink", "--expiry"]),
    ("diff", ["--oneshot", "--events", "--metrics-port", "--expiry", "--watch"]),
    ("prune", ["--mig-strategy", "--simulate", "--oneshot", "--metrics-port"]),
])
def test_each_command_offers_only_the_settings_that_change_what_it_does(
        command: str, absent: list[str]) -> None:
    text = help_of(command)
    assert [flag for flag in absent if f"  {flag}" in text] == []


def test_prune_still_takes_every_flag_of_run_so_an_uninstall_job_reuses_them(
        tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    out.write_text("nvidia.com/gpu.count=8\n")
    result = invoke("prune", "-o", str(out), "--mig-strategy", "mixed", "--oneshot",
                    "--sleep-interval", "1m", "--metrics-port", "8080", "--simulate", "hgx-h100")
    assert result.exit_code == 0, result.output
    assert not out.exists() and result.stdout == "- nvidia.com/gpu.count\n"


@pytest.mark.parametrize("command", ["devices", "features"])
def test_devices_and_features_take_the_hosts_reading_arguments_unlisted_and_print_the_same(
        command: str, tmp_path: Path) -> None:
    """One host's reading arguments serve every command that reads GPUs: the settings only
    the labels use are accepted (not offered) and change nothing printed."""
    host = ["--machine-type-file", str(tmp_path / "dmi"), "--nvidia-smi", str(tmp_path / "no"),
            "--resource-manager", "dra", "--plugins-registry", str(tmp_path),
            "--no-vgpu-labels"]
    plain = invoke(command, "--simulate", "h100-mig", "-o", "json")
    given = invoke(command, "--simulate", "h100-mig", "-o", "json", *host)
    assert plain.exit_code == given.exit_code == 0, given.stderr
    assert given.stdout == plain.stdout and json.loads(given.stdout)
    assert "--machine-type-file" not in help_of(command)


def test_log_level_is_honoured_by_the_one_shot_commands_that_are_quiet_by_default(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    """A setting offered changes something: `--log-level info` on explain (quiet: errors only
    by default) shows the resource manager's info line (auto looking in the registry it is
    given); without it, nothing is logged."""
    args = ["explain", "gpu.count", "--simulate", "hgx-h100", "--plugins-registry",
            str(tmp_path)]
    quiet = invoke(*args)
    told = invoke(*args, "--log-level", "info")
    assert quiet.exit_code == told.exit_code == 0
    assert "INFO" not in quiet.stderr and "INFO gfd" in told.stderr, told.stderr


# ----------------------------------------------------------------------------- -o/--output


@pytest.mark.parametrize("command", sorted(OUTPUTS))
def test_every_format_of_every_command_prints_what_it_says(command: str) -> None:
    args = {"selector": ["--product", "H100"], "explain": ["gpu.product"],
            "why": ["train-2", "-n", "ml"]}.get(command, [])
    common = {"selector": [], "fleet": ["--from", "@sample"], "why": ["--from", "@sample"]}.get(
        command, ["--simulate", "hgx-h100"])
    outputs = {}
    code = 1 if command == "diff" else 0  # (nothing is published here: differences)
    quiet = {"GFD_NO_TIMESTAMP": "true"}  # two calls may straddle a second
    for fmt in OUTPUTS[command]:
        result = invoke(command, *args, *common, "-o", fmt, env=quiet)
        assert result.exit_code == code, (fmt, result.output)
        outputs[fmt] = result.stdout
    if "json" in outputs and "yaml" in outputs:
        docs = list(yaml.safe_load_all(outputs["yaml"]))
        assert json.loads(outputs["json"]) == (docs[0] if len(docs) == 1 else
                                               {"apiVersion": "v1", "kind": "List",
                                                "items": docs})
    default = invoke(command, *args, *common, env=quiet)
    assert default.stdout == outputs[OUTPUTS[command][0]]


def test_selector_dra_as_json_is_one_list_kubectl_applies() -> None:
    as_yaml = list(yaml.safe_load_all(invoke("selector", "--dra", "--product", "A10").stdout))
    as_json = json.loads(invoke("selector", "--dra", "--product", "A10", "-o", "json").stdout)
    assert len(as_yaml) == 2 and as_yaml[0]["kind"] == "ResourceClaimTemplate"
    assert as_json == {"apiVersion": "v1", "kind": "List", "items": as_yaml}


def test_labels_name_prints_the_keys_text_prints_key_value() -> None:
    text = invoke("labels", "--simulate", "hgx-h100", "-o", "text").stdout.splitlines()
    names = invoke("labels", "--simulate", "hgx-h100", "-o", "name").stdout.splitlines()
    assert names == [line.split("=", 1)[0] for line in text] and "nvidia.com/gpu.count" in names


@pytest.mark.parametrize("command, fmt", [("labels", "json"), ("devices", "json"),
                                          ("labels", "text"), ("features", "text")])
def test_the_old_format_flag_still_works_and_says_it_is_deprecated(command: str,
                                                                   fmt: str) -> None:
    args = ["--simulate", "hgx-h100"] + (["--no-timestamp"] if command == "labels" else [])
    old = invoke(command, *args, "--format", fmt)
    new = invoke(command, *args, "-o", fmt)
    assert old.exit_code == new.exit_code == 0
    assert old.stdout == new.stdout
    assert "gfd: warning: --format is deprecated; use -o/--output" in old.stderr
    assert "--format" not in help_of(command)


def test_diff_o_with_a_path_still_means_the_feature_file_with_a_warning(tmp_path: Path) -> None:
    out = tmp_path / "gfd"
    assert invoke("run", "--simulate", "hgx-h100", "-o", str(out), "--oneshot").exit_code == 0
    result = invoke("diff", "--simulate", "hgx-h100", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert f"write --output-file {out}" in result.stderr
    assert result.stderr.splitlines()[-1].startswith("in sync: ")


def test_diff_o_with_a_word_that_is_no_format_is_a_usage_error_naming_output_file() -> None:
    result = invoke("diff", "--simulate", "hgx-h100", "-o", "features")
    assert result.exit_code == 2
    assert result.stderr == ("gfd: error: --output: 'features' is not an output format: one of "
                             "text, json, yaml; the feature file is --output-file; see gfd "
                             "diff --help\n")


# ----------------------------------------------------------------------------- one error format


@pytest.mark.parametrize("args, line", [
    (["run", "--sleep-interval", "xyz"],
     "gfd: error: --sleep-interval: 'xyz' is not a duration"),
    (["labels", "--bogus"], "gfd: error: No such option '--bogus'"),
    (["explain"], "gfd: error: Missing argument 'KEY'"),
    (["docs", "nothing"], "gfd: error: WHAT: 'nothing' is not one of 'labels', 'settings'"),
    (["frobnicate"], "gfd: error: No such command 'frobnicate'"),
], ids=["bad-value", "unknown-option", "missing-argument", "bad-argument", "unknown-command"])
def test_click_usage_errors_are_one_line_in_gfds_form_with_the_help_hint(
        args: list[str], line: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith(line), result.stderr
    command = "gfd" if args[0] == "frobnicate" else f"gfd {args[0]}"
    assert result.stderr.endswith(f"; see {command} --help\n")


@pytest.mark.parametrize("args, line", [
    (["devices", "--mig-strategy", "mixed"], "gfd: error: gfd devices does not take "
     "--mig-strategy: it changes nothing there (a setting of gfd labels, explain, diff, run); "
     "see gfd devices --help"),
    (["labels", "--sleep-interval", "5s"], "gfd: error: gfd labels does not take "
     "--sleep-interval: it changes nothing there (a setting of gfd run); see gfd labels --help"),
    (["selector", "--sink=node"], "gfd: error: gfd selector does not take --sink: it changes "
     "nothing there (a setting of gfd diff, prune, run); see gfd selector --help"),
])
def test_a_setting_given_to_a_command_it_does_nothing_for_says_so_and_where_it_belongs(
        args: list[str], line: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2 and result.stderr.splitlines() == [line]


def test_diff_against_standard_output_is_a_usage_error_not_a_diff() -> None:
    """Regression: `gfd diff -o -` compared with nothing and printed `+37 ~0 -0 at stdout`."""
    result = invoke("diff", "--simulate", "hgx-h100", "--output-file", "-")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("gfd: error: standard output (--output-file -) holds no "
                                    "published labels to compare with: ")


def test_a_bad_value_from_the_environment_names_the_variable() -> None:
    result = invoke("labels", "--simulate", "hgx-h100", env={"MIG_STRATEGY": "bogus"})
    assert result.exit_code == 2
    assert result.stderr.startswith("gfd: error: MIG_STRATEGY (the environment's "
                                    "--mig-strategy): must be one of none, single, mixed")


def test_a_missing_snapshot_and_a_missing_config_file_exit_the_same(tmp_path: Path) -> None:
    snapshot = invoke("labels", "--snapshot", str(tmp_path / "none.json"))
    config = invoke("labels", "--simulate", "hgx-h100", "--config-file",
                    str(tmp_path / "none.yaml"))
    assert snapshot.exit_code == config.exit_code == 2
    assert snapshot.stderr.startswith("gfd: error: snapshot file ")
    assert config.stderr.startswith("gfd: error: ")


def test_gfd_alone_prints_its_help_and_exits_0() -> None:
    result = invoke()
    assert result.exit_code == 0 and "Commands:" in result.stdout


# ----------------------------------------------------------------------------- completion


def completions(args: list[str], incomplete: str) -> list[str]:
    complete = ShellComplete(cli, {}, "gfd", "_GFD_COMPLETE")
    return [item.value for item in complete.get_completions(args, incomplete)]


@pytest.mark.parametrize("args, incomplete, expected", [
    (["labels", "--simulate"], "", sorted(SIMULATIONS)),
    (["labels", "--simulate"], "dgx", ["dgx-a100-mig-mixed", "dgx-a100-mig-single"]),
    (["labels", "--mig-strategy"], "", ["none", "single", "mixed"]),
    (["run", "--sink"], "n", ["nodefeature", "node"]),
    (["diff", "--resource-manager"], "", ["auto", "device-plugin", "dra"]),
    (["run", "--device-discovery-strategy"], "v", ["vfio"]),
    (["run", "--watch"], "", ["true", "false"]),
    (["labels", "-o"], "", ["text", "json", "yaml", "name"]),
    (["completion"], "", ["bash", "zsh", "fish"]),
])
def test_completion_offers_the_values_of_each_option(args: list[str], incomplete: str,
                                                     expected: list[str]) -> None:
    assert completions(args, incomplete) == expected


@pytest.mark.parametrize("args", [["run", "--output-file"], ["labels", "--snapshot"],
                                  ["run", "--kubeconfig"]])
def test_completion_of_a_path_setting_is_left_to_the_shells_file_completion(
        args: list[str]) -> None:
    complete = ShellComplete(cli, {}, "gfd", "_GFD_COMPLETE")
    assert [(i.type, i.value) for i in complete.get_completions(args, "/e")] == [("file", "/e")]


def test_completion_offers_the_commands_and_only_a_commands_own_flags() -> None:
    assert {"labels", "run", "diff", "completion"} <= set(completions([], ""))
    flags = completions(["snapshot"], "--")
    assert "--simulate" in flags and "--mig-strategy" not in flags


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_the_shell(shell: str) -> None:
    result = invoke("completion", shell)
    assert result.exit_code == 0 and "_GFD_COMPLETE" in result.stdout


def test_bash_completion_answers_through_the_real_protocol() -> None:
    """What bash's completion function does: call gfd with its words in the environment."""
    env = {k: v for k, v in os.environ.items() if k not in CLEAN} | {
        "_GFD_COMPLETE": "bash_complete", "COMP_WORDS": "gfd labels --simulate hgx",
        "COMP_CWORD": "3"}
    done = subprocess.run([sys.executable, "-m", "gfd"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["plain,hgx-h100"]


# ----------------------------------------------------------------------------- the README's tables

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_table(after: str) -> list[list[str]]:
    """The rows of the first Markdown table after the line starting with ``after``."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(after))
    rows = []
    for line in lines[start + 1:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip().replace("\\|", "|") for c in
                 re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if not set("".join(cells)) <= set("-: "):
            rows.append(cells)
    return rows[1:]  # without the header


def command_of(cell: str) -> str:
    return cell.strip("`").split()[1] if cell.startswith("`gfd ") else cell.strip("`")


def test_the_readme_command_table_lists_every_command_and_only_flags_each_takes() -> None:
    rows = readme_table("## Commands")
    assert {command_of(r[0]) for r in rows} == set(cli.commands) | {"gpu-feature-discovery"}
    for row in rows:
        name = command_of(row[0])
        if name == "gpu-feature-discovery":
            continue
        command = cli.commands[name]
        takes = {o for p in command.params for o in [*p.opts, *p.secondary_opts]}
        spans = [span for span in re.findall(r"`([^`]*)`", " ".join(row[1:]))
                 if not span.startswith(("gfd ", "kubectl "))]  # (another command's)
        for flag in re.findall(r"(?:^|\s)(--?[a-z][a-z-]*)", " ".join(spans)):
            assert flag in takes, f"README: `gfd {name}` row names {flag}, which it lacks"


def test_the_readme_output_table_is_each_commands_o_choices() -> None:
    rows = readme_table("**Output formats.**")
    table = {command_of(r[0]): re.findall(r"^`([a-z]+)`|, `([a-z]+)`", r[1]) for r in rows}
    formats = {name: tuple(a or b for a, b in found) for name, found in table.items()}
    assert formats == OUTPUTS
    for name, choices in OUTPUTS.items():
        assert f"-o, --output [{'|'.join(choices)}]" in help_of(name)


def test_the_readme_exit_code_table_is_each_commands_help() -> None:
    rows = readme_table("**Exit codes.**")
    table = {command_of(r[0]): {code: meaning for code, meaning in enumerate(r[1:]) if meaning}
             for r in rows}
    assert table == EXIT_CODES


def no_gpu_env() -> dict[str, str]:
    """A process environment where NVML cannot start (no libnvidia-ml anywhere)."""
    return {k: v for k, v in os.environ.items()
            if k not in CLEAN and k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}


def scenarios(tmp: Path) -> dict[tuple[str, int], list[str]]:
    """One invocation for each cell of the exit-code table; ``!`` first: run it as a
    process without NVML."""
    synced, empty, planted = tmp / "synced", tmp / "empty", tmp / "planted"
    assert invoke("run", "--simulate", "hgx-h100", "-o", str(synced), "--oneshot",
                  "--no-timestamp").exit_code == 0
    planted.symlink_to(tmp / "victim")
    (tmp / "victim").write_text("x=y\n")
    sim = ["--simulate", "hgx-h100"]
    return {
        ("run", 0): ["run", *sim, "--oneshot", "-o", str(tmp / "run")],
        ("run", 1): ["!", "run", "--oneshot", "-o", str(tmp / "run")],
        ("run", 2): ["run", "--oneshot", "--expiry", "soon"],
        ("labels", 0): ["labels", *sim], ("labels", 1): ["!", "labels"],
        ("labels", 2): ["labels", "--label-set", "all"],
        ("snapshot", 0): ["snapshot", *sim], ("snapshot", 1): ["!", "snapshot"],
        ("snapshot", 2): ["snapshot", "--snapshot", str(tmp / "none.json")],
        ("devices", 0): ["devices", *sim], ("devices", 1): ["!", "devices"],
        ("devices", 2): ["devices", "-o", "table"],
        ("devices", 3): ["devices", "--simulate", "h100-mig", "--feature-gates",
                         "DynamicMIG=true,PassthroughSupport=true"],
        ("features", 0): ["features", *sim], ("features", 1): ["!", "features"],
        ("features", 2): ["features", "--mig-strategy", "mixed"],
        ("explain", 0): ["explain", "gpu.count", *sim],
        ("explain", 1): ["explain", "gpu.nothing", *sim],
        ("explain", 2): ["explain", "gpu.count", "--simulate", "no-such-machine"],
        ("diff", 0): ["diff", *sim, "--output-file", str(synced), "--no-timestamp"],
        ("diff", 1): ["diff", *sim, "--output-file", str(empty)],
        ("diff", 2): ["diff", *sim, "--sink", "node"],
        ("diff", 3): ["!", "diff", "--output-file", str(empty)],
        ("prune", 0): ["prune", "-o", str(empty)],
        ("prune", 1): ["prune", "-o", str(planted)],
        ("prune", 2): ["prune", "--sink", "elsewhere"],
        ("selector", 0): ["selector", "--product", "H100"],
        ("selector", 2): ["selector", "--count", "2"],
        ("docs", 0): ["docs", "settings"], ("docs", 2): ["docs", "everything"],
        ("completion", 0): ["completion", "fish"], ("completion", 2): ["completion", "tcsh"],
        ("fleet", 0): ["fleet", "--from", "@sample"],
        ("fleet", 1): ["fleet", "--from", str(_fleet_dump(tmp, planted=True)), "--check"],
        ("fleet", 2): ["fleet", "--from", "@sample", "--context", "elsewhere"],
        ("fleet", 3): ["fleet", "--from", str(_fleet_dump(tmp, planted=False))],
        ("why", 0): ["why", "train-2", "-n", "ml", "--from", "@sample"],
        ("why", 1): ["why", "huge", "-n", "ml", "--from", str(_why_dump(tmp, nodes=True))],
        ("why", 2): ["why", "no-such-pod", "-n", "ml", "--from", "@sample"],
        ("why", 3): ["why", "huge", "-n", "ml", "--from", str(_why_dump(tmp, nodes=False))],
    }


def _why_dump(tmp: Path, *, nodes: bool) -> Path:
    """The sample fleet and a pod asking more GPUs than any node has (pending), or that pod
    and no nodes (none read: incomplete)."""
    dump = fleetsample.build()
    (waiting,) = [i for i in dump["items"] if i["kind"] == "Pod" and not i["spec"].get("nodeName")]
    huge = json.loads(json.dumps(waiting))
    huge["metadata"]["name"] = "huge"
    huge["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "99"}}
    dump["items"] = [i for i in dump["items"] if nodes or i["kind"] != "Node"] + [huge]
    path = tmp / f"why-{'nodes' if nodes else 'pods'}.json"
    path.write_text(json.dumps(dump))
    return path


def _fleet_dump(tmp: Path, *, planted: bool) -> Path:
    """The sample fleet with one node's allocatable one short of its labels (``--check``
    finds it), or its nodes alone (no pods read: incomplete)."""
    dump = fleetsample.build()
    if planted:
        node = next(i for i in dump["items"] if i["kind"] == "Node")
        node["status"]["allocatable"]["nvidia.com/gpu"] = "3"
    else:
        dump["items"] = [i for i in dump["items"] if i["kind"] == "Node"]
    path = tmp / f"fleet-{'planted' if planted else 'nodes'}.json"
    path.write_text(json.dumps(dump))
    return path


def test_every_exit_code_in_the_readme_is_what_the_command_does(tmp_path: Path) -> None:
    cases = scenarios(tmp_path)
    assert set(cases) == {(c, code) for c, codes in EXIT_CODES.items() for code in codes}
    for (command, code), args in cases.items():
        if args[0] == "!":
            done = subprocess.run([sys.executable, "-m", "gfd", *args[1:]], env=no_gpu_env(),
                                  capture_output=True, text=True, timeout=60, check=False)
            got, err = done.returncode, done.stderr
        else:
            result = invoke(*args)
            got, err = result.exit_code, result.stderr
        assert got == code, (command, args, err)
        if code and (command, code) not in (("diff", 1), ("devices", 3), ("fleet", 1),
                                            ("fleet", 3), ("why", 1), ("why", 3)):
            # (no error: differences; the driver's own words; what --check found; what was
            # not read; why a pod would not bind)
            assert err.splitlines()[-1].startswith("gfd: error: "), (command, args, err)
