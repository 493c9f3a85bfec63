"""Help that fits a screen: each command's ``--help`` (the options that most change its
output, its other settings by group, its exit codes) and ``--help-all`` (every option in
full, under its section); ``gfd --help``'s one-line summaries."""

from __future__ import annotations

import copy
import re
import textwrap
from collections.abc import Iterable
from typing import Any

import click
from click.formatting import measure_table

from gfd.config import Entry, Part, Section

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
    "fleet": {0: "printed (--watch, --serve: until stopped)",
              1: "--check found a disagreement, or runtime failure",
              2: "usage or configuration error",
              3: "printed, but a LIST was refused or failed (marked incomplete)"},
    "why": {0: "it would bind now (or is bound)", 1: "it would not (explained), or runtime "
            "failure", 2: "usage error, no such pod, no pod or workload in the file",
            3: "cannot tell: a LIST was refused or failed, or a filter could not be judged"},
    "docs": {0: "printed", 2: "usage error"},
    "completion": {0: "printed", 2: "usage error"},
}
"""Each command's exit codes: its ``--help`` ends with them, the README's table lists them."""

SHORT: dict[str, tuple[str, ...]] = {
    "labels": ("mig_strategy", "label_set", "no_timestamp", "accelerator_label", "config_file",
               "resource_manager", "simulate", "snapshot"),
    "explain": ("mig_strategy", "label_set", "config_file", "resource_manager", "simulate",
                "snapshot"),
    "snapshot": ("device_discovery_strategy", "resource_manager", "config_file", "simulate",
                 "snapshot"),
    "devices": ("device_discovery_strategy", "config_file", "simulate", "snapshot"),
    "features": ("device_discovery_strategy", "config_file", "simulate", "snapshot"),
    "diff": ("mig_strategy", "label_set", "config_file", "output_file", "sink", "kubeconfig",
             "node_name"),
    "prune": ("output_file", "sink", "kubeconfig", "namespace", "node_name"),
    "run": ("mig_strategy", "label_set", "config_file", "output_file", "sink", "node_name",
            "oneshot", "sleep_interval", "metrics_port"),
}
"""The settings a command's ``--help`` shows with their help: those that most change what it
prints or does. Its other settings are listed by group, flags only; ``--help-all`` shows
every one in full."""

FOLDED: dict[str, tuple[str, tuple[str, ...]]] = {
    "fleet": ("pod fits", ("product", "min_memory", "mig_profile", "shared", "dedicated",
                           "renamed", "family", "min_compute", "count", "label_set", "dra",
                           "feature_gates")),
}
"""A command's own options its ``--help`` lists under one group, flags only (``--help-all``
describes each): ``gfd fleet``'s filters of where a pod fits are ``gfd selector``'s."""

HELP_ALL = "--help-all"

SUMMARIES = {
    "run": "Run the agent: label this node and keep its labels current.",
    "labels": "Print the labels this node would get.",
    "features": "Print the features this node's NodeFeature would carry.",
    "diff": "Show what `gfd run` would change at the chosen sink.",
    "prune": "Remove what gfd published at the chosen sink.",
    "snapshot": "Print the raw GPU snapshot (replay it with --snapshot).",
    "explain": "Explain why a label has its value on this machine.",
    "selector": "Print where a GPU pod may run and what it must request.",
    "devices": "Print the GPUs as the NVIDIA DRA driver publishes them.",
    "fleet": "Show the cluster's GPUs: total, allocated, free; where a pod fits.",
    "why": "Explain why a GPU pod is pending, node by node, and what binds it.",
    "docs": "Print the label or settings reference (Markdown).",
    "completion": "Print the shell completion script (bash, zsh, fish).",
}
"""Each command's line in ``gfd --help``, whole (click would cut its help's first sentence)."""

_SECTION_TITLES = {s: f"{s.value.capitalize()} options" for s in Section}


_NO_BREAK = "\u2011"
"""A non-breaking hyphen: stands in for a word's hyphens while click wraps it."""


def _whole(text: str, width: int) -> str:
    """``text`` with the hyphens of each word that fits ``width`` made non-breaking."""
    return re.sub(r"\S+", lambda m: m[0].replace("-", _NO_BREAK) if len(m[0]) <= width
                  else m[0], text)


class HelpFormatter(click.HelpFormatter):
    """click's, but a word that fits its column is never split at its hyphens: a machine
    (``t4-time-sliced``), a flag (``--plugins-registry``), a value (``device-plugin``) stays
    whole on one line, as it is typed (a longer one, a long path, still breaks)."""

    def write_dl(self, rows: Iterable[tuple[str, str]], col_max: int = 30,
                 col_spacing: int = 2) -> None:
        rows = list(rows)
        first = min(measure_table(rows)[0], col_max) + col_spacing if rows else 0
        width = max(self.width - first - 2, 10)  # (click's width of the second column)
        start = len(self.buffer)
        super().write_dl([(term, _whole(text, width)) for term, text in rows], col_max,
                         col_spacing)
        self._restore(start)

    def write_text(self, text: str) -> None:
        start = len(self.buffer)
        super().write_text(_whole(text, self.width - self.current_indent))
        self._restore(start)

    def _restore(self, start: int) -> None:
        self.buffer[start:] = [s.replace(_NO_BREAK, "-") for s in self.buffer[start:]]


class HelpContext(click.Context):
    """A context whose help is written by :class:`HelpFormatter`."""

    formatter_class = HelpFormatter


class BriefOption(click.Option):
    """An option with two helps: ``brief`` for the short ``--help``, ``help`` in full for
    ``--help-all``."""

    def __init__(self, *args: Any, brief: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.brief = brief or self.help or ""
        self.entry: Entry | None = None
        """The setting the option sets (None: the command's own option)."""
        self.section: Section | None = None
        """The help section it is listed under (None: Options)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        if ctx.meta.get(HELP_ALL) or self.brief == self.help:
            return super().get_help_record(ctx)
        short = copy.copy(self)  # (the option is shared by every call: change a copy)
        short.help = self.brief
        return click.Option.get_help_record(short, ctx)


class Command(click.Command):
    """A command whose ``--help`` fits a screen: its own options and the settings that most
    change its output with their help, its other settings by group (flags only), its exit
    codes, and last the way to see everything: ``--help-all`` (each setting under its
    section, in full, and the command's notes)."""

    context_class = HelpContext

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(click.Option(
            [HELP_ALL], is_flag=True, expose_value=False, is_eager=True, callback=_help_all,
            help="Show every option in full and exit."))

    def get_short_help_str(self, limit: int = 45) -> str:
        return SUMMARIES.get(self.name or "") or super().get_short_help_str(limit)

    def _grouped(self, ctx: click.Context) -> list[tuple[BriefOption, Entry]]:
        """The settings the short help lists by group only (none: it shows everything)."""
        short = SHORT.get(self.name or "", ())
        return [(p, e) for p, e in _settings(self.get_params(ctx))
                if not p.hidden and e.name not in short]

    def _short(self, ctx: click.Context) -> bool:
        return not ctx.meta.get(HELP_ALL) and bool(self._grouped(ctx) or self.epilog)

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self._short(ctx):
            self._format_short(ctx, formatter)
            return
        sections: dict[str, list[tuple[str, str]]] = {"Options": []}
        for title in _SECTION_TITLES.values():
            sections[title] = []
        params = self.get_params(ctx)  # (--help-all last, after --help)
        params = [p for p in params if HELP_ALL not in p.opts] + [
            p for p in params if HELP_ALL in p.opts]
        for param in params:
            record = param.get_help_record(ctx)
            if record is None or isinstance(param, click.Argument):
                continue
            section = getattr(param, "section", None)
            sections[_SECTION_TITLES[section] if section else "Options"].append(record)
        for title, records in sections.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)

    def _format_short(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        grouped = self._grouped(ctx)
        params = self.get_params(ctx)
        settings = [p for p, _ in _settings(params)]
        own = [p for p in params if p not in settings
               and not isinstance(p, click.Argument)]  # (named in the usage line)
        shown = [p for p in settings if p not in [g for g, _ in grouped]]
        help_option = self.get_help_option(ctx)
        title, names = FOLDED.get(self.name or "", ("", ()))
        folded = [p for p in own if p.name in names]
        own = [p for p in own if p not in folded]
        last = [p for p in own if p is help_option] + [p for p in own if HELP_ALL in p.opts]
        first = [p for p in own if p not in last]
        records = [r for p in [*first, *shown, *last] if (r := p.get_help_record(ctx))]
        with formatter.section("Options"):
            formatter.write_dl(records)
        if not grouped and not folded:
            return
        by_section: dict[str, list[str]] = {}
        for _, entry in grouped:
            by_section.setdefault(entry.spec.section.value, []).append(entry.flag)
        if folded:
            by_section[title] = [max(p.opts, key=len) for p in folded
                                 if isinstance(p, click.Option)]
        with formatter.section(f"More options, by group (each in full: {ctx.command_path} "
                               f"{HELP_ALL})"):
            width = max(len(s) for s in by_section) + 2
            for section in [*(s.value for s in Section), title]:
                flags = by_section.get(section)
                if not flags:
                    continue
                lines = textwrap.wrap(", ".join(flags), formatter.width - formatter.current_indent
                                      - width, break_on_hyphens=False, break_long_words=False)
                for i, line in enumerate(lines):
                    head = section if i == 0 else ""
                    formatter.write(f"{'':>{formatter.current_indent}}{head:<{width}}{line}\n")

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        short = self._short(ctx)
        if not short:
            super().format_epilog(ctx, formatter)
            ignored = [o for p, e in _settings(self.params) if e.spec.part is Part.NONE
                       and p.hidden and self.name in e.spec.commands for o in p.opts]
            if ignored:
                formatter.write_paragraph()
                formatter.write_text(f"Accepted for GFD compatibility and ignored: "
                                     f"{', '.join(ignored)}.")
            if _settings(self.params):
                formatter.write_paragraph()
                formatter.write_text("Each setting in full, with its environment variables "
                                     "and config-file field: gfd docs settings")
        codes = EXIT_CODES.get(self.name or "")
        if codes:
            with formatter.section("Exit codes"):
                formatter.write_dl([(str(k), v) for k, v in codes.items()])
        if short:
            formatter.write_paragraph()
            notes = " and notes" if self.epilog else ""
            formatter.write_text(f"Every option{notes} in full: {ctx.command_path} {HELP_ALL}")


def _help_all(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    ctx.meta[HELP_ALL] = True
    click.echo(ctx.get_help(), color=ctx.color)
    ctx.exit()


def _settings(params: list[click.Parameter]) -> list[tuple[BriefOption, Entry]]:
    """The options among ``params`` that set a setting, with its row of the table."""
    return [(p, p.entry) for p in params if isinstance(p, BriefOption) and p.entry is not None]
