"""The console scripts' first code: hold SIGHUP before anything heavy is imported.

A SIGHUP's default action ends the process. GFD's config-manager may send one while gfd is
still starting (importing takes a tenth of a second), so each entry point first records a
SIGHUP instead, and the agent turns one that arrived early into a reload once it runs.
"""

from __future__ import annotations

import signal
from types import FrameType


class EarlyReload:
    """A SIGHUP handler for start-up: it only records that a reload was asked for."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True

    def asked(self) -> bool:
        return self.requested

    def install(self) -> EarlyReload:
        signal.signal(signal.SIGHUP, self)
        return self


def gfd() -> None:
    """The ``gfd`` console script and ``python -m gfd``."""
    early = EarlyReload().install()
    from gfd.cli import main

    main(early=early.asked)


def gpu_feature_discovery() -> None:
    """The ``gpu-feature-discovery`` console script."""
    early = EarlyReload().install()
    from gfd.gpu_feature_discovery import main

    main(early=early.asked)


def kubectl_gfd() -> None:
    """The ``kubectl-gfd`` console script: kubectl runs it for ``kubectl gfd ...`` (its plugin
    convention: an executable named ``kubectl-<name>`` on PATH)."""
    early = EarlyReload().install()
    from gfd.cli import main

    main(early=early.asked, prog="kubectl gfd")
