"""A real Kubernetes control plane for tests, in the envtest convention: etcd and
kube-apiserver (and kube-scheduler on demand) from the folder named by ``$KUBEBUILDER_ASSETS``,
on loopback with free ports, real PKI and ``--authorization-mode Node,RBAC``, in a temporary
folder (tests/README.md, "Suites by kind": realapi/; /work/shared/TESTING.md §4).

``ControlPlane.start(assets, workdir)`` brings it up, installs NFD's CRDs and waits until they
are served; ``stop()`` ends every process it started. On top of it:

- ``request``/``get``/``create``/``apply``/``delete``: the admin's REST calls (client
  certificate in ``system:masters``), objects given as dicts; ``admin_kubeconfig``;
- ``create_namespace`` (with its ``default`` ServiceAccount: no controller-manager runs),
  ``create_node`` (Ready, allocatable resources, no not-ready taint: no kubelet runs);
- ``install_rbac(mode)``: the Role/ClusterRole and bindings of ``manifests/overlays/<mode>``
  exactly as the YAML says, and nothing of the other modes, for the ServiceAccount of
  ``manifests/base``; ``service_account_kubeconfig``: a TokenRequest token for it;
- ``install_fleet_rbac(without=...)``: ``gfd fleet``'s ClusterRole of ``manifests/fleet``
  bound to its ServiceAccount, less the rules of the resources named;
- ``compact``: compact etcd's history, ``metrics``: the API server's /metrics text;
- ``start_scheduler``: kube-scheduler with the admin's kubeconfig;
- ``start_controller_manager``: kube-controller-manager with only the controllers named.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urllib3
import yaml

from helpers.paths import ROOT
from helpers.process import free_port

if TYPE_CHECKING:  # imported where used: a checkout without the tier needs no cryptography
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

JSON = dict[str, Any]

ASSETS_ENV = "KUBEBUILDER_ASSETS"
ENABLE_HINT = 'export KUBEBUILDER_ASSETS="$(../shared/k8s-assets/unpack.sh)"'
BINARIES = ("etcd", "kube-apiserver")
SERVICE_CIDR = "10.0.0.0/24"
ISSUER = "https://kubernetes.default.svc.cluster.local"
MANIFESTS = ROOT / "manifests"
RBAC_MODES = ("node", "nodefeature")
"""The overlays whose RBAC ``install_rbac`` applies (manifests/overlays/<mode>)."""
NFD_GROUP_VERSION = "nfd.k8s-sigs.io/v1alpha1"
AUDITED_USER = "system:serviceaccount:gfd:gfd"
"""The identity whose every request the audit log records: the ServiceAccount of manifests/."""
AUDIT_MARKERS = "realapi-audit"
"""Namespace of the admin's marker requests, which tell how far the audit log has got."""
START_TIMEOUT = 120.0
"""Seconds for etcd plus the API server to turn ready (5-15 s alone on 2 cores; shared
machines are slower)."""


class ControlPlaneError(Exception):
    """The control plane could not start, or an admin call failed."""


class ApiStatus(ControlPlaneError):
    """An admin call answered with a status other than the one expected."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        message = body.get("message", body) if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: {status} {message}")
        self.status = status
        self.body = body


# ----------------------------------------------------------------------------- finding things


def shared_dir() -> Path | None:
    """The project's ``shared/`` folder: beside the checkout (``../shared``), or beside
    any folder above it (a worktree kept in a subfolder)."""
    for parent in ROOT.parents:
        candidate = parent / "shared" / "k8s-assets"
        if candidate.is_dir():
            return candidate.parent
    return None


def crds_file(assets: Path) -> Path:
    """NFD's CRDs: ``../shared/k8s-assets/nfd-api-crds.yaml``, else the copy ``unpack.sh``
    leaves in the assets folder."""
    shared = shared_dir()
    for candidate in ([shared / "k8s-assets" / "nfd-api-crds.yaml"] if shared else []) + [
            assets / "nfd-api-crds.yaml"]:
        if candidate.is_file():
            return candidate
    raise ControlPlaneError(
        f"nfd-api-crds.yaml is neither in ../shared/k8s-assets nor in {assets}: "
        f"unpack the assets with {ENABLE_HINT}")


def assets_from_env() -> Path | None:
    """``$KUBEBUILDER_ASSETS`` as a folder, or None when unset or empty."""
    value = os.environ.get(ASSETS_ENV, "").strip()
    return Path(value) if value else None


def check_assets(assets: Path, binaries: Iterable[str] = BINARIES) -> None:
    missing = [b for b in binaries if not os.access(assets / b, os.X_OK)]
    if missing:
        raise ControlPlaneError(
            f"{ASSETS_ENV}={assets} lacks {', '.join(missing)}: point it at a folder holding "
            f"kube-apiserver, etcd and kube-scheduler ({ENABLE_HINT})")


# ----------------------------------------------------------------------------- PKI


@dataclass(frozen=True)
class Pki:
    """Files of a cluster's PKI, all PEM."""

    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    admin_cert: Path
    admin_key: Path


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _certificate(subject: x509.Name, key: ec.EllipticCurvePrivateKey, issuer: x509.Name,
                 issuer_key: ec.EllipticCurvePrivateKey, *, ca: bool,
                 usage: list[x509.ObjectIdentifier], sans: list[x509.GeneralName],
                 ) -> x509.Certificate:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
    else:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=True,
            data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(folder: Path) -> Pki:
    """A CA, a serving certificate for 127.0.0.1 (and the in-cluster names), an RSA
    service-account signing key pair and an admin client certificate in system:masters."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True)
    curve = ec.SECP256R1()
    ca_key = ec.generate_private_key(curve)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gfd-test-ca")])
    ca = _certificate(ca_name, ca_key, ca_name, ca_key, ca=True, usage=[], sans=[])

    serving_key = ec.generate_private_key(curve)
    service_ip = next(ipaddress.ip_network(SERVICE_CIDR).hosts())
    serving = _certificate(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]), serving_key,
        ca_name, ca_key, ca=False, usage=[ExtendedKeyUsageOID.SERVER_AUTH],
        sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.IPAddress(service_ip),
              x509.DNSName("localhost"), x509.DNSName("kubernetes"),
              x509.DNSName("kubernetes.default"), x509.DNSName("kubernetes.default.svc")])

    admin_key = ec.generate_private_key(curve)
    admin = _certificate(
        x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                   x509.NameAttribute(NameOID.COMMON_NAME, "admin")]), admin_key,
        ca_name, ca_key, ca=False, usage=[ExtendedKeyUsageOID.CLIENT_AUTH], sans=[])

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = Pki(ca_cert=folder / "ca.crt", serving_cert=folder / "apiserver.crt",
              serving_key=folder / "apiserver.key", sa_key=folder / "sa.key",
              sa_pub=folder / "sa.pub", admin_cert=folder / "admin.crt",
              admin_key=folder / "admin.key")
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.serving_cert.write_bytes(serving.public_bytes(serialization.Encoding.PEM))
    pki.serving_key.write_bytes(_pem_key(serving_key))
    pki.admin_cert.write_bytes(admin.public_bytes(serialization.Encoding.PEM))
    pki.admin_key.write_bytes(_pem_key(admin_key))
    pki.sa_key.write_bytes(_pem_key(sa_key))
    pki.sa_pub.write_bytes(sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    for key in (pki.serving_key, pki.admin_key, pki.sa_key):
        key.chmod(0o600)
    return pki


# ----------------------------------------------------------------------------- processes


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the test process dies, however it dies,
    so no etcd or API server outlives a killed pytest."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


@dataclass
class Process:
    """One binary of the control plane, its log in ``log``."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, name: str, argv: list[str], log: Path) -> Process:
        with log.open("ab") as out:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                     stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        return cls(name, popen, log)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def restart(self) -> None:
        """Kill it and start it again with the same command line, logging to the same log
        (a crash, or a node's reboot: a graceful stop of kube-apiserver waits out its open
        watches, seconds on end)."""
        self.popen.kill()
        self.popen.wait(10)
        self.popen = Process.start(self.name, list(self.popen.args), self.log).popen  # type: ignore[arg-type]

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)


def _poll(check: Any, what: str, timeout: float, processes: Iterable[Process] = ()) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for proc in processes:
            if not proc.running():
                raise ControlPlaneError(
                    f"{proc.name} exited ({proc.popen.returncode}) before {what}; its log "
                    f"{proc.log} ends:\n{proc.tail()}")
        try:
            if check():
                return
        except (urllib3.exceptions.HTTPError, OSError, ControlPlaneError):
            pass
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {p.name} ({p.log}):\n{p.tail()}" for p in processes)
            raise ControlPlaneError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")
        time.sleep(0.1)


# ----------------------------------------------------------------------------- REST paths


KINDS: dict[str, tuple[str, bool]] = {
    "Namespace": ("namespaces", False),
    "ServiceAccount": ("serviceaccounts", True),
    "Node": ("nodes", False),
    "Pod": ("pods", True),
    "ConfigMap": ("configmaps", True),
    "DaemonSet": ("daemonsets", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "CustomResourceDefinition": ("customresourcedefinitions", False),
    "ValidatingAdmissionPolicy": ("validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": ("validatingadmissionpolicybindings", False),
    "NodeFeature": ("nodefeatures", True),
    "NodeFeatureRule": ("nodefeaturerules", False),
    "DeviceClass": ("deviceclasses", False),
    "PriorityClass": ("priorityclasses", False),
    "ResourceSlice": ("resourceslices", False),
    "ResourceClaim": ("resourceclaims", True),
    "ResourceClaimTemplate": ("resourceclaimtemplates", True),
}
"""kind -> (resource, namespaced), for the objects tests create. Add a row for a new kind."""


def collection_path(api_version: str, kind: str, namespace: str | None = None) -> str:
    try:
        resource, namespaced = KINDS[kind]
    except KeyError:
        raise ControlPlaneError(f"unknown kind {kind}: add it to KINDS in "
                                f"tests/helpers/controlplane.py") from None
    root = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    if namespaced:
        if not namespace:
            raise ControlPlaneError(f"{kind} is namespaced: give metadata.namespace")
        return f"{root}/namespaces/{namespace}/{resource}"
    return f"{root}/{resource}"


def object_path(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    base = collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
    return f"{base}/{meta['name']}"


def load_yaml(path: Path) -> list[JSON]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def rbac_objects(mode: str) -> list[JSON]:
    """The RBAC objects of ``manifests/overlays/<mode>``: every file the kustomization lists
    that is not a folder (its own resources: base is shared), and the files of the
    components it lists (components/events), RBAC kinds only."""
    overlay = MANIFESTS / "overlays" / mode
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    files = [overlay / r for r in kustomization.get("resources", [])]
    for component in kustomization.get("components", []):
        folder = overlay / component
        listed = yaml.safe_load((folder / "kustomization.yaml").read_text())
        files += [folder / r for r in listed.get("resources", [])]
    found: list[JSON] = []
    for path in files:
        if path.is_file():
            found += [doc for doc in load_yaml(path)
                      if doc.get("apiVersion", "").startswith("rbac.authorization.k8s.io/")]
    if not found:
        raise ControlPlaneError(f"manifests/overlays/{mode} lists no RBAC objects")
    return found


def fleet_objects(where: str = "fleet") -> list[JSON]:
    """The RBAC objects of ``manifests/fleet`` (or ``fleet/serve``: ``gfd fleet --serve``'s)
    among the files its kustomization lists: the ClusterRole, its ClusterRoleBinding and the
    ServiceAccount it binds."""
    folder = MANIFESTS / where
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    return [doc for resource in kustomization.get("resources", [])
            for doc in load_yaml(folder / resource)
            if doc["kind"] in ("ClusterRole", "ClusterRoleBinding", "ServiceAccount")]


def _grant(rule: JSON, verb: str) -> tuple[str, str, str, str]:
    """What a SubjectAccessReview of ``ControlPlane.allowed`` asks about one rule's verb."""
    return rule["apiGroups"][0], rule["resources"][0], rule.get("namespace", ""), verb


def base_identity() -> tuple[JSON, JSON]:
    """The Namespace and ServiceAccount of manifests/base."""
    namespace = load_yaml(MANIFESTS / "base" / "namespace.yaml")[0]
    account = load_yaml(MANIFESTS / "base" / "serviceaccount.yaml")[0]
    return namespace, account


def audit_args(folder: Path) -> list[str]:
    """kube-apiserver flags for an audit log of AUDITED_USER's requests (bodies included)
    and the admin's markers, in ``folder``/audit.log, written before each answer."""
    policy = {
        "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "Request", "users": [AUDITED_USER]},
            {"level": "Metadata", "users": ["admin"], "namespaces": [AUDIT_MARKERS],
             "omitStages": ["ResponseStarted"]},
            {"level": "None"},
        ],
    }
    (folder / "audit-policy.yaml").write_text(yaml.safe_dump(policy))
    return ["--audit-policy-file", str(folder / "audit-policy.yaml"),
            "--audit-log-path", str(folder / "audit.log"), "--audit-log-format", "json",
            "--audit-log-mode", "blocking"]


def write_kubeconfig(path: Path, server: str, ca: Path, user: JSON, name: str) -> Path:
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "realapi", "cluster": {
            "server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": "realapi", "user": name}}],
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


# ----------------------------------------------------------------------------- the control plane


@dataclass
class ControlPlane:
    """etcd and kube-apiserver, running; see the module docstring."""

    assets: Path
    workdir: Path
    pki: Pki
    port: int
    etcd_url: str
    etcd: Process
    apiserver: Process
    admin_kubeconfig: Path
    extra: list[Process] = field(default_factory=list)
    _http: urllib3.PoolManager | None = None
    _markers: int = 0
    _restarted_at: int = 0

    @property
    def audit_log(self) -> Path:
        return self.workdir.parent / "audit.log"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # -- lifecycle

    @classmethod
    def start(cls, assets: Path, workdir: Path, *, fsync: bool = False, audit: bool = True,
              apiserver_args: Iterable[str] = (), attempts: int = 3) -> ControlPlane:
        """Start etcd and the API server in ``workdir`` and wait until NFD's CRDs are
        served. ``fsync=False`` runs etcd with --unsafe-no-fsync (tests: nothing to keep);
        ``audit`` logs every request of AUDITED_USER to ``audit_log`` (``audit_events``).
        Raises ControlPlaneError with the failing process's log when it cannot start."""
        check_assets(assets)
        crds = crds_file(assets)
        workdir.mkdir(parents=True, exist_ok=True)
        pki = make_pki(workdir / "pki")
        apiserver_args = list(apiserver_args)
        if audit:
            apiserver_args += audit_args(workdir)
        error: ControlPlaneError | None = None
        for attempt in range(attempts):  # another process may take a free port first
            try:
                plane = cls._launch(assets, workdir / f"run{attempt}", pki, fsync,
                                    list(apiserver_args))
            except ControlPlaneError as exc:
                error = exc
                continue
            try:
                plane.install_crds(crds)
            except BaseException:
                plane.stop()
                raise
            return plane
        assert error is not None
        raise error

    @classmethod
    def _launch(cls, assets: Path, folder: Path, pki: Pki, fsync: bool,
                apiserver_args: list[str]) -> ControlPlane:
        folder.mkdir(parents=True)
        client, peer, port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{client}"
        etcd = Process.start("etcd", [
            str(assets / "etcd"), "--name", "default", "--data-dir", str(folder / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"default=http://127.0.0.1:{peer}",
            "--log-level", "warn", *([] if fsync else ["--unsafe-no-fsync"]),
        ], folder / "etcd.log")
        plain = urllib3.PoolManager(timeout=urllib3.Timeout(2.0), retries=False)
        try:
            _poll(lambda: json.loads(plain.request("GET", f"{etcd_url}/health").data)
                  .get("health") == "true", "etcd's /health", START_TIMEOUT, [etcd])
        except BaseException:
            etcd.stop()
            raise
        admin_kubeconfig = write_kubeconfig(
            folder / "admin.kubeconfig", f"https://127.0.0.1:{port}", pki.ca_cert,
            {"client-certificate": str(pki.admin_cert), "client-key": str(pki.admin_key)},
            "admin")
        apiserver = Process.start("kube-apiserver", [
            str(assets / "kube-apiserver"),
            "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(port), "--cert-dir", str(folder / "certs"),
            "--tls-cert-file", str(pki.serving_cert),
            "--tls-private-key-file", str(pki.serving_key),
            "--client-ca-file", str(pki.ca_cert),
            "--service-account-issuer", ISSUER,
            "--service-account-key-file", str(pki.sa_pub),
            "--service-account-signing-key-file", str(pki.sa_key),
            "--service-cluster-ip-range", SERVICE_CIDR,
            "--authorization-mode", "Node,RBAC",
            "--allow-privileged=true",
            # OpenShift's default; the nodefeature RBAC carries `delete` for it
            "--enable-admission-plugins", "OwnerReferencesPermissionEnforcement",
            *apiserver_args,
        ], folder / "kube-apiserver.log")
        plane = cls(assets=assets, workdir=folder, pki=pki, port=port, etcd_url=etcd_url,
                    etcd=etcd, apiserver=apiserver, admin_kubeconfig=admin_kubeconfig)
        try:
            _poll(lambda: plane.request("GET", "/readyz", expect=None)[0] == 200,
                  "kube-apiserver's /readyz", START_TIMEOUT, [etcd, apiserver])
        except BaseException:
            plane.stop()
            raise
        return plane

    def stop(self) -> None:
        """End every process this control plane started: scheduler, API server, etcd."""
        for proc in [*reversed(self.extra), self.apiserver, self.etcd]:
            proc.stop()
        self.extra.clear()
        if self._http is not None:
            self._http.clear()

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def processes(self) -> list[Process]:
        return [self.etcd, self.apiserver, *self.extra]

    # -- REST as the admin

    @property
    def http(self) -> urllib3.PoolManager:
        if self._http is None:
            self._http = urllib3.PoolManager(
                maxsize=4, ca_certs=str(self.pki.ca_cert), cert_file=str(self.pki.admin_cert),
                key_file=str(self.pki.admin_key), timeout=urllib3.Timeout(30.0), retries=False)
        return self._http

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json", query: Mapping[str, str] | None = None,
                expect: Iterable[int] | None = (200, 201)) -> tuple[int, Any]:
        """One admin request; returns (status, decoded body). Raises ApiStatus when the
        status is not in ``expect`` (None: any status)."""
        url = self.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = None if body is None else (
            body.encode() if isinstance(body, str) else json.dumps(body).encode())
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        resp = self.http.request(method, url, body=data, headers=headers)
        raw = resp.data
        try:
            decoded: Any = json.loads(raw) if raw else None
        except ValueError:
            decoded = raw.decode(errors="replace")
        if expect is not None and resp.status not in tuple(expect):
            raise ApiStatus(method, path, resp.status, decoded)
        return resp.status, decoded

    def get(self, path: str) -> JSON | None:
        """The object at ``path``, or None when it does not exist."""
        status, body = self.request("GET", path, expect=(200, 404))
        return body if status == 200 else None

    def create(self, obj: JSON, manager: str | None = None) -> JSON:
        meta = obj["metadata"]
        path = collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        query = {"fieldManager": manager} if manager else None
        return dict(self.request("POST", path, obj, query=query)[1])

    def apply(self, obj: JSON, manager: str = "realapi-admin") -> JSON:
        """Server-side apply as ``manager``, forcing conflicts (an admin's kubectl apply)."""
        return dict(self.request("PATCH", object_path(obj), obj,
                                 content_type="application/apply-patch+yaml",
                                 query={"fieldManager": manager, "force": "true"})[1])

    def patch(self, path: str, patch: Any, kind: str = "merge",
              manager: str | None = None) -> JSON:
        query = {"fieldManager": manager} if manager else None
        return dict(self.request("PATCH", path, patch, query=query,
                                 content_type=f"application/{kind}-patch+json")[1])

    def delete(self, obj_or_path: Mapping[str, Any] | str, wait: bool = True) -> None:
        """Delete (foreground for nothing: no garbage collector runs) and, with ``wait``,
        until it is gone."""
        path = obj_or_path if isinstance(obj_or_path, str) else object_path(obj_or_path)
        self.request("DELETE", path, expect=(200, 202, 404))
        if wait:
            _poll(lambda: self.get(path) is None, f"{path} to be deleted", 30.0)

    def audit_offset(self) -> int:
        """Where the audit log ends now (for ``audit_events(since=...)``)."""
        self.sync_audit()
        return self.audit_log.stat().st_size

    def sync_audit(self, timeout: float = 10.0) -> None:
        """Return once every request answered before this call is in the audit log: the
        admin's marker request, sent after them, is there."""
        self._markers += 1
        marker = f"marker-{os.getpid()}-{self._markers}"
        self.request("GET", f"/api/v1/namespaces/{AUDIT_MARKERS}/configmaps/{marker}",
                     expect=(404,))

        def logged() -> bool:
            return self.audit_log.is_file() and marker in self.audit_log.read_text()

        _poll(logged, "the audit log to catch up", timeout)

    def audit_events(self, since: int = 0, first_only: bool = True) -> list[JSON]:
        """AUDITED_USER's requests from byte ``since`` of the audit log, one event each (a
        watch when its stream starts, anything else when it is answered), in order;
        ``first_only=False``: every event (a watch's end too)."""
        self.sync_audit()
        with self.audit_log.open("rb") as log:
            log.seek(since)
            lines = log.read().splitlines()
        events: list[JSON] = []
        seen: set[str] = set()
        for line in lines:
            event = json.loads(line)
            if event["user"]["username"] != AUDITED_USER or (
                    first_only and event["auditID"] in seen):
                continue
            seen.add(event["auditID"])
            events.append(event)
        return events

    def restart_apiserver(self) -> None:
        """Kill and restart kube-apiserver on the same port: every watch is cut, and its
        watch cache starts again from etcd's current revision."""
        self._restarted_at = self.audit_offset() if self.audit_log.is_file() else 0
        self.apiserver.restart()
        if self._http is not None:
            self._http.clear()
        _poll(lambda: self.request("GET", "/readyz", expect=None)[0] == 200,
              "kube-apiserver's /readyz after a restart", START_TIMEOUT,
              [self.etcd, self.apiserver])

    def open_watches(self) -> int:
        """AUDITED_USER's watches now open: started since the API server last started, not
        yet ended (audit log)."""
        started: set[str] = set()
        ended: set[str] = set()
        for event in self.audit_events(self._restarted_at, first_only=False):
            if event["verb"] == "watch":
                (started if event["stage"] == "ResponseStarted" else ended).add(
                    event["auditID"])
        return len(started - ended)

    def metrics(self) -> str:
        return str(self.request("GET", "/metrics")[1])

    # -- cluster content

    def install_crds(self, path: Path, timeout: float = 60.0) -> None:
        """Create the CRDs in ``path`` and wait until each is Established and its resource
        answers a list."""
        for crd in load_yaml(path):
            if self.get(object_path(crd)) is None:
                self.create(crd)
        for crd in load_yaml(path):
            group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
            version = next(v["name"] for v in crd["spec"]["versions"] if v.get("served"))
            namespaced = crd["spec"]["scope"] == "Namespaced"
            list_path = (f"/apis/{group}/{version}/namespaces/default/{plural}" if namespaced
                         else f"/apis/{group}/{version}/{plural}")

            def served(crd: JSON = crd, list_path: str = list_path) -> bool:
                current = self.get(object_path(crd)) or {}
                conditions = current.get("status", {}).get("conditions", [])
                established = any(c["type"] == "Established" and c["status"] == "True"
                                  for c in conditions)
                return established and self.request("GET", list_path, expect=None)[0] == 200

            _poll(served, f"CRD {crd['metadata']['name']} to be served", timeout,
                  [self.etcd, self.apiserver])

    def create_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> JSON:
        """The namespace and its ``default`` ServiceAccount (no controller-manager makes it)."""
        namespace = self.apply({"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": name, "labels": dict(labels or {})}})
        self.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": name}})
        return namespace

    def create_node(self, name: str, labels: Mapping[str, str] | None = None,
                    allocatable: Mapping[str, str] | None = None, *,
                    annotations: Mapping[str, str] | None = None,
                    manager: str = "kubelet") -> JSON:
        """A Node as a kubelet would leave it: Ready, with capacity and allocatable
        resources, without the not-ready taint the API server adds on create. ``labels``
        (default: the hostname and os labels) are exactly the Node's, owned by ``manager``."""
        resources = {"cpu": "16", "memory": "64Gi", "pods": "110", **(allocatable or {})}
        node_labels = (dict(labels) if labels is not None else
                       {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"})
        meta: JSON = {"name": name, "labels": node_labels}
        if annotations:
            meta["annotations"] = dict(annotations)
        self.create({"apiVersion": "v1", "kind": "Node", "metadata": meta}, manager=manager)
        path = f"/api/v1/nodes/{name}"
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.patch(f"{path}/status", {"status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet is posting ready status",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                         "kubeletVersion": "v1.36.2", "bootID": "", "machineID": "",
                         "systemUUID": "", "kernelVersion": "", "osImage": "",
                         "containerRuntimeVersion": "", "kubeProxyVersion": ""}}},
                   manager=manager)
        return self.patch(path, {"spec": {"taints": None}}, manager=manager)

    def install_rbac(self, mode: str | None, timeout: float = 30.0) -> None:
        """Bind the ServiceAccount of manifests/base to exactly the RBAC of
        ``manifests/overlays/<mode>`` (None: to nothing), deleting the other modes' RBAC
        objects, and wait until the authorizer agrees (SubjectAccessReview)."""
        if mode is not None and mode not in RBAC_MODES:
            raise ControlPlaneError(f"unknown mode {mode}: one of {', '.join(RBAC_MODES)}")
        namespace, account = base_identity()
        self.apply(namespace)
        self.create_namespace(namespace["metadata"]["name"])
        self.apply(account)
        for other in RBAC_MODES:
            if other != mode:
                for obj in rbac_objects(other):
                    self.delete(obj, wait=False)
        if mode is not None:
            for obj in rbac_objects(mode):
                self.apply(obj)
        user = (f"system:serviceaccount:{account['metadata']['namespace']}:"
                f"{account['metadata']['name']}")
        # a rule both modes grant (components/events) is allowed in either
        granted = {_grant(rule, verb) for rule in (self._rules(mode) if mode else ())
                   for verb in rule["verbs"]}
        expected = [(rule, verb, _grant(rule, verb) in granted) for m in RBAC_MODES
                    for rule in self._rules(m) for verb in rule["verbs"]]
        _poll(lambda: all(self.allowed(user, rule, verb) == want
                          for rule, verb, want in expected),
              f"RBAC of mode {mode} to take effect", timeout)

    def install_fleet_rbac(self, without: Iterable[str] = (), timeout: float = 30.0, *,
                           where: str = "fleet") -> JSON:
        """Bind the ServiceAccount of manifests/fleet (or ``where``: fleet/serve) to its
        ClusterRole exactly as the YAML says, less every rule naming a resource in
        ``without``; wait until the authorizer agrees (SubjectAccessReview: each rule of the
        YAML allowed, or not); return the ServiceAccount."""
        objects = fleet_objects(where)
        (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
        (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
        dropped = set(without)
        unknown = dropped - {r for rule in role["rules"] for r in rule["resources"]}
        if unknown:
            raise ControlPlaneError(f"manifests/{where} grants nothing on {sorted(unknown)}")
        self.create_namespace(account["metadata"]["namespace"])
        for obj in objects:
            if obj is role:
                obj = {**role, "rules": [rule for rule in role["rules"]
                                         if not dropped & set(rule["resources"])]}
            self.apply(obj)
        user = (f"system:serviceaccount:{account['metadata']['namespace']}:"
                f"{account['metadata']['name']}")
        expected = [(rule, verb, not dropped & set(rule["resources"]))
                    for rule in role["rules"] for verb in rule["verbs"]]
        _poll(lambda: all(self.allowed(user, rule, verb) == want
                          for rule, verb, want in expected),
              f"the fleet's RBAC without {sorted(dropped)} to take effect", timeout)
        return account

    def _rules(self, mode: str) -> Iterator[JSON]:
        for obj in rbac_objects(mode):
            if obj["kind"] in ("Role", "ClusterRole"):
                for rule in obj.get("rules", []):
                    yield {**rule, "namespace": obj["metadata"].get("namespace", "")}

    def allowed(self, user: str, rule: JSON, verb: str) -> bool:
        """Whether ``user`` (a ServiceAccount) may ``verb`` the rule's first resource."""
        namespace = user.split(":")[2] if user.startswith("system:serviceaccount:") else ""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": user, "groups": [
                      "system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                      "system:authenticated"],
                      "resourceAttributes": {
                          "group": rule["apiGroups"][0], "resource": rule["resources"][0],
                          "verb": verb, "namespace": rule.get("namespace", "")}}}
        answer = self.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                              review)[1]
        return bool(answer["status"].get("allowed", False))

    def token(self, namespace: str, name: str, seconds: int = 3600,
              bound_pod: Mapping[str, str] | None = None) -> str:
        """A TokenRequest token for the ServiceAccount; ``bound_pod`` ({name, uid}) binds
        it to a pod (the token then carries the pod's node-name claim)."""
        spec: JSON = {"expirationSeconds": seconds}
        if bound_pod is not None:
            spec["boundObjectRef"] = {"kind": "Pod", "apiVersion": "v1", **bound_pod}
        answer = self.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})[1]
        return str(answer["status"]["token"])

    def service_account_kubeconfig(self, path: Path, namespace: str = "gfd",
                                   name: str = "gfd", **token_args: Any) -> Path:
        """A kubeconfig for the ServiceAccount with a fresh TokenRequest token, its
        context's namespace the ServiceAccount's."""
        written = write_kubeconfig(path, self.url, self.pki.ca_cert,
                                   {"token": self.token(namespace, name, **token_args)},
                                   f"{namespace}-{name}")
        config = yaml.safe_load(written.read_text())
        config["contexts"][0]["context"]["namespace"] = namespace
        written.write_text(yaml.safe_dump(config))
        return written

    def compact(self) -> int:
        """Compact etcd's history up to its current revision (what the API server does
        every 5 minutes); returns that revision."""
        plain = urllib3.PoolManager(timeout=urllib3.Timeout(10.0), retries=False)
        header = json.loads(plain.request("POST", f"{self.etcd_url}/v3/kv/range",
                                          body=json.dumps({"key": "AA=="})).data)["header"]
        revision = int(header["revision"])
        resp = plain.request("POST", f"{self.etcd_url}/v3/kv/compaction",
                             body=json.dumps({"revision": revision, "physical": True}))
        if resp.status != 200:
            raise ControlPlaneError(f"etcd compaction: {resp.status} {resp.data[:200]!r}")
        return revision

    # -- kube-scheduler

    def start_scheduler(self, timeout: float = 60.0) -> Process:
        """kube-scheduler with the admin's kubeconfig, no leader election, no serving
        port; returns once its Node informer has synced (its log says so). Stopped by
        ``stop()`` or by the caller."""
        check_assets(self.assets, ["kube-scheduler"])
        log = self.workdir / f"kube-scheduler-{len(self.extra)}.log"
        proc = Process.start("kube-scheduler", [
            str(self.assets / "kube-scheduler"), "--kubeconfig", str(self.admin_kubeconfig),
            "--leader-elect=false", "--secure-port", "0", "-v", "2",
        ], log)
        self.extra.append(proc)

        def synced() -> bool:
            return any("Caches populated" in line and "*v1.Node" in line
                       for line in log.read_text(errors="replace").splitlines())

        _poll(synced, "kube-scheduler to start", timeout, [proc])
        return proc


    # -- kube-controller-manager

    def start_controller_manager(
            self, controllers: Iterable[str] = ("resourceclaim-controller",
                                                "garbage-collector-controller"),
            timeout: float = 60.0) -> Process:
        """kube-controller-manager with the admin's kubeconfig and only ``controllers``
        (1.36's names: ``resourceclaim-controller`` makes a Pod's claims from its templates,
        ``garbage-collector-controller`` deletes what a deleted object owned); returns once
        its /healthz answers. Stopped by ``stop()`` or by the caller."""
        check_assets(self.assets, ["kube-controller-manager"])
        wanted = list(controllers)
        port = free_port()
        log = self.workdir / f"kube-controller-manager-{len(self.extra)}.log"
        proc = Process.start("kube-controller-manager", [
            str(self.assets / "kube-controller-manager"),
            "--kubeconfig", str(self.admin_kubeconfig),
            "--authentication-kubeconfig", str(self.admin_kubeconfig),
            "--authorization-kubeconfig", str(self.admin_kubeconfig),
            "--controllers", ",".join(wanted), "--leader-elect=false",
            "--use-service-account-credentials=false", "--bind-address", "127.0.0.1",
            "--secure-port", str(port), "--cert-dir", str(self.workdir / f"kcm-{port}"),
            "-v", "2",
        ], log)
        self.extra.append(proc)
        plain = urllib3.PoolManager(cert_reqs="CERT_NONE", timeout=urllib3.Timeout(2.0),
                                    retries=False)
        import warnings

        def healthy() -> bool:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", urllib3.exceptions.InsecureRequestWarning)
                return plain.request("GET", f"https://127.0.0.1:{port}/healthz").status == 200

        def started() -> bool:  # /healthz answers before the resourceclaim controller runs
            if "resourceclaim-controller" not in wanted:
                return True
            text = log.read_text(errors="replace")
            return "Caches are synced" in text and (
                '"Controller starting..." controller="resourceclaim-controller"' in text)

        _poll(lambda: healthy() and started(), "kube-controller-manager to start its "
              "controllers", timeout, [proc])
        return proc


def remove_tree(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
