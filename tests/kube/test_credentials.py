"""Credentials that cannot load (a FIFO for a kubeconfig included) are one-line ConfigErrors;
a kubeconfig list is checked file by file; a symlink is followed."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest
from fakes.apiserver import FakeApiServer

from gfd.errors import ConfigError
from gfd.hostfile import what_is
from gfd.kube.client import Kube

NODE = "gpu-node-1"


def _bind_socket(path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))  # the socket file stays


@pytest.mark.parametrize("make, kind", [
    (lambda path: os.mkfifo(path), "a FIFO (named pipe)"),
    (lambda path: path.mkdir(), "a directory"),
    (lambda path: _bind_socket(path), "a socket"),
], ids=["fifo", "directory", "socket"])
def test_a_kubeconfig_that_is_not_a_regular_file_is_one_line_and_never_blocks(
        tmp_path: Path, make: Any, kind: str) -> None:
    # Regression: the client opened a FIFO for reading and waited forever for a writer.
    path = tmp_path / "kubeconfig"
    make(path)
    with pytest.raises(ConfigError) as caught:
        Kube(kubeconfig=str(path))
    assert str(caught.value) == (f"kubeconfig {path} is {kind}, not a regular file (point "
                                 "--kubeconfig / KUBECONFIG at the kubeconfig file itself)")
    # the same words as every other file gfd refuses (gfd.hostfile names the kinds)
    assert kind == what_is(os.stat(path).st_mode)


def test_a_kubeconfig_list_is_checked_file_by_file(server: FakeApiServer,
                                                   tmp_path: Path) -> None:
    good = server.write_kubeconfig(tmp_path / "good")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="is a FIFO"):
        Kube(kubeconfig=f"{good}{os.pathsep}{fifo}")


def test_a_symlink_to_a_kubeconfig_is_followed(server: FakeApiServer, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(server.write_kubeconfig(tmp_path / "kubeconfig"))
    api = Kube(kubeconfig=str(link), qps=0)
    try:
        assert api.get_node(NODE)["metadata"]["name"] == NODE
    finally:
        api.close()


def test_a_missing_kubeconfig_is_a_config_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "nowhere"
    with pytest.raises(ConfigError, match="cannot load Kubernetes credentials from") as caught:
        Kube(kubeconfig=str(path))
    assert str(path) in str(caught.value) and "--kubeconfig" in str(caught.value)


@pytest.mark.parametrize("text", ["just text", "apiVersion: v1\nkind: Config\n"],
                         ids=["not-a-mapping", "no-context"])
def test_a_kubeconfig_that_cannot_load_is_a_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(ConfigError, match="cannot load Kubernetes credentials"):
        Kube(kubeconfig=str(path))


def test_a_kubeconfig_that_is_not_yaml_is_one_line_config_error(tmp_path: Path) -> None:
    # Regression: the YAML parser's error escaped as a traceback instead of exit 2.
    path = tmp_path / "kubeconfig"
    path.write_text("clusters: [1, 2\n")
    with pytest.raises(ConfigError, match="cannot load Kubernetes credentials") as caught:
        Kube(kubeconfig=str(path))
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_outside_a_pod_without_a_kubeconfig_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with pytest.raises(ConfigError, match="in-cluster service account"):
        Kube(kubeconfig="")


def test_the_namespace_is_the_contexts_else_default(server: FakeApiServer,
                                                     tmp_path: Path) -> None:
    from gfd.kube.credentials import namespace

    with_ns = server.write_kubeconfig(tmp_path / "with", namespace="research")
    without = server.write_kubeconfig(tmp_path / "without")
    assert namespace(str(with_ns)) == "research"
    assert namespace(str(without)) == "default"
    assert namespace(str(tmp_path / "missing")) == "default"
    assert namespace(str(with_ns), context="no-such-context") == "default"
