"""Prometheus metrics, liveness/readiness, and the /metrics /healthz /readyz HTTP server, a
module each: the metrics' definitions and what agent events record (``registry``, the only
importer of ``prometheus_client``), the health the probes read (``health``), the HTTP server
(``server``). Their public names are importable from here, each loaded on first use: importing
``gfd.metrics.health`` (or this package) loads no Prometheus code."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gfd.metrics.health import Health
    from gfd.metrics.registry import (
        CHANGE_KINDS,
        CYCLE_RESULTS,
        DURATION_BUCKETS,
        EVENT_BUCKETS,
        FAMILIES,
        Family,
        Metrics,
    )
    from gfd.metrics.server import (
        BACKLOG,
        CONTENT_TYPE,
        MAX_CONNECTIONS,
        MAX_REQUEST_BYTES,
        REQUEST_TIMEOUT,
        MetricsServer,
        endpoint,
    )

_HOMES = {
    "health": ("Health",),
    "registry": ("CHANGE_KINDS", "CYCLE_RESULTS", "DURATION_BUCKETS", "EVENT_BUCKETS",
                 "FAMILIES", "Family", "Metrics"),
    "server": ("BACKLOG", "CONTENT_TYPE", "MAX_CONNECTIONS", "MAX_REQUEST_BYTES",
               "REQUEST_TIMEOUT", "MetricsServer", "endpoint"),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = ["BACKLOG", "CHANGE_KINDS", "CONTENT_TYPE", "CYCLE_RESULTS", "DURATION_BUCKETS",
           "EVENT_BUCKETS", "FAMILIES", "MAX_CONNECTIONS", "MAX_REQUEST_BYTES", "REQUEST_TIMEOUT",
           "Family", "Health", "Metrics", "MetricsServer", "endpoint"]


def __getattr__(name: str) -> Any:
    """``name`` from the module that holds it, imported now."""
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
