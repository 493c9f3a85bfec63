"""Which resource manager hands out this node's GPUs: the NVIDIA device plugin or the NVIDIA
DRA driver (``--resource-manager``; ``auto`` finds it on the node).

Evidence of DRA, cheapest first: the DRA kubelet plugin's registration socket
(``dra.REGISTRATION_SOCKET``) in the kubelet's plugin registry (one ``stat`` per cycle), and,
where gfd talks to the API server, the node's ResourceSlices of that driver
(one field-selected LIST at start and then once a day, ``SLICE_RECHECK``, through a callable
the wiring passes in: this module imports no Kubernetes client). No evidence means
``device-plugin``, what GFD assumes. A decision is logged once with its evidence, and
again when it changes.

A running agent also watches the plugin registry (inotify, ``watch()``): the plugin
registering or leaving fires a ``registry`` trigger, so the switch is published at once, not
at the next cycle. Without inotify the per-cycle ``stat`` still sees it.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gfd import dra
from gfd.errors import GfdError
from gfd.fswatch import Watch
from gfd.snapshot import ResourceManager, Snapshot
from gfd.triggers import Fire, Trigger, died

log = logging.getLogger(__name__)

DRA_DRIVER = dra.DRIVER
"""The NVIDIA DRA driver's name (its ResourceSlices' ``spec.driver``)."""
REGISTRATION_SOCKET = dra.REGISTRATION_SOCKET
"""The socket the DRA kubelet plugin registers with the kubelet through."""

SLICE_RECHECK = 86400.0
"""Seconds between two ResourceSlice LISTs of a running agent (the loop's duty). Rare on
purpose: an API sink's budget is at most one request per node-hour in steady state
(BENCHMARKS.md, "API load"), and this is the fallback evidence -- a plugin that registers
or leaves is seen at once through the plugin registry, at no API cost; a resource manager
changes with a driver reinstall."""

DEFAULT_REGISTRY = "/var/lib/kubelet/plugins_registry"
"""The kubelet's: missing there is usual off a node (``gfd labels`` on a workstation), so
said at info level; a path given that does not exist is a warning."""

SliceCount = Callable[[], int]
"""How many ResourceSlices of the DRA driver this node has (raises GfdError)."""


@dataclass(slots=True)
class ResourceManagerReader:
    """Decides the resource manager for each read: fixed by the setting, or found (auto)."""

    setting: str
    """``auto``, ``device-plugin`` or ``dra``."""
    plugins_registry: str
    slices: SliceCount | None = None
    """Counts this node's ResourceSlices of the DRA driver; None without an API sink."""
    release: Callable[[], None] | None = None
    """Frees what ``slices`` holds (its API client), called by ``close()``."""
    _last: ResourceManager | None = field(default=None, init=False)
    _slices: int | None = field(default=None, init=False)
    """The last ResourceSlice count (None: the API did not answer)."""
    _asked: bool = field(default=False, init=False)
    """Whether the API was asked since the last refresh."""
    _slice_error: str = field(default="", init=False)
    _watch: Watch = field(init=False, compare=False, repr=False, default_factory=lambda: Watch(
        "registry-watch", fallback="the plugin registry is checked each cycle",
        say=lambda why: log.debug("resource manager: %s", why)))
    _denied: bool = field(default=False, init=False)
    """Whether the registry's permissions were already said to hide the plugin."""
    _missing: bool = field(default=False, init=False)
    """Whether the registry directory was already said to be missing."""

    def refresh(self) -> None:
        """Ask the API server again at the next read (the loop's ResourceSlice duty)."""
        self._asked = False

    def watch(self, fire: Fire) -> None:
        """Under ``auto``, fire a ``registry`` trigger whenever the DRA kubelet plugin's
        socket appears in or leaves the plugin registry (idempotent). Where inotify or the
        directory cannot be watched, say so once at debug level: each cycle's ``stat``
        still sees the change, one ``--sleep-interval`` later."""
        if self.setting != "auto":
            return
        registry = self.plugins_registry

        def changed(directory: str, name: str) -> None:
            if name in (REGISTRATION_SOCKET, ""):
                fire(Trigger(source="registry", kind="registration", at=time.monotonic(),
                             detail=os.path.join(directory, name)))

        self._watch.start([registry], changed,
                          on_death=lambda why: fire(died("registry", why, time.monotonic())))

    def close(self) -> None:
        self._watch.close()
        if self.release is not None:
            self.release()
            self.release = None

    def read(self) -> ResourceManager:
        if self.setting != "auto":
            found = ResourceManager(name=self.setting,
                                    evidence=f"--resource-manager {self.setting}")
        else:
            found = self._detect()
        if self._last is None or self._last.name != found.name:
            if self._last is None:
                log.info("resource manager: %s (%s)", found.name, found.evidence)
            else:
                log.info("resource manager changed from %s to %s (%s)", self._last.name,
                         found.name, found.evidence)
        self._last = found
        return found

    def _detect(self) -> ResourceManager:
        path = os.path.join(self.plugins_registry, REGISTRATION_SOCKET)
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            socket = f"no {path}"
            if not self._missing and not os.path.isdir(self.plugins_registry):
                self._missing = True  # a missing mount: said once; a warning where a path
                # was given and nothing else can tell (no ResourceSlices to ask)
                log.log(logging.WARNING if (self.plugins_registry != DEFAULT_REGISTRY
                                            and self.slices is None) else logging.INFO,
                        "resource manager: --plugins-registry %s does not exist, so auto "
                        "cannot see the DRA plugin and takes this node as device-plugin unless "
                        "%s (mount the kubelet's plugins_registry there read-only, or set "
                        "--resource-manager)", self.plugins_registry,
                        "its ResourceSlices say dra" if self.slices is not None
                        else "told otherwise")
        except PermissionError as exc:
            socket = f"{path} unreadable: {exc.strerror or exc}"
            if not self._denied:  # once; a warning only where nothing else can tell
                self._denied = True
                log.log(logging.INFO if self.slices is not None else logging.WARNING,
                        "resource manager: cannot look into %s (%s): the kubelet makes it "
                        "0750 root, so only a root gfd sees the DRA plugin there; %s",
                        self.plugins_registry, exc.strerror or exc,
                        "the node's ResourceSlices decide" if self.slices is not None
                        else "set --resource-manager on DRA nodes")
        except OSError as exc:
            socket = f"{path} unreadable: {exc.strerror or exc}"
        else:
            if stat.S_ISSOCK(mode):
                return ResourceManager(
                    name="dra", evidence=f"the NVIDIA DRA kubelet plugin is registered: "
                                         f"{path} is a socket")
            socket = f"{path} is not a socket"
        if self.slices is None:
            return ResourceManager(name="device-plugin", evidence=f"no sign of DRA: {socket}")
        count = self._slice_count()
        if count is None:  # the API did not answer: keep what was decided, say why
            if self._last is not None and self._last.name == "dra":
                return ResourceManager(name="dra", evidence=(
                    f"kept: {socket}; ResourceSlices unreadable ({self._slice_error})"))
            return ResourceManager(name="device-plugin", evidence=(
                f"no sign of DRA: {socket}; ResourceSlices unreadable ({self._slice_error})"))
        if count:
            return ResourceManager(name="dra", evidence=(
                f"{count} ResourceSlice(s) of driver {DRA_DRIVER} for this node"))
        return ResourceManager(name="device-plugin", evidence=(
            f"no sign of DRA: {socket}; no ResourceSlice of driver {DRA_DRIVER} for this node"))

    def _slice_count(self) -> int | None:
        if not self._asked and self.slices is not None:
            self._asked = True
            try:
                self._slices = self.slices()
            except GfdError as exc:
                if str(exc) != self._slice_error:
                    log.warning("resource manager: cannot list this node's ResourceSlices: "
                                "%s (grant list on resourceslices.resource.k8s.io, or set "
                                "--resource-manager)", exc)
                self._slice_error = str(exc)
                self._slices = None
            else:
                self._slice_error = ""
        return self._slices


def assumed(snapshot: Snapshot, *, simulated: bool) -> ResourceManager:
    """The resource manager of a machine that is not this host (``--simulate``, ``--snapshot``)
    under ``auto``, whose kubelet says nothing about it: device-plugin for a simulated
    machine (as GFD assumes), the one recorded with a snapshot (device-plugin where it
    records none); the evidence says so and how to choose the other."""
    if simulated:
        return _assumed("device-plugin", "assumed for a simulated machine")
    recorded = snapshot.resource_manager
    if not recorded.evidence or recorded.name not in _OTHER:
        return _assumed("device-plugin", "assumed: the snapshot records none")
    return _assumed(recorded.name, "as the snapshot recorded it")


_OTHER = {"device-plugin": ("dra", "the DRA driver's labels"),
          "dra": ("device-plugin", "the device plugin's labels")}
"""Each resource manager: the other one, and what choosing it gives."""


def _assumed(name: str, why: str) -> ResourceManager:
    other, gives = _OTHER[name]
    return ResourceManager(name=name, evidence=f"{why}; --resource-manager {other} for {gives}")
