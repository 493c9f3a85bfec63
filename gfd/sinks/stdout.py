"""``--output-file -``: the feature file's text on standard output, once per change."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from gfd.errors import ConfigError
from gfd.features import Features
from gfd.sinks.base import PublishResult, diff
from gfd.sinks.featurefile import render
from gfd.triggers import Fire


@dataclass(slots=True)
class StdoutSink:
    """``--output-file -``: the same text on stdout, once per change."""

    write: Callable[[str], None]
    name: str = "stdout"
    _last: dict[str, str] | None = field(default=None, init=False)

    @property
    def where(self) -> str:
        return "standard output"

    def published_features(self) -> dict[str, str] | None:
        return None  # labels only

    def published(self, also: Collection[str] = ()) -> dict[str, str]:
        """What this sink printed; standard output keeps nothing to read back, so ``gfd
        diff --output-file -`` (a new sink) is refused rather than shown as adding every label."""
        if self._last is None:
            raise ConfigError("standard output (--output-file -) holds no published labels to "
                              "compare with: diff the feature file (--output-file PATH) or an "
                              "API sink (--sink node|nodefeature); gfd labels prints what gfd "
                              "would publish")
        return dict(self._last)

    def publish(self, labels: dict[str, str], *,
                features: Features | None = None) -> PublishResult:
        change = diff(self._last or {}, labels)
        if self._last is not None and change.empty:
            return PublishResult(written=False, change=change)
        self.write(render(labels, expires=None))
        self._last = dict(labels)
        return PublishResult(written=True, change=change)

    def prune(self) -> PublishResult:
        return PublishResult(written=False)

    def refresh(self) -> None:
        pass

    def watch(self, fire: Fire) -> None:
        pass  # nothing to watch

    def close(self) -> None:
        pass
