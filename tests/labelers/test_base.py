"""What a labeler returns and how results combine: ``merge`` folds results in order (a later
labeler wins a key, warnings add up), ``flatten`` gives sorted plain labels, ``key`` puts a
name under ``nvidia.com/``."""

from __future__ import annotations

import pytest

from gfd.labelers.base import PREFIX, Label, LabelDoc, Result, flatten, key, merge


def labelled(**values: str) -> dict[str, Label]:
    return {k: Label(value=v, source=f"source of {k}") for k, v in values.items()}


def test_key_puts_a_name_under_the_nvidia_prefix() -> None:
    assert PREFIX == "nvidia.com/"
    assert key("gpu.count") == "nvidia.com/gpu.count"


def test_merge_of_nothing_is_an_empty_result() -> None:
    assert merge([]) == Result()


def test_a_later_result_wins_a_key_and_keeps_the_others() -> None:
    first = Result(labelled(a="1", b="1"))
    second = Result(labelled(b="2", c="2"))
    merged = merge([first, second])
    assert {k: v.value for k, v in merged.labels.items()} == {"a": "1", "b": "2", "c": "2"}
    assert merged.labels["b"] is second.labels["b"], "the provenance comes with the value"


def test_merge_keeps_every_warning_in_order() -> None:
    merged = merge([Result(warnings=("w1",)), Result(), Result(warnings=("w2", "w3"))])
    assert merged.warnings == ("w1", "w2", "w3")


def test_merge_does_not_change_the_results_it_folds() -> None:
    first = Result(labelled(a="1"))
    merge([first, Result(labelled(a="2"))])
    assert first.labels["a"].value == "1"


def test_flatten_gives_plain_values_sorted_by_key() -> None:
    flat = flatten(labelled(z="1", a="2", m=""))
    assert flat == {"a": "2", "m": "", "z": "1"}
    assert list(flat) == ["a", "m", "z"]


def test_a_label_without_provenance_has_empty_provenance() -> None:
    assert Label(value="x") == Label(value="x", source="", raw="", rules=())


def test_a_declared_label_doc_leaves_its_module_to_the_catalogue() -> None:
    doc = LabelDoc(key="gpu.count", value="integer", example="8", source="s", when="w",
                   set="compat")
    assert doc.module == ""


@pytest.mark.parametrize("results, keys", [
    ([Result(labelled(a="1")), Result(labelled(a="2")), Result(labelled(a="3"))], {"a": "3"}),
    ([Result(labelled(a="1")), Result()], {"a": "1"}),
], ids=["three-writers", "a-later-empty-result-removes-nothing"])
def test_merge_table(results: list[Result], keys: dict[str, str]) -> None:
    assert flatten(merge(results).labels) == keys
