"""Help that fits a screen: every command's --help at most 45 lines at 80 columns, ending
with the way to see everything; --help-all describes every option in full under its
section; every setting a command takes still parses, shown, listed by group, or hidden;
gfd --help's whole summaries."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner, Result

from gfd.cli import cli
from gfd.cli_help import EXIT_CODES, HELP_ALL, SHORT, SUMMARIES
from gfd.cli_options import ACCEPTS, SettingOption
from gfd.config import BY_NAME, COMMANDS, TABLE, Bool, Part, Section
from gfd.readers.simulate import SIMULATIONS

CLEAN = dict.fromkeys(e for entry in TABLE for e in entry.spec.env)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=CLEAN, terminal_width=80)


def help_of(command: str, flag: str = "--help") -> str:
    result = invoke(command, flag)
    assert result.exit_code == 0, result.output
    return result.stdout


def help_all(command: str) -> str:
    return help_of(command, "--help-all")


def test_run_lists_its_settings_under_every_section_in_the_tables_order() -> None:
    text = help_all("run")
    titles = ["Options:"] + [f"{s.value.capitalize()} options:" for s in Section]
    positions = [text.index(t) for t in titles]
    assert positions == sorted(positions)
    for entry in TABLE:  # each setting under its own section's heading
        if entry.spec.part is Part.NONE:  # (GFD's flags that do nothing: named once, at the end)
            assert re.search(rf"ignored: [^\n]*{re.escape(entry.flag)}", text), entry.flag
            continue
        found = re.search(rf"[ ,]{re.escape(entry.flag)}[ ,\n]", text)
        assert found, entry.flag
        at = found.start()
        section = f"{entry.spec.section.value.capitalize()} options:"
        heading = max((p, t) for p, t in zip(positions, titles, strict=True) if p < at)[1]
        assert heading == section, entry.flag


SCREEN = 45
"""Lines a command's --help may take at 80 columns: it fits a 50-line terminal with its
prompt and the command line."""


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_every_commands_help_fits_one_screen_and_its_last_line_says_how_to_see_all(
        command: str) -> None:
    short, full = help_of(command), help_all(command)
    lines = short.splitlines()
    assert len(lines) <= SCREEN, (command, len(lines))
    assert max(len(line) for line in lines) <= 80
    if full != short:  # something is listed by group only, or a note is held back
        assert re.fullmatch(rf"Every option( and notes)? in full: gfd {command} {HELP_ALL}",
                            lines[-1]), lines[-1]
        assert len(full.splitlines()) > len(lines)


@pytest.mark.parametrize("command", ["explain", "docs", "completion"])
def test_an_argument_is_named_in_the_usage_line_not_listed_as_an_option(command: str) -> None:
    for text in (help_of(command), help_all(command)):
        usage, options = text.split("\nOptions:\n")
        argument = usage.splitlines()[0].split("[OPTIONS] ")[1]
        assert argument and not re.search(rf"^  {re.escape(argument)}\s*$", options, re.M)


def test_gfd_help_gives_each_command_a_whole_line_and_names_help_all() -> None:
    result = CliRunner().invoke(cli, ["--help"], terminal_width=80)
    lines = result.stdout.splitlines()
    listed = lines[lines.index("Commands:") + 1:]
    assert sorted(SUMMARIES) == sorted(cli.commands)
    assert listed == [f"  {name:<10}  {SUMMARIES[name]}" for name in sorted(cli.commands)]
    assert "..." not in "\n".join(listed) and HELP_ALL in " ".join(result.stdout.split())


def sample(option: SettingOption) -> tuple[list[str], object]:
    """A command line giving the option a valid value, and the value it must parse to."""
    kind = option.setting.spec.kind
    if isinstance(kind, Bool):
        return [], True  # (bare)
    text = {"DURATION": "90s", "INTEGER": "7", "NUMBER": "2.5", "ADDRESS": "127.0.0.1",
            "PATH": "/tmp/gfd-x/y"}.get(kind.metavar, kind.choices[-1] if kind.choices
                                          else "example.com/x")
    return [text], kind.from_text(text)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_setting_a_command_takes_still_parses_whether_shown_grouped_or_hidden(
        command: str) -> None:
    """Hidden from the short help is not removed: every spelling of every setting the
    command takes (GFD's included) parses to its value; what the short help does not
    describe it lists by group, and --help-all describes it; a hidden one (another
    command's, for reuse, or GFD's that does nothing) is in neither help."""
    group = cli.commands[command]
    options = [p for p in group.params if isinstance(p, SettingOption)]
    also = ACCEPTS.get(command, ())
    assert {o.setting.name for o in options} == {
        e.name for e in TABLE if command in e.spec.commands or e.name in also}
    short, full = help_of(command), help_all(command)
    for option in options:
        values, expected = sample(option)
        for flag in option.opts:
            key = ["gpu.count"] if command == "explain" else []
            ctx = group.make_context(command, [*key, flag, *values])
            assert ctx.params[option.setting.name] == expected, (command, flag)
        named = rf"(?<![\w-]){re.escape(option.setting.flag)}(?![\w-])"
        offered = command in option.setting.spec.commands
        if offered and option.setting.spec.part is not Part.NONE:
            assert re.search(named, short) and re.search(named, full), option.setting.flag
        elif offered:  # (GFD's, accepted and ignored: --help-all says so)
            assert not re.search(named, short)
            assert re.search(rf"ignored: [^\n]*{re.escape(option.setting.flag)}", full)
        else:
            assert not re.search(named, short) and not re.search(named, full), option.setting.flag


@pytest.mark.parametrize("command", sorted(SHORT))
def test_the_short_help_describes_the_settings_that_most_change_the_output(command: str) -> None:
    text = " ".join(help_of(command).split()).replace("- ", "-")
    grouped = text.split("More options, by group")[1].split("Exit codes:")[0]
    for name in SHORT[command]:
        entry = BY_NAME[name]
        assert command in entry.spec.commands
        assert f"{entry.flag}" in text and (entry.spec.brief or entry.spec.help) in text, name
        assert not re.search(rf"(?<![\w-]){re.escape(entry.flag)}(?![\w-])", grouped), name


@pytest.mark.parametrize("command", COMMANDS)
def test_boolean_flags_show_no_metavar_since_they_work_bare(command: str) -> None:
    assert "BOOLEAN" not in help_of(command)


def test_a_settings_brief_is_at_most_three_lines_and_help_all_and_the_reference_have_it_all(
        ) -> None:
    """A long help gets a brief in the settings table for the short --help; --help-all and
    docs/settings.md keep the whole."""
    long = {e.flag: len(e.spec.brief or e.spec.help) for e in TABLE
            if len(e.spec.brief or e.spec.help) > 120}
    assert long == {}
    reference = " ".join(invoke("docs", "settings").stdout.split())
    short = " ".join(help_of("run").split()).replace("- ", "-")
    full = " ".join(help_all("run").split()).replace("- ", "-")
    for entry in TABLE:
        if entry.name in SHORT["run"]:
            assert (entry.spec.brief or entry.spec.help) in short, entry.flag
        if entry.spec.part is not Part.NONE:
            assert " ".join(entry.spec.help.split()) in full, entry.flag
        assert " ".join(entry.spec.help.split())[:60] in reference, entry.flag


@pytest.mark.parametrize("width", [60, 80, 120])
@pytest.mark.parametrize("command", sorted(BY_NAME["simulate"].spec.commands))
def test_simulate_help_lists_every_machine_each_whole_on_one_line(command: str,
                                                                  width: int) -> None:
    result = CliRunner().invoke(cli, [command, HELP_ALL], env=CLEAN, terminal_width=width)
    assert result.exit_code == 0, result.output
    assert f"One of: {', '.join(sorted(SIMULATIONS))}." in " ".join(result.stdout.split())
    for machine in SIMULATIONS:  # never wrapped at its hyphens: it is typed whole
        assert re.search(rf"(?<![\w-]){re.escape(machine)}(?![\w-])", result.stdout), machine


@pytest.mark.parametrize("flag", ["--help", HELP_ALL])
@pytest.mark.parametrize("command", sorted(cli.commands))
def test_help_splits_no_word_at_a_hyphen_where_it_fits_its_column(command: str,
                                                                  flag: str) -> None:
    """Flags (``--plugins-registry``), values (``device-plugin``, ``nvidia-smi``) and
    machines stay whole; only a word longer than the column (a long default path) breaks."""
    broken = [m[1] for line in help_of(command, flag).splitlines()
              if (m := re.search(r"(\S+-)$", line))]
    assert all(b.startswith("/") for b in broken), broken


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
