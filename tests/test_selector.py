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


# --------------------------------------------------------------------------- --dra

import re  # noqa: E402

from gfd.devices import published as _published  # noqa: E402
from gfd.errors import ConfigError  # noqa: E402
from gfd.readers.simulate import SIMULATIONS as _SIMULATIONS  # noqa: E402
from gfd.readers.simulate import simulate as _simulate  # noqa: E402
from gfd.selector import (  # noqa: E402
    Constraints,
    claim,
    dra_requirements,
    parse,
)


def _cel_exprs(c: Constraints) -> list[str]:
    template = claim(c)[0]
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    return [s["cel"]["expression"] for s in request["selectors"]]


def test_dra_product_a10_never_names_an_a100_and_a100_never_an_a10() -> None:
    a10 = parse(Constraints(product="A10"))
    assert [n for _, n in a10.models] == ["NVIDIA A10"]
    a100 = parse(Constraints(product="A100"))
    assert "NVIDIA A10" not in [n for _, n in a100.models]
    assert "NVIDIA A100 80GB PCIe" in [n for _, n in a100.models]
    assert _cel_exprs(Constraints(product="A10")) == [
        "device.attributes['gpu.nvidia.com'].productName in ['NVIDIA A10']"]


def test_dra_each_filter_becomes_the_drivers_cel() -> None:
    assert _cel_exprs(Constraints(min_memory=40000, family="hopper", min_compute="8.6")) == [
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40000Mi')) >= 0",
        "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'",
        "device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo("
        "semver('8.6.0')) >= 0",
    ]
    assert _cel_exprs(Constraints(mig_profile="1g.10gb.me")) == [
        "device.attributes['gpu.nvidia.com'].profile == '1g.10gb+me'"]
    assert _cel_exprs(Constraints(product="NVIDIA-Foo-X1.5")) == [
        "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches("
        "'^nvidia[- ]foo[- ]x1[.]5$')"]


def test_dra_the_claim_asks_the_drivers_class_for_count_devices() -> None:
    template, pod = claim(Constraints(mig_profile="3g.20gb"), count=2, name="half")
    request = template["spec"]["spec"]["devices"]["requests"][0]
    assert template["apiVersion"] == "resource.k8s.io/v1" and template["metadata"]["name"] == "half"
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com"
    assert request["exactly"]["count"] == 2
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "half"}]
    template, _ = claim(Constraints(product="H100"))
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"][
        "deviceClassName"] == "gpu.nvidia.com"


@pytest.mark.parametrize("c, kw, fragment", [
    (Constraints(), {}, "no constraint"),
    (Constraints(product="H100", shared=True), {}, "--shared/--dedicated"),
    (Constraints(mig_profile="1c.3g.20gb"), {}, "whole GPU instance"),
    (Constraints(family="fermi"), {}, "--family 'fermi'"),
    (Constraints(product="H100"), {"count": 0}, "--count 0"),
    (Constraints(product="H100"), {"name": "Not_A_Name"}, "--name"),
    (Constraints(min_compute="8"), {}, "MAJOR.MINOR"),
], ids=["nothing", "shared", "ci-profile", "old-family", "count", "name", "compute"])
def test_dra_filters_no_claim_can_express_are_one_line_errors(
        c: Constraints, kw: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        claim(c, **kw)


def _node_matches(labels: dict[str, str], terms: list[list[Any]]) -> bool:
    def ok(key: str, op: str, values: tuple[str, ...]) -> bool:
        if op == "Exists":
            return key in labels
        if key not in labels:
            return False
        if op == "In":
            return labels[key] in values
        return int(labels[key]) > int(values[0])  # Gt
    return any(all(ok(*r) for r in term) for term in terms)


def _dra_labels(machine: str) -> dict[str, str]:
    """The labels the machine gets under --resource-manager dra (the pipeline's dra rule)."""
    from dataclasses import replace

    from gfd.snapshot import ResourceManager
    sim = simulate(machine)
    snap = replace(sim.snapshot, resource_manager=ResourceManager(name="dra", evidence="test"))
    options = LabelOptions(sharing=sim.sharing or LabelOptions().sharing)
    return compute_labels(snap, options).labels


FILTERS = [Constraints(product="A100"), Constraints(product="A10"),
           Constraints(product="H100", min_memory=80000), Constraints(min_memory=30000),
           Constraints(min_compute="8.6"), Constraints(family="hopper"),
           Constraints(family="turing"), Constraints(mig_profile="1g.5gb"),
           Constraints(mig_profile="1g.10gb+me"), Constraints(product="A100", min_compute="8.6"),
           Constraints(product="GB200", min_compute="10.0")]


@pytest.mark.parametrize("c", FILTERS, ids=lambda c: ",".join(
    f"{k}={v}" for k, v in vars_of(c).items()))
def test_dra_node_affinity_keeps_every_simulated_node_that_has_a_matching_device(
        c: Constraints) -> None:
    """The affinity is a necessary condition: a node with a device the CEL describes is never
    excluded (checked with the devices gfd devices prints and the CEL's meaning)."""
    f = parse(c)
    terms = dra_requirements(f)
    for machine in sorted(_SIMULATIONS):
        devices = _published(_simulate(machine).snapshot)
        has = any(_describes(f, d) for d in devices)
        if has:
            assert _node_matches(_dra_labels(machine), terms), machine


def vars_of(c: Constraints) -> dict[str, Any]:
    return {k: getattr(c, k) for k in ("product", "min_memory", "family", "min_compute",
                                       "mig_profile") if getattr(c, k) not in ("", None)}


def _describes(f: Any, d: Any) -> bool:
    """What the CEL of f says about device d, evaluated in Python from its meaning."""
    if (d.type == "mig") != bool(f.mig_profile):
        return False
    if f.models and d.attribute("productName") not in [n for _, n in f.models]:
        return False
    if f.mig_profile and d.attribute("profile") != f.mig_profile:
        return False
    if f.min_memory is not None and d.capacity_of("memory") < f.min_memory * 2**20:
        return False
    from gfd.dra import FAMILY_ARCHITECTURES
    if f.family and d.attribute("architecture") != FAMILY_ARCHITECTURES[f.family]:
        return False
    if f.min_compute is not None:
        major, minor, _ = (int(x) for x in str(d.attribute("cudaComputeCapability")).split("."))
        if (major, minor) < f.min_compute:
            return False
    return True
