"""SmiReader: nvidia-smi compute-policy --list through a stub executable replaying recorded
outputs (tests/data/smi; the 1-GPU and GeForce files are verbatim from seed 001)."""

from __future__ import annotations

import json
import logging
import shutil
import stat
import time
from pathlib import Path

import pytest

from gfd.readers.smi import SmiReader, parse_timeslices

TESTS = Path(__file__).resolve().parent.parent
STUB = TESTS / "fakes" / "stub_nvidia_smi.py"
DATA = TESTS / "data" / "smi"
LOGGER = "gfd.readers.smi"
STUB_VARS = ("STUB_SMI_OUTPUT", "STUB_SMI_STDERR", "STUB_SMI_EXIT", "STUB_SMI_SLEEP",
             "STUB_SMI_ARGV_LOG")


@pytest.fixture
def stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An executable copy of the stub nvidia-smi, with a clean stub environment."""
    for name in STUB_VARS:
        monkeypatch.delenv(name, raising=False)
    target = tmp_path / "nvidia-smi"
    shutil.copyfile(STUB, target)
    target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(target)


def answer(monkeypatch: pytest.MonkeyPatch, output: str | Path | None = None, *,
           exit_code: int = 0, sleep: float = 0.0) -> None:
    if output is not None:
        monkeypatch.setenv("STUB_SMI_OUTPUT", str(DATA / output if isinstance(output, str)
                                                  else output))
    monkeypatch.setenv("STUB_SMI_EXIT", str(exit_code))
    if sleep:
        monkeypatch.setenv("STUB_SMI_SLEEP", str(sleep))


RECORDED = [
    pytest.param("timeslice-default-1gpu.txt", 0, {0: "default"}, id="seed001-default-1gpu"),
    pytest.param("timeslice-default-4gpu.txt", 0, dict.fromkeys(range(4), "default"),
                 id="default-4gpu"),
    pytest.param("timeslice-mixed.txt", 0, {0: "default", 1: "short", 2: "medium", 3: "long"},
                 id="mixed"),
    pytest.param("geforce-not-supported.txt", 3, None, id="seed001-geforce-exit3"),
    pytest.param("geforce-not-supported.txt", 0, None, id="seed001-geforce-exit0"),
]


@pytest.mark.parametrize(("recorded", "exit_code", "expected"), RECORDED)
def test_recorded_outputs(stub: str, monkeypatch: pytest.MonkeyPatch, recorded: str,
                          exit_code: int, expected: dict[int, str] | None) -> None:
    answer(monkeypatch, recorded, exit_code=exit_code)
    assert SmiReader(stub).timeslices() == expected


def test_runs_exactly_compute_policy_list(stub: str, monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    argv_log = tmp_path / "argv.log"
    monkeypatch.setenv("STUB_SMI_ARGV_LOG", str(argv_log))
    answer(monkeypatch, "timeslice-default-1gpu.txt")
    reader = SmiReader(stub)
    reader.timeslices()
    reader.timeslices()
    calls = [json.loads(line) for line in argv_log.read_text().splitlines()]
    assert calls == [["compute-policy", "--list"]] * 2


def test_missing_executable_is_none(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    reader = SmiReader(str(tmp_path / "no-such-nvidia-smi"))
    assert [reader.timeslices() for _ in range(3)] == [None] * 3
    records = [r for r in caplog.records if r.name == LOGGER]
    assert len(records) == 1
    assert records[0].levelno == logging.DEBUG
    assert "not found" in records[0].getMessage()


def test_not_on_path_is_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert SmiReader("nvidia-smi").timeslices() is None


def test_not_executable_is_none(tmp_path: Path) -> None:
    """No execute bit at all: execve fails with EACCES, even for root."""
    plain = tmp_path / "nvidia-smi"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    assert SmiReader(str(plain)).timeslices() is None


def test_timeout_is_none_and_warned_once(stub: str, monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    answer(monkeypatch, "timeslice-default-1gpu.txt", sleep=15.0)
    reader = SmiReader(stub, timeout=0.2)
    started = time.monotonic()
    assert reader.timeslices() is None
    assert reader.timeslices() is None
    assert time.monotonic() - started < 15  # killed, not waited for (2 x 15 s)
    records = [r for r in caplog.records if r.name == LOGGER]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert "did not answer within 0.2s" in records[0].getMessage()


@pytest.mark.parametrize(("recorded", "exit_code", "fragment"), [
    pytest.param("geforce-not-supported.txt", 3, "not supported", id="not-supported-exit3"),
    pytest.param("geforce-not-supported.txt", 0, "not supported", id="not-supported-exit0"),
    pytest.param("timeslice-default-1gpu.txt", 9, "exited with 9", id="exit-9"),
    pytest.param(None, 0, "no timeslice policy", id="empty-output"),
])
def test_each_cause_logged_once(stub: str, monkeypatch: pytest.MonkeyPatch,
                                caplog: pytest.LogCaptureFixture, recorded: str | None,
                                exit_code: int, fragment: str) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    answer(monkeypatch, recorded, exit_code=exit_code)
    reader = SmiReader(stub)
    assert [reader.timeslices() for _ in range(3)] == [None] * 3
    records = [r for r in caplog.records if r.name == LOGGER]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].levelno == logging.DEBUG
    assert fragment in records[0].getMessage()


def test_distinct_causes_each_logged(stub: str, monkeypatch: pytest.MonkeyPatch,
                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    reader = SmiReader(stub)
    answer(monkeypatch, "timeslice-default-1gpu.txt", exit_code=4)
    reader.timeslices()
    reader.timeslices()
    answer(monkeypatch, "geforce-not-supported.txt", exit_code=3)
    reader.timeslices()
    reader.timeslices()
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(messages) == 2
    assert "exited with 4" in messages[0]
    assert "not supported" in messages[1]


def test_non_zero_exit_with_rows_is_none(stub: str, monkeypatch: pytest.MonkeyPatch) -> None:
    answer(monkeypatch, "timeslice-default-4gpu.txt", exit_code=1)
    assert SmiReader(stub).timeslices() is None


def test_recovers_after_failure(stub: str, monkeypatch: pytest.MonkeyPatch) -> None:
    reader = SmiReader(stub)
    answer(monkeypatch, "geforce-not-supported.txt", exit_code=3)
    assert reader.timeslices() is None
    answer(monkeypatch, "timeslice-default-1gpu.txt")
    assert reader.timeslices() == {0: "default"}


def test_not_supported_on_stderr(stub: str, monkeypatch: pytest.MonkeyPatch,
                                 caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    monkeypatch.setenv("STUB_SMI_STDERR", str(DATA / "geforce-not-supported.txt"))
    answer(monkeypatch, None, exit_code=3)
    assert SmiReader(stub).timeslices() is None
    assert "not supported" in caplog.records[-1].getMessage()


PARSE = [
    pytest.param("| 0 Timeslice Default |", {0: "default"}, id="seed-row"),
    pytest.param("|   12     Timeslice            LONG     |", {12: "long"}, id="padded-upper"),
    pytest.param("0     Timeslice            Medium", {0: "medium"}, id="no-box"),
    pytest.param("│ 1  Timeslice  Short │", {1: "short"}, id="unicode-box"),
    pytest.param("| 0 Power Policy 250 |\n| 0 Timeslice Default |", {0: "default"},
                 id="other-policy-ignored"),
    pytest.param("| 0 Timeslice Bogus |", {}, id="unknown-value-ignored"),
    pytest.param("| GPU Name Value |\n|=====|\n+----+", {}, id="headers-only"),
    pytest.param("", {}, id="empty"),
    pytest.param("| 0 Timeslice Default |\n"
                 "Failed to get compute policies for GPU 1 : Not Supported",
                 {0: "default"}, id="partial"),
]


@pytest.mark.parametrize(("output", "expected"), PARSE)
def test_parse_timeslices(output: str, expected: dict[int, str]) -> None:
    assert parse_timeslices(output) == expected


def test_recorded_files_parse_directly() -> None:
    assert parse_timeslices((DATA / "timeslice-default-1gpu.txt").read_text()) == {0: "default"}
    assert parse_timeslices((DATA / "geforce-not-supported.txt").read_text()) == {}
