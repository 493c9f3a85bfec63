"""The project's exceptions: every error gfd raises derives from GfdError."""

from __future__ import annotations


class GfdError(Exception):
    """Base of every error gfd raises on purpose; the message is one line for the user."""


class ConfigError(GfdError):
    """Invalid flags, environment or config file (exit code 2)."""


class DiscoveryError(GfdError):
    """Reading the GPUs failed (NVML, nvidia-smi, host files, snapshots)."""


class NvmlInitError(DiscoveryError):
    """NVML could not be started (library missing, driver not loaded, ...)."""


class PublishError(GfdError):
    """Publishing labels failed (file system or API server)."""
