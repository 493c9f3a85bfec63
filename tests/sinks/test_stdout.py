"""``--output-file -``: the feature file's text on standard output, once per change."""

from __future__ import annotations

import pytest

from gfd.errors import ConfigError
from gfd.sinks.stdout import StdoutSink


def test_stdout_sink_prints_once_per_change() -> None:
    out: list[str] = []
    sink = StdoutSink(out.append)
    sink.publish({"a/b": "1"})
    sink.publish({"a/b": "1"})
    sink.publish({"a/b": "2"})
    assert out == ["a/b=1\n", "a/b=2\n"]


def test_the_text_is_the_feature_files_sorted_lines_without_expiry() -> None:
    out: list[str] = []
    StdoutSink(out.append).publish({"b/x": "2", "a/y": "", "a/x": "1"})
    assert out == ["a/x=1\na/y=\nb/x=2\n"]


def test_the_first_publish_of_no_labels_still_prints_once() -> None:
    out: list[str] = []
    sink = StdoutSink(out.append)
    assert sink.publish({}).written
    assert not sink.publish({}).written
    assert out == [""]


CHANGES = [
    ("added", {"a/b": "1"}, {"a/b": "1", "a/c": "2"}, ("a/c",), (), ()),
    ("changed", {"a/b": "1"}, {"a/b": "2"}, (), ("a/b",), ()),
    ("removed", {"a/b": "1", "a/c": "2"}, {"a/b": "1"}, (), (), ("a/c",)),
]


@pytest.mark.parametrize("before, after, added, changed, removed", [c[1:] for c in CHANGES],
                         ids=[c[0] for c in CHANGES])
def test_a_publish_reports_what_changed_since_the_last_one(
        before: dict[str, str], after: dict[str, str], added: tuple[str, ...],
        changed: tuple[str, ...], removed: tuple[str, ...]) -> None:
    sink = StdoutSink(lambda text: None)
    sink.publish(before)
    change = sink.publish(after).change
    assert (change.added, change.changed, change.removed) == (added, changed, removed)


def test_published_is_what_was_printed_last() -> None:
    sink = StdoutSink(lambda text: None)
    with pytest.raises(ConfigError, match=r"standard output.* holds no published labels"):
        sink.published()  # `gfd diff -o -` said "+37 ~0 -0 at stdout"
    sink.publish({"a/b": "1"})
    labels = sink.published()
    labels["a/b"] = "changed by the caller"
    assert sink.published() == {"a/b": "1"}, "a copy, not the sink's own state"


def test_prune_refresh_and_close_print_nothing() -> None:
    out: list[str] = []
    sink = StdoutSink(out.append)
    sink.publish({"a/b": "1"})
    assert not sink.prune().written
    sink.refresh()
    sink.close()
    assert not sink.publish({"a/b": "1"}).written, "refresh does not reprint unchanged labels"
    assert out == ["a/b=1\n"]
