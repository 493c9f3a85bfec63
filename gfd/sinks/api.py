"""What the API-server sinks share: the request retry policy and the sink factory."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from gfd.backoff import backoff
from gfd.errors import ConfigError

if TYPE_CHECKING:
    from gfd.config import Settings
    from gfd.sinks.base import Sink

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(slots=True)
class Retry:
    """Retries 429, 5xx and connection errors with jittered backoff, honouring Retry-After.

    Conflicts (409) are not retried here: the sinks re-read and retry them themselves.
    After ``attempts`` the error goes up, the cycle fails, and the agent backs off.
    """

    attempts: int = 4
    cap: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    rand: Callable[[], float] = field(default=random.random)

    def run(self, operation: Callable[[], T]) -> T:
        from gfd.kube import KubeError

        for attempt in range(1, self.attempts + 1):
            try:
                return operation()
            except KubeError as exc:
                if not exc.retriable or attempt == self.attempts:
                    raise
                delay = exc.retry_after if exc.retry_after is not None else backoff(
                    attempt, self.cap, self.rand, start=0.5)
                delay = min(delay, self.cap)
                log.debug("API request failed (%s); retry %d in %.2fs", exc, attempt, delay)
                self.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover


def make_api_sink(settings: Settings, *,
                  on_request: Callable[[str, str], None] | None = None) -> Sink:
    """Build the NodeFeature or Node sink (imports the Kubernetes client)."""
    if not settings.node_name:
        raise ConfigError(
            "--node-name / NODE_NAME is required with the NodeFeature and Node sinks "
            "(set it from the downward API: fieldRef spec.nodeName)")
    from gfd.kube import Kube

    kube = Kube(kubeconfig=settings.kubeconfig, qps=settings.kube_api_qps,
                burst=settings.kube_api_burst, on_request=on_request)
    if settings.effective_sink == "node":
        from gfd.sinks.node import NodeSink

        return NodeSink(kube, settings.node_name, resync_interval=settings.resync_interval)
    from gfd.sinks.nodefeature import NodeFeatureSink

    return NodeFeatureSink(kube, settings.node_name, namespace=settings.namespace,
                           pod_name=settings.pod_name, resync_interval=settings.resync_interval)
