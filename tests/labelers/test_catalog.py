"""The catalogue gathers every area module's LABELS and names each entry's module itself."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import gfd.labelers
from gfd.labelers.base import LabelDoc
from gfd.labelers.catalog import (
    EXTENDED_KEY,
    LABELS,
    MODULES,
    describe,
    gather,
    key_pattern,
    module_name,
)
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.readers.simulate import SIMULATIONS, simulate

ALL_MODULES = [importlib.import_module(f"gfd.labelers.{m.name}")
               for m in pkgutil.iter_modules(gfd.labelers.__path__)]


def declared(module: ModuleType) -> tuple[LabelDoc, ...]:
    docs: tuple[LabelDoc, ...] = module.LABELS
    return docs


def test_every_module_that_declares_labels_is_gathered() -> None:
    declaring = {m.__name__ for m in ALL_MODULES if hasattr(m, "LABELS")} - {
        "gfd.labelers.catalog"}
    assert declaring == {m.__name__ for m in MODULES}
    assert len(MODULES) == len(set(MODULES))


def test_every_declared_label_is_in_the_catalogue() -> None:
    keys = [doc.key for doc in LABELS]
    assert len(keys) == len(set(keys)), "one entry per key"
    assert set(keys) == {doc.key for m in MODULES for doc in declared(m)}


@pytest.mark.parametrize("module", MODULES, ids=module_name)
def test_a_module_declares_labels_without_naming_itself(module: ModuleType) -> None:
    docs = declared(module)
    assert docs, "a gathered module declares at least one label"
    assert all(doc.module == "" for doc in docs), "the catalogue derives the module"
    assert len({doc.key for doc in docs}) == len(docs)
    assert all(doc.set in ("compat", "extended") for doc in docs)


def test_each_entry_names_exactly_the_modules_that_list_it() -> None:
    for doc in LABELS:
        listing = [module_name(m) for m in MODULES if any(d.key == doc.key for d in declared(m))]
        assert doc.module == " / ".join(listing), doc.key


def test_describe_names_the_modules_that_compute_a_key() -> None:
    for key in ("nvidia.com/gpu.product", "nvidia.com/mig-1g.5gb.count",
                "nvidia.com/gpu.memory"):
        doc = describe(key)
        assert doc is not None
        assert doc.module == "gpu / mig"
    for key, module in (("nvidia.com/gpu.family", "family"), ("nvidia.com/gpu.nvlink", "nvlink"),
                        ("nvidia.com/gpu.product.NVIDIA-A10", "inventory")):
        doc = describe(key)
        assert doc is not None
        assert doc.module == module


def test_modules_listing_the_same_key_agree_on_every_field() -> None:
    by_key: dict[str, LabelDoc] = {}
    for module in MODULES:
        for doc in declared(module):
            assert by_key.setdefault(doc.key, doc) == doc, doc.key


def test_gather_joins_modules_in_order_and_puts_compat_first() -> None:
    shared = LabelDoc(key="a", value="v", example="e", source="s", when="w", set="compat")
    extra = LabelDoc(key="b", value="v", example="e", source="s", when="w", set="extended")
    own = LabelDoc(key="c", value="v", example="e", source="s", when="w", set="compat")
    one = ModuleType("gfd.labelers.one")
    two = ModuleType("gfd.labelers.two")
    one.LABELS = (extra, shared)  # type: ignore[attr-defined]
    two.LABELS = (shared, own)  # type: ignore[attr-defined]
    assert [(d.key, d.module) for d in gather((one, two))] == [
        ("a", "one / two"), ("c", "two"), ("b", "one")]


def test_compat_labels_come_before_extended_ones() -> None:
    sets = [doc.set for doc in LABELS]
    assert sets == sorted(sets)


def _example_keys(doc: LabelDoc) -> list[str]:
    keys = [doc.key.replace("<model>", "NVIDIA-A10")]
    if "<R>" in doc.key:
        keys = [k.replace("<R>", r) for k in keys for r in ("gpu", "mig-1g.5gb", "mig-1G.5GB")]
    return [f"nvidia.com/{k}" for k in keys]


@pytest.mark.parametrize("doc", LABELS, ids=lambda d: d.key)
def test_extended_key_pattern_matches_exactly_the_extended_entries(doc: LabelDoc) -> None:
    for key in _example_keys(doc):
        assert bool(EXTENDED_KEY.fullmatch(key)) == (doc.set == "extended"), key
        assert describe(key) == doc, key


@pytest.mark.parametrize("machine", sorted(SIMULATIONS))
@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
def test_every_emitted_label_matches_exactly_one_entry(machine: str, strategy: str) -> None:
    labels = compute_labels(simulate(machine).snapshot,
                            LabelOptions(mig_strategy=strategy, timestamp=1)).labels
    patterns = [(key_pattern(doc.key), doc) for doc in LABELS]
    for key in labels:
        entries = [doc.key for pattern, doc in patterns if pattern.fullmatch(key)]
        assert len(entries) == 1, (key, entries)


# ------------------------------------------------------------------ the resource managers' rules


def test_every_resource_manager_has_one_row_of_rules() -> None:
    from gfd.labelers.catalog import MANAGER_RULES
    from gfd.snapshot import RESOURCE_MANAGERS

    assert sorted(row.manager for row in MANAGER_RULES) == sorted(RESOURCE_MANAGERS)


def test_a_manager_without_a_row_is_a_key_error() -> None:
    from gfd.labelers.catalog import rules

    assert rules("dra").resources == ("gpu",)
    with pytest.raises(KeyError):
        rules("slurm")


def test_a_resource_the_manager_does_not_hand_out_is_excluded_under_it() -> None:
    from gfd.labelers.catalog import EXCLUDED_KEYS

    for key in ("nvidia.com/mig-1g.5gb.count", "nvidia.com/mig-3g.20gb.memory"):
        assert EXCLUDED_KEYS["dra"].fullmatch(key), key
        assert not EXCLUDED_KEYS["device-plugin"].fullmatch(key), key
    assert not EXCLUDED_KEYS["dra"].fullmatch("nvidia.com/gpu.count")
    assert EXCLUDED_KEYS["dra"].fullmatch("nvidia.com/gpu.replicas"), "documented for the plugin"
