"""The label diff every sink reports (``diff``, ``Change``) and ``PublishResult``."""

from __future__ import annotations

import pytest

from gfd.sinks.base import Change, PublishResult, diff

DIFFS = [
    ("nothing-to-nothing", {}, {}, (), (), ()),
    ("same", {"a": "1"}, {"a": "1"}, (), (), ()),
    ("added", {}, {"b": "1", "a": "2"}, ("a", "b"), (), ()),
    ("changed", {"a": "1", "b": "2"}, {"a": "1", "b": "3"}, (), ("b",), ()),
    ("removed", {"b": "1", "a": "2"}, {}, (), (), ("a", "b")),
    ("empty-value-is-a-value", {"a": ""}, {"a": "x"}, (), ("a",), ()),
    ("all-three", {"keep": "1", "edit": "1", "drop": "1"},
     {"keep": "1", "edit": "2", "new": "1"}, ("new",), ("edit",), ("drop",)),
]


@pytest.mark.parametrize("old, new, added, changed, removed", [d[1:] for d in DIFFS],
                         ids=[d[0] for d in DIFFS])
def test_diff_sorts_keys_into_added_changed_and_removed(
        old: dict[str, str], new: dict[str, str], added: tuple[str, ...],
        changed: tuple[str, ...], removed: tuple[str, ...]) -> None:
    change = diff(old, new)
    assert (change.added, change.changed, change.removed) == (added, changed, removed)
    assert change.empty is (not (added or changed or removed))


def test_diff_keys_come_sorted_whatever_the_input_order() -> None:
    change = diff({"z": "1", "y": "1"}, {"c": "1", "a": "1", "b": "1"})
    assert change.added == ("a", "b", "c") and change.removed == ("y", "z")


@pytest.mark.parametrize("change, summary", [
    (Change(), "+0 ~0 -0"),
    (Change(added=("a", "b"), changed=("c",), removed=("d", "e", "f")), "+2 ~1 -3"),
], ids=["empty", "counts"])
def test_change_summary_counts_each_kind(change: Change, summary: str) -> None:
    assert change.summary() == summary


def test_a_publish_result_without_a_change_reports_an_empty_one() -> None:
    result = PublishResult(written=True)
    assert result.change.empty and result.change == Change()
