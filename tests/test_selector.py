"""`gfd selector`: stanzas evaluated against real label sets with Kubernetes' matching rules."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from gfd.cli import cli
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.readers.simulate import simulate


def node_labels(machine: str, strategy: str = "none") -> dict[str, str]:
    sim = simulate(machine)
    options = LabelOptions(mig_strategy=strategy, sharing=sim.sharing or LabelOptions().sharing)
    return compute_labels(sim.snapshot, options).labels


def _integer(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_matches(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    """One NodeSelectorRequirement, as the scheduler evaluates it."""
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        have, want = _integer(labels.get(key, "")), int(values[0])
        if not present or have is None:
            return False
        return have > want if op == "Gt" else have < want
    raise AssertionError(op)


def matches(stanza: dict[str, Any], labels: dict[str, str]) -> bool:
    """nodeSelector: every pair equal; required node affinity: any term with all its
    expressions matching (terms are ORed, expressions ANDed)."""
    if "nodeSelector" in stanza:
        return all(labels.get(k) == v for k, v in stanza["nodeSelector"].items())
    terms = stanza["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    return any(all(requirement_matches(e, labels) for e in t["matchExpressions"]) for t in terms)


def selector(*args: str) -> tuple[int, dict[str, Any], str]:
    result = CliRunner().invoke(cli, ["selector", *args])
    return result.exit_code, (yaml.safe_load(result.stdout) or {}), result.stderr


def test_h100_with_40000_mib_matches_hgx_h100_and_not_t4() -> None:
    code, stanza, err = selector("--product", "H100", "--min-memory", "40000")
    assert code == 0, err
    assert matches(stanza, node_labels("hgx-h100"))
    assert not matches(stanza, node_labels("t4-time-sliced"))


@pytest.mark.parametrize("args, yes, no", [
    (["--product", "T4", "--shared"], ["t4-time-sliced"], ["hgx-h100"]),
    (["--product", "T4", "--dedicated"], [], ["t4-time-sliced"]),
    (["--family", "hopper"], ["hgx-h100", "h100-mig"], ["t4-time-sliced", "mixed-a100-a10"]),
    (["--min-compute", "8.6"], ["geforce-laptop", "hgx-h100"], ["t4-time-sliced",
                                                                 "mixed-a100-a10"]),
    (["--min-compute", "8.0"], ["mixed-a100-a10", "hgx-h100"], ["t4-time-sliced"]),
    (["--min-memory", "20000"], ["hgx-h100", "mixed-a100-a10"], ["t4-time-sliced",
                                                                  "geforce-laptop"]),
    (["--product", "A10"], [], ["mixed-a100-a10", "hgx-h100"]),
    (["--product", "A100"], ["mixed-a100-a10"], ["hgx-h100"]),
], ids=["shared-t4", "dedicated-t4", "hopper", "compute-8.6", "compute-8.0", "memory",
        "a10-not-primary", "a100"])
def test_selectors_match_the_machines_they_describe(args: list[str], yes: list[str],
                                                    no: list[str]) -> None:
    code, stanza, err = selector(*args)
    assert code == 0, err
    for machine in yes:
        assert matches(stanza, node_labels(machine)), machine
    for machine in no:
        assert not matches(stanza, node_labels(machine)), machine


def test_mig_profile_selects_nodes_offering_that_slice() -> None:
    code, stanza, _ = selector("--mig-profile", "3g.20gb")
    assert code == 0
    assert matches(stanza, node_labels("dgx-a100-mig-mixed", "mixed"))
    assert not matches(stanza, node_labels("dgx-a100-mig-mixed", "none"))
    assert not matches(stanza, node_labels("hgx-h100"))


def test_exact_values_give_a_plain_node_selector() -> None:
    code, stanza, _ = selector("--family", "hopper", "--dedicated")
    assert code == 0
    assert stanza == {"nodeSelector": {"nvidia.com/gpu.replicas": "1",
                                       "nvidia.com/gpu.family": "hopper"}}


def test_compat_label_set_uses_gfds_memory_label() -> None:
    _, stanza, _ = selector("--min-memory", "40000", "--label-set", "compat")
    keys = [e["key"] for t in stanza["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        for e in t["matchExpressions"]]
    assert keys == ["nvidia.com/gpu.memory"]


@pytest.mark.parametrize("args, reason", [
    (["--product", "H999"], "no known NVIDIA model"),
    (["--mig-profile", "big"], "not a MIG profile"),
    (["--family", "quantum"], "must be one of"),
    (["--min-compute", "eight"], "MAJOR.MINOR"),
    (["--min-memory", "0"], "positive"),
    (["--min-memory", "40000", "--form", "nodeSelector"], "need node affinity"),
    ([], "no constraint"),
])
def test_inexpressible_constraints_are_refused_with_the_reason(args: list[str],
                                                               reason: str) -> None:
    code, _, err = selector(*args)
    assert code == 2 and reason in err
