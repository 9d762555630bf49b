"""What makes the control plane and the broker reachable from a node's pods, and nothing more
when no pods run: the API server's address, admission and certificate, the controllers pods
need, the broker's listener for pods, the scheduler's identity."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from distributary.devtools import kube_pki
from distributary.devtools.controlplane import ControlPlane
from distributary.devtools.node import kubelet_programs
from distributary.local.broker import BrokerSecurity, EmbeddedBroker

PORTS = {"etcd": 1, "peer": 2, "apiserver": 3, "kcm": 4}


def plane(tmp_path: Path, pods_at: str | None) -> ControlPlane:
    made = ControlPlane(tmp_path, pods_at=pods_at)
    made.ports = dict(PORTS)
    return made


def test_a_plane_without_pods_stays_on_loopback_without_service_account_admission(
    tmp_path: Path,
) -> None:
    made = plane(tmp_path, None)
    flags = made._apiserver_flags()
    assert "--bind-address=127.0.0.1" in flags
    assert "--advertise-address=127.0.0.1" in flags
    assert "--disable-admission-plugins=ServiceAccount" in flags
    controllers = made._controllers_flags(tmp_path / "k")
    assert [flag.split("=")[0] for flag in controllers] == ["--kubeconfig", "--healthz-port"]


def test_a_plane_for_pods_listens_for_them_and_admits_them_with_their_accounts(
    tmp_path: Path,
) -> None:
    made = plane(tmp_path, "10.244.0.1")
    flags = made._apiserver_flags()
    assert "--bind-address=0.0.0.0" in flags
    assert "--advertise-address=10.244.0.1" in flags  # the `kubernetes` Service's endpoint
    assert not [f for f in flags if f.startswith("--disable-admission-plugins")]
    controllers = made._controllers_flags(tmp_path / "k")
    assert controllers[-2:] == ["--pods", f"--root-ca-file={made.pki / 'ca.crt'}"]


def test_the_api_servers_certificate_names_the_address_pods_reach_it_at() -> None:
    _, plain = kube_pki._apiserver_certificate(None)
    _, for_pods = kube_pki._apiserver_certificate("10.244.0.1")
    assert "DNS:kubernetes.default.svc," in plain
    assert "IP:10.244.0.1" not in plain
    assert for_pods == plain + ", IP:10.244.0.1"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the certificates")
def test_a_certificate_is_kept_while_its_request_is_the_same_and_issued_again_otherwise(
    tmp_path: Path,
) -> None:
    kube_pki.write_certificates(tmp_path)
    first = (tmp_path / "apiserver.crt").read_bytes()
    kube_pki.write_certificates(tmp_path)
    assert (tmp_path / "apiserver.crt").read_bytes() == first
    kube_pki.write_certificates(tmp_path, "10.244.0.1")
    again = (tmp_path / "apiserver.crt").read_bytes()
    assert again != first
    text = subprocess.run(
        ["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", "apiserver.crt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "IP Address:10.244.0.1" in text
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", "ca.crt", "apiserver.crt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stderr  # by the CA made the first time


def test_the_broker_adds_a_plaintext_listener_for_pods_advertised_at_their_address(
    tmp_path: Path,
) -> None:
    broker = EmbeddedBroker(tmp_path, pods_at="10.244.0.1")
    broker.port, broker.controller_port, broker.pods_port = 9092, 9093, 9094
    lines = dict(line.split("=", 1) for line in broker._listeners())
    assert lines["listeners"].split(",") == [
        "PLAINTEXT://127.0.0.1:9092",
        "CONTROLLER://127.0.0.1:9093",
        "PODS://0.0.0.0:9094",
    ]
    assert lines["advertised.listeners"].split(",") == [
        "PLAINTEXT://127.0.0.1:9092",
        "PODS://10.244.0.1:9094",
    ]
    assert "PODS:PLAINTEXT" in lines["listener.security.protocol.map"].split(",")
    assert broker.pods_bootstrap_servers == "10.244.0.1:9094"


def test_a_broker_without_pods_listens_on_loopback_alone(tmp_path: Path) -> None:
    broker = EmbeddedBroker(tmp_path)
    broker.port, broker.controller_port = 9092, 9093
    assert not [line for line in broker._listeners() if "0.0.0.0" in line or "PODS" in line]
    with pytest.raises(ValueError, match="pods_at"):
        _ = broker.pods_bootstrap_servers


def test_a_secured_broker_has_no_plaintext_listener_for_pods(tmp_path: Path) -> None:
    security = BrokerSecurity(ca=tmp_path, certificate=tmp_path, key=tmp_path)
    with pytest.raises(ValueError, match="plaintext"):
        EmbeddedBroker(tmp_path, security=security, pods_at="10.244.0.1")


def test_the_scheduler_is_built_with_the_kubelet() -> None:
    assert "kube-scheduler" in kubelet_programs().binaries
