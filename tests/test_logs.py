"""Logging: ``Once`` logs a recurring problem once until it clears; the JSON formatter writes
one sorted JSON object per line; ``configure`` routes gfd's logs to stderr, idempotently."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gfd.logs import JsonFormatter, Once, configure, fields

LOGGER = "gfd.test"


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == LOGGER]


@pytest.fixture
def once(caplog: pytest.LogCaptureFixture) -> Once:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    return Once(logging.getLogger(LOGGER))


# ----------------------------------------------------------------------------- Once


def test_a_message_is_logged_the_first_time_only(once: Once,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    assert once.warning("NVML: %s", "Unknown Error") is True
    assert once.warning("NVML: %s", "Unknown Error") is False
    assert messages(caplog) == [(logging.WARNING, "NVML: Unknown Error")]


def test_distinct_messages_are_each_logged_once(once: Once,
                                                caplog: pytest.LogCaptureFixture) -> None:
    for text in ("a", "b", "a", "b", "c"):
        once.error(text)
    assert messages(caplog) == [(logging.ERROR, "a"), (logging.ERROR, "b"), (logging.ERROR, "c")]


def test_a_key_logs_changing_messages_once(once: Once, caplog: pytest.LogCaptureFixture) -> None:
    once.warning("cycle 1 failed", key="cycle")
    once.warning("cycle 2 failed", key="cycle")
    assert messages(caplog) == [(logging.WARNING, "cycle 1 failed")]


def test_reset_forgets_so_the_next_occurrence_is_logged_again(
        once: Once, caplog: pytest.LogCaptureFixture) -> None:
    assert once.reset() is False, "nothing to forget yet"
    once.error("down")
    assert once.reset() is True
    assert once.reset() is False
    once.error("down")
    assert messages(caplog) == [(logging.ERROR, "down"), (logging.ERROR, "down")]


def test_text_with_percent_signs_and_no_arguments_is_logged_as_is(
        once: Once, caplog: pytest.LogCaptureFixture) -> None:
    once.log(logging.INFO, "disk 100% full")
    assert messages(caplog) == [(logging.INFO, "disk 100% full")]


# ----------------------------------------------------------------------------- JSON lines


def record(message: str, *args: object, exc: bool = False) -> logging.LogRecord:
    info = None
    if exc:
        try:
            raise ValueError("boom")
        except ValueError:
            info = sys.exc_info()
    rec = logging.LogRecord("gfd.daemon", logging.WARNING, __file__, 1, message, args, info)
    rec.created, rec.msecs = 1_790_000_000.0, 42.0
    return rec


def test_a_record_is_one_json_object_with_sorted_keys() -> None:
    line = JsonFormatter().format(record("labels changed: %s", "+1 ~0 -0"))
    assert "\n" not in line
    assert json.loads(line) == {"ts": "2026-09-21T14:13:20.042Z", "level": "warning",
                                "logger": "gfd.daemon", "msg": "labels changed: +1 ~0 -0"}
    assert list(json.loads(line)) == sorted(json.loads(line))


def test_an_exception_goes_into_exc_and_the_line_stays_one_line() -> None:
    line = JsonFormatter().format(record("failed", exc=True))
    entry = json.loads(line)
    assert "\n" not in line
    assert "ValueError: boom" in entry["exc"] and "Traceback" in entry["exc"]


def test_fields_become_json_values_beside_the_message_and_never_replace_its_keys() -> None:
    rec = record("config reloaded: %s", "x")
    rec.fields = fields(changes={"mig_strategy": {"from": "none", "to": "mixed"}},
                        counts=[1, 2], msg="not the message", where=Path("/x"))["fields"]
    entry = json.loads(JsonFormatter().format(rec))
    assert entry["changes"] == {"mig_strategy": {"from": "none", "to": "mixed"}}
    assert entry["counts"] == [1, 2] and entry["where"] == "/x"
    assert entry["msg"] == "config reloaded: x"


def test_the_text_line_shows_the_message_alone(
        gfd_logger: logging.Logger, capsys: pytest.CaptureFixture[str]) -> None:
    configure(level="info", fmt="text")
    logging.getLogger("gfd.app").info("started", extra=fields(settings={"a": 1}))
    assert capsys.readouterr().err.rstrip().endswith("INFO gfd.app: started")


# ----------------------------------------------------------------------------- configure


@pytest.fixture
def gfd_logger() -> Iterator[logging.Logger]:
    """The "gfd" logger, restored afterwards (other tests rely on it propagating)."""
    logger = logging.getLogger("gfd")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    yield logger
    logger.handlers[:], logger.level, logger.propagate = saved


@pytest.mark.parametrize("fmt, formatter", [("json", JsonFormatter), ("text", logging.Formatter)])
def test_configure_installs_one_stderr_handler_in_the_chosen_format(
        gfd_logger: logging.Logger, fmt: str, formatter: type[logging.Formatter]) -> None:
    configure(level="debug", fmt=fmt)
    configure(level="warning", fmt=fmt)
    [handler] = gfd_logger.handlers
    assert isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr
    assert type(handler.formatter) is formatter
    assert gfd_logger.level == logging.WARNING and gfd_logger.propagate is False


def test_configured_text_lines_name_level_and_logger(
        gfd_logger: logging.Logger, capsys: pytest.CaptureFixture[str]) -> None:
    configure(level="info", fmt="text")
    logging.getLogger("gfd.app").info("hello %s", "world")
    logging.getLogger("gfd.app").debug("not shown")
    err = capsys.readouterr().err
    assert err.rstrip().endswith("INFO gfd.app: hello world")
    assert "not shown" not in err
