"""What a running agent is made of (``Parts``, built by ``app``) and the seams its parts fill:
where snapshots come from, where Events go, where a reload's candidate comes from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gfd.budget import Budget
from gfd.config import Settings
from gfd.labelers.options import LabelOptions
from gfd.schedule import Duty
from gfd.sinks.base import Change, Sink
from gfd.snapshot import Snapshot
from gfd.triggers import Fire


class SnapshotSource(Protocol):
    """Where snapshots come from (``discovery.Discovery`` in production)."""

    fail_on_init_error: bool

    def read(self) -> Snapshot: ...

    def refresh(self, *, gpus: bool = False) -> None:
        """Re-read slowly changing facts at the next read (``gpus``: every GPU's static facts
        too, on SIGHUP)."""
        ...

    def watch(self, fire: Fire) -> None:
        """Start the watchers that see hardware changes as they happen (NVML events)."""
        ...

    def close(self) -> None: ...


class EventRecorder(Protocol):
    """Records Kubernetes Events on the Node from what the loop saw (``events.NodeEvents``)."""

    def published(self, snapshot: Snapshot, labels: dict[str, str], change: Change) -> None:
        """A cycle published (or found unchanged) these labels, read from this snapshot."""
        ...

    def failed(self, kind: str, message: str) -> None:
        """A cycle failed where ``kind`` says (discovery, publish, config)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Parts:
    """What a running agent is made of, all built from one Settings (by ``app``)."""

    settings: Settings
    discovery: SnapshotSource
    sink: Sink
    options: LabelOptions
    duties: tuple[Duty, ...] = ()
    events: EventRecorder | None = None
    """Events on the Node (built with the sink, which holds the API credentials)."""
    changes: tuple[str, ...] = ()
    """For a reload candidate: the settings that changed, as ``name: old -> new``."""
    budget: Budget | None = None
    """The deadline the parts' API requests share: opened for ``API_SHARE`` of
    --stuck-after at the start of each cycle (None: parts that make no API request)."""

    def close(self) -> None:
        """Close every part (the agent has stopped)."""
        self.discovery.close()
        self.sink.close()
        if self.events is not None:
            self.events.close()

    def close_new(self, running: Parts) -> None:
        """Close what this reload candidate built anew, not what it shares with the
        ``running`` parts (a candidate refused, superseded, or pending when the agent stops)."""
        if self.discovery is not running.discovery:
            self.discovery.close()
        if self.sink is not running.sink:
            self.sink.close()
        if self.events is not None and self.events is not running.events:
            self.events.close()


class PartsSource(Protocol):
    """New parts when the config changed (``app.Reloader``)."""

    def poll(self, current: Parts, *, force: bool) -> Parts | None:
        """None when the config file is unchanged; ``current`` itself when it changed but the
        settings are the running ones; else a candidate built from ``current`` for the new
        settings. Raises ConfigError when the new config is refused."""
        ...
