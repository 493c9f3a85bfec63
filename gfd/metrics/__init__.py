"""Prometheus metrics, liveness/readiness, and the /metrics /healthz /readyz HTTP server, a
module each: the metrics' definitions and what agent events record (``registry``, the only
importer of ``prometheus_client``), the health the probes read (``health``), the HTTP server
(``server``). Their public names are importable from here."""

from gfd.metrics.health import Health
from gfd.metrics.registry import (
    CHANGE_KINDS,
    CYCLE_RESULTS,
    DURATION_BUCKETS,
    EVENT_BUCKETS,
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

__all__ = ["BACKLOG", "CHANGE_KINDS", "CONTENT_TYPE", "CYCLE_RESULTS", "DURATION_BUCKETS",
           "EVENT_BUCKETS", "MAX_CONNECTIONS", "MAX_REQUEST_BYTES", "REQUEST_TIMEOUT", "Health",
           "Metrics", "MetricsServer", "endpoint"]
