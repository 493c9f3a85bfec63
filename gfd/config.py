"""Settings: the frozen result of flags, environment and config file, with GFD's precedence.

Precedence per setting (reference §6.2): an explicitly given flag or environment
variable, then the config file, then the default. ``cli.py`` reads argv/env and
tells which values were explicit; ``configfile.py`` parses the file; ``resolve()``
here combines them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

from gfd.errors import ConfigError
from gfd.labelers.options import LABEL_SETS, MIG_STRATEGIES, LabelOptions
from gfd.sharing import Sharing

DEFAULT_OUTPUT_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gfd"
DEFAULT_MACHINE_TYPE_FILE = "/sys/class/dmi/id/product_name"
SINKS = ("file", "nodefeature", "node")
LOG_FORMATS = ("text", "json")
DISCOVERY_STRATEGIES = ("auto", "nvml", "tegra", "vfio")


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """Every setting of gfd, after precedence. Field names are the flags' names."""

    mig_strategy: str = "none"
    """none / single / mixed (--mig-strategy, GFD_MIG_STRATEGY, MIG_STRATEGY, flags.migStrategy)."""
    fail_on_init_error: bool = True
    """Exit when NVML cannot start; false: keep going and retry NVML every cycle."""
    oneshot: bool = False
    """Label once and exit (flags.gfd.oneshot)."""
    no_timestamp: bool = False
    """Omit gfd.timestamp (flags.gfd.noTimestamp)."""
    sleep_interval: float | None = 10.0
    """Seconds between cycles; None means ``infinite`` (label once, wait for a signal)."""
    output_file: str = DEFAULT_OUTPUT_FILE
    """Feature file path; ``-`` (or ``""`` as in GFD) writes to stdout."""
    machine_type_file: str = DEFAULT_MACHINE_TYPE_FILE
    sysfs_root: str = "/sys"
    nvidia_smi: str = "nvidia-smi"
    """nvidia-smi to run (looked up on PATH unless a path is given)."""
    config_file: str = ""
    use_node_feature_api: bool = False
    """Publish a NodeFeature object instead of a feature file (GFD's flag)."""
    sink: str = "file"
    """file / nodefeature / node; ``--use-node-feature-api`` selects nodefeature."""
    device_discovery_strategy: str = "auto"
    kubeconfig: str = ""
    kube_api_qps: float = 5.0
    kube_api_burst: int = 10
    namespace: str = "default"
    node_name: str = ""
    pod_name: str = ""
    label_set: str = "extended"
    accelerator_label: str = ""
    expiry: float = 3600.0
    """Feature-file expiry in seconds; 0 disables the expiry header."""
    resync_interval: float = 3600.0
    """API sinks: seconds between re-reads of the published object that heal drift."""
    stuck_after: float = 120.0
    """/healthz fails when one cycle runs longer than this (e.g. a hung NVML call), so the
    kubelet restarts the container."""
    metrics_port: int = 0
    """Port for /metrics, /healthz, /readyz; 0 disables the server."""
    log_format: str = "text"
    log_level: str = "info"
    simulate: str = ""
    snapshot: str = ""
    sharing: Sharing = field(default_factory=Sharing)
    """From the config file's sharing section (no flag sets it)."""

    @property
    def effective_sink(self) -> str:
        return "nodefeature" if self.use_node_feature_api and self.sink == "file" else self.sink

    def label_options(self, *, timestamp: int | None) -> LabelOptions:
        return LabelOptions(
            mig_strategy=self.mig_strategy,
            sharing=self.sharing,
            label_set=self.label_set,
            timestamp=None if self.no_timestamp else timestamp,
            accelerator_label=self.accelerator_label or None,
        )


SETTING_NAMES = frozenset(f.name for f in fields(Settings))

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")
_MAX_NANOS = 2**63 - 1
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | int | float, *, what: str = "duration") -> float | None:
    """A Go duration (``10s``, ``1m30s``, ``500ms``), ``infinite`` (returns None), or, as GFD's
    config file allows, a JSON number of nanoseconds. Seconds as a float.

    As in Go, a string needs a unit: ``"60"`` is an error (only ``"0"`` may omit it)."""
    if isinstance(text, bool):
        raise ConfigError(f"{what}: expected a duration such as 60s, got {text!r}")
    if isinstance(text, int | float):
        if (isinstance(text, float) and not math.isfinite(text)) or not 0 <= text <= _MAX_NANOS:
            raise ConfigError(f"{what}: must be a non-negative number of nanoseconds, got {text!r}")
        return float(text) / 1e9
    value = text.strip()
    if value == "infinite":
        return None
    if value == "0":
        return 0.0
    if re.fullmatch(r"[0-9]+", value):
        raise ConfigError(f"{what}: {text!r} has no unit (write e.g. {value}s)")
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(value):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(value) or pos == 0:
        raise ConfigError(
            f"{what}: {text!r} is not a duration (use Go syntax such as 10s, 1m30s, 1h, "
            "or infinite)"
        )
    if not math.isfinite(total) or total > _MAX_NANOS / 1e9:
        raise ConfigError(f"{what}: {text!r} is too long (Go durations end near 292 years)")
    return total


def resolve(
    explicit: dict[str, Any],
    defaults: dict[str, Any],
    file_values: dict[str, Any] | None = None,
    *,
    sharing: Sharing | None = None,
) -> Settings:
    """Combine values: explicit flag/env > config file > default, then check them."""
    merged: dict[str, Any] = {}
    for name in SETTING_NAMES - {"sharing"}:
        if name in explicit:
            merged[name] = explicit[name]
        elif file_values and name in file_values:
            merged[name] = file_values[name]
        elif name in defaults:
            merged[name] = defaults[name]
    settings = replace(Settings(), **merged)
    if sharing is not None:
        settings = replace(settings, sharing=sharing)
    check(settings)
    return settings


def check(settings: Settings) -> None:
    """Reject settings no run could use, with the setting, the value and the rule."""

    def need(ok: bool, message: str) -> None:
        if not ok:
            raise ConfigError(message)

    need(settings.mig_strategy in MIG_STRATEGIES,
         f"mig-strategy: must be one of {', '.join(MIG_STRATEGIES)}, got "
         f"{settings.mig_strategy!r}")
    need(settings.label_set in LABEL_SETS,
         f"label-set: must be one of {', '.join(LABEL_SETS)}, got {settings.label_set!r}")
    need(settings.sink in SINKS,
         f"sink: must be one of {', '.join(SINKS)}, got {settings.sink!r}")
    need(settings.log_format in LOG_FORMATS,
         f"log-format: must be one of {', '.join(LOG_FORMATS)}, got {settings.log_format!r}")
    need(settings.device_discovery_strategy in DISCOVERY_STRATEGIES,
         f"device-discovery-strategy: must be one of {', '.join(DISCOVERY_STRATEGIES)}, got "
         f"{settings.device_discovery_strategy!r}")
    need(settings.sleep_interval is None or settings.sleep_interval >= 0,
         "sleep-interval: must not be negative")
    need(settings.expiry >= 0, "expiry: must not be negative (0 disables expiry)")
    need(settings.resync_interval > 0, "resync-interval: must be positive")
    need(settings.stuck_after > 0, "stuck-after: must be positive")
    need(0 <= settings.metrics_port <= 65535,
         f"metrics-port: must be 0..65535, got {settings.metrics_port}")
    need(not (settings.simulate and settings.snapshot),
         "--simulate and --snapshot cannot be used together: pick one source")
    if settings.accelerator_label:
        from gfd.labelers.validate import key_problem

        problem = key_problem(settings.accelerator_label)
        need(problem is None,
             f"accelerator-label: {settings.accelerator_label!r} is not a valid label key: "
             f"{problem}")
