"""``gfd selector --dra``: the claim's CEL over the driver's attributes (checked against the
devices ``gfd devices`` projects, with the CEL read by a small evaluator of the forms it writes),
the gates' attribute table, the complete Pod, and node affinity that never leaves out a node
with a matching device, in either label set."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from helpers import placement

from gfd import dra
from gfd.devices import Device, published
from gfd.errors import ConfigError
from gfd.facts.naming import sanitise
from gfd.selector import Options, parse, render
from gfd.selector.claims import cel, parse_gates, requirements

_MATCH = re.compile(r"device\.attributes\['gpu\.nvidia\.com'\]\.productName\.lowerAscii\(\)"
                    r"\.matches\('((?:[^'\\]|\\.)*)'\)")
_EQ = re.compile(r"device\.attributes\['gpu\.nvidia\.com'\]\.(\w+) == '([^']*)'")
_QTY = re.compile(r"device\.capacity\['gpu\.nvidia\.com'\]\.(\w+)\.compareTo\(quantity\("
                  r"'([0-9]+)Mi'\)\) >= 0")
_VER = re.compile(r"device\.attributes\['gpu\.nvidia\.com'\]\.(\w+)\.compareTo\(semver\("
                  r"'([0-9]+)\.([0-9]+)\.0'\)\) >= 0")


def evaluate(expression: str, d: Device) -> bool:
    """The meaning of the CEL forms the selector writes (RE2 and Python's re agree on them)."""
    ok = True
    for clause in expression.split(" && "):
        if m := _MATCH.fullmatch(clause):
            pattern = m.group(1).replace("\\\\", "\\")
            ok &= re.search(pattern, str(d.attribute("productName")).lower()) is not None
        elif m := _EQ.fullmatch(clause):
            ok &= d.attribute(m.group(1)) == m.group(2)
        elif m := _QTY.fullmatch(clause):
            have = d.capacity_of(m.group(1))
            ok &= have is not None and have >= int(m.group(2)) * 2**20
        elif m := _VER.fullmatch(clause):
            have = tuple(int(x) for x in str(d.attribute(m.group(1))).split(".")[:2])
            ok &= have >= (int(m.group(2)), int(m.group(3)))
        else:
            raise AssertionError(f"the evaluator does not know this form: {clause}")
    return ok


def truth(o: dict[str, Any], d: Device) -> bool:
    """What the options ask of a device, from its attributes and the options alone."""
    if d.type != ("mig" if o.get("mig_profile") else "gpu"):
        return False
    if o.get("product"):
        wanted = {w.lower() for w in sanitise(o["product"]).split("-") if w}
        have = {w.lower() for w in sanitise(str(d.attribute("productName"))).split("-") if w}
        if not wanted <= have:
            return False
    if "min_memory" in o and (d.capacity_of("memory") or 0) < o["min_memory"] * 2**20:
        return False
    cc = tuple(int(x) for x in str(d.attribute("cudaComputeCapability")).split(".")[:2])
    if o.get("family") and placement.family((cc[0], cc[1])) != o["family"]:
        return False
    if o.get("min_compute") and cc < tuple(int(x) for x in o["min_compute"].split(".")):
        return False
    return not (o.get("mig_profile")
                and d.attribute("profile") != o["mig_profile"].replace(".me", "+me"))


FILTERS: list[dict[str, Any]] = [
    {"product": "A100"}, {"product": "A10"}, {"product": "A100-80GB"}, {"product": "H100"},
    {"product": "NVIDIA-A100-SXM4-40GB"}, {"product": "GB200", "min_compute": "10.0"},
    {"min_memory": 30000}, {"min_memory": 4864}, {"min_memory": 4865}, {"min_memory": 81559},
    {"min_compute": "8.6"}, {"family": "hopper"}, {"family": "turing"},
    {"family": "ampere", "min_memory": 40000}, {"mig_profile": "1g.5gb"},
    {"mig_profile": "1g.10gb.me"}, {"mig_profile": "3g.40gb", "min_memory": 40000},
    {"mig_profile": "3g.20gb", "product": "A100"}, {"product": "A100", "min_compute": "8.6"},
]


@pytest.mark.parametrize("o", FILTERS, ids=str)
def test_the_claim_selects_only_devices_that_meet_the_filters(o: dict[str, Any]) -> None:
    f = parse(Options(dra=True, **o))
    expressions = cel(f)
    for machine, snap in placement.machines().items():
        for d in published(snap):
            if d.type != ("mig" if f.mig_profile else "gpu"):
                continue
            selected = all(evaluate(e, d) for e in expressions)
            assert not selected or truth(o, d), (machine, d.name, expressions)
            assert selected or not truth(o, d), ("missed", machine, d.name, expressions)


@pytest.mark.parametrize("o, label_set", list(itertools.product(FILTERS, ("extended", "compat"))),
                         ids=str)
def test_node_affinity_never_leaves_out_a_node_with_a_matching_device(
        o: dict[str, Any], label_set: str) -> None:
    f = parse(Options(dra=True, **o))
    pod = render(Options(dra=True, **o), label_set=label_set).documents[1]
    for machine, snap in placement.machines().items():
        labels = placement.node_labels(snap, "none", None, label_set, "dra")
        if any(truth(o, d) for d in published(snap)):
            assert placement.admits(pod["spec"], labels), (machine, requirements(f, label_set))


def test_each_filter_becomes_the_drivers_cel() -> None:
    f = parse(Options(dra=True, min_memory=40000, family="hopper", min_compute="8.6"))
    assert cel(f) == [
        "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40000Mi')) >= 0",
        "device.attributes['gpu.nvidia.com'].architecture == 'Hopper'",
        "device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo("
        "semver('8.6.0')) >= 0"]
    assert cel(parse(Options(dra=True, mig_profile="1g.10gb.me"))) == [
        "device.attributes['gpu.nvidia.com'].profile == '1g.10gb+me'"]
    # words by CEL's string functions, not a list of names: any H100 the driver names matches
    (words,) = cel(parse(Options(dra=True, product="H100-NVL")))
    assert " in [" not in words and words.count(".matches(") == 2
    pattern = re.findall(r"matches\('([^']*)'\)", words)
    for name, hit in (("NVIDIA H100 NVL", True), ("NVIDIA H100-NVL-X", True),
                      ("NVIDIA H100 PCIe", False), ("NVIDIA H100L NVL", False)):
        assert all(re.search(p, name.lower()) for p in pattern) is hit, name


def test_the_output_is_a_template_and_a_complete_pod() -> None:
    template, pod = render(Options(dra=True, mig_profile="3g.20gb", count=2,
                                   name="half")).documents
    assert (template["apiVersion"], template["kind"]) == ("resource.k8s.io/v1",
                                                          "ResourceClaimTemplate")
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == dra.MIG_CLASS and request["count"] == 2
    assert (pod["apiVersion"], pod["kind"]) == ("v1", "Pod")
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "half"}]
    (container,) = pod["spec"]["containers"]
    assert container["image"] and container["resources"] == {"claims": [{"name": "gpu"}]}


def test_the_compat_label_set_places_by_compat_labels_only() -> None:
    pod = render(Options(dra=True, product="A100", min_memory=40000),
                 label_set="compat").documents[1]
    keys = {e["key"] for t in pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        for e in t["matchExpressions"]}
    assert keys == {"nvidia.com/gpu.present"}


def test_the_gates_decide_which_attributes_exist() -> None:
    dynamic = parse_gates("DynamicMIG=true,PassthroughSupport=false")
    assert dynamic[dra.DYNAMIC_MIG] and not dynamic[dra.PASSTHROUGH_SUPPORT]
    with pytest.raises(ConfigError, match="--feature-gates: unrecognized feature gate"):
        parse_gates("DynamicMig=true")
    with pytest.raises(ConfigError, match="mutually exclusive with PassthroughSupport"):
        parse_gates("DynamicMIG=true,PassthroughSupport=true")
    mig = parse(Options(dra=True, mig_profile="1g.10gb"))
    assert cel(mig, uuid="MIG-abc")[-1].endswith(".uuid == 'MIG-abc'")
    with pytest.raises(ConfigError, match="no uuid attribute on mig devices under DynamicMIG"):
        cel(mig, dynamic, uuid="MIG-abc")
    # the parent GPU still pins a DynamicMIG device
    assert cel(mig, dynamic, uuid="GPU-abc")[-1].endswith(".parentUUID == 'GPU-abc'")
    # every filter the selector has is expressible under every gate the driver accepts
    for o in FILTERS:
        assert cel(parse(Options(dra=True, **o)), dynamic) == cel(parse(Options(dra=True, **o)))
    # DynamicMIG devices exist before MIG is enabled: no mig.enabled.count in the affinity
    keys = {r[0] for t in requirements(mig, gates=dynamic) for r in t}
    assert "nvidia.com/mig.enabled.count" not in keys
    assert "nvidia.com/mig.enabled.count" in {r[0] for t in requirements(mig) for r in t}


# TaintToleration refuses a node with a NoSchedule/NoExecute taint the pod does not tolerate;
# a claim's pod never gets the nvidia.com/gpu toleration from ExtendedResourceToleration (off
# by default, pkg/kubeapiserver/options/plugins.go, and it only reads extended resources).


@pytest.mark.parametrize("o", [{"product": "H100"}, {"mig_profile": "3g.20gb", "count": 2},
                               {"family": "hopper", "min_memory": 40000}], ids=str)
@pytest.mark.parametrize("label_set", ["extended", "compat"])
def test_the_example_pod_tolerates_the_gpu_taint(o: dict[str, Any], label_set: str) -> None:
    if label_set == "compat" and "family" in o:
        o = {"min_memory": o["min_memory"]}
    pod = render(Options(dra=True, **o), label_set=label_set).documents[1]
    assert pod["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
