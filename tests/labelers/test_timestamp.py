"""``gfd.timestamp``: the agent's start time from the options, absent with --no-timestamp."""

from __future__ import annotations

from helpers.builders import gpu, labels, snapshot


def test_timestamp_present_when_given() -> None:
    assert labels(snapshot(gpu(0)), timestamp=1724632719)["gfd.timestamp"] == "1724632719"


def test_timestamp_absent_with_no_timestamp() -> None:
    assert "gfd.timestamp" not in labels(snapshot(gpu(0)), timestamp=None)
