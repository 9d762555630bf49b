"""Throwaway TLS material for a secured test bed: a CA, a broker certificate, a client one.

The secured embedded broker (`local.broker.BrokerSecurity`) of the integration tests and of
`e2e/local.py --secured` serves with these. They are made with the `openssl` command, which every
machine that builds Kafka has, so no Python cryptography library joins the dependencies. Keys are
unencrypted PKCS#8 (`BEGIN PRIVATE KEY`), as Java's PEM key store reads them; certificates last
two days.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from distributary.errors import DistributaryError


class CertificateError(DistributaryError, RuntimeError):
    """openssl is missing or failed; the message says which command and why."""


@dataclass(frozen=True)
class Certificates:
    """PEM files: the CA, the broker's certificate and key, the client's certificate and key,
    and the client's key and certificate in one file (a Java PEM key store)."""

    ca: Path
    broker: Path
    broker_key: Path
    client: Path
    client_key: Path
    client_keystore: Path


def _openssl(*args: str) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise CertificateError("openssl is needed to make test certificates: install it")
    result = subprocess.run([openssl, *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise CertificateError(f"openssl {args[0]} failed: {result.stderr.strip()[-500:]}")


def _signed(folder: Path, name: str, extensions: str, ca: Path, ca_key: Path) -> None:
    (folder / f"{name}.ext").write_text(extensions)
    _openssl(
        "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
        "-keyout", str(folder / f"{name}.key"), "-out", str(folder / f"{name}.csr"),
    )  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(folder / f"{name}.csr"), "-CA", str(ca),
        "-CAkey", str(ca_key), "-CAcreateserial", "-days", "2", "-sha256",
        "-extfile", str(folder / f"{name}.ext"), "-out", str(folder / f"{name}.pem"),
    )  # fmt: skip


def make_certificates(folder: Path) -> Certificates:
    """A CA and the broker's (for 127.0.0.1 and localhost) and a client's certificates signed
    by it, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-sha256",
        "-subj", "/CN=distributary-test-ca", "-keyout", str(ca_key), "-out", str(ca),
    )  # fmt: skip
    # The broker's certificate serves its listeners and is also its client certificate on
    # the mTLS listener between brokers.
    broker_extensions = (
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    _signed(folder, "broker", broker_extensions, ca, ca_key)
    _signed(folder, "client", "extendedKeyUsage=clientAuth\n", ca, ca_key)
    keystore = folder / "client-keystore.pem"
    keystore.write_text((folder / "client.key").read_text() + (folder / "client.pem").read_text())
    for key in (ca_key, folder / "broker.key", folder / "client.key", keystore):
        key.chmod(0o600)
    return Certificates(
        ca=ca,
        broker=folder / "broker.pem",
        broker_key=folder / "broker.key",
        client=folder / "client.pem",
        client_key=folder / "client.key",
        client_keystore=keystore,
    )
