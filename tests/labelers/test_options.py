"""LabelOptions: everything besides the snapshot that decides labels, with GFD's defaults, and
the strategy and label-set names the settings table offers."""

from __future__ import annotations

import pytest

from gfd.config import BY_NAME
from gfd.labelers.options import LABEL_SETS, MIG_STRATEGIES, LabelOptions
from gfd.sharing import Sharing


def test_the_defaults_are_no_mig_strategy_no_sharing_the_extended_set_and_no_timestamp() -> None:
    options = LabelOptions()
    assert (options.mig_strategy, options.sharing, options.label_set, options.timestamp,
            options.accelerator_label) == ("none", Sharing(), "extended", None, None)


@pytest.mark.parametrize("label_set, extended", [("extended", True), ("compat", False)])
def test_extended_follows_the_label_set(label_set: str, extended: bool) -> None:
    assert LabelOptions(label_set=label_set).extended is extended


def test_the_names_are_gfds_strategies_and_gfds_two_sets() -> None:
    assert MIG_STRATEGIES == ("none", "single", "mixed")
    assert LABEL_SETS == ("compat", "extended")


@pytest.mark.parametrize("setting, names", [("mig_strategy", MIG_STRATEGIES),
                                            ("label_set", LABEL_SETS)])
def test_the_settings_table_offers_exactly_these_names(setting: str,
                                                       names: tuple[str, ...]) -> None:
    assert BY_NAME[setting].spec.kind.choices == names
