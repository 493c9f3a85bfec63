"""The command line's shape: options generated from the settings table, ``-o/--output``,
help grouped by section, shell completion of values, one-line errors and exit codes."""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click
from click.formatting import join_options

from gfd.cli_help import BriefOption, Command, HelpContext
from gfd.config import BY_NAME, TABLE, Entry, Part, Settings
from gfd.errors import ConfigError, GfdError
from gfd.labelers.options import LABEL_SETS
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
    INCOMPLETE = 3
    """``gfd fleet``: printed, but a LIST was refused or failed (the counts lack it)."""


OUTPUTS: dict[str, tuple[str, ...]] = {
    "labels": ("text", "json", "yaml", "name"),
    "snapshot": ("json", "yaml"),
    "devices": ("yaml", "json", "text"),
    "features": ("yaml", "json", "text"),
    "explain": ("text", "json", "yaml"),
    "diff": ("text", "json", "yaml"),
    "selector": ("yaml", "json"),
    "fleet": ("text", "wide", "json", "yaml"),
    "why": ("text", "wide", "json", "yaml"),
}
"""``-o/--output`` of each command that prints data; the first is the default."""

_RUNS = tuple(e.name for e in TABLE if "run" in e.spec.commands)
_HOST = ("machine_type_file", "nvidia_smi", "resource_manager", "plugins_registry",
         "no_vgpu_labels")
ACCEPTS: dict[str, tuple[str, ...]] = {"prune": _RUNS, "diff": _RUNS, "devices": _HOST,
                                       "features": _HOST}
"""Settings a command also takes, unlisted in its help, although they change nothing it
prints: ``prune`` and ``diff`` take ``run``'s, so an uninstall Job or a look from inside the
agent's pod can reuse the agent's arguments; ``devices`` and ``features`` the ways of reading
this host that only the labels use, so one host's reading arguments serve every command
that reads GPUs."""

GFD_OUTPUT_FLAGS = ("--output", "-o")
"""GFD's spellings of ``--output-file``; ``-o/--output`` is the output format wherever a
command prints data."""

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


class SettingOption(BriefOption):
    """An option whose default lives in the settings table: click sees None (so an option
    not given lets the config file decide), help shows the table's default under the
    setting's section (its environment variables are in ``gfd docs settings``, so the help
    stays short); a boolean shows no metavar (``--watch``, ``--watch=false``)."""

    def __init__(self, *args: Any, entry: Entry, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.setting = entry
        self.entry, self.section = entry, entry.spec.section

    def get_help_extra(self, ctx: click.Context) -> Any:
        extra = super().get_help_extra(ctx)
        extra.pop("envvars", None)  # (in `gfd docs settings`: help stays short)
        default = self.setting.spec.kind.render(self.setting.default)
        if default and default != "false":  # (a flag that is off unless given: no default)
            extra["default"] = default
        return extra

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None or self.setting.name != "simulate":
            return record
        return record[0], f"{record[1]}  One of: {', '.join(_machines())}."

    def get_help_spec(self, ctx: click.Context) -> str:
        if isinstance(self.setting.spec.kind, Bool):
            return join_options(self.opts)[0]
        return super().get_help_spec(ctx)


def _help(entry: Entry, command: str) -> str:
    """The setting's help in ``--help-all``: the table's help in full, and where ``-o`` means
    what."""
    text = entry.spec.help
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
                        brief=spec.brief or spec.help, type=SettingType(entry), default=None,
                        envvar=list(spec.env), show_envvar=bool(spec.env),
                        help=_help(entry, command), hidden=hidden, **extra)


def settings_options(command: str) -> Callable[[F], F]:
    """The options of the settings that apply to ``command``, in table order (and, hidden,
    those of the command it also accepts)."""
    also = ACCEPTS.get(command, ())

    def apply(func: F) -> F:
        for entry in reversed(TABLE):
            if command in entry.spec.commands:  # (GFD's flags that do nothing: accepted)
                func = _option(entry, command, hidden=entry.spec.part is Part.NONE)(func)
            elif entry.name in also:
                func = _option(entry, command, hidden=True)(func)
        return func

    return apply


SELECTOR_MISSES = (
    "Missed on purpose, where the labels cannot tell (each kind in docs/selector.md): nodes "
    "with GPUs of several models when a filter needs the model; MIG slices under "
    "--mig-strategy single when --mig-profile is given (request them as nvidia.com/gpu); "
    "--shared/--dedicated where gpu.replicas is 0 or absent (DRA nodes); MPS with MIG enabled "
    "(no labels); shared units for --count above 1; models gfd's list names differently from "
    "NVML (a warning says so).")
"""``gfd selector``'s notes (``--help-all``)."""


def _brief(*flags: str, brief: str = "", **kwargs: Any) -> Callable[[F], F]:
    return click.option(*flags, cls=BriefOption, brief=brief, **kwargs)


_SELECTOR: tuple[Callable[[F], F], ...] = (
    _brief("--product", default="", brief="GPU model words (H100, A100-80GB), or a gpu.product.",
           help="GPU model words, in any order (H100, A100-80GB), or an exact gpu.product value "
                "(with or without -SHARED)."),
    _brief("--min-memory", type=int, default=None, brief="At least this much MiB per unit.",
           help="At least this much memory per unit the pod can get, MiB (a MIG slice's, an "
                "MPS replica's share)."),
    _brief("--mig-profile", default="", brief="A MIG slice, e.g. 1g.10gb (mixed strategy).",
           help="A MIG slice, e.g. 1g.10gb: requests nvidia.com/mig-<profile> (mixed "
                "strategy)."),
    _brief("--shared", is_flag=True, default=False, help="A time-sliced or MPS replica."),
    _brief("--dedicated", is_flag=True, default=False, help="A unit no other pod shares."),
    _brief("--renamed", is_flag=True, default=False,
           brief="Request <name>.shared (implies --shared).",
           help="The device plugin renames shared resources (renameByDefault): request "
                "<name>.shared (implies --shared)."),
    _brief("--family", default="", help="Architecture, e.g. hopper."),
    _brief("--min-compute", default="", help="Minimum compute capability, e.g. 8.0."),
    _brief("--count", type=int, default=1, help="How many units (devices with --dra)."),
    _brief("--label-set", type=click.Choice(LABEL_SETS), default="extended",
           brief="compat: only GFD's labels.",
           help="compat: use only GFD's labels (for clusters labelled by GFD)."),
    _FORM := _brief("--form", type=click.Choice(["auto", "nodeSelector", "affinity"]),
                    default="auto", brief="auto: a nodeSelector if it suffices.",
                    help="auto: a nodeSelector when exact values suffice, else node affinity."),
    _brief("--dra", is_flag=True, default=False,
           brief="A DRA ResourceClaimTemplate and a Pod.",
           help="Print a DRA ResourceClaimTemplate (CEL over the NVIDIA DRA driver's "
                "attributes) and an example Pod using it, placed by node affinity over the "
                "labels of --resource-manager dra."),
    _brief("--name", default=None, help="--dra: the ResourceClaimTemplate's name."),
    _brief("--feature-gates", default="", brief="--dra: the driver's gates (DynamicMIG=true).",
           help="--dra: the DRA driver's gates, e.g. DynamicMIG=true (what its devices publish "
                "changes)."),
    _brief("--uuid", default="", brief="--dra: one GPU-... or MIG-... device.",
           help="--dra: one GPU (GPU-...) or MIG device (MIG-...)."),
)


def selector_options(func: F) -> F:
    """``gfd selector``'s own options (it takes no settings)."""
    for option in reversed(_SELECTOR):
        func = option(func)
    return func


_NOT_FOR_FLEET = 3
"""The selector's last three options (--name, --feature-gates, --uuid) and --form shape a
printed stanza; ``gfd fleet`` takes --feature-gates back (its DRA devices' CEL needs it)."""


def fleet_filter_options(func: F) -> F:
    """``gfd selector``'s filters for ``gfd fleet``'s "where a pod fits" (the same options,
    parsed by the same code), without those that only shape the printed stanza."""
    chosen = [o for o in _SELECTOR[:-_NOT_FOR_FLEET] if o is not _FORM] + [_SELECTOR[-2]]
    for option in reversed(chosen):
        func = option(func)
    return func


def explicit(params: dict[str, Any]) -> dict[str, Any]:
    """The settings given on the command line or in the environment (click passes None for
    the others, so the config file and the defaults can fill them)."""
    return {k: v for k, v in params.items() if k in BY_NAME and v is not None}


def prepare(params: dict[str, Any], *, level: str = "", quiet: bool = False) -> Settings:
    """A one-shot command's settings (its options, the environment, the config file), with
    logging configured: at the ``--log-level`` given, else at the command's own ``level``
    (``quiet``: warnings), else the default."""
    from gfd.app import load_settings
    from gfd.logs import configure

    given = explicit(params)
    settings, _ = load_settings(given)
    chosen = settings.log_level if "log_level" in given else level or settings.log_level
    if quiet and not level and "log_level" not in given:
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
    if isinstance(exc, click.NoSuchOption) and exc.ctx is not None:
        message = _elsewhere(exc.option_name, exc.ctx.info_name or "") or message
    return f"{prog}: error: {message.rstrip('.')}; see {where} --help"


def _elsewhere(flag: str, command: str) -> str:
    """For a setting's flag a command does not take: that it changes nothing there, and
    which commands it changes ("": not a setting's flag)."""
    entry = next((e for e in TABLE if flag in e.spec.flags), None)
    if entry is None or not command:
        return ""
    return (f"gfd {command} does not take {flag}: it changes nothing there (a setting of "
            f"gfd {', '.join(entry.spec.commands)})")


def exit_code(prog: str, exc: GfdError, *, failure: Exit = Exit.FAILURE) -> Exit:
    """One line on stderr for an error, and its exit code: 2 for usage and config, else
    ``failure`` (1; 3 for ``diff``, whose 1 means differences)."""
    click.echo(f"{prog}: error: {exc}", err=True)
    return Exit.USAGE if isinstance(exc, ConfigError) else failure


class Group(click.Group):
    """Every command's errors as one line on stderr with an exit code: gfd's own errors
    (2 for usage and config), and click's usage errors (2) in the same form."""

    command_class = Command
    context_class = HelpContext

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
