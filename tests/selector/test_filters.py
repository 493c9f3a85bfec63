"""One parser: the options become one Filters value; contradictions and filters no GPU can meet
are refused in one line naming the fix; what was resolved loosely or narrowed is said."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gfd.cli import cli
from gfd.errors import ConfigError
from gfd.facts.family import FAMILIES, family
from gfd.selector import Options, parse
from gfd.selector.filters import FAMILY_COMPUTE


@pytest.mark.parametrize("kw, fragment", [
    ({"shared": True, "dedicated": True}, "--shared and --dedicated contradict"),
    ({"renamed": True, "dedicated": True}, "contradicts --dedicated"),
    ({"product": "A100", "family": "hopper"}, "no such model is hopper"),
    ({"family": "hopper", "min_compute": "10.0"}, "at most 9.99"),
    ({"product": "T4", "min_compute": "8.0"}, "no such GPU has that compute capability"),
    ({"family": "turing", "mig_profile": "1g.5gb"}, "GPUs have no MIG"),
    ({"mig_profile": "1g.5gb", "min_memory": 6000}, "holds at most 5120 MiB"),
    ({"product": "Tesla-T4-SHARED", "dedicated": True}, "contradicts --dedicated"),
    ({"product": "Tesla-T4-SHARED", "renamed": True}, "carries no -SHARED"),
    ({"product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "mig_profile": "2g.10gb"}, "pass one"),
    ({"dra": True, "name": "", "product": "A100"}, "--name ''"),
    ({"dra": True, "product": "A100", "shared": True}, "leave them out with --dra"),
    ({"dra": True, "family": "fermi"}, "--family 'fermi': with --dra"),
    ({"dra": True, "mig_profile": "1c.3g.20gb"}, "whole GPU instance"),
    ({"name": "x", "product": "A100"}, "--name goes with --dra"),
    ({"count": 2, "shared": True}, "ask for 1"),
    ({"count": 0, "product": "A100"}, "--count 0"),
    ({}, "no constraint"),
    ({"mig_profile": "big"}, "not a MIG profile"),
    ({"family": "quantum"}, "must be one of"),
    ({"min_compute": "eight"}, "MAJOR.MINOR"),
    ({"min_memory": 0}, "positive"),
], ids=lambda v: str(v)[:40])
def test_contradictions_and_impossible_filters_are_refused(kw: dict[str, Any],
                                                           fragment: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        parse(Options(**kw))


def test_one_value_holds_every_filter() -> None:
    f = parse(Options(product="Tesla-T4-SHARED"))
    assert f.shared is True and f.product and f.product.values == ("Tesla-T4",)
    assert f.resource == "nvidia.com/gpu"
    f = parse(Options(product="NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"))
    assert f.mig_profile == "1g.5gb" and f.resource == "nvidia.com/mig-1g.5gb"
    f = parse(Options(mig_profile="1g.10gb+me", renamed=True))
    assert f.mig_profile == "1g.10gb.me" and f.driver_profile == "1g.10gb+me"
    assert f.resource == "nvidia.com/mig-1g.10gb.me.shared" and f.shared is True
    assert parse(Options(min_compute="8.6")).min_compute == (8, 6)
    # go-nvlib's negative attribute keeps its '-'; only '+' is spelt '.' in resource names
    f = parse(Options(mig_profile="1g.10gb-me"))
    assert f.mig_profile == "1g.10gb-me" and f.driver_profile == "1g.10gb-me"
    f = parse(Options(mig_profile="1g.20gb+me.all"))
    assert f.mig_profile == "1g.20gb.me.all" and f.driver_profile == "1g.20gb+me.all"


def test_several_units_are_narrowed_to_dedicated_with_a_line() -> None:
    f = parse(Options(product="A100", count=2))
    assert f.shared is False and f.count == 2
    assert any(w.startswith("narrowed: --count 2") for w in f.warnings)


def test_an_unknown_product_is_a_warning_not_a_silent_miss() -> None:
    f = parse(Options(product="H999"))
    assert f.product and f.product.values == ("H999",)
    assert len(f.warnings) == 1 and "no GPU model gfd knows" in f.warnings[0]


def run(*args: str) -> tuple[int, list[Any], str]:
    result = CliRunner().invoke(cli, ["selector", *args])
    return result.exit_code, list(yaml.safe_load_all(result.stdout)), result.stderr


def test_the_command_prints_placement_and_the_request_together() -> None:
    """With the toleration of ``nvidia.com/gpu``, the taint GPU nodes commonly carry: the
    ``ExtendedResourceToleration`` admission plugin that would add it is off by default
    (kube-apiserver's default plugins), so a pod as printed would bind no tainted node."""
    code, docs, err = run("--family", "hopper", "--dedicated")
    assert code == 0, err
    assert docs == [{
        "nodeSelector": {"nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.family": "hopper",
                         "nvidia.com/gpu.heterogeneous": "false"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "containers": [{"name": "gpu", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}]
    code, docs, _ = run("--mig-profile", "3g.20gb", "--renamed")
    assert docs[0]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-3g.20gb.shared": 1}


def test_the_command_refuses_in_one_line_with_exit_2() -> None:
    code, _, err = run("--shared", "--dedicated")
    assert code == 2 and len(err.strip().splitlines()) == 1
    code, _, err = run("--product", "H999")
    assert code == 0 and "warning: --product 'H999'" in err
    code, _, err = run("--product", "A100", "--feature-gates", "DynamicMIG=true")
    assert code == 2 and "go with --dra" in err
    code, _, err = run("--min-memory", "40000", "--form", "nodeSelector")
    assert code == 2 and "need node affinity" in err
    code, _, err = run("--min-memory", "40000", "--label-set", "compat")
    assert code == 2 and "--label-set compat" in err


def test_the_compute_range_of_each_family_is_the_family_tables() -> None:
    """FAMILY_COMPUTE (what --family and --min-compute are cross-checked with) agrees with the
    labelers' family table for every compute capability."""
    assert set(FAMILY_COMPUTE) == set(FAMILIES)
    for major in range(1, 16):
        for minor in range(0, 10):
            name = family(major, minor)
            if name != "undefined":
                low, high = FAMILY_COMPUTE[name]
                assert low <= (major, minor) <= high, (major, minor, name)
