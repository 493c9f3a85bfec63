"""``gpu-feature-discovery``: GFD's own command line, on top of gfd.

Everywhere GFD runs today (the GPU Operator, the device plugin's Helm chart, GFD's static
manifests) the pod spec runs ``gpu-feature-discovery`` with GFD's flags and environment.
This entry point accepts exactly that command line and maps it onto the settings table:

* Go flag syntax: ``-flag`` or ``--flag``, a value as ``=value`` or the next argument; a
  boolean takes no value or ``=true|false`` (Go's spellings); parsing stops at the first
  argument that is not a flag, or after ``--`` (GFD ignores what follows).
* GFD's environment semantics: a variable fills a flag not given on the command line, the
  first one set wins, and a variable set to the empty string counts as set -- false for a
  boolean, "" for text (``GFD_OUTPUT_FILE=""`` means standard output), ignored for numbers
  and durations.
* GFD v0.20's defaults: 60 s interval, the NodeFeature API on, no feature-file expiry, and
  GFD's label set. Without ``NODE_NAME`` (GFD's static manifests set none) gfd writes the
  feature file instead of exiting, unless the NodeFeature API was asked for explicitly.

The process's ``argv[0]`` is ``gpu-feature-discovery``: GFD's config-manager sidecar finds
the process it sends SIGHUP to by that name, so a console script (whose ``argv[0]`` is the
interpreter) re-executes itself under it first.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import click

from gfd import __version__
from gfd.config import TABLE, Entry, Settings
from gfd.errors import ConfigError, GfdError, show
from gfd.settingkinds import Bool, OutputPath, PathKind, Text, ValueProblem
from gfd.settingkinds import Duration as DurationKind

if TYPE_CHECKING:
    from gfd.cli import ReloadAsked
    from gfd.configfile import FileConfig

log = logging.getLogger(__name__)

NAME = "gpu-feature-discovery"
TITLE = "GPU Feature Discovery"
_REEXEC_MARK = "GFD_PROCESS_NAME_SET"

GFD_DEFAULTS = replace(Settings(), sleep_interval=60.0, use_node_feature_api=True, expiry=0.0,
                       label_set="compat", resource_manager="device-plugin")
"""GFD v0.20's defaults where they differ from ``gfd run``'s."""

_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def flags() -> dict[str, Entry]:
    """Every flag name this command line accepts (without dashes): GFD's own spellings, and
    gfd's names for the settings GFD does not have (``metrics-port``, ``sink`` ...)."""
    table: dict[str, Entry] = {}
    for entry in TABLE:
        names = entry.spec.gfd or tuple(f.lstrip("-") for f in entry.spec.flags
                                        if f.startswith("--"))
        for name in names:
            table[name] = entry
    return table


@dataclass(frozen=True, slots=True, kw_only=True)
class Command:
    """A parsed ``gpu-feature-discovery`` command line."""

    explicit: dict[str, Any] = field(default_factory=dict)
    """Settings given by a flag or an environment variable, typed."""
    help: bool = False
    version: bool = False
    ignored: tuple[str, ...] = ()
    """Arguments after the flags (GFD ignores them too)."""


def go_bool(text: str, *, what: str) -> bool:
    """Go's strconv.ParseBool."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise ConfigError(f"invalid boolean value {show(text)} for {what}: use true or false")


def _value(entry: Entry, text: str, *, what: str) -> Any:
    kind = entry.spec.kind
    if isinstance(kind, Bool):
        return go_bool(text, what=what)
    if isinstance(kind, DurationKind) and text.strip().isascii() and text.strip().isdigit():
        return float(text.strip())  # "60": whole seconds, as the device plugin's chart passes
    try:
        return kind.from_text(text)
    except ValueProblem as exc:
        raise ConfigError(f"invalid value {show(text)} for {what}: {exc}") from None


def parse(argv: Sequence[str], env: Mapping[str, str]) -> Command:
    """GFD's command line and environment as explicit setting values (ConfigError if invalid)."""
    known = flags()
    explicit: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            i += 1
            break
        if len(arg) < 2 or not arg.startswith("-"):
            break  # the first argument that is not a flag ends the flags, as in Go
        body = arg[2:] if arg.startswith("--") else arg[1:]
        if not body or body[0] in "-=":
            raise ConfigError(f"bad flag syntax: {arg}")
        name, has_value, text = body.partition("=")
        if name in ("h", "help"):
            return Command(help=True)
        if name in ("v", "version"):
            return Command(version=True)
        entry = known.get(name)
        if entry is None:
            raise ConfigError(f"flag provided but not defined: -{name} (see {NAME} --help)")
        what = f"flag -{name}"
        if isinstance(entry.spec.kind, Bool) and not has_value:
            explicit[entry.name] = True
        else:
            if not has_value:
                i += 1
                if i == len(argv):
                    raise ConfigError(f"flag needs an argument: -{name}")
                text = argv[i]
            explicit[entry.name] = _value(entry, text, what=what)
        i += 1
    for entry in TABLE:
        if entry.name in explicit:
            continue
        for var in entry.spec.env:
            if var not in env:
                continue
            text = env[var]
            if text == "":
                kind = entry.spec.kind
                if isinstance(kind, Bool):
                    explicit[entry.name] = False
                elif isinstance(kind, Text | PathKind | OutputPath):
                    explicit[entry.name] = kind.from_text("")
                # an empty number or duration is ignored, as GFD's flag library does
            else:
                explicit[entry.name] = _value(entry, text, what=f"${var}")
            break  # the first variable that is set wins, even when empty
    return Command(explicit=explicit, ignored=tuple(argv[i:]))


def help_text() -> str:
    """GFD-style usage: every flag, its variables and its GFD default."""
    lines = [f"NAME:\n   {TITLE} - generate labels for NVIDIA devices (gfd {__version__})\n",
             f"USAGE:\n   {NAME} [global options]\n", f"VERSION:\n   {__version__}\n",
             "GLOBAL OPTIONS:"]
    by_entry: dict[str, list[str]] = {}
    for name, entry in flags().items():
        by_entry.setdefault(entry.name, []).append(("-" if len(name) == 1 else "--") + name)
    for entry in TABLE:
        spellings = ", ".join(by_entry[entry.name])
        value = "" if isinstance(entry.spec.kind, Bool) else " value"
        default = entry.spec.kind.render(getattr(GFD_DEFAULTS, entry.name))
        env = ", ".join(f"${v}" for v in entry.spec.env)
        lines.append(f"   {spellings}{value}  {entry.spec.help} (default: {default!r})"
                     + (f" [{env}]" if env else ""))
    lines.append("   --help, -h  show help")
    lines.append("   --version, -v  print the version")
    return "\n".join(lines) + "\n"


def _node_feature_note(explicit: Mapping[str, Any]) -> Any:
    """The warning for GFD's static manifests: no NODE_NAME, NodeFeature API on by default."""

    def notes(settings: Settings, loaded: FileConfig | None) -> list[str]:
        asked = "use_node_feature_api" in explicit or (
            loaded is not None and "use_node_feature_api" in loaded.values)
        if asked or settings.node_name or settings.effective_sink != "file":
            return []
        return [f"NODE_NAME is not set: writing the feature file {settings.output_file} instead "
                "of a NodeFeature object (GFD v0.20 would exit: 'required flag node-name not "
                "set'); set NODE_NAME from the downward API (fieldRef spec.nodeName) to publish "
                "a NodeFeature"]

    return notes


def _process_name_is_set() -> bool:
    """True when /proc/self/cmdline's first argument is ``gpu-feature-discovery`` (or when
    there is no procfs to look at)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            first = f.read().split(b"\0", 1)[0]
    except OSError:
        return True
    return first == NAME.encode()


def _reexec_as_gfd(argv: Sequence[str]) -> None:
    """Replace this process with the same program whose ``argv[0]`` is ``gpu-feature-discovery``
    (the interpreter and the module path carried explicitly). Returns only if it cannot."""
    if os.environ.get(_REEXEC_MARK) or _process_name_is_set():
        return
    env = dict(os.environ)
    env[_REEXEC_MARK] = "1"
    env["PYTHONEXECUTABLE"] = sys.executable
    paths = [p for p in sys.path if p]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    # an ignored SIGHUP stays ignored across exec: none can end the new process before it
    # installs its own handler (one sent meanwhile is lost; the config file is re-read anyway)
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        os.execve(sys.executable, [NAME, "-P", "-m", "gfd.gpu_feature_discovery", *argv], env)
    except OSError as exc:
        signal.signal(signal.SIGHUP, previous)
        log.debug("cannot re-execute as %s: %s", NAME, exc)


def run(argv: Sequence[str], env: Mapping[str, str], *, early: ReloadAsked | None = None) -> int:
    """The whole command: parse, print help or version, or run the agent; the exit code."""
    from gfd.cli import Exit, exit_code, run_agent

    try:
        command = parse(argv, env)
    except ConfigError as exc:
        return exit_code(NAME, exc)
    if command.help:
        click.echo(help_text(), nl=False)
        return Exit.OK
    if command.version:
        click.echo(f"{TITLE} version {__version__}\ncommit: gfd {__version__}")
        return Exit.OK
    if not command.explicit.get("oneshot"):
        _reexec_as_gfd(argv)  # a long-running agent: let the config-manager find it by name
    if command.ignored:
        click.echo(f"{NAME}: warning: ignoring arguments after the flags: "
                   f"{' '.join(command.ignored)}", err=True)
    defaults = GFD_DEFAULTS
    if not command.explicit.get("node_name"):
        defaults = replace(defaults, use_node_feature_api=False)
    try:
        return run_agent(command.explicit, defaults=defaults,
                         notes=_node_feature_note(command.explicit), early=early)
    except GfdError as exc:
        return exit_code(NAME, exc)


def main(argv: list[str] | None = None, *, early: ReloadAsked | None = None) -> None:
    """Entry point (``gfd.launch`` calls it for the ``gpu-feature-discovery`` console script)."""
    sys.exit(run(sys.argv[1:] if argv is None else argv, os.environ, early=early))


if __name__ == "__main__":  # the re-executed process (see _reexec_as_gfd)
    main()
