"""The project's exceptions: every error gfd raises derives from GfdError."""

from __future__ import annotations

import reprlib


class GfdError(Exception):
    """Base of every error gfd raises on purpose; the message is one line for the user."""


class ConfigError(GfdError):
    """Invalid flags, environment or config file (exit code 2)."""


class DiscoveryError(GfdError):
    """Reading the GPUs failed (NVML, nvidia-smi, host files, snapshots)."""


class BackendInitError(DiscoveryError):
    """The GPU back end could not start (its library missing, the driver not loaded, ...):
    with --fail-on-init-error=false gfd labels without it and retries every cycle."""


class NvmlInitError(BackendInitError):
    """NVML could not be started (library missing, driver not loaded, ...)."""


class CudaInitError(BackendInitError):
    """The CUDA driver API (Tegra back end) could not be started: libcuda.so.1 missing or
    ``cuInit`` failing."""


class PublishError(GfdError):
    """Publishing labels failed (file system or API server)."""


class Refused(GfdError):
    """gfd will not touch what it did not write (``gfd prune`` finding another's feature
    file, NodeFeature or Node labels): nothing was changed; the message says whose it is."""


class ApiSinkError(PublishError):
    """Publishing through the Kubernetes API failed (a request, a conflict that outlasted its
    retries, an object that is someone else's). Each retry costs API requests, so the agent
    backs off from these up to a cap that does not depend on --sleep-interval."""


class ApiError(ApiSinkError):
    """A Kubernetes API request failed (raised by ``gfd.kube``, handled by the API sinks
    without importing the client). ``status`` is None when no answer came back."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "",
                 retry_after: float | None = None, causes: tuple[str, ...] = (),
                 resource_missing: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        """The API's machine reason (``Conflict``, ``NotFound``...)."""
        self.retry_after = retry_after
        """Seconds from a Retry-After header, if any."""
        self.causes = causes
        """The messages of the Status body's causes (a 422 names the bad fields there)."""
        self.resource_missing = resource_missing
        """True for a 404 on the resource type itself (CRD not installed), not one object."""

    @property
    def retriable(self) -> bool:
        return self.status is None or self.status == 429 or self.status >= 500


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) turned into one space."""
    return " ".join(text.split())


SHOW_LIMIT = 200
"""The most characters ``show`` gives any value: an error line stays readable whatever the
input it quotes."""


def show(value: object, limit: int = SHOW_LIMIT) -> str:
    """How every message quotes input (a file's value, a flag, what a device or a file
    said): its repr, on one line, shortened at each level and cut to ``limit`` characters
    with the full length said, so a hostile value never makes a long error line."""
    shortener = reprlib.Repr()
    shortener.maxstring = shortener.maxother = 80
    shortener.maxlevel = 3
    shortener.maxlist = shortener.maxdict = shortener.maxtuple = 6
    try:
        shown = shortener.repr(value)
    except (RecursionError, ValueError):
        shown = f"<{type(value).__name__}>"
    if "\n" in shown or "\r" in shown:
        shown = one_line(shown)
    if len(shown) > limit:
        shown = f"{shown[:limit]}... ({len(shown)} characters)"
    return shown


class WatchExpired(ApiError):
    """A watch's resourceVersion is older than the API server keeps (410 Gone, reason
    ``Expired``): read the object again and watch from the resourceVersion of that read."""
