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

from gfd.cli import cli
from gfd.cli_options import EXIT_CODES, OUTPUTS
from gfd.config import TABLE, Section
from gfd.readers.simulate import SIMULATIONS

CLEAN = dict.fromkeys(e for entry in TABLE for e in entry.spec.env)


def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={**CLEAN, **(env or {})})


def help_of(command: str) -> str:
    result = invoke(command, "--help")
    assert result.exit_code == 0, result.output
    return result.stdout


# ----------------------------------------------------------------------------- what help offers


@pytest.mark.parametrize("flag", ["--mig-strategy", "--label-set", "--no-timestamp",
                                  "--accelerator-label", "--sink", "--oneshot"])
def test_snapshot_offers_no_setting_that_leaves_its_output_unchanged(flag: str) -> None:
    assert flag not in help_of("snapshot")


@pytest.mark.parametrize("command, absent", [
    ("labels", ["--sink", "--oneshot", "--metrics-port", "--output-file", "--pod-name"]),
    ("explain", ["--sink", "--sleep-interval", "--events"]),
    ("devices", ["--mig-strategy", "--sink", "--expiry"]),
    ("diff", ["--oneshot", "--events", "--pod-name", "--metrics-port", "--expiry"]),
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


def test_run_lists_its_settings_under_every_section_in_the_tables_order() -> None:
    text = help_of("run")
    titles = ["Options:"] + [f"{s.value.capitalize()} options:" for s in Section]
    positions = [text.index(t) for t in titles]
    assert positions == sorted(positions)
    for entry in TABLE:  # each setting under its own section's heading
        found = re.search(rf"[ ,]{re.escape(entry.flag)}[ ,\n]", text)
        assert found, entry.flag
        at = found.start()
        section = f"{entry.spec.section.value.capitalize()} options:"
        heading = max((p, t) for p, t in zip(positions, titles, strict=True) if p < at)[1]
        assert heading == section, entry.flag


@pytest.mark.parametrize("command", ["labels", "snapshot", "devices", "explain", "diff",
                                     "prune", "run"])
def test_boolean_flags_show_no_metavar_since_they_work_bare(command: str) -> None:
    assert "BOOLEAN" not in help_of(command)


def test_simulate_help_lists_every_machine() -> None:
    text = " ".join(help_of("labels").split())
    assert f"One of: {', '.join(sorted(SIMULATIONS))}." in text.replace("- ", "-")


@pytest.mark.parametrize("command", sorted(EXIT_CODES))
def test_every_help_ends_with_the_commands_exit_codes(command: str) -> None:
    tail = help_of(command).split("Exit codes:")[1]
    for code, meaning in EXIT_CODES[command].items():
        assert f"  {code}  {meaning.split()[0]}" in tail


def test_help_says_which_commands_o_means_the_feature_file() -> None:
    assert "-o is GFD's" in " ".join(help_of("run").split())
    assert "-o, --output [text|json|yaml]" in help_of("diff")
    top = " ".join(invoke("--help").stdout.split())
    assert "-o/--output" in top and "-o FILE" in top


# ----------------------------------------------------------------------------- -o/--output


@pytest.mark.parametrize("command", sorted(OUTPUTS))
def test_every_format_of_every_command_prints_what_it_says(command: str) -> None:
    args = {"selector": ["--product", "H100"], "explain": ["gpu.product"]}.get(command, [])
    common = [] if command == "selector" else ["--simulate", "hgx-h100"]
    outputs = {}
    code = 1 if command == "diff" else 0  # (nothing is published here: differences)
    for fmt in OUTPUTS[command]:
        result = invoke(command, *args, *common, "-o", fmt)
        assert result.exit_code == code, (fmt, result.output)
        outputs[fmt] = result.stdout
    if "json" in outputs and "yaml" in outputs:
        assert json.loads(outputs["json"]) == yaml.safe_load(outputs["yaml"])
    default = invoke(command, *args, *common)
    assert default.stdout == outputs[OUTPUTS[command][0]]


def test_labels_name_prints_the_keys_text_prints_key_value() -> None:
    text = invoke("labels", "--simulate", "hgx-h100", "-o", "text").stdout.splitlines()
    names = invoke("labels", "--simulate", "hgx-h100", "-o", "name").stdout.splitlines()
    assert names == [line.split("=", 1)[0] for line in text] and "nvidia.com/gpu.count" in names


@pytest.mark.parametrize("command, fmt", [("labels", "json"), ("devices", "json"),
                                          ("labels", "text")])
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
