"""``gfd.timestamp``: the agent's start time from the options, absent with --no-timestamp."""

from __future__ import annotations

from helpers.builders import gpu, labels, snapshot

from gfd.labelers.options import LabelOptions
from gfd.labelers.timestamp import timestamp
from gfd.snapshot import Snapshot


def test_timestamp_present_when_given() -> None:
    assert labels(snapshot(gpu(0)), timestamp=1724632719)["gfd.timestamp"] == "1724632719"


def test_timestamp_absent_with_no_timestamp() -> None:
    assert "gfd.timestamp" not in labels(snapshot(gpu(0)), timestamp=None)


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_the_timestamp_comes_from_the_options_whatever_the_snapshot() -> None:
    result = timestamp(Snapshot(nvml_available=False), LabelOptions(timestamp=7))
    assert result.labels["nvidia.com/gfd.timestamp"].value == "7"
    assert timestamp(Snapshot(), LabelOptions()).labels == {}
