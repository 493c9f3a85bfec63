"""A pod's request as the scheduler computes it: ``PodRequests`` /
``aggregateContainerResourcesByFn`` in kubernetes
``staging/src/k8s.io/component-helpers/resource/helpers.go``.

- the regular containers' requests are summed;
- ``InitContainerUse(i) = sum(resources of restartable init containers with index < i) +
  resources of the i-th init container`` (KEP-753); a restartable init container (a sidecar,
  ``restartPolicy: Always``) also adds to the regular containers' sum, and its own use is
  every sidecar up to and including it;
- the pod's request is the larger of that sum and the largest ``InitContainerUse``, plus
  ``spec.overhead``; pod-level ``spec.resources`` never apply to extended resources
  (``IsSupportedPodLevelResource``: CPU, memory, hugepages);
- the API server sets a missing request from its limit (for extended resources they may not
  differ), so a limit stands in for a missing request.

The expected values below are worked out by hand from those rules."""

from __future__ import annotations

from typing import Any

import pytest

from gfd.fleet.requests import RequestError, pod_requests

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-1g.10gb"


def c(name: str, limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None,
      *, sidecar: bool = False) -> dict[str, Any]:
    """A container with these limits and requests (and ``restartPolicy: Always`` for a
    sidecar)."""
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = {k: str(v) for k, v in limits.items()}
    if requests is not None:
        resources["requests"] = {k: str(v) for k, v in requests.items()}
    out: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/cuda:12.4.0-base",
                           "resources": resources}
    if sidecar:
        out["restartPolicy"] = "Always"
    return out


def spec(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (),
         **more: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"containers": list(containers), **more}
    if init:
        out["initContainers"] = list(init)
    return out


CASES = [
    ("one container's limit stands in for its missing request",
     spec(c("main", {GPU: 2})), {GPU: 2}),
    ("a request given beside its limit is the request",
     spec(c("main", {GPU: 2}, {GPU: 2})), {GPU: 2}),
    ("a request given without a limit is the request",
     spec(c("main", requests={GPU: 1})), {GPU: 1}),
    ("the regular containers' requests are summed",
     spec(c("a", {GPU: 1}), c("b", {GPU: 2}), c("c", {})), {GPU: 3}),
    ("each resource is summed on its own",
     spec(c("a", {GPU: 1}), c("b", {MIG: 2}), c("d", {MIG: 1})), {GPU: 1, MIG: 3}),
    ("an init container larger than the containers' sum sets the request",
     spec(c("main", {GPU: 1}), c("side", {GPU: 1}), init=(c("warm", {GPU: 4}),)), {GPU: 4}),
    ("init containers run one at a time: the largest counts, not their sum",
     spec(c("main", {GPU: 2}), init=(c("i1", {GPU: 1}), c("i2", {GPU: 3}))), {GPU: 3}),
    ("an init container smaller than the containers' sum changes nothing",
     spec(c("main", {GPU: 4}), init=(c("i1", {GPU: 2}),)), {GPU: 4}),
    ("an init-only resource is still requested",
     spec(c("main", {GPU: 1}), init=(c("i1", {MIG: 2}),)), {GPU: 1, MIG: 2}),
    # KEP-753: a sidecar keeps running, so it adds to the regular containers' sum
    ("a sidecar adds to the containers' sum",
     spec(c("main", {GPU: 2}), init=(c("proxy", {GPU: 1}, sidecar=True),)), {GPU: 3}),
    # InitContainerUse(0) = 3 (no sidecar before it); sum = 1 + 1 = 2 -> 3
    ("an init container before a sidecar does not include it",
     spec(c("main", {GPU: 1}), init=(c("i1", {GPU: 3}), c("s", {GPU: 1}, sidecar=True))),
     {GPU: 3}),
    # InitContainerUse(1) = 1 (sidecar) + 3 = 4; sum = 1 + 1 = 2 -> 4
    ("an init container after a sidecar runs beside it",
     spec(c("main", {GPU: 1}), init=(c("s", {GPU: 1}, sidecar=True), c("i1", {GPU: 3}))),
     {GPU: 4}),
    # uses: s1 -> 2, s2 -> 3, i1 -> 2 + 1 + 2 = 5; sum = 1 + 2 + 1 = 4 -> 5
    ("every sidecar started before an init container adds to its use",
     spec(c("main", {GPU: 1}), init=(c("s1", {GPU: 2}, sidecar=True),
                                     c("s2", {GPU: 1}, sidecar=True), c("i1", {GPU: 2}))),
     {GPU: 5}),
    # uses: i0 -> 5, s -> 1, i1 -> 1 + 1 = 2; sum = 2 + 1 = 3 -> 5
    ("the largest use wins wherever it comes in the order",
     spec(c("main", {GPU: 2}), init=(c("i0", {GPU: 5}), c("s", {GPU: 1}, sidecar=True),
                                     c("i1", {GPU: 1}))), {GPU: 5}),
    # uses: s1 -> 1, i1 -> 1 + 1 = 2, s2 -> 1 + 2 = 3; sum = 1 + 1 + 2 = 4 -> 4
    ("sidecars on both sides of an init container: the sum of all of them with the "
     "containers can win", spec(c("main", {GPU: 1}), init=(
         c("s1", {GPU: 1}, sidecar=True), c("i1", {GPU: 1}), c("s2", {GPU: 2}, sidecar=True))),
     {GPU: 4}),
    ("restartPolicy other than Always is an ordinary init container",
     spec(c("main", {GPU: 1}), init=(c("i", {GPU: 1}) | {"restartPolicy": "OnFailure"},)),
     {GPU: 1}),
    ("overhead is added to the pod's request",
     spec(c("main", {GPU: 1}), overhead={GPU: "1"}), {GPU: 2}),
    ("overhead is added after the init-container maximum",
     spec(c("main", {GPU: 1}), init=(c("i", {GPU: 3}),), overhead={GPU: "1"}), {GPU: 4}),
    ("pod-level resources do not apply to extended resources",
     spec(c("main", {GPU: 1}), resources={"requests": {GPU: "4"}, "limits": {GPU: "4"}}),
     {GPU: 1}),
    ("quantities are read as quantities",
     spec(c("a", {GPU: "1e0"}), c("b", {GPU: "2"}), c("d", {GPU: "+1"})), {GPU: 4}),
    ("a pod asking for nothing asks for nothing", spec(c("main", {})), {}),
    ("a zero request is no request", spec(c("main", {GPU: 0})), {}),
]


@pytest.mark.parametrize("pod_spec, expected", [(s, e) for _, s, e in CASES],
                         ids=[n for n, _, _ in CASES])
def test_the_pod_requests_what_the_scheduler_computes(pod_spec: dict[str, Any],
                                                       expected: dict[str, int]) -> None:
    got = {k: v for k, v in pod_requests(pod_spec).items() if k in (GPU, MIG)}
    assert got == expected


SKIPS = [
    ("a skipped pair leaves that container's request out",
     spec(c("main", {GPU: 2}), c("side", {GPU: 1})), {("main", GPU)}, {GPU: 1}),
    ("a skipped pair leaves the container's other resources in",
     spec(c("main", {GPU: 2, MIG: 1})), {("main", GPU)}, {MIG: 1}),
    ("a pair names its container: the same resource elsewhere stays",
     spec(c("main", {GPU: 2}), init=(c("i", {GPU: 3}),)), {("main", GPU)}, {GPU: 3}),
    ("an init container's pair is skipped too",
     spec(c("main", {GPU: 2}), init=(c("i", {GPU: 3}),)), {("i", GPU)}, {GPU: 2}),
    ("every request skipped: nothing asked",
     spec(c("main", {GPU: 2})), {("main", GPU)}, {}),
]


@pytest.mark.parametrize("pod_spec, skip, expected", [(s, k, e) for _, s, k, e in SKIPS],
                         ids=[n for n, _, _, _ in SKIPS])
def test_skipped_pairs_are_what_a_dra_claim_serves_instead(
        pod_spec: dict[str, Any], skip: set[tuple[str, str]], expected: dict[str, int]) -> None:
    got = {k: v for k, v in pod_requests(pod_spec, skip=skip).items() if k in (GPU, MIG)}
    assert got == expected


@pytest.mark.parametrize("empty", [
    {}, {"containers": None}, {"containers": [{"name": "main", "resources": None}]},
], ids=str)
def test_a_spec_without_requests_asks_for_nothing(empty: dict[str, Any]) -> None:
    assert pod_requests(empty) == {}


@pytest.mark.parametrize("broken, where", [
    ({"containers": ["not a container"]}, "spec.containers[0]"),
    ({"containers": [{"name": "main", "resources": {"limits": {GPU: "many"}}}]},
     f"spec.containers[0].resources.limits.{GPU}"),
    ({"containers": [{"name": "main", "resources": {"requests": {GPU: "1e99999"}}}]},
     f"spec.containers[0].resources.requests.{GPU}"),
    ({"containers": [], "overhead": {"cpu": ["1"]}}, "spec.overhead.cpu"),
], ids=["a string for a container", "many GPUs", "beyond an int64", "a list for an amount"])
def test_a_malformed_spec_is_refused_naming_the_field(broken: dict[str, Any],
                                                      where: str) -> None:
    """The reader then skips the pod and names it: nothing is guessed."""
    with pytest.raises(RequestError) as raised:
        pod_requests(broken)
    assert raised.value.where == where


# --------------------------------------------------------- CPU, memory and pod-level resources
# PodRequests (helpers.go): applyPodLevelResources replaces the containers' aggregate with
# spec.resources.requests for the resources IsSupportedPodLevelResource admits (CPU and
# memory), then spec.overhead is added; framework.NewResource (kube-scheduler) holds CPU as
# MilliValue() and every other resource as Value(), both rounded up. Pod-level requests that
# are left out default to the pod-level limits (pkg/apis/core/v1/defaults.go,
# defaultPodRequests), so a limit stands in for a missing request there too.

NATIVE = [
    ("CPU is held in thousandths", spec(c("main", {"cpu": "2"})), {"cpu": 2000}),
    ("CPU fractions add up in thousandths",
     spec(c("a", requests={"cpu": "100m"}), c("b", requests={"cpu": "0.25"})), {"cpu": 350}),
    ("a CPU finer than a thousandth rounds up", spec(c("main", requests={"cpu": "1.0001"})),
     {"cpu": 1001}),
    ("memory in bytes", spec(c("main", requests={"memory": "1.5Ki"})), {"memory": 1536}),
    ("a memory quantity below a byte rounds up to one", spec(c("main", requests={
        "memory": "100m"})), {"memory": 1}),
    ("the rounding is of the pod's sum, not of each container's",
     spec(c("a", requests={"memory": "500m"}), c("b", requests={"memory": "500m"})),
     {"memory": 1}),
    ("pod-level requests replace the containers' CPU and memory",
     spec(c("a", requests={"cpu": "1", "memory": "1Gi", GPU: 1}),
          c("b", requests={"cpu": "2", "memory": "1Gi"}),
          resources={"requests": {"cpu": "1500m", "memory": "3Gi"}}),
     {"cpu": 1500, "memory": 3 * 2**30, GPU: 1}),
    ("a pod-level request of one resource leaves the other the containers' sum",
     spec(c("a", requests={"cpu": "1", "memory": "1Gi"}), c("b", requests={"cpu": "2"}),
          resources={"requests": {"cpu": "4"}}), {"cpu": 4000, "memory": 2**30}),
    ("a pod-level limit stands in for its missing request",
     spec(c("a", requests={"cpu": "1"}), resources={"limits": {"cpu": "2"}}), {"cpu": 2000}),
    ("overhead is added after the pod-level resources",
     spec(c("a", requests={"cpu": "1"}), resources={"requests": {"cpu": "2"}},
          overhead={"cpu": "250m", "memory": "120Mi"}),
     {"cpu": 2250, "memory": 120 * 2**20}),
    ("sidecars and init containers, for CPU: max(1 + 0.5, 0.5 + 2)",
     spec(c("main", requests={"cpu": "1"}),
          init=(c("proxy", requests={"cpu": "500m"}, sidecar=True),
                c("setup", requests={"cpu": "2"}))), {"cpu": 2500}),
    ("ephemeral storage in bytes, summed", spec(c("a", requests={"ephemeral-storage": "1G"}),
                                                c("b", requests={"ephemeral-storage": "1Gi"})),
     {"ephemeral-storage": 10**9 + 2**30}),
]


@pytest.mark.parametrize("pod_spec, expected", [(s, e) for _, s, e in NATIVE],
                         ids=[n for n, _, _ in NATIVE])
def test_cpu_memory_and_storage_are_held_as_the_scheduler_holds_them(
        pod_spec: dict[str, Any], expected: dict[str, int]) -> None:
    assert pod_requests(pod_spec) == expected


def test_pod_level_hugepages_replace_the_containers_hugepages() -> None:
    pod_spec = spec(c("a", requests={"hugepages-2Mi": "2Mi"}),
                    resources={"requests": {"hugepages-2Mi": "8Mi"}})
    assert pod_requests(pod_spec) == {"hugepages-2Mi": 8 * 2**20}
