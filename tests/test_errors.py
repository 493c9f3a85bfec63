"""The error tree: every error gfd raises on purpose is a GfdError; an ApiError says whether
retrying can help; ``one_line`` makes any text one line for the user."""

from __future__ import annotations

import pytest

from gfd.errors import (
    ApiError,
    ApiSinkError,
    BackendInitError,
    ConfigError,
    DiscoveryError,
    GfdError,
    NvmlInitError,
    PublishError,
    WatchExpired,
    one_line,
)

FAMILY = [
    (ConfigError, GfdError),
    (DiscoveryError, GfdError),
    (BackendInitError, DiscoveryError),
    (NvmlInitError, BackendInitError),
    (PublishError, GfdError),
    (ApiSinkError, PublishError),
    (ApiError, ApiSinkError),
    (WatchExpired, ApiError),
]


@pytest.mark.parametrize("error, parent", FAMILY, ids=[e.__name__ for e, _ in FAMILY])
def test_each_error_is_caught_by_its_parent(error: type[GfdError],
                                            parent: type[GfdError]) -> None:
    assert issubclass(error, parent) and issubclass(error, GfdError)


def test_the_cli_exit_codes_follow_the_tree() -> None:
    # ConfigError is exit 2; everything else is 1: no error is both.
    assert not issubclass(ConfigError, DiscoveryError | PublishError)
    assert not issubclass(DiscoveryError, ConfigError)
    assert not issubclass(PublishError, ConfigError)


RETRIABLE = [
    ("no-answer", None, True),
    ("throttled-429", 429, True),
    ("internal-500", 500, True),
    ("unavailable-503", 503, True),
    ("bad-request-400", 400, False),
    ("forbidden-403", 403, False),
    ("not-found-404", 404, False),
    ("conflict-409", 409, False),
    ("invalid-422", 422, False),
    ("gone-410", 410, False),
]


@pytest.mark.parametrize("status, retriable", [r[1:] for r in RETRIABLE],
                         ids=[r[0] for r in RETRIABLE])
def test_an_api_error_is_retriable_only_without_an_answer_or_for_429_and_5xx(
        status: int | None, retriable: bool) -> None:
    assert ApiError("x", status=status).retriable is retriable


def test_an_api_error_carries_what_the_api_answered() -> None:
    error = ApiError("patch node n: HTTP 422 Invalid: bad", status=422, reason="Invalid",
                     retry_after=2.5, causes=("a", "b"), resource_missing=False)
    assert str(error) == "patch node n: HTTP 422 Invalid: bad"
    assert (error.status, error.reason, error.retry_after, error.causes) == (
        422, "Invalid", 2.5, ("a", "b"))


def test_an_api_error_without_details_has_empty_ones() -> None:
    error = ApiError("cannot reach the API server")
    assert (error.status, error.reason, error.retry_after, error.causes,
            error.resource_missing) == (None, "", None, (), False)


ONE_LINE = [
    ("already-one-line", "cannot read x", "cannot read x"),
    ("newlines", "while parsing\n  in file\nexpected ']'", "while parsing in file expected ']'"),
    ("tabs-and-carriage-returns", "a\tb\r\nc", "a b c"),
    ("runs-of-spaces", "a   b", "a b"),
    ("surrounding-space", "  a b \n", "a b"),
    ("empty", "", ""),
]


@pytest.mark.parametrize("text, line", [o[1:] for o in ONE_LINE], ids=[o[0] for o in ONE_LINE])
def test_one_line_turns_every_run_of_whitespace_into_one_space(text: str, line: str) -> None:
    assert one_line(text) == line


@pytest.mark.parametrize("value, shown", [
    ("abc", "'abc'"),
    (5, "5"),
    ("a\nb", "'a\\nb'"),
    ({"k": [1, 2]}, "{'k': [1, 2]}"),
], ids=["text", "number", "newline", "nested"])
def test_show_quotes_a_short_value_whole(value: object, shown: str) -> None:
    from gfd.errors import show

    assert show(value) == shown


@pytest.mark.parametrize("value", [
    "x" * 1_500_000, ["y" * 1000] * 1000, [[["z" * 100] * 10] * 10] * 10,
    {f"k{n}": "v" * 100 for n in range(1000)}, b"\x00" * 100_000,
], ids=["long-text", "long-list", "nested-lists", "wide-mapping", "bytes"])
def test_show_never_gives_more_than_its_limit_and_says_it_cut(value: object) -> None:
    from gfd.errors import SHOW_LIMIT, show

    shown = show(value)
    assert len(shown) <= SHOW_LIMIT + len("... (100000 characters)")
    assert "\n" not in shown and shown.startswith(repr(value)[:10])


@pytest.mark.parametrize("value, shown", [
    ("abc", "'abc'"),
    (5, "5"),
    ("two\nlines", "'two\\nlines'"),
    (list(range(20)), "[0, 1, 2, 3, 4, 5, ...]"),
], ids=["text", "number", "newline-escaped", "long-list"])
def test_show_renders_a_value_short_and_on_one_line(value: object, shown: str) -> None:
    from gfd.errors import show

    assert show(value) == shown
    assert "\n" not in show(value)


def test_show_cuts_a_long_value_in_the_middle() -> None:
    from gfd.errors import show

    shown = show("x" * 200)
    assert shown.startswith("'xxx") and shown.endswith("xxx'") and "..." in shown
    assert len(shown) <= 80
