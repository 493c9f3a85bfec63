"""Kubernetes credentials: the kubeconfig (checked to be a regular file) or the in-cluster
service account, loaded into the client's configuration; one line, once, for credentials that
skip TLS verification."""

from __future__ import annotations

import functools
import logging
import os
import stat
from typing import Any

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from gfd.errors import ConfigError, one_line
from gfd.hostfile import what_is

log = logging.getLogger("gfd.kube")
"""Named for the package: its lines read ``gfd.kube`` as they did before the split."""


def check_kubeconfig(value: str) -> None:
    """Every existing file ``value`` names (KUBECONFIG may list several, ``:``-separated) must
    be a regular file or a link to one: the client would block forever opening a FIFO."""
    for path in filter(None, value.split(os.pathsep)):
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            continue  # the client says so, naming the file
        except OSError as exc:
            raise ConfigError(f"cannot read kubeconfig {path}: {one_line(str(exc))} (set "
                              "--kubeconfig / KUBECONFIG to a readable file)") from exc
        if not stat.S_ISREG(mode):
            raise ConfigError(f"kubeconfig {path} is {what_is(mode)}, not a regular file (point "
                              "--kubeconfig / KUBECONFIG at the kubeconfig file itself)")


@functools.cache
def unverified(where: str) -> None:
    """One warning line, once per process, for credentials that skip TLS verification
    (``insecure-skip-tls-verify``); urllib3's own two-line warning, which it repeats for each
    new connection, is silenced."""
    import warnings

    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    log.warning("%s skips TLS verification (insecure-skip-tls-verify): gfd does not check the "
                "API server's certificate; give the cluster's certificate-authority instead",
                where)


def configuration(kubeconfig: str, *, context: str = "") -> Any:
    """The client's configuration from ``kubeconfig`` ("": the in-cluster service account)
    and its ``context`` ("": the current one), its own retries off: gfd decides about
    retries and backoff itself."""
    cfg = client.Configuration()
    check_kubeconfig(kubeconfig)
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, context=context or None,
                                    client_configuration=cfg)
        else:
            config.load_incluster_config(client_configuration=cfg)
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        where = kubeconfig or "in-cluster service account"
        raise ConfigError(
            f"cannot load Kubernetes credentials from {where}: {one_line(str(exc))} (set "
            "--kubeconfig / KUBECONFIG, or run in a pod with a ServiceAccount)") from exc
    cfg.retries = False  # gfd decides about retries and backoff itself
    if not cfg.verify_ssl:
        unverified(kubeconfig or "the in-cluster service account")
    return cfg


IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def namespace(kubeconfig: str, *, context: str = "") -> str:
    """The namespace kubectl would use: the kubeconfig context's (``context``, else the
    current one), the pod's own in-cluster, else ``default``."""
    if not kubeconfig:
        try:
            with open(IN_CLUSTER_NAMESPACE, encoding="utf-8") as f:
                return f.read().strip() or "default"
        except OSError:
            return "default"
    try:
        contexts, current = config.list_kube_config_contexts(config_file=kubeconfig)
    except (ConfigException, OSError, TypeError, ValueError, yaml.YAMLError):
        return "default"
    chosen = next((c for c in contexts if c.get("name") == context), None) if context \
        else current
    found = ((chosen or {}).get("context") or {}).get("namespace")
    return found if isinstance(found, str) and found else "default"
