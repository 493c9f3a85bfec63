"""Starting the agent for ``gfd run`` and ``gpu-feature-discovery``: settings, logging
(the start line, its settings as fields), the metrics server (only with a metrics port:
nothing else reads the metrics), the parts, signal handlers."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from gfd import __version__, render
from gfd.config import Settings
from gfd.logs import configure, fields

if TYPE_CHECKING:
    from gfd.configfile import FileConfig

log = logging.getLogger("gfd")


Notes = Callable[[Settings, "FileConfig | None"], list[str]]
ReloadAsked = Callable[[], bool]
"""Whether a SIGHUP arrived before the agent's own handlers were in place (``gfd.launch``)."""


def run_agent(explicit: dict[str, Any], *, defaults: Settings | None = None,
              notes: Notes | None = None, early: ReloadAsked | None = None) -> int:
    """Start ``gfd run`` from explicit setting values (any command line maps onto these);
    returns the exit code. ``defaults``: the defaults to resolve against (GFD's own for the
    ``gpu-feature-discovery`` command line); ``notes``: warnings to log once the settings
    are known; ``early``: whether a SIGHUP came during start-up (it becomes a reload)."""
    started = int(time.time())
    from gfd.app import Factory, Reloader, load_settings

    settings, loaded = load_settings(explicit, defaults=defaults)
    configure(level=settings.log_level, fmt=settings.log_format)
    log.info("gfd %s starting: %s", __version__, render.settings_line(settings, defaults),
             extra=fields(version=__version__, settings=render.settings_fields(settings)))
    for note in notes(settings, loaded) if notes else ():
        log.warning("%s", note)
    from gfd.daemon import Agent
    from gfd.signals import Signals

    metrics = health = server = None
    if settings.metrics_port:  # without the port nothing could read them: not even imported
        from gfd.metrics import Health, Metrics, MetricsServer

        metrics = Metrics(version=__version__)
        health = Health(stuck_after=settings.stuck_after)
        server = MetricsServer(metrics, health, port=settings.metrics_port,
                               host=settings.metrics_address)
        server.start()
    factory = Factory(started=started, write=lambda text: click.echo(text, nl=False),
                      on_request=metrics.api_request if metrics else None,
                      on_reconnect=metrics.watch_reconnect if metrics else None,
                      on_event=metrics.kube_event if metrics else None)
    reloader = None
    try:
        parts = factory.parts(settings)
        reloader = Reloader(explicit, loaded, factory, defaults=defaults) if loaded else None
        signals = Signals()
        watched = reloader is not None and not settings.oneshot and reloader.watch(signals.fire)
        agent = Agent(parts, reloader=reloader, observer=metrics, health=health,
                      config_watched=watched)
        _install_signal_handlers(signals)
        if early is not None and early():  # a SIGHUP that came while starting
            signals.request_reload()
        try:
            code = agent.run(signals)
        finally:
            signals.close()
    finally:
        if reloader is not None:
            reloader.close()
        if server:
            server.stop()
    log.info("gfd stopped; published labels left in place")
    return code


def _install_signal_handlers(signals: Any) -> None:
    """Handlers only record the signal (no lock, no logging: they run on the loop's thread
    between any two bytecodes, maybe inside the loop's own wait); the loop logs and acts."""
    import signal

    def stop(signum: int, frame: object) -> None:
        signals.request_stop(signum)

    def reload(signum: int, frame: object) -> None:
        signals.request_reload()

    signals.wake.install()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
        signal.signal(sig, stop)
    signal.signal(signal.SIGHUP, reload)
