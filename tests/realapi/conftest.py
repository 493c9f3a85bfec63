"""Fixtures of the real-API tier besides ``control_plane`` and ``admin_kubeconfig`` (in
tests/conftest.py, so e2e tests can run on both servers): the ServiceAccount of
``manifests/`` bound to one mode's RBAC, kube-scheduler on demand, and fresh Nodes.

``KUBEBUILDER_ASSETS`` unset: every test here skips with one line saying how to enable the
tier. Set, but the control plane cannot start: every test here fails with the reason."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers.controlplane import ControlPlane, Process

_serial = itertools.count(1)


@pytest.fixture
def sa_kubeconfig(control_plane: ControlPlane,
                  tmp_path: Path) -> Callable[[str | None], Path]:
    """``sa_kubeconfig(mode)``: bind the ServiceAccount gfd/gfd of manifests/base to exactly
    the RBAC of manifests/overlays/<mode> ("node", "nodefeature"; None: no RBAC at all) and
    return a kubeconfig holding a fresh token for it."""

    def make(mode: str | None) -> Path:
        control_plane.install_rbac(mode)
        return control_plane.service_account_kubeconfig(tmp_path / f"sa-{mode}.kubeconfig")

    return make


@pytest.fixture(scope="session")
def scheduler(control_plane: ControlPlane) -> Iterator[Process]:
    """kube-scheduler, running from first use to the end of the session."""
    proc = control_plane.start_scheduler()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def node_name(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh Ready Node named after the test, deleted after it."""
    stem = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{next(_serial)}"
    control_plane.create_node(name)
    yield name
    control_plane.delete(f"/api/v1/nodes/{name}", wait=False)
