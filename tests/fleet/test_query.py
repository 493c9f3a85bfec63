"""Where a pod fits, as asked: the options' values and ``/fleet``'s query parameters parsed
by the selector's own parser, to the same value; what is no filter, or no value, refused in
one line naming it."""

from __future__ import annotations

import pytest

from gfd.errors import ConfigError
from gfd.fleet.query import PARAMETERS, from_query, parse_filters
from gfd.selector import Options, parse


def test_no_filter_is_no_question() -> None:
    assert parse_filters({"product": "", "count": 1, "shared": False, "min_memory": None,
                          "label_set": "extended", "feature_gates": ""}) is None
    assert from_query({}) is None
    assert from_query({"nodes": ["true"]}) is None  # not a filter: the caller's


def test_the_query_and_the_options_parse_to_the_selectors_one_value() -> None:
    asked = from_query({"product": ["H100"], "count": ["2"], "min-memory": ["40960"],
                        "dedicated": [""], "label-set": ["compat"]})
    assert asked is not None
    assert asked.filters == parse(Options(product="H100", count=2, min_memory=40960,
                                          dedicated=True))
    assert asked.label_set == "compat" and asked.gates == {}
    same = parse_filters({"product": "H100", "count": 2, "min_memory": 40960,
                          "dedicated": True, "label_set": "compat"})
    assert same == asked


def test_dra_takes_the_drivers_gates() -> None:
    asked = from_query({"dra": ["true"], "product": ["H100"],
                        "feature-gates": ["DynamicMIG=true"]})
    assert asked is not None and asked.filters.dra and asked.gates["DynamicMIG"] is True


@pytest.mark.parametrize("query, said", [
    ({"count": ["two"]}, "count=two: a whole number"),
    ({"shared": ["maybe"]}, "shared=maybe: true or false"),
    ({"label-set": ["all"]}, "label-set=all: one of compat, extended"),
    ({"count": ["1", "2"]}, "count: given 2 times"),
    ({"feature-gates": ["DynamicMIG=true"]}, "--feature-gates goes with --dra"),
    ({"product": ["H100"], "feature-gates": ["DynamicMIG=true"]},
     "--feature-gates goes with --dra"),
])
def test_a_value_that_is_not_one_is_one_line_naming_it(query: dict[str, list[str]],
                                                       said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        from_query(query)


def test_the_parameters_are_the_options_names() -> None:
    from gfd.cli_fleet import fleet_cmd

    options = {o.lstrip("-") for p in fleet_cmd.params for o in p.opts}
    assert set(PARAMETERS) <= options
