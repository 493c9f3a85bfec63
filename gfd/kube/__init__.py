"""The Kubernetes API boundary: the only importer of the ``kubernetes`` client.

Returns plain dicts, raises only :class:`gfd.errors.ApiError` with the HTTP status,
the API reason, the Status causes and any Retry-After, and reports every request
(verb, code) to an optional callback for metrics.

Every answer is distrusted the same way: it must arrive whole within one deadline (connect
included; a socket timeout alone restarts with each byte, so a trickling answer would never
end), it is read in chunks and refused beyond ``MAX_ANSWER_BYTES`` (a Node or NodeFeature is a
few KB), and a success must be a Kubernetes object (an auth proxy's HTML page is not).

Watches (``Kube.watch``) stream one object's events over their own connection pool, so a
watch open for an hour never holds up, or is held up by, the other requests.

One module per job: ``client`` (``Kube``, the typed facade), ``calls`` (one request: rate
limit, deadline, budget, the answer read and checked), ``channel`` (connections and the
watchdog that ends a request at its deadline), ``watch`` (the watch stream), ``status``
(error answers as ``ApiError``), ``credentials`` (kubeconfig or service account). Their
public names are importable from here.
"""

from gfd.kube.calls import DEADLINE, MAX_ANSWER_BYTES, RateLimiter
from gfd.kube.channel import KEEPALIVE, keepalive_socket_options
from gfd.kube.client import (
    APPLY,
    MERGE,
    NFD_GROUP,
    NFD_VERSION,
    NODEFEATURES,
    RESOURCESLICE_LIMIT,
    Kube,
)
from gfd.kube.credentials import check_kubeconfig, unverified
from gfd.kube.watch import MAX_WATCH_EVENT_BYTES, WatchEvent, WatchKind, WatchStream

__all__ = ["APPLY", "DEADLINE", "KEEPALIVE", "MAX_ANSWER_BYTES", "MAX_WATCH_EVENT_BYTES",
           "MERGE", "NFD_GROUP", "NFD_VERSION", "NODEFEATURES", "RESOURCESLICE_LIMIT", "Kube",
           "RateLimiter", "WatchEvent", "WatchKind", "WatchStream", "check_kubeconfig",
           "keepalive_socket_options", "unverified"]
