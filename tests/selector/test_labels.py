"""The selector's contract over the whole matrix: every simulated machine (and heterogeneous
variants) x MIG strategy x sharing config x label set x resource manager x a filter matrix; a
node its output admits never holds a unit of the requested resource that breaks a filter (the
truth from the device plugin's rules, tests/helpers/placement.py); every good node it leaves
out is of a kind ``labels.MISSED`` documents."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
from helpers import placement
from helpers.placement import Unit

from gfd.errors import ConfigError
from gfd.facts.naming import sanitise
from gfd.selector import Options, render
from gfd.selector.labels import MISSED

STRATEGIES = ("none", "single", "mixed")
LABEL_SETS = ("extended", "compat")
MANAGERS = ("device-plugin", "dra")


@dataclass(frozen=True)
class Node:
    machine: str
    strategy: str
    sharing: str
    label_set: str
    manager: str
    labels: dict[str, str]
    units: dict[str, list[Unit]]

    @property
    def fails_several(self) -> bool:
        return placement.fail_requests_greater_than_one(placement.SHARING[self.sharing])


@cache
def nodes() -> tuple[Node, ...]:
    out = []
    for (machine, snap), strategy, sharing, label_set, manager in itertools.product(
            placement.machines().items(), STRATEGIES, placement.SHARING, LABEL_SETS, MANAGERS):
        cfg = placement.SHARING[sharing]
        out.append(Node(machine, strategy, sharing, label_set, manager,
                        placement.node_labels(snap, strategy, cfg, label_set, manager),
                        placement.units(snap, strategy, cfg, manager)))
    return tuple(out)


def _sizes() -> list[int]:
    sizes = {u.memory_mib for n in nodes() for us in n.units.values() for u in us}
    return sorted({s + d for s in sizes for d in (0, 1)})


def filter_matrix() -> list[dict[str, Any]]:
    products = ["A100", "A10", "A100-80GB", "80GB-A100", "H100", "T4", "Tesla-T4-SHARED",
                "NVIDIA-A100-SXM4-40GB", "RTX-PRO-6000", "GB200", "L4", "GeForce-RTX-3060"]
    out: list[dict[str, Any]] = [{"product": p} for p in products]
    out += [{"min_memory": m} for m in _sizes()]
    out += [{"family": f} for f in ("ampere", "hopper", "turing", "ada-lovelace", "blackwell")]
    out += [{"min_compute": c} for c in ("7.5", "8.0", "8.6", "8.9", "9.0", "10.0")]
    out += [{"shared": True}, {"dedicated": True}, {"renamed": True}]
    profiles = ["1g.5gb", "3g.20gb", "1g.10gb.me", "3g.40gb", "7g.80gb", "2g.10gb"]
    out += [{"mig_profile": p} for p in profiles]
    out += [{"mig_profile": "1g.5gb", "min_memory": 4864}, {"mig_profile": "1g.5gb",
            "shared": True}, {"mig_profile": "3g.40gb", "dedicated": True},
            {"mig_profile": "1g.10gb.me", "product": "H100"}]
    for m in (1536, 1537, 4864, 4865, 20000, 40000, 40961, 80000):
        out += [{"min_memory": m, "shared": True}, {"min_memory": m, "dedicated": True},
                {"min_memory": m, "renamed": True}, {"min_memory": m, "product": "A100"}]
    out += [{"product": "A100", "min_compute": "8.0"}, {"product": "T4", "shared": True},
            {"product": "T4", "renamed": True}, {"family": "hopper", "dedicated": True},
            {"family": "hopper", "min_memory": 40000}, {"min_compute": "8.6", "shared": True},
            {"product": "A100", "count": 2}, {"min_memory": 4000, "count": 2},
            {"family": "ampere", "count": 2, "dedicated": True}]
    return out


def satisfies(unit: Unit, o: dict[str, Any]) -> bool:
    """What the options ask of one unit, read from the options alone."""
    product = o.get("product", "")
    if product:
        value = sanitise(product)
        if value.upper().endswith("-SHARED"):
            value = value[: -len("-SHARED")]
            if unit.replicas == 1:
                return False
        model = sanitise(unit.model)
        words = {w.lower() for w in value.split("-") if w}
        if model.lower() != value.lower() and not words <= {
                w.lower() for w in model.split("-") if w}:
            return False
    if "min_memory" in o and unit.memory_mib < o["min_memory"]:
        return False
    if o.get("family") and placement.family(unit.compute) != o["family"]:
        return False
    if o.get("min_compute"):
        major, minor = (int(x) for x in o["min_compute"].split("."))
        if unit.compute < (major, minor):
            return False
    if (o.get("shared") or o.get("renamed")) and unit.replicas == 1:
        return False
    if o.get("dedicated") and unit.replicas > 1:
        return False
    return not (o.get("mig_profile") and unit.profile != o["mig_profile"])


def _missed_kind(node: Node, o: dict[str, Any], resource: str) -> str:
    """Which documented kind a good node that was left out belongs to ("" when none)."""
    models = {u.model for us in node.units.values() for u in us}
    model_filter = any(k in o for k in ("product", "family", "min_compute")) or (
        "min_memory" in o and (node.sharing.startswith("mps") or "mig_profile" in o))
    if len(models) > 1 and model_filter:
        return MISSED[0]
    if node.labels.get("nvidia.com/gpu.replicas") == "0" and (
            o.get("shared") or o.get("dedicated") or o.get("renamed")
            or o.get("count", 1) > 1):
        return MISSED[2]
    if not node.labels and node.sharing.startswith("mps"):
        return MISSED[4]
    if node.manager == "dra" and (o.get("dedicated") or o.get("count", 1) > 1):
        return MISSED[6]
    if o.get("count", 1) > 1 and any(u.replicas > 1 for u in node.units.get(resource, [])):
        return MISSED[5]
    return ""


def test_no_placement_breaks_a_filter_and_every_miss_is_documented() -> None:
    wrong: list[str] = []
    undocumented: list[str] = []
    counts: Counter[str] = Counter()
    for o, label_set, form in itertools.product(filter_matrix(), LABEL_SETS,
                                                ("auto", "affinity")):
        try:
            out = render(Options(**o), label_set=label_set, form=form)
        except ConfigError:
            counts["refused"] += 1
            continue
        spec = out.documents[0]
        ((resource, count),) = spec["containers"][0]["resources"]["limits"].items()
        for node in nodes():
            if node.label_set != label_set:
                continue
            have = node.units.get(resource, [])
            good = len(have) >= count and all(satisfies(u, o) for u in have) and not (
                count > 1 and node.fails_several and any(u.replicas > 1 for u in have))
            where = f"{o} {label_set}/{form} on {node.machine}/{node.strategy}/{node.sharing}/" \
                    f"{node.manager} requesting {count} {resource}"
            counts["placements"] += 1
            if placement.admits(spec, node.labels):
                if len(have) >= count and not good:
                    wrong.append(where)
                counts["admitted"] += 1
            elif good:
                counts["missed"] += 1
                if not _missed_kind(node, o, resource):
                    undocumented.append(where)
    assert counts["placements"] > 20000, counts
    assert not wrong, f"{len(wrong)} wrong placements, e.g.\n" + "\n".join(wrong[:15])
    assert not undocumented, (f"{len(undocumented)} undocumented misses, e.g.\n"
                              + "\n".join(undocumented[:15]))


def test_every_missed_kind_is_documented() -> None:
    """docs/selector.md lists each kind of good node the selector leaves out, word for word,
    and `gfd selector --help` points there."""
    from click.testing import CliRunner
    from helpers.paths import ROOT

    from gfd.cli import cli

    text = (ROOT / "docs" / "selector.md").read_text()
    for kind in MISSED:
        assert f"- {kind[0].upper()}{kind[1:]}." in text, kind
    help_text = CliRunner().invoke(cli, ["selector", "--help"]).output
    assert "docs/selector.md" in " ".join(help_text.split())


@pytest.mark.parametrize("op, values, labels, expected", [
    ("In", ["a", "b"], {"k": "b"}, True), ("In", ["a"], {}, False),
    ("NotIn", ["a"], {}, True), ("NotIn", ["a"], {"k": "a"}, False),
    ("Exists", [], {"k": ""}, True), ("DoesNotExist", [], {"k": "x"}, False),
    ("Gt", ["5"], {"k": "6"}, True), ("Gt", ["5"], {"k": "5"}, False),
    ("Gt", ["5"], {"k": "6.0"}, False), ("Gt", ["5"], {}, False),
    ("Lt", ["5"], {"k": "-3"}, True), ("Lt", ["5"], {"k": "x"}, False),
], ids=lambda v: str(v))
def test_the_matcher_reads_requirements_as_the_scheduler_does(
        op: str, values: list[str], labels: dict[str, str], expected: bool) -> None:
    """Kubernetes' labels.Requirement: NotIn and DoesNotExist hold for a missing key; Gt and
    Lt need an integer value (tests/realapi/test_selector_scheduling.py checks the same
    matcher against kube-scheduler itself)."""
    expr = {"key": "k", "operator": op, **({"values": values} if values else {})}
    assert placement.requirement_matches(expr, labels) is expected
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [expr]},
                              {"matchExpressions": [{"key": "other", "operator": "Exists"}]}]}}}}
    assert placement.admits(spec, labels) is expected  # terms OR-ed
    assert placement.admits(spec, {**labels, "other": "1"})


# TaintToleration (kube-scheduler) refuses a node whose NoSchedule/NoExecute taint the pod does
# not tolerate; GPU nodes are commonly tainted nvidia.com/gpu, and nothing adds the toleration
# for a pod as printed: the ExtendedResourceToleration admission plugin is off by default
# (pkg/kubeapiserver/options/plugins.go, DefaultOffAdmissionPlugins). So `gfd selector`
# prints it with every stanza.

STANZAS = [({"product": "H100"}, "auto", "extended"), ({"dedicated": True}, "nodeSelector",
                                                       "extended"),
           ({"mig_profile": "1g.10gb", "count": 2}, "affinity", "extended"),
           ({"shared": True}, "auto", "compat"), ({"min_memory": 40000}, "auto", "extended")]


@pytest.mark.parametrize("o, form, label_set", STANZAS, ids=[str(s[0]) for s in STANZAS])
def test_every_stanza_tolerates_the_gpu_taint(o: dict[str, Any], form: str,
                                              label_set: str) -> None:
    (stanza,) = render(Options(**o), form=form, label_set=label_set).documents
    assert stanza["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
