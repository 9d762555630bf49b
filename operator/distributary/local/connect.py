"""A Kafka Connect worker for `distributary run`, tests and benchmarks: change data capture.

Like the embedded broker (`local.broker`), it is the real thing started from cached Maven jars:
Apache Kafka's Connect runtime in distributed mode, one worker, with Debezium's PostgreSQL
connector on its classpath (`artifacts.KAFKA_CONNECT`; no plugin path). Distributed mode, even
for one worker, because only it keeps connector configs, source offsets and statuses in Kafka
topics and offers exactly-once source delivery: a task's records and its source offsets commit in
one Kafka transaction, so a worker killed at any point neither loses nor repeats a change.

The worker knows no secret. Connector configs name theirs with `${dir:FOLDER:FILE}`
(Kafka's DirectoryConfigProvider, allowed to read the secrets folder only), so no database
password is ever stored in the config topic. The worker's own Kafka password, with SASL, reaches
the JVM in an environment variable that worker.properties names (`${env:...}`), never in a file.
It is stopped with SIGTERM and killed only if that hangs; `kill` is SIGKILL, for crash tests.

Its REST API is `backends.connect.ConnectClient`, which the operator uses too.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from distributary import processes
from distributary.artifacts import KAFKA_CONNECT, jars
from distributary.backends.connect import ConnectError
from distributary.kafka.connection import password
from distributary.local.broker import java_binary, jvm_performance_options
from distributary.plan.access.kafka_connection import KafkaSecurity
from distributary.processes import free_port

MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
DIRECTORY_PROVIDER = "org.apache.kafka.common.config.provider.DirectoryConfigProvider"
ENV_PROVIDER = "org.apache.kafka.common.config.provider.EnvVarConfigProvider"
PASSWORD_VARIABLE = "DISTRIBUTARY_CONNECT_KAFKA_PASSWORD"
ORPHAN_GRACE = 30.0  # seconds a worker left by a killed run is given to stop
# The clients of a worker: its own (internal topics, group), and those it makes for connectors.
CLIENT_PREFIXES = ("", "producer.", "consumer.", "admin.")

_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
logger.common.name = org.apache.kafka.common
logger.common.level = WARN
logger.plugins.name = org.apache.kafka.connect.runtime.isolation
logger.plugins.level = WARN
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
"""


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class ConnectWorker:
    """One Kafka Connect worker in distributed mode, its state (settings, log, port) in
    `folder`, its connectors' configs, offsets and statuses in `{topic_prefix}.*` topics."""

    def __init__(
        self,
        folder: Path,
        bootstrap_servers: str,
        *,
        group_id: str,
        topic_prefix: str,
        security: KafkaSecurity | None = None,
        secrets_dir: Path | None = None,
        rest_port: int | None = None,
        replication_factor: int = 1,
        heap: str = "512m",
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.folder = folder.resolve()
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self.topic_prefix = topic_prefix
        self.security = security
        self.secrets_dir = secrets_dir.resolve() if secrets_dir else None
        self.replication_factor = replication_factor
        self.heap = heap
        self.settings = dict(settings or {})  # worker.properties beside (or over) the defaults
        self.port = rest_port or 0
        self._process: processes.Supervised | None = None

    @property
    def url(self) -> str:
        """The REST API's base URL."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        """The worker's own log (Connect's and the connectors')."""
        return self.folder / "worker.log"

    def _choose_port(self) -> None:
        saved = self.folder / "port"
        if not self.port and saved.exists():
            port = int(saved.read_text().strip() or 0)
            self.port = port if port and _port_free(port) else 0
        self.port = self.port or free_port()
        saved.write_text(f"{self.port}\n")

    def _client_settings(self) -> dict[str, str]:
        """Java client settings for `security`, the password as an `${env:...}` reference."""
        security = self.security
        if security is None or security.protocol == "PLAINTEXT":
            return {}
        if security.client_certificate and (
            security.ssl_certificate_location != security.ssl_key_location
        ):
            keystore = self._keystore(security)
            security = security.model_copy(
                update={"ssl_certificate_location": keystore, "ssl_key_location": keystore}
            )
        reference = f"${{env:{PASSWORD_VARIABLE}}}" if security.sasl else None
        return security.java_properties(reference)

    def _keystore(self, security: KafkaSecurity) -> str:
        """The client key and certificate in one PEM file (mode 0600), as Java's PEM key store
        wants; the files themselves stay where they are."""
        assert security.ssl_key_location
        assert security.ssl_certificate_location
        keystore = self.folder / "client-keystore.pem"
        fd = os.open(keystore, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(Path(security.ssl_key_location).read_text().rstrip() + "\n")
            out.write(Path(security.ssl_certificate_location).read_text().rstrip() + "\n")
        return str(keystore)

    def _write_config(self) -> Path:
        # The directory provider only with a secrets folder, and allowed to read nothing else.
        providers = {"config.providers": "dir,env" if self.secrets_dir else "env"}
        if self.secrets_dir:
            providers["config.providers.dir.class"] = DIRECTORY_PROVIDER
            providers["config.providers.dir.param.allowed.paths"] = str(self.secrets_dir)
        providers["config.providers.env.class"] = ENV_PROVIDER
        providers["config.providers.env.param.allowlist.pattern"] = f"^{PASSWORD_VARIABLE}$"
        rf = str(self.replication_factor)
        settings = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": self.group_id,
            "config.storage.topic": f"{self.topic_prefix}.configs",
            "offset.storage.topic": f"{self.topic_prefix}.offsets",
            "status.storage.topic": f"{self.topic_prefix}.status",
            "config.storage.replication.factor": rf,
            "offset.storage.replication.factor": rf,
            "status.storage.replication.factor": rf,
            "key.converter": JSON_CONVERTER,
            "value.converter": JSON_CONVERTER,
            "key.converter.schemas.enable": "false",
            "value.converter.schemas.enable": "false",
            "listeners": f"http://127.0.0.1:{self.port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port),
            "exactly.once.source.support": "enabled",
            # Every plugin on the classpath declares itself; no scan, a faster start.
            "plugin.discovery": "service_load",
            "offset.flush.interval.ms": "1000",
            # A killed task leaves its transaction (records and offsets) open; until the broker
            # aborts it, no worker reads the offsets topic to its end, so none starts. Kafka's
            # default (60 s) would hold a restarted worker that long.
            "producer.transaction.timeout.ms": "10000",
            # One worker: a restarted worker takes its connectors back at once, instead of
            # waiting (5 minutes by default) for the worker it replaces to return.
            "scheduled.rebalance.max.delay.ms": "0",
            "session.timeout.ms": "6000",
            "heartbeat.interval.ms": "1000",
            **providers,
            **{
                f"{prefix}{key}": value
                for prefix in CLIENT_PREFIXES
                for key, value in self._client_settings().items()
            },
            **self.settings,
        }
        config = self.folder / "worker.properties"
        config.write_text("".join(f"{key}={_escaped(value)}\n" for key, value in settings.items()))
        (self.folder / "log4j2.properties").write_text(_LOG4J.format(log=self.log_file))
        return config

    def _environment(self) -> dict[str, str]:
        environ = {k: v for k, v in os.environ.items() if k != PASSWORD_VARIABLE}
        if self.security is not None and self.security.sasl:
            secret = password(self.security)
            assert secret is not None
            environ[PASSWORD_VARIABLE] = secret
        return environ

    def start(self, timeout: float = 120.0) -> ConnectWorker:
        """Start the worker and return once it has joined its group and serves its REST API."""
        java = java_binary()
        classpath = os.pathsep.join(str(j) for j in jars(KAFKA_CONNECT))
        self.folder.mkdir(parents=True, exist_ok=True)
        self._check_not_running()
        self._choose_port()
        config = self._write_config()
        command = [
            java,
            f"-Xmx{self.heap}",
            *jvm_performance_options(),
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={self.folder / 'log4j2.properties'}",
            "-cp",
            classpath,
            MAIN_CLASS,
            str(config),
        ]
        self._process = processes.start(
            command, log=self.folder / "worker.out", env=self._environment()
        )
        (self.folder / "worker.pid").write_text(f"{self._process.pid}\n")
        (self.folder / "worker.owner").write_text(f"{os.getpid()}\n")
        atexit.register(self.stop)
        self._wait_until_serving(timeout)
        return self

    def _check_not_running(self) -> None:
        pid_file = self.folder / "worker.pid"
        if not pid_file.exists():
            return
        pid = int(pid_file.read_text().strip() or 0)
        cmdline = Path(f"/proc/{pid}/cmdline")
        own_config = str(self.folder / "worker.properties").encode()

        def running() -> bool:
            try:
                return own_config in cmdline.read_bytes()
            except OSError:
                return False

        if pid and running() and _orphaned(self.folder):
            # Left by a process that was killed: told to stop when its parent died, it is
            # given a while to commit and go, then killed (its records are transactional).
            deadline = time.monotonic() + ORPHAN_GRACE
            while running() and time.monotonic() < deadline:
                time.sleep(0.2)
            if running():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                time.sleep(0.5)
        if pid and running():
            raise ConnectError(
                f"a Kafka Connect worker (pid {pid}) is already using {self.folder}: "
                f"stop it (kill {pid}) or choose another folder"
            )

    def _wait_until_serving(self, timeout: float) -> None:
        assert self._process is not None

        def serving() -> bool:
            return _answers(f"{self.url}/") and _answers(f"{self.url}/connectors")

        if self._process.wait_until_serving(serving, timeout):
            return
        if self._process.poll() is not None:
            raise ConnectError(
                f"Kafka Connect exited with code {self._process.returncode} while starting; "
                f"see {self.log_file} and {self.folder / 'worker.out'}"
            )
        self.stop()
        raise ConnectError(
            f"Kafka Connect did not join group {self.group_id} within {timeout:.0f}s; "
            f"see {self.log_file}"
        )

    def exit_code(self) -> int | None:
        """The worker's exit code once it has exited on its own; None while it runs (or was
        stopped by `stop`)."""
        return self._process.poll() if self._process is not None else None

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the worker cleanly (SIGTERM: tasks stop, offsets commit), killing it if that
        takes too long."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        (self.folder / "worker.pid").unlink(missing_ok=True)
        process.stop(timeout, what="Kafka Connect")

    def kill(self) -> None:
        """Kill the worker at once (SIGKILL), as a crash would: nothing is flushed."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        (self.folder / "worker.pid").unlink(missing_ok=True)
        process.kill()

    def __enter__(self) -> ConnectWorker:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _orphaned(folder: Path) -> bool:
    """Whether the process that started the folder's worker has died."""
    try:
        owner = int((folder / "worker.owner").read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(owner, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _escaped(value: str) -> str:
    """A value as a Java .properties line holds it (backslashes and line breaks escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def _answers(url: str) -> bool:
    with (
        contextlib.suppress(OSError, urllib.error.URLError),
        urllib.request.urlopen(url, timeout=2) as response,
    ):
        return bool(response.status == 200)
    return False
