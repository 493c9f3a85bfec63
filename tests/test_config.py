"""The settings table: each Kind's text and file parsing, precedence, and changes."""

from __future__ import annotations

from gfd.config import TABLE, Part


def test_every_setting_of_the_table_has_a_class_and_help() -> None:
    for entry in TABLE:
        assert isinstance(entry.spec.part, Part) and entry.spec.help, entry.name
        assert entry.spec.flags[0].startswith("--"), entry.name
