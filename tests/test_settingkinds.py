"""The kinds of a setting's values: each parses command-line text and config-file values by
its rule and refuses others with that rule; Go durations read and written as GFD does; a file
value's type named in messages."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.errors import ConfigError
from gfd.settingkinds import (
    Address,
    Bool,
    Choice,
    Duration,
    Float,
    Int,
    Kind,
    OutputPath,
    PathKind,
    Text,
    ValueProblem,
    format_duration,
    kind_of,
    parse_duration,
)

# ----------------------------------------------------------------------------- kinds, from text

TEXT = [
    ("text", Text(), "anything at all", "anything at all"),
    ("output-path", OutputPath(), "/x/gfd", "/x/gfd"),
    ("output-path-dash", OutputPath(), "-", "-"),
    ("output-path-empty-is-stdout", OutputPath(), "", "-"),
    ("path", PathKind(), "/sys", "/sys"),
    ("address-any-ipv4", Address(), "0.0.0.0", "0.0.0.0"),
    ("address-any", Address(), "::", "::"),
    ("address-bracketed", Address(), "[::1]", "::1"),
    ("address-loopback", Address(), " 127.0.0.1 ", "127.0.0.1"),
    ("bool-true", Bool(), "true", True),
    ("bool-1", Bool(), "1", True),
    ("bool-upper-with-space", Bool(), " YES ", True),
    ("bool-on", Bool(), "on", True),
    ("bool-false", Bool(), "false", False),
    ("bool-f", Bool(), "F", False),
    ("bool-off", Bool(), "off", False),
    ("choice", Choice(("none", "single", "mixed")), "mixed", "mixed"),
    ("duration-seconds", Duration(), "10s", 10.0),
    ("duration-compound", Duration(), "1m30s", 90.0),
    ("duration-ms", Duration(), "500ms", 0.5),
    ("duration-zero", Duration(), "0", 0.0),
    ("duration-infinite", Duration(infinite=True), "infinite", None),
    ("int", Int(0, 65535), " 9100 ", 9100),
    ("int-bounds", Int(0, 65535), "65535", 65535),
    ("float", Float(0.0), "2.5", 2.5),
    ("float-integer-text", Float(0.0), "5", 5.0),
]


@pytest.mark.parametrize("kind, text, value", [t[1:] for t in TEXT], ids=[t[0] for t in TEXT])
def test_each_kind_parses_command_line_text(kind: Kind, text: str, value: Any) -> None:
    assert kind.from_text(text) == value


TEXT_REFUSALS = [
    ("bool-word", Bool(), "maybe", "must be true or false, got 'maybe'"),
    ("choice-case", Choice(("none", "mixed")), "Mixed", "must be one of none, mixed, got 'Mixed'"),
    ("duration-without-unit", Duration(), "60", "'60' has no unit (write e.g. 60s)"),
    ("duration-unknown-unit", Duration(), "10x", "'10x' is not a duration"),
    ("duration-infinite-not-allowed", Duration(), "infinite", "must be a finite duration"),
    ("duration-zero-not-allowed", Duration(zero=False), "0s", "must be longer than 0, got '0s'"),
    ("int-word", Int(0, 10), "ten", "must be an integer, got 'ten'"),
    ("int-fraction", Int(0, 10), "1.5", "must be an integer"),
    ("int-too-big", Int(0, 65535), "70000", "must be 0..65535, got 70000"),
    ("int-negative", Int(0, 65535), "-1", "must be 0..65535, got -1"),
    ("float-word", Float(0.0), "fast", "must be a number, got 'fast'"),
    ("float-negative", Float(0.0), "-1", "must be a number >= 0, got '-1'"),
    ("float-not-finite", Float(0.0), "inf", "must be a number >= 0"),
    ("float-nan", Float(0.0), "nan", "must be a number >= 0"),
    ("output-path-dev-stdout", OutputPath(), "/dev/stdout",
     "'/dev/stdout' is a standard stream, not a feature file (gfd writes the file by renaming "
     "a new one into place); use - (or '') to print the labels on standard output"),
    ("output-path-proc-fd-1", OutputPath(), "/proc/self/fd/1", "use - (or '')"),
    ("output-path-dev-stderr", OutputPath(), "/dev/stderr", "is a standard stream"),
    ("address-name", Address(), "localhost", "must be an IP address such as 0.0.0.0, :: or "
                                             "127.0.0.1, got 'localhost'"),
    ("address-with-port", Address(), "0.0.0.0:8080", "must be an IP address"),
    ("address-empty", Address(), "", "must be an IP address"),
]


@pytest.mark.parametrize("kind, text, message", [t[1:] for t in TEXT_REFUSALS],
                         ids=[t[0] for t in TEXT_REFUSALS])
def test_each_kind_refuses_text_with_its_rule(kind: Kind, text: str, message: str) -> None:
    with pytest.raises(ValueProblem) as caught:
        kind.from_text(text)
    assert message in str(caught.value)


# ----------------------------------------------------------------------------- kinds, from a file

FILE = [
    ("text", Text(), "abc", "abc"),
    ("bool", Bool(), False, False),
    ("choice", Choice(("none", "single")), "single", "single"),
    ("duration-text", Duration(), "1h", 3600.0),
    ("duration-nanoseconds", Duration(), 10_000_000_000, 10.0),
    ("duration-float-nanoseconds", Duration(), 1.5e9, 1.5),
    ("duration-infinite", Duration(infinite=True), "infinite", None),
]


@pytest.mark.parametrize("kind, value, parsed", [f[1:] for f in FILE], ids=[f[0] for f in FILE])
def test_each_kind_reads_config_file_values(kind: Kind, value: object, parsed: Any) -> None:
    warnings: list[str] = []
    assert kind.from_file(value, warnings.append) == parsed
    assert warnings == []


FILE_REFUSALS = [
    ("text-number", Text(), 5, "must be a string, got a number: 5"),
    ("text-list", Text(), ["a"], "must be a string, got a list: ['a']"),
    ("bool-quoted", Bool(), "true", "must be a boolean, got 'true' (write true or false without "
                                    "quotes)"),
    ("bool-number", Bool(), 1, "must be a boolean, got 1"),
    ("choice-number", Choice(("none", "single")), 1, "must be one of none, single, got 1"),
    ("duration-boolean", Duration(), True, "must be a duration such as 60s or 1m30s"),
    ("duration-mapping", Duration(), {"s": 1}, "must be a duration such as 60s"),
    ("duration-negative", Duration(), -5, "must not be negative, got -5"),
    ("duration-nan", Duration(), float("nan"), "must be a duration such as 60s"),
    ("duration-text-without-unit", Duration(), "60", "has no unit"),
]


@pytest.mark.parametrize("kind, value, message", [f[1:] for f in FILE_REFUSALS],
                         ids=[f[0] for f in FILE_REFUSALS])
def test_each_kind_refuses_file_values_with_its_rule(kind: Kind, value: object,
                                                     message: str) -> None:
    with pytest.raises(ValueProblem) as caught:
        kind.from_file(value, lambda text: None)
    assert message in str(caught.value)


def test_the_quoted_bool_hint_is_only_for_true_and_false_words() -> None:
    with pytest.raises(ValueProblem) as caught:
        Bool().from_file("enabled", lambda text: None)
    assert "without quotes" not in str(caught.value)


def test_a_finite_duration_rule_does_not_offer_infinite() -> None:
    with pytest.raises(ValueProblem) as caught:
        Duration().from_file([], lambda text: None)
    assert "infinite" not in str(caught.value)
    with pytest.raises(ValueProblem) as caught:
        Duration(infinite=True).from_file([], lambda text: None)
    assert "or infinite" in str(caught.value)


@pytest.mark.parametrize("value, warned", [
    (100, "100 is read as 100 nanoseconds, as GFD reads it; write e.g. '100s' if seconds "
          "were meant"),
    ("0", None),
    (0, None),
    (2_000_000, None),
], ids=["tiny-bare-number", "zero-text", "zero-number", "two-milliseconds"])
def test_a_bare_number_under_a_millisecond_warns_it_is_nanoseconds(
        value: object, warned: str | None) -> None:
    warnings: list[str] = []
    Duration().from_file(value, warnings.append)
    assert warnings == ([warned] if warned else [])


# ----------------------------------------------------------------------------- rendering


@pytest.mark.parametrize("kind, value, text", [
    (Bool(), True, "true"),
    (Bool(), False, "false"),
    (Float(0.0), 5.0, "5"),
    (Float(0.0), 2.5, "2.5"),
    (Duration(), 3600.0, "1h"),
    (Duration(infinite=True), None, "infinite"),
    (Int(0, 9), 7, "7"),
    (Text(), "x", "x"),
], ids=["true", "false", "float-whole", "float-fraction", "duration", "infinite", "int", "text"])
def test_each_kind_renders_values_as_they_are_written(kind: Kind, value: Any, text: str) -> None:
    assert kind.render(value) == text


def test_a_choice_shows_its_choices_as_metavar() -> None:
    assert Choice(("a", "b")).metavar == "[a|b]"


# ----------------------------------------------------------------------------- durations

DURATIONS = [
    ("seconds", "10s", 10.0),
    ("minutes-and-seconds", "1m30s", 90.0),
    ("fractional-hours", "1.5h", 5400.0),
    ("leading-dot", ".5s", 0.5),
    ("every-unit", "1h1m1s1ms1us1ns", 3661.001001001),
    ("micro-sign", "3µs", 3e-6),
    ("surrounding-space", " 2m ", 120.0),
    ("zero", "0", 0.0),
    ("infinite", "infinite", None),
    ("nanoseconds-int", 60_000_000_000, 60.0),
    ("nanoseconds-float", 5e8, 0.5),
]


@pytest.mark.parametrize("text, seconds", [d[1:] for d in DURATIONS], ids=[d[0] for d in DURATIONS])
def test_parse_duration_reads_go_durations_and_nanoseconds(text: str | int | float,
                                                           seconds: float | None) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


DURATION_REFUSALS = [
    ("boolean", True, "expected a duration such as 60s"),
    ("negative-number", -1, "must be a non-negative number of nanoseconds"),
    ("infinite-float", float("inf"), "must be a non-negative number of nanoseconds"),
    ("beyond-go", 2**64, "must be a non-negative number of nanoseconds"),
    ("no-unit", "60", "has no unit (write e.g. 60s)"),
    ("empty", "", "is not a duration"),
    ("sign", "-5s", "is negative (use a duration such as 10s, 1m30s, 1h, or infinite)"),
    ("trailing-garbage", "5s!", "is not a duration"),
    ("unit-only", "s", "is not a duration"),
    ("too-long", "3000000h", "is too long"),
]


@pytest.mark.parametrize("text, message", [d[1:] for d in DURATION_REFUSALS],
                         ids=[d[0] for d in DURATION_REFUSALS])
def test_parse_duration_refuses_what_go_refuses(text: str | int | float, message: str) -> None:
    with pytest.raises(ConfigError, match=r"^sleep: ") as caught:
        parse_duration(text, what="sleep")
    assert message in str(caught.value)


FORMATS = [
    ("infinite", None, "infinite"),
    ("zero", 0.0, "0"),
    ("milliseconds", 0.5, "500ms"),
    ("seconds", 10.0, "10s"),
    ("fractional-seconds", 1.5, "1.5s"),
    ("minute", 60.0, "1m"),
    ("minutes-and-seconds", 90.0, "1m30s"),
    ("hour", 3600.0, "1h"),
    ("every-part", 3661.0, "1h1m1s"),
    ("hours-and-a-fraction", 7200.5, "2h0.5s"),
]


@pytest.mark.parametrize("seconds, text", [f[1:] for f in FORMATS], ids=[f[0] for f in FORMATS])
def test_format_duration_writes_the_shortest_go_duration(seconds: float | None,
                                                         text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds, "and reads back the same"


# ----------------------------------------------------------------------------- a file value's type


@pytest.mark.parametrize("value, kind", [
    ({}, "a mapping"), ([], "a list"), (True, "a boolean"), ("x", "a string"), (1, "a number"),
    (1.5, "a number"), (None, "a NoneType"),
], ids=["mapping", "list", "boolean", "string", "int", "float", "null"])
def test_kind_of_names_a_file_values_type(value: object, kind: str) -> None:
    assert kind_of(value) == kind
