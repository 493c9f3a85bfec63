"""The flags and environment variables a gfd command accepts, read from its click command
(what a manifest or the chart may pass it)."""

from __future__ import annotations

import click


def option_names(command: click.Command) -> set[str]:
    """Every ``--flag`` and ``--no-flag`` of the command."""
    return {o for p in command.params if isinstance(p, click.Option)
            for o in (*p.opts, *p.secondary_opts)}


def option_envvars(command: click.Command) -> set[str]:
    """Every environment variable an option of the command reads."""
    names: set[str] = set()
    for p in command.params:
        names.update([p.envvar] if isinstance(p.envvar, str) else p.envvar or [])
    return names
