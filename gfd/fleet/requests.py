"""A pod's resource request as the scheduler computes it (``PodRequests`` in
kubernetes ``staging/src/k8s.io/component-helpers/resource/helpers.go``, used by
``NodeResourcesFit``).

- the regular containers' requests are summed;
- init containers run one at a time, so the pod needs the largest of them; a restartable init
  container (a sidecar: ``restartPolicy: Always``) keeps running, so it adds to the regular
  containers' sum and to every init container started after it (KEP-753);
- the pod's request is the larger of the two, plus ``spec.overhead``;
- a missing request is its limit (the API server defaults it so for extended resources, which
  may not differ from their limit); pod-level ``spec.resources`` cover CPU and memory only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gfd.fleet.quantity import parse_quantity

Amounts = dict[str, int]


def _container(container: dict[str, Any], skip: set[tuple[str, str]],
               keep: Callable[[str], bool]) -> Amounts:
    resources = container.get("resources")
    resources = resources if isinstance(resources, dict) else {}
    out: Amounts = {}
    name = str(container.get("name", ""))
    for field in ("limits", "requests"):  # requests win over limits
        values = resources.get(field)
        for key, text in (values.items() if isinstance(values, dict) else ()):
            if not keep(str(key)):
                continue
            amount = parse_quantity(str(text))
            if amount is not None and (name, str(key)) not in skip:
                out[str(key)] = int(amount) if amount == int(amount) else -(-amount.numerator
                                                                           // amount.denominator)
    return out


def _add(into: Amounts, more: Amounts) -> Amounts:
    out = dict(into)
    for key, value in more.items():
        out[key] = out.get(key, 0) + value
    return out


def _max(a: Amounts, b: Amounts) -> Amounts:
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in a.keys() | b.keys()}


def _items(value: Any) -> Iterable[dict[str, Any]]:
    return (c for c in value if isinstance(c, dict)) if isinstance(value, list) else ()


def _every(name: str) -> bool:
    return True


def pod_requests(spec: dict[str, Any], *, skip: set[tuple[str, str]] | None = None,
                 keep: Callable[[str], bool] = _every) -> Amounts:
    """Resource name -> the pod's request, whole units (CPU in whole cores rounded up: gfd
    counts only extended resources, which are integers). ``skip``: (container, resource)
    pairs left out (a request a DRA claim serves instead); ``keep``: the resources wanted
    (the others are not read at all)."""
    skip = skip or set()
    total: Amounts = {}
    for container in _items(spec.get("containers")):
        total = _add(total, _container(container, skip, keep))
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for container in _items(spec.get("initContainers")):
        own = _container(container, skip, keep)
        if container.get("restartPolicy") == "Always":
            total = _add(total, own)
            sidecars = _add(sidecars, own)
            use = sidecars
        else:
            use = _add(own, sidecars)
        init_peak = _max(init_peak, use)
    result = _max(total, init_peak)
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        result = _add(result, {str(k): int(v) for k, v in (
            (k, parse_quantity(str(t))) for k, t in overhead.items() if keep(str(k)))
            if v is not None and v == int(v)})
    return {k: v for k, v in result.items() if v}
