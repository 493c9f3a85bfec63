"""The kinds of a setting's values: parsed from text and from config-file values, and shown.

Each kind parses command-line and environment text and config-file values (YAML/JSON types),
checks them and shows them -- Go durations as GFD reads them, booleans, choices, paths,
addresses, numbers.

A kind raises :class:`ValueProblem` with the rule a value broke, without saying where the value
came from: the settings table (``gfd.config``), the command line and the config file's parser
add that.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable
from typing import Any

from gfd.errors import ConfigError, show


def kind_of(value: object) -> str:
    """``a mapping``, ``a list``, ``a boolean``... for messages about a file's values."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    return f"a {type(value).__name__}"


class ValueProblem(ValueError):
    """A value a setting cannot take; the message is the rule, without the location."""


Warn = Callable[[str], None]

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_MAX_NANOS = 2**63 - 1
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_SUB_MILLISECOND = 1e-3
_DURATION_RULE = "must be a duration such as 60s or 1m30s, a number of nanoseconds, or infinite"


def parse_duration(text: str | int | float, *, what: str = "duration",
                   infinite: bool = True) -> float | None:
    """A Go duration (``10s``, ``1m30s``, ``500ms``), ``infinite`` (returns None), or, as GFD's
    config file allows, a JSON number of nanoseconds. Seconds as a float.

    As in Go, a string needs a unit: ``"60"`` is an error (only ``"0"`` may omit it). A
    message suggests ``infinite`` only where the setting takes it (``infinite``)."""
    if isinstance(text, bool):
        raise ConfigError(f"{what}: expected a duration such as 60s, got {show(text)}")
    if isinstance(text, int | float):
        if (isinstance(text, float) and not math.isfinite(text)) or not 0 <= text <= _MAX_NANOS:
            raise ConfigError(f"{what}: must be a non-negative number of nanoseconds, got "
                              f"{show(text)}")
        return float(text) / 1e9
    value = text.strip()
    if value == "infinite":
        return None
    if value == "0":
        return 0.0
    if re.fullmatch(r"[0-9]+", value):
        raise ConfigError(f"{what}: {show(text)} has no unit (write e.g. {value}s)")
    if value.startswith("-"):
        raise ConfigError(f"{what}: {show(text)} is negative (use a duration such as 10s, "
                          "1m30s, 1h" + (", or infinite)" if infinite else ")"))
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(value) or pos == 0:
        raise ConfigError(
            f"{what}: {show(text)} is not a duration (use Go syntax such as 10s, 1m30s, 1h"
            + (", or infinite)" if infinite else ")"))
    if not math.isfinite(total) or total > _MAX_NANOS / 1e9:
        raise ConfigError(f"{what}: {show(text)} is too long (Go durations end near 292 years)")
    return total


def format_duration(seconds: float | None) -> str:
    """``3600.0`` -> ``1h``, ``90.0`` -> ``1m30s``, ``0.5`` -> ``500ms``, None -> ``infinite``."""
    if seconds is None:
        return "infinite"
    if seconds == 0:
        return "0"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    frac = seconds - whole
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "")
    if secs or frac or not text:
        text += f"{secs + frac:g}s"
    return text


class Kind:
    """How a setting's values are written: parsed from text (flags, environment) and from
    config-file values (YAML/JSON types), and shown in help and docs."""

    metavar = "TEXT"
    choices: tuple[str, ...] = ()

    def from_text(self, text: str) -> Any:
        return text

    def from_file(self, value: object, warn: Warn) -> Any:
        if isinstance(value, str):
            return self.from_text(value)
        raise ValueProblem(f"must be a string, got {kind_of(value)}: {show(value)}")

    def render(self, value: Any) -> str:
        return str(value)


class Text(Kind):
    pass


STANDARD_STREAMS = ("/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2",
                    "/proc/self/fd/1", "/proc/self/fd/2")
"""Paths that name a standard stream: a feature file (renamed into place) cannot be one."""


class OutputPath(Kind):
    """A path where ``""`` (GFD's spelling) and ``-`` both mean standard output; a path
    that names a standard stream (``/dev/stdout``) is refused in favour of ``-``."""

    metavar = "PATH"

    def from_text(self, text: str) -> str:
        if text.rstrip("/") in STANDARD_STREAMS:
            raise ValueProblem(
                f"{show(text)} is a standard stream, not a feature file (gfd writes the file "
                "by renaming a new one into place); use - (or '') to print the labels on "
                "standard output")
        return text or "-"


class PathKind(Kind):
    metavar = "PATH"


class Address(Kind):
    """An IP address to listen on: ``0.0.0.0`` (every IPv4 interface), ``::`` (every
    interface, IPv6 and IPv4 where the host allows it), or one address (``127.0.0.1``)."""

    metavar = "ADDRESS"

    def from_text(self, text: str) -> str:
        value = text.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            raise ValueProblem(f"must be an IP address such as 0.0.0.0, :: or 127.0.0.1, got "
                               f"{show(text)}") from None


class Bool(Kind):
    """``true``/``false`` and the usual spellings on the command line; a real boolean in a
    config file (a quoted ``"true"`` is refused there, as GFD's loader refuses it)."""

    metavar = "BOOLEAN"
    TRUE = frozenset({"1", "t", "true", "y", "yes", "on"})
    FALSE = frozenset({"0", "f", "false", "n", "no", "off"})

    def from_text(self, text: str) -> bool:
        lowered = text.strip().lower()
        if lowered in self.TRUE:
            return True
        if lowered in self.FALSE:
            return False
        raise ValueProblem(f"must be true or false, got {show(text)}")

    def from_file(self, value: object, warn: Warn) -> bool:
        if isinstance(value, bool):
            return value
        hint = ""
        if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no"):
            hint = " (write true or false without quotes)"
        raise ValueProblem(f"must be a boolean, got {show(value)}{hint}")

    def render(self, value: Any) -> str:
        return "true" if value else "false"


class Choice(Kind):
    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices
        self.metavar = "[" + "|".join(choices) + "]"

    def from_text(self, text: str) -> str:
        if text in self.choices:
            return text
        raise ValueProblem(f"must be one of {', '.join(self.choices)}, got {show(text)}")

    def from_file(self, value: object, warn: Warn) -> str:
        if isinstance(value, str):
            return self.from_text(value)
        raise ValueProblem(f"must be one of {', '.join(self.choices)}, got {show(value)}")


class Duration(Kind):
    """A Go duration (``10s``, ``1m30s``); in a config file also a number of nanoseconds, as
    GFD reads it. ``infinite`` where ``infinite`` is allowed (returns None)."""

    metavar = "DURATION"

    def __init__(self, *, infinite: bool = False, zero: bool = True) -> None:
        self.infinite = infinite
        self.zero = zero

    def _check(self, seconds: float | None, shown: str) -> float | None:
        if seconds is None and not self.infinite:
            raise ValueProblem(f"must be a finite duration such as 1h, got {shown}")
        if seconds == 0 and not self.zero:
            raise ValueProblem(f"must be longer than 0, got {shown}")
        return seconds

    def from_text(self, text: str) -> float | None:
        try:
            seconds = parse_duration(text, what="", infinite=self.infinite)
        except ConfigError as exc:
            raise ValueProblem(str(exc).removeprefix(": ")) from None
        return self._check(seconds, show(text))

    def from_file(self, value: object, warn: Warn) -> float | None:
        rule = _DURATION_RULE if self.infinite else _DURATION_RULE.removesuffix(", or infinite")
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ValueProblem(f"{rule}, got {show(value)}")
        if not isinstance(value, str):
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueProblem(f"{rule}, got {show(value)}")
            if value < 0:
                raise ValueProblem(f"must not be negative, got {show(value)}")
        try:
            seconds = parse_duration(value, what="", infinite=self.infinite)
        except ConfigError as exc:
            raise ValueProblem(str(exc).removeprefix(": ")) from None
        seconds = self._check(seconds, show(value))
        bare = not isinstance(value, str) or (value.strip().isascii() and value.strip().isdigit())
        if bare and seconds is not None and 0 < seconds < _SUB_MILLISECOND:
            warn(f"{show(value)} is read as {seconds * 1e9:g} nanoseconds, as GFD reads it; "
                 f"write e.g. '{value}s' if seconds were meant")
        return seconds

    def render(self, value: Any) -> str:
        return format_duration(value)


class Int(Kind):
    metavar = "INTEGER"

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def from_text(self, text: str) -> int:
        try:
            number = int(text.strip(), 10)
        except ValueError:
            raise ValueProblem(f"must be an integer, got {show(text)}") from None
        if not self.low <= number <= self.high:
            raise ValueProblem(f"must be {self.low}..{self.high}, got {number}")
        return number


class Float(Kind):
    metavar = "NUMBER"

    def __init__(self, low: float) -> None:
        self.low = low

    def from_text(self, text: str) -> float:
        try:
            number = float(text.strip())
        except ValueError:
            raise ValueProblem(f"must be a number, got {show(text)}") from None
        if not math.isfinite(number) or number < self.low:
            raise ValueProblem(f"must be a number >= {self.low:g}, got {show(text)}")
        return number

    def render(self, value: Any) -> str:
        return f"{value:g}"
