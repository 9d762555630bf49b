"""The local control plane's certificates and kubeconfigs: a CA, the API server's serving
certificate, client certificates for the admin, the controllers, the API server towards kubelets
and each node, and the service-account signing key, made with the machine's openssl and kept in
the control plane's state folder (`devtools.controlplane`)."""

from __future__ import annotations

import base64
import secrets
import shutil
import subprocess
from pathlib import Path

import yaml

from distributary.errors import DistributaryError


class ControlPlaneError(DistributaryError, RuntimeError):
    """The control plane could not be built or started; the message says why and what to do."""


_APISERVER_NAMES = (  # the API server's certificate, beside the address pods reach it at
    "IP:127.0.0.1, DNS:localhost, IP:10.0.0.1, DNS:kubernetes, DNS:kubernetes.default, "
    "DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local"
)
_LEAF_CERTS = {  # name: (subject, extensions); the API server's is `_apiserver_certificate`
    "admin": ("CN = distributary-admin\nO = system:masters", "extendedKeyUsage = clientAuth"),
    "controller-manager": (
        # In system:masters: the garbage collector deletes every kind, custom ones included.
        "CN = system:kube-controller-manager\nO = system:masters",
        "extendedKeyUsage = clientAuth",
    ),
    # What the API server shows a node's kubelet for logs, exec and port forwarding.
    "apiserver-kubelet-client": (
        "CN = kube-apiserver-kubelet-client\nO = system:masters",
        "extendedKeyUsage = clientAuth",
    ),
}


def _apiserver_certificate(pods_at: str | None) -> tuple[str, str]:
    names = _APISERVER_NAMES + (f", IP:{pods_at}" if pods_at else "")
    return "CN = kube-apiserver", f"extendedKeyUsage = serverAuth\nsubjectAltName = {names}"


_NEW_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
_DAYS = ("-days", "3650")


def _openssl(pki: Path, *args: str) -> None:
    result = subprocess.run(["openssl", *args], cwd=pki, capture_output=True, text=True)
    if result.returncode != 0:
        raise ControlPlaneError(f"`openssl {args[0]}` failed in {pki}: {result.stderr.strip()}")


def _openssl_config(pki: Path, name: str, subject: str, extensions: str) -> str:
    (pki / f"{name}.cnf").write_text(_config_text(subject, extensions))
    return f"{name}.cnf"


def _config_text(subject: str, extensions: str) -> str:
    return f"[req]\ndistinguished_name = dn\nprompt = no\n[dn]\n{subject}\n[ext]\n{extensions}\n"


def write_certificates(pki: Path, pods_at: str | None = None) -> None:
    """A CA, the API server's serving certificate (naming `pods_at` too, if given), client
    certificates for the admin, the controller manager and the API server towards kubelets, and
    the service-account signing key; kept once made (a certificate added or changed since is
    issued by the CA already there)."""
    if not (pki / ".complete").exists():
        _write_authorities(pki)
    leaves = {"apiserver": _apiserver_certificate(pods_at), **_LEAF_CERTS}
    for name, (subject, extensions) in leaves.items():
        issue_certificate(pki, name, subject, extensions)


def _write_authorities(pki: Path) -> None:
    if shutil.which("openssl") is None:
        raise ControlPlaneError("openssl is needed to make the control plane's certificates")
    pki.mkdir(parents=True, exist_ok=True)
    for stale in pki.glob("*.crt"):  # of a CA that was never completed
        stale.unlink()
    ca_ext = "basicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign"
    config = _openssl_config(pki, "ca", "CN = distributary-control-plane-ca", ca_ext)
    _openssl(pki, "req", "-x509", "-config", config, "-extensions", "ext", *_NEW_KEY, *_DAYS,
             "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    _openssl(pki, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", "service-accounts.key")  # fmt: skip
    _openssl(pki, "pkey", "-in", "service-accounts.key", "-pubout", "-out", "service-accounts.pub")
    for key in pki.glob("*.key"):
        key.chmod(0o600)
    (pki / ".complete").touch()


def issue_certificate(pki: Path, name: str, subject: str, extensions: str) -> Path:
    """`name`.crt and `name`.key in `pki`, signed by the CA there (a node's identity: `subject`
    "CN = system:node:NAME\\nO = system:nodes"); kept if issued already with this subject and
    these extensions, issued again otherwise; the certificate's path."""
    certificate = pki / f"{name}.crt"
    leaf = "basicConstraints = critical, CA:FALSE\nkeyUsage = critical, digitalSignature"
    config_file = pki / f"{name}.cnf"
    issued_as = config_file.read_text() if config_file.exists() else None
    if certificate.exists() and issued_as == _config_text(subject, f"{leaf}\n{extensions}"):
        return certificate
    config = _openssl_config(pki, name, subject, f"{leaf}\n{extensions}")
    _openssl(pki, "req", "-new", "-config", config, *_NEW_KEY,
             "-keyout", f"{name}.key", "-out", f"{name}.csr")  # fmt: skip
    (pki / f"{name}.key").chmod(0o600)
    _openssl(pki, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-set_serial", str(secrets.randbits(63)), *_DAYS, "-extfile", config,
             "-extensions", "ext", "-out", f"{name}.crt.partial")  # fmt: skip
    (pki / f"{name}.crt.partial").replace(certificate)
    return certificate


def kubeconfig(server: str, pki: Path, user: str, *, embed: bool) -> str:
    def data(kind: str, path: Path) -> dict[str, str]:
        if embed:
            return {f"{kind}-data": base64.b64encode(path.read_bytes()).decode()}
        return {kind: str(path)}

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "distributary",
                "cluster": {"server": server, **data("certificate-authority", pki / "ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    **data("client-certificate", pki / f"{user}.crt"),
                    **data("client-key", pki / f"{user}.key"),
                },
            }
        ],
        "contexts": [
            {"name": "distributary", "context": {"cluster": "distributary", "user": user}}
        ],
        "current-context": "distributary",
    }
    return yaml.safe_dump(config, sort_keys=False)


def client_kubeconfig(server: str, pki: Path, user: str) -> str:
    """A kubeconfig for the client certificate `user`.crt (and its key) in `pki`, by path."""
    return kubeconfig(server, pki, user, embed=False)
