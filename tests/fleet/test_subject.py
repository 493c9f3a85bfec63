"""The pod `gfd why` explains, read from a Pod or from a workload's pod template: named after
the workload, in its namespace (else the one given, else ``default``); its GPU requests per
container (sidecars apart from init containers); its claims, by name or from a template
(the claim made from it, as ``status.resourceClaimStatuses`` records it); what the scheduler
checks that gfd does not (host ports, persistent volumes, topology spread, required pod
affinity); and a kind that makes no pod refused in one line."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.whyobjects import GPU, pod, request, template

from gfd.errors import ConfigError
from gfd.fleet.model import Malformed
from gfd.fleet.subject import PodClaim, claim_from, from_pod, read, with_manifest


def workload(kind: str, template_of_pod: dict[str, Any]) -> dict[str, Any]:
    spec = {"metadata": {"labels": {"app": "train"}}, "spec": template_of_pod["spec"]}
    body: dict[str, Any] = {"template": spec}
    if kind == "CronJob":
        body = {"jobTemplate": {"spec": {"template": spec}}}
    return {"apiVersion": "apps/v1", "kind": kind,
            "metadata": {"name": "train", "namespace": "research"}, "spec": body}


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet",
                                  "Job", "CronJob"])
def test_a_workloads_pod_is_named_after_it_in_its_namespace(kind: str) -> None:
    subject = read(workload(kind, pod("ignored", limits={GPU: 2})))
    assert (subject.kind, subject.namespace, subject.name) == (kind, "research", "train")
    assert subject.pod.requests == {GPU: 2}
    assert subject.spec["containers"][0]["name"] == "main"


def test_a_pod_without_a_namespace_takes_the_one_given_else_default() -> None:
    raw = pod("p")
    del raw["metadata"]["namespace"]
    assert read(raw, namespace="team").namespace == "team"
    assert read(raw).namespace == "default"


def test_each_containers_gpus_are_kept_with_its_kind() -> None:
    subject = read(pod("p", limits={GPU: 4}, init=[({GPU: 1}, True), ({GPU: 6}, False)]))
    assert [(c.name, c.kind, c.gpu) for c in subject.containers] == [
        ("init-0", "sidecar", {GPU: 1}), ("init-1", "init", {GPU: 6}),
        ("main", "container", {GPU: 4})]
    assert subject.pod.requests == {GPU: 7}


def test_claims_are_named_or_made_from_templates() -> None:
    subject = read(pod("p", claims=["mine"], templates=["t"], made={"t": "p-t-x1y2z"}))
    assert subject.pod_claims == (PodClaim(name="mine", claim="mine"),
                                  PodClaim(name="t", claim="p-t-x1y2z", template="t"))
    assert read(pod("p", templates=["t"])).pod_claims == (PodClaim(name="t", template="t"),)


def test_what_the_scheduler_checks_and_gfd_cannot_see_is_named() -> None:
    raw = pod("p", limits={GPU: 1}, extra={
        "volumes": [{"name": "cache", "emptyDir": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        "topologySpreadConstraints": [{"topologyKey": "zone", "maxSkew": 1,
                                       "whenUnsatisfiable": "DoNotSchedule"},
                                      {"topologyKey": "rack", "maxSkew": 1,
                                       "whenUnsatisfiable": "ScheduleAnyway"}],
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname"}]}}})
    raw["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    assert read(raw).not_judged == (
        ("NodePorts", "host port 8080/TCP"),
        ("VolumeRestrictions", "volumes data (binding, limits, zones)"),
        ("PodTopologySpread", "topology spread over zone"),
        ("InterPodAffinity", "required podAntiAffinity"))


def test_a_kind_that_makes_no_pod_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"ConfigMap settings: not a Pod or a workload"):
        read({"kind": "ConfigMap", "metadata": {"name": "settings"}})
    with pytest.raises(ConfigError, match=r"no pod template at spec\.template"):
        read({"kind": "Deployment", "metadata": {"name": "d"}, "spec": {}})


def test_a_field_of_the_wrong_type_is_malformed() -> None:
    raw = pod("p")
    raw["spec"]["tolerations"] = "all"
    with pytest.raises(Malformed):
        read(raw)


def test_a_template_makes_an_unallocated_claim_of_its_spec() -> None:
    made = claim_from(template("t", request(count=3)), "ml", "p-t")
    assert (made.namespace, made.name) == ("ml", "p-t")
    assert [r.count for r in made.requests] == [3]


def test_a_changed_manifest_is_read_again_with_the_changed_objects_standing_for_the_given() \
        -> None:
    subject = read(pod("p", templates=["t"]), given=[template("t", request(count=9))])
    changed = with_manifest(subject, subject.manifest, [template("t", request(count=2))])
    raw = changed.given[("ResourceClaimTemplate", "t")]
    assert raw["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2


def test_a_pod_of_the_fleet_is_its_values_and_its_claims() -> None:
    subject = read(pod("p", claims=["c"]))
    held = from_pod(subject.pod)
    assert held.pod_claims == (PodClaim(name="c", claim="c"),) and held.manifest == {}
