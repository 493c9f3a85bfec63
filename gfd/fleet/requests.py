"""A pod's resource request as the scheduler computes it (``PodRequests`` in
kubernetes ``staging/src/k8s.io/component-helpers/resource/helpers.go``, used by
``NodeResourcesFit``).

- the regular containers' requests are summed;
- init containers run one at a time, so the pod needs the largest of them; a restartable init
  container (a sidecar: ``restartPolicy: Always``) keeps running, so it adds to the regular
  containers' sum and to every init container started after it (KEP-753);
- the pod's request is the larger of the two; pod-level ``spec.resources`` replace it for CPU,
  memory and hugepages (``IsSupportedPodLevelResource``), never for extended resources; then
  ``spec.overhead`` is added;
- a missing request is its limit (the API server defaults it so for extended resources, which
  may not differ from their limit);
- the result is held as the scheduler holds it (``framework.NewResource``): CPU in
  thousandths (``MilliValue``), every other resource in whole units (``Value``), rounded up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

from gfd.fleet.quantity import CPU, INT64_MAX, QuantityError, read_quantity

Amounts = dict[str, int]
Exact = dict[str, Fraction]
POD_LEVEL = ("cpu", "memory")
HUGEPAGES = "hugepages-"
"""What pod-level ``spec.resources`` may set (``IsSupportedPodLevelResource``): CPU, memory
and ``hugepages-<size>``."""


def _pod_level(name: str) -> bool:
    return name in POD_LEVEL or name.startswith(HUGEPAGES)


class RequestError(ValueError):
    """A request that is not a quantity, or beyond what the scheduler holds."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def _read(value: Any, where: str) -> Fraction:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise RequestError(where, "not a quantity")
    try:
        return read_quantity(value)
    except QuantityError as exc:
        raise RequestError(where, f"{exc} ({value[:40]!r})") from None


def _dict(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError(where, "not an object")
    return value


def _limits_and_requests(resources: dict[str, Any], where: str,
                         keep: Callable[[str], bool], name: str = "",
                         skip: set[tuple[str, str]] | None = None) -> Exact:
    out: Exact = {}
    for part in ("limits", "requests"):  # requests win over limits
        for key, value in _dict(resources.get(part), f"{where}{part}").items():
            key = str(key)
            if not keep(key) or (skip and (name, key) in skip):
                continue
            out[key] = _read(value, f"{where}{part}.{key}")
    return out


def _add(into: Exact, more: Exact) -> Exact:
    out = dict(into)
    for key, value in more.items():
        out[key] = out.get(key, Fraction(0)) + value
    return out


def _max(a: Exact, b: Exact) -> Exact:
    return {k: max(a.get(k, Fraction(0)), b.get(k, Fraction(0))) for k in a.keys() | b.keys()}


def _items(value: Any, where: str) -> Iterable[tuple[int, dict[str, Any]]]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RequestError(where, "not a list")
    for i, c in enumerate(value):
        if not isinstance(c, dict):
            raise RequestError(f"{where}[{i}]", "not an object")
    return enumerate(value)


def _every(name: str) -> bool:
    return True


def units(name: str, value: Fraction, where: str = "") -> int:
    """``value`` of resource ``name`` as the scheduler holds it."""
    if name == CPU:
        value *= 1000
    held = -(-value.numerator // value.denominator)
    if held > INT64_MAX:
        raise RequestError(where or name, "beyond what the scheduler holds (an int64)")
    return held


def pod_requests(spec: dict[str, Any], *, skip: set[tuple[str, str]] | None = None,
                 keep: Callable[[str], bool] = _every) -> Amounts:
    """Resource name -> the pod's request as the scheduler holds it (CPU in thousandths).
    ``skip``: (container, resource) pairs left out (a request a DRA claim serves instead);
    ``keep``: the resources wanted (the others are not read at all). RequestError for a
    field that is not of its type or a quantity beyond an int64."""
    total: Exact = {}
    for i, container in _items(spec.get("containers"), "spec.containers"):
        where = f"spec.containers[{i}].resources."
        total = _add(total, _limits_and_requests(
            _dict(container.get("resources"), where[:-1]), where, keep,
            str(container.get("name", "")), skip))
    sidecars: Exact = {}
    init_peak: Exact = {}
    for i, container in _items(spec.get("initContainers"), "spec.initContainers"):
        where = f"spec.initContainers[{i}].resources."
        own = _limits_and_requests(_dict(container.get("resources"), where[:-1]), where, keep,
                                   str(container.get("name", "")), skip)
        if container.get("restartPolicy") == "Always":
            total = _add(total, own)
            sidecars = _add(sidecars, own)
            use = sidecars
        else:
            use = _add(own, sidecars)
        init_peak = _max(init_peak, use)
    result = _max(total, init_peak)
    pod_level = _dict(spec.get("resources"), "spec.resources")
    if pod_level:
        level = _limits_and_requests(pod_level, "spec.resources.",
                                     lambda k: _pod_level(k) and keep(k))
        result.update(level)
    overhead = _dict(spec.get("overhead"), "spec.overhead")
    result = _add(result, {str(k): _read(v, f"spec.overhead.{k}")
                           for k, v in overhead.items() if keep(str(k))})
    return {k: units(k, v, k) for k, v in result.items() if v}
