"""Fixtures of the real-API tier: one control plane (etcd + kube-apiserver from
``$KUBEBUILDER_ASSETS``) per session, the admin's kubeconfig, the ServiceAccount of
``manifests/`` bound to one mode's RBAC, kube-scheduler on demand, and fresh Nodes.

``KUBEBUILDER_ASSETS`` unset: every test here skips with one line saying how to enable the
tier. Set, but the control plane cannot start: every test here fails with the reason."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest
from helpers.controlplane import (
    ASSETS_ENV,
    ENABLE_HINT,
    ControlPlane,
    Process,
    assets_from_env,
)

_serial = itertools.count(1)
SKIP_REASON = f"real API server tier off: {ASSETS_ENV} is unset; to run it: {ENABLE_HINT}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Every skip for want of assets is reported at this file, so ``-rs`` folds them into
    one line instead of one per test."""
    report: pytest.TestReport = yield
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and longrepr[2].endswith(SKIP_REASON):
        report.longrepr = (__file__, 1, longrepr[2])
    return report


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd and kube-apiserver, running for the whole session, NFD's CRDs served."""
    assets = assets_from_env()
    if assets is None:
        pytest.skip(SKIP_REASON)
    plane = ControlPlane.start(assets, tmp_path_factory.mktemp("controlplane"))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def admin_kubeconfig(control_plane: ControlPlane) -> Path:
    """A kubeconfig for the cluster admin (client certificate in system:masters)."""
    return control_plane.admin_kubeconfig


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
