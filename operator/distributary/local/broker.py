"""An embedded single-node Kafka broker (KRaft) for `distributary run`, tests and benchmarks.

One launcher serves all three so that what is tested is what people run. The broker is a real
Apache Kafka process started from cached Maven jars: combined broker and controller roles, loopback
listeners on free ports, data under a state folder that survives restarts (the cluster id and the
ports are kept there, so a second start finds its data). It is stopped with SIGTERM, Kafka's
controlled shutdown, and killed only if that hangs.

Given `BrokerSecurity` it serves clients only over TLS, as a secured production cluster does: a
SASL_SSL listener (SCRAM-SHA-512) and an SSL listener that requires client certificates (mutual
TLS), with no plaintext listener for clients (the KRaft controller's stays internal, on loopback).
The brokers talk to each other over the SSL listener with the broker's own certificate, and the
SCRAM users are created through it once the broker serves, so no password is ever on a command
line or in server.properties.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import re
import shutil
import socket
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from distributary import processes
from distributary.artifacts import KAFKA_BROKER, jars
from distributary.errors import DistributaryError
from distributary.kafka.cluster import cluster_ready
from distributary.kafka.connection import add_scram_user, client_settings
from distributary.plan.access.kafka_connection import KafkaSecurity

MIN_JAVA = 17


class BrokerError(DistributaryError, RuntimeError):
    """The embedded broker could not start; the message says why and what to do."""


def jvm_performance_options() -> list[str]:
    """The garbage collector and tuning options of the broker's and Connect's JVMs: Kafka's own
    `KAFKA_JVM_PERFORMANCE_OPTS`, as its start scripts read it, else G1 (what they default to).
    The test suite sets the serial collector there: its JVMs live minutes on two cores, where
    G1's concurrent threads cost more CPU than they save."""
    configured = os.environ.get("KAFKA_JVM_PERFORMANCE_OPTS", "").split()
    return configured or ["-XX:+UseG1GC"]


def java_binary() -> str:
    """The `java` to run: $JAVA_HOME/bin/java, else the one on PATH; at least Java 17."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise BrokerError(
            f"Java {MIN_JAVA} or newer is needed to run Kafka and Spark: install a "
            "JDK (e.g. apt-get install openjdk-17-jdk) or set JAVA_HOME"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise BrokerError(
            f"{java} is Java {major or 'of an unknown version'}; Kafka and Spark "
            f"need Java {MIN_JAVA} or newer: install one or set JAVA_HOME"
        )
    return java


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        # As the broker itself binds: a port in TIME_WAIT from its last run counts as free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
"""


SCRAM_MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class BrokerSecurity:
    """What a secured embedded broker serves with: PEM files of the CA that signs its and its
    clients' certificates, its certificate (naming 127.0.0.1) and its unencrypted PKCS#8 key,
    and the SCRAM-SHA-512 users of its SASL_SSL listener (name -> password)."""

    ca: Path
    certificate: Path
    key: Path
    scram_users: Mapping[str, str] = field(default_factory=dict)


BIND_ATTEMPTS = 3  # starts with new ports when a port chosen free was taken meanwhile


def _said_since(sizes: Mapping[Path, int], words: bytes) -> bool:
    """Whether any of the files has `words` past the size it had (`sizes`)."""
    for path, size in sizes.items():
        if path.exists():
            with open(path, "rb") as text:
                text.seek(size)
                if words in text.read():
                    return True
    return False


class EmbeddedBroker:
    """A single-node KRaft Kafka broker whose data lives under `state_dir`; plaintext, or
    with `security` a SASL_SSL and an mTLS listener only.

    With `pods_at` (the address a test node's pods reach the host at, `devtools.node`), a
    plaintext listener more, on every address of the host and advertised at `pods_at`, for
    clients in pods (`pods_bootstrap_servers`); the others stay on loopback."""

    def __init__(
        self,
        state_dir: Path,
        *,
        heap: str = "512m",
        settings: Mapping[str, str] | None = None,
        security: BrokerSecurity | None = None,
        pods_at: str | None = None,
    ) -> None:
        if pods_at is not None and security is not None:
            raise ValueError("a listener for pods is plaintext: pods_at and security exclude")
        self.state_dir = state_dir.resolve()
        self.heap = heap
        self.settings = dict(settings or {})  # server.properties beside (or over) the defaults
        self.security = security
        self.port = 0
        self.controller_port = 0
        self.ssl_port = 0  # the mTLS listener's, when secured
        self.pods_at = pods_at
        self.pods_port = 0  # the pods' listener's, with pods_at
        self._process: processes.Supervised | None = None

    @property
    def bootstrap_servers(self) -> str:
        """`host:port` for clients (secured: the SASL_SSL listener's)."""
        return f"127.0.0.1:{self.port}"

    @property
    def ssl_bootstrap_servers(self) -> str:
        """`host:port` of the mTLS listener (secured brokers only)."""
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def pods_bootstrap_servers(self) -> str:
        """`host:port` for clients in the node's pods (with `pods_at` only)."""
        if self.pods_at is None:
            raise ValueError("this broker has no listener for pods: start it with pods_at")
        return f"{self.pods_at}:{self.pods_port}"

    @property
    def own_security(self) -> KafkaSecurity | None:
        """How the broker's own probe connects (to the mTLS listener, with the broker's
        certificate); None for a plaintext broker."""
        if self.security is None:
            return None
        return KafkaSecurity(
            protocol="SSL",
            ssl_ca_location=str(self.security.ca),
            ssl_certificate_location=str(self.security.certificate),
            ssl_key_location=str(self.security.key),
        )

    @property
    def log_file(self) -> Path:
        """The broker's own log."""
        return self.state_dir / "broker.log"

    def _choose_ports(self) -> None:
        """The listeners' ports: those of the last start if still free, else free ones."""
        names = ["port", "controller_port"]
        names += ["ssl_port"] if self.security is not None else []
        names += ["pods_port"] if self.pods_at is not None else []
        saved = self.state_dir / "ports"
        if saved.exists():
            ports = [int(p) for p in saved.read_text().split()]
            if len(ports) == len(names) and all(_port_free(p) for p in ports):
                for name, port in zip(names, ports, strict=True):
                    setattr(self, name, port)
                return
        chosen: list[int] = []
        while len(chosen) < len(names):
            port = processes.free_port()
            if port not in chosen:
                chosen.append(port)
        for name, port in zip(names, chosen, strict=True):
            setattr(self, name, port)
        saved.write_text(" ".join(str(p) for p in chosen) + "\n")

    def _listeners(self) -> list[str]:
        """server.properties lines of the listeners: plaintext, or SASL_SSL and mTLS."""
        controller = f"CONTROLLER://127.0.0.1:{self.controller_port}"
        if self.security is None:
            plaintext = f"PLAINTEXT://127.0.0.1:{self.port}"
            pods, advertised, mapped = "", "", ""
            if self.pods_at is not None:
                pods = f",PODS://0.0.0.0:{self.pods_port}"
                advertised, mapped = f",PODS://{self.pods_at}:{self.pods_port}", ",PODS:PLAINTEXT"
            return [
                f"listeners={plaintext},{controller}{pods}",
                f"advertised.listeners={plaintext}{advertised}",
                "inter.broker.listener.name=PLAINTEXT",
                f"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{mapped}",
            ]
        sasl, ssl = f"SASL_SSL://127.0.0.1:{self.port}", f"SSL://127.0.0.1:{self.ssl_port}"
        return [
            f"listeners={sasl},{ssl},{controller}",
            f"advertised.listeners={sasl},{ssl}",
            "inter.broker.listener.name=SSL",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,SSL:SSL,CONTROLLER:PLAINTEXT",
            f"sasl.enabled.mechanisms={SCRAM_MECHANISM}",
            f"listener.name.sasl_ssl.{SCRAM_MECHANISM.lower()}.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "listener.name.ssl.ssl.client.auth=required",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self._keystore()}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.security.ca}",
        ]

    def _keystore(self) -> Path:
        """The broker's key and certificate in one PEM file, as Java's PEM key store wants."""
        assert self.security is not None
        keystore = self.state_dir / "broker-keystore.pem"
        fd = os.open(keystore, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(self.security.key.read_text().rstrip() + "\n")
            out.write(self.security.certificate.read_text().rstrip() + "\n")
        return keystore

    def _write_config(self) -> Path:
        data = self.state_dir / "data"
        config = self.state_dir / "server.properties"
        config.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                    *self._listeners(),
                    "controller.listener.names=CONTROLLER",
                    f"log.dirs={data}",
                    "num.partitions=1",
                    "auto.create.topics.enable=false",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=4",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "share.coordinator.state.topic.replication.factor=1",
                    "share.coordinator.state.topic.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    # One node is its own controller: no other broker needs the controller's
                    # no-op records (two a second) to see it alive, nor heartbeats every 2 s.
                    # Idle, the broker used 2.3 CPU-s per 30 s instead of 3.75 on two cores.
                    "metadata.max.idle.interval.ms=0",
                    "broker.heartbeat.interval.ms=5000",
                    "broker.session.timeout.ms=15000",
                    # Compaction and retention act within seconds, so tests can observe them.
                    "log.retention.check.interval.ms=5000",
                    "log.cleaner.backoff.ms=2000",
                    *(f"{key}={value}" for key, value in self.settings.items()),
                    "",
                ]
            )
        )
        (self.state_dir / "log4j2.properties").write_text(_LOG4J.format(log=self.log_file))
        return config

    def _java_command(self, java: str, main: str, *args: str) -> list[str]:
        classpath = os.pathsep.join(str(j) for j in jars(KAFKA_BROKER))
        return [
            java,
            f"-Xmx{self.heap}",
            *jvm_performance_options(),
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.state_dir / 'log4j2.properties'}",
            "-cp",
            classpath,
            main,
            *args,
        ]

    def _format(self, java: str, config: Path) -> None:
        if (self.state_dir / "data" / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        result = subprocess.run(
            self._java_command(
                java,
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={cluster_id}",
                "-c",
                str(config),
            ),
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise BrokerError(
                f"formatting Kafka storage in {self.state_dir / 'data'} failed: "
                f"{(result.stdout + result.stderr).strip()[-800:]}"
            )

    def start(self, timeout: float = 90.0) -> EmbeddedBroker:
        """Start the broker and return once it accepts connections."""
        java = java_binary()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._check_not_running()
        for attempt in range(1, BIND_ATTEMPTS + 1):
            self._choose_ports()
            config = self._write_config()
            self._format(java, config)
            log = self.state_dir / "broker.out"
            said_before = {f: f.stat().st_size if f.exists() else 0 for f in (log, self.log_file)}
            command = self._java_command(java, "kafka.Kafka", str(config))
            self._process = processes.start(command, log=log)
            (self.state_dir / "broker.pid").write_text(f"{self._process.pid}\n")
            atexit.register(self.stop)
            try:
                self._wait_until_serving(timeout)
                break
            except BrokerError:
                # A port found free was taken by another process before Kafka bound it (the
                # machine's other programs choose free ports too): new ports, once more.
                if not _said_since(said_before, b"Address already in use") or (
                    attempt == BIND_ATTEMPTS
                ):
                    raise
                (self.state_dir / "ports").unlink(missing_ok=True)
        if self.security is not None:
            for user, password in self.security.scram_users.items():
                add_scram_user(
                    self.ssl_bootstrap_servers, self.own_security, user, password, SCRAM_MECHANISM
                )
        return self

    def _check_not_running(self) -> None:
        pid_file = self.state_dir / "broker.pid"
        if not pid_file.exists():
            return
        pid = int(pid_file.read_text().strip() or 0)
        cmdline = Path(f"/proc/{pid}/cmdline")
        own_config = str(self.state_dir / "server.properties").encode()
        if pid and cmdline.exists() and own_config in cmdline.read_bytes():
            raise BrokerError(
                f"a Kafka broker (pid {pid}) is already using {self.state_dir}: "
                f"stop it (kill {pid}) or choose another state folder"
            )

    def _wait_until_serving(self, timeout: float) -> None:
        assert self._process is not None
        if self._process.wait_until_serving(self._serving, timeout):
            return
        if self._process.poll() is not None:
            raise BrokerError(
                f"Kafka exited with code {self._process.returncode} while "
                f"starting; see {self.log_file} and "
                f"{self.state_dir / 'broker.out'}"
            )
        self.stop()
        raise BrokerError(f"Kafka did not start within {timeout:.0f}s; see {self.log_file}")

    def _serving(self) -> bool:
        port = self.ssl_port if self.security is not None else self.port
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            if self.security is None:
                return cluster_ready(self.bootstrap_servers)
            return cluster_ready(
                self.ssl_bootstrap_servers, client=client_settings(self.own_security)
            )
        return False

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the broker down cleanly (SIGTERM), killing it if that takes too long."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        (self.state_dir / "broker.pid").unlink(missing_ok=True)
        process.stop(timeout, what="Kafka")

    def __enter__(self) -> EmbeddedBroker:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
