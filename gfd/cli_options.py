"""The command line's shape: options generated from the settings table, ``-o/--output``,
help grouped by section, shell completion of values, one-line errors and exit codes."""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
from click.formatting import join_options

from gfd.config import BY_NAME, TABLE, Entry, Section, Settings
from gfd.errors import ConfigError, GfdError
from gfd.settingkinds import Bool, Choice, OutputPath, PathKind, ValueProblem

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])


class Exit(enum.IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    UNKNOWN = 3
    """``gfd diff``: it could not look (its 1 means "differences")."""
    NOT_STARTED = 3
    """``gfd devices``: the DRA driver's plugin would not start on this node."""


EXIT_CODES: dict[str, dict[int, str]] = {
    "run": {0: "stopped by a signal, or --oneshot labelled", 1: "runtime failure",
            2: "usage or configuration error"},
    "labels": {0: "printed", 1: "runtime failure", 2: "usage or configuration error"},
    "snapshot": {0: "printed", 1: "runtime failure", 2: "usage or configuration error"},
    "devices": {0: "printed", 1: "a device cannot be described fully, or runtime failure",
                2: "usage or configuration error",
                3: "the DRA driver's plugin would not start on this node"},
    "features": {0: "printed", 1: "runtime failure", 2: "usage or configuration error"},
    "explain": {0: "printed", 1: "not a label on this machine, or runtime failure",
                2: "usage or configuration error"},
    "diff": {0: "in sync", 1: "differences", 2: "usage or configuration error",
             3: "could not look (reading the GPUs or the target failed, or it is not gfd's)"},
    "prune": {0: "pruned, or nothing to prune", 1: "runtime failure",
              2: "usage or configuration error"},
    "selector": {0: "printed", 2: "usage error"},
    "docs": {0: "printed", 2: "usage error"},
    "completion": {0: "printed", 2: "usage error"},
}
"""Each command's exit codes: its ``--help`` ends with them, the README's table lists them."""

OUTPUTS: dict[str, tuple[str, ...]] = {
    "labels": ("text", "json", "yaml", "name"),
    "snapshot": ("json", "yaml"),
    "devices": ("yaml", "json", "text"),
    "features": ("yaml", "json", "text"),
    "explain": ("text", "json", "yaml"),
    "diff": ("text", "json", "yaml"),
    "selector": ("yaml", "json"),
}
"""``-o/--output`` of each command that prints data; the first is the default."""

ACCEPTS = {"prune": "run"}
"""A command that also takes another's settings, unlisted in its help: ``prune`` takes
``run``'s, so an uninstall Job can reuse the agent's arguments."""

GFD_OUTPUT_FLAGS = ("--output", "-o")
"""GFD's spellings of ``--output-file``; ``-o/--output`` is the output format wherever a
command prints data."""

_SECTION_TITLES = {s: f"{s.value.capitalize()} options" for s in Section}


def _machines() -> list[str]:
    from gfd.readers.simulate import SIMULATIONS

    return sorted(SIMULATIONS)


class SettingType(click.ParamType[Any]):
    """A click type that parses a setting's text with its kind from the settings table, and
    completes its values (choices, machine names, paths)."""

    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.name = entry.spec.kind.metavar.lower()

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return self.entry.spec.kind.metavar

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if not isinstance(value, str):
            return value  # a valueless boolean flag: its flag_value
        try:
            return self.entry.spec.kind.from_text(value)
        except ValueProblem as exc:
            raise click.BadParameter(str(exc), ctx, param, self._where(ctx)) from None

    def _where(self, ctx: click.Context | None) -> str:
        """The flag, or the environment variable the bad value came from."""
        source = ctx.get_parameter_source(self.entry.name) if ctx else None
        if source is click.core.ParameterSource.ENVIRONMENT:
            env = next((e for e in self.entry.spec.env if e in os.environ), "")
            if env:
                return f"{env} (the environment's {self.entry.flag})"
        return self.entry.flag

    def shell_complete(self, ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> list[CompletionItem]:
        from click.shell_completion import CompletionItem

        kind = self.entry.spec.kind
        if self.entry.name == "simulate":
            values: Sequence[str] = _machines()
        elif isinstance(kind, Choice):
            values = kind.choices
        elif isinstance(kind, Bool):
            values = ("true", "false")
        elif isinstance(kind, PathKind | OutputPath):
            return [CompletionItem(incomplete, type="file")]
        else:
            return []
        return [CompletionItem(v) for v in values if v.startswith(incomplete)]


class SettingOption(click.Option):
    """An option whose default lives in the settings table: click sees None (so an option
    not given lets the config file decide), help shows the table's default under the
    setting's section (its environment variables are in ``gfd docs settings``, so the help
    stays short); a boolean shows no metavar (``--watch``, ``--watch=false``)."""

    def __init__(self, *args: Any, entry: Entry, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.entry = entry
        self.section: Section = entry.spec.section

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        extra.pop("envvars", None)  # (in `gfd docs settings`: help stays short)
        default = self.entry.spec.kind.render(self.entry.default)
        if default and default != "false":  # (a flag that is off unless given: no default)
            extra["default"] = default
        return extra

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None or self.entry.name != "simulate":
            return record
        return record[0], f"{record[1]}  One of: {', '.join(_machines())}."

    def get_help_spec(self, ctx: click.Context) -> str:
        if isinstance(self.entry.spec.kind, Bool):
            return join_options(self.opts)[0]
        return super().get_help_spec(ctx)


def _help(entry: Entry, command: str) -> str:
    text = entry.spec.brief or entry.spec.help
    if entry.name == "output_file" and command in OUTPUTS:
        text += f" (gfd {command}'s -o/--output is the output format.)"
    elif entry.name == "output_file":
        text += " (-o is GFD's flag, kept here; in commands that print data it is the " \
                "output format.)"
    return text


def _option(entry: Entry, command: str, *, hidden: bool) -> Callable[[F], F]:
    spec = entry.spec
    flags = spec.flags
    if command in OUTPUTS:  # -o/--output is the output format here
        flags = tuple(f for f in flags if f not in GFD_OUTPUT_FLAGS)
    extra: dict[str, Any] = {}
    if isinstance(spec.kind, Bool):
        extra = {"is_flag": False, "flag_value": True}  # --x, --x=true|false, as GFD
    return click.option(*flags, entry.name, cls=SettingOption, entry=entry,
                        type=SettingType(entry), default=None, envvar=list(spec.env),
                        show_envvar=bool(spec.env), help=_help(entry, command), hidden=hidden,
                        **extra)


def settings_options(command: str) -> Callable[[F], F]:
    """The options of the settings that apply to ``command``, in table order (and, hidden,
    those of the command it also accepts)."""
    also = ACCEPTS.get(command, "")

    def apply(func: F) -> F:
        for entry in reversed(TABLE):
            if command in entry.spec.commands:
                func = _option(entry, command, hidden=False)(func)
            elif also and also in entry.spec.commands:
                func = _option(entry, command, hidden=True)(func)
        return func

    return apply


def explicit(params: dict[str, Any]) -> dict[str, Any]:
    """The settings given on the command line or in the environment (click passes None for
    the others, so the config file and the defaults can fill them)."""
    return {k: v for k, v in params.items() if k in BY_NAME and v is not None}


def prepare(params: dict[str, Any], *, level: str = "", quiet: bool = False) -> Settings:
    """A one-shot command's settings (its options, the environment, the config file), with
    logging configured: at ``level``, else the settings' own (``quiet``: warnings unless a
    level other than the default info was asked for)."""
    from gfd.app import load_settings
    from gfd.logs import configure

    settings, _ = load_settings(explicit(params))
    chosen = level or settings.log_level
    if quiet and not level and settings.log_level == "info":
        chosen = "warning"
    configure(level=chosen, fmt=settings.log_format)
    return settings


# --------------------------------------------------------------------------- -o/--output


class OutputFormat(click.Choice[str]):
    """``-o/--output``'s formats; for ``diff`` a path (``-o /x/gfd``, the feature file as
    before) is taken as ``--output-file`` with a deprecation warning."""

    def __init__(self, command: str) -> None:
        super().__init__(OUTPUTS[command])
        self.command = command

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        if (self.command == "diff" and isinstance(value, str) and "/" in value
                and ctx is not None):
            click.echo(f"gfd: warning: `gfd diff -o PATH` is deprecated: -o/--output is the "
                       f"output format now; write --output-file {value}", err=True)
            ctx.meta["gfd.output_file"] = value
            return OUTPUTS[self.command][0]
        if isinstance(value, str) and value not in self.choices:
            hint = ("; the feature file is --output-file" if self.command == "diff" else "")
            self.fail(f"{value!r} is not an output format: one of "
                      f"{', '.join(self.choices)}{hint}", param, ctx)
        return super().convert(value, param, ctx)


def _deprecated_format(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        click.echo("gfd: warning: --format is deprecated; use -o/--output", err=True)
        ctx.meta["gfd.format"] = value


def output_option(command: str) -> Callable[[F], F]:
    """``-o/--output`` with ``command``'s formats (and the hidden, deprecated ``--format``
    where the command had one)."""
    formats = OUTPUTS[command]
    option = click.option("-o", "--output", "output", type=OutputFormat(command),
                           default=formats[0], show_default=True,
                           help="Output format: " + ", ".join(formats) + ".")

    def apply(func: F) -> F:
        func = option(func)
        if command in ("labels", "devices", "features"):
            func = click.option("--format", type=click.Choice(formats), default=None,
                                hidden=True, expose_value=False, callback=_deprecated_format,
                                is_eager=True)(func)
        return func

    return apply


def chosen_output(ctx: click.Context, output: str) -> str:
    """The output format: ``-o``, or the deprecated ``--format`` when only it was given."""
    source = ctx.get_parameter_source("output")
    given = source is not click.core.ParameterSource.DEFAULT
    return output if given else str(ctx.meta.get("gfd.format", output))


def output_file_alias(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with a deprecated ``gfd diff -o PATH`` as ``--output-file``."""
    path = ctx.meta.get("gfd.output_file")
    if path is None or params.get("output_file") is not None:
        return params
    return {**params, "output_file": BY_NAME["output_file"].spec.kind.from_text(path)}


# --------------------------------------------------------------------------- help, errors


class Command(click.Command):
    """A command whose help lists its options by section and ends with its exit codes."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        sections: dict[str, list[tuple[str, str]]] = {"Options": []}
        for title in _SECTION_TITLES.values():
            sections[title] = []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            section = getattr(param, "section", None)
            sections[_SECTION_TITLES[section] if section else "Options"].append(record)
        for title, records in sections.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_epilog(ctx, formatter)
        if any(isinstance(p, SettingOption) for p in self.params):
            formatter.write_paragraph()
            formatter.write_text("Each setting in full, with its environment variables and "
                                 "config-file field: gfd docs settings")
        codes = EXIT_CODES.get(self.name or "")
        if codes:
            with formatter.section("Exit codes"):
                formatter.write_dl([(str(k), v) for k, v in codes.items()])


def usage_line(prog: str, exc: click.ClickException) -> str:
    """A click error as gfd's one line: ``gfd: error: --flag: problem; see gfd run --help``."""
    message = exc.format_message()
    if isinstance(exc, click.BadParameter) and not isinstance(exc, click.MissingParameter):
        hint = exc.param_hint
        if not isinstance(hint, str) and isinstance(exc.param, click.Option):
            hint = max(exc.param.opts, key=len)
        elif not isinstance(hint, str) and exc.param is not None:
            hint = exc.param.human_readable_name
        if isinstance(hint, str):
            message = f"{hint}: {exc.message}"
    where = exc.ctx.command_path if isinstance(exc, click.UsageError) and exc.ctx else prog
    return f"{prog}: error: {message.rstrip('.')}; see {where} --help"


def exit_code(prog: str, exc: GfdError, *, failure: Exit = Exit.FAILURE) -> Exit:
    """One line on stderr for an error, and its exit code: 2 for usage and config, else
    ``failure`` (1; 3 for ``diff``, whose 1 means differences)."""
    click.echo(f"{prog}: error: {exc}", err=True)
    return Exit.USAGE if isinstance(exc, ConfigError) else failure


class Group(click.Group):
    """Every command's errors as one line on stderr with an exit code: gfd's own errors
    (2 for usage and config), and click's usage errors (2) in the same form."""

    command_class = Command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except GfdError as exc:
            failure = Exit.UNKNOWN if ctx.invoked_subcommand == "diff" else Exit.FAILURE
            ctx.exit(exit_code("gfd", exc, failure=failure))

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # `gfd` alone: its help, as helm
            click.echo(exc.format_message())
            code = Exit.OK
        except click.ClickException as exc:
            _fail(usage_line(prog_name or "gfd", exc), exc.exit_code)
        except click.exceptions.Abort:
            _fail("gfd: error: aborted", Exit.FAILURE)
        raise SystemExit(code if isinstance(code, int) else 0)


def _fail(line: str, code: int) -> NoReturn:
    click.echo(line, err=True)
    raise SystemExit(code)
