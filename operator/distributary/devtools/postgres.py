"""A throw-away PostgreSQL 15 server for tests, benchmarks and the examples' change data capture.

It is the Debian package's own `initdb` and `postgres`, started on a free loopback port with its
data under a folder, configured for logical decoding (what Debezium's `pgoutput` plugin reads):
`wal_level=logical` and room for replication slots and WAL senders. TCP clients log in with a
password (scram-sha-256, also for replication connections), as they would against a real server,
so a connector's password handling is exercised; the superuser's password is set by `initdb` from
a file that is removed at once, and kept in the folder (mode 0600) for the tests.

PostgreSQL refuses to run as root. As root, the server runs as the `postgres` user the package
creates; its data then lives in a folder that user can reach (a pytest folder is private to root),
linked from the given folder and removed when this process exits. The server is asked to die with
this process, so a killed test run leaves no server behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import quote

import psycopg

from distributary import processes
from distributary.errors import DistributaryError
from distributary.processes import free_port

PG_VERSION = 15
INSTALL_HINT = "run tools/system-packages.sh (it installs postgresql-15)"
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "wal_level": "logical",
    "max_replication_slots": "20",
    "max_wal_senders": "20",
    "fsync": "off",  # a throw-away server: speed over durability across power loss
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "log_min_messages": "warning",
}
PG_HBA = """\
local all all trust
host all all 127.0.0.1/32 scram-sha-256
host replication all 127.0.0.1/32 scram-sha-256
"""


class PostgresError(DistributaryError, RuntimeError):
    """The test PostgreSQL could not be set up or started; the message says why."""


def bindir() -> Path:
    """The folder of PostgreSQL 15's programs (`initdb`, `postgres`)."""
    candidates = [Path(f"/usr/lib/postgresql/{PG_VERSION}/bin")]
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(Path(out.stdout.strip()))
    for candidate in candidates:
        if (candidate / "initdb").exists() and (candidate / "postgres").exists():
            return candidate
    raise PostgresError(
        f"PostgreSQL {PG_VERSION} (initdb, postgres) is not installed: {INSTALL_HINT}"
    )


def _reachable_by_others(path: Path) -> bool:
    """Whether a user other than the owner can reach `path` (every parent searchable by all)."""
    return all(os.stat(p).st_mode & 0o001 for p in [path, *path.parents])


class PostgresServer:
    """A PostgreSQL 15 server on 127.0.0.1 whose data lives under `folder`; with `pods_at` (the
    address a test node's pods reach the host at) and `pods_cidr` (their network), listening
    there too and admitting the pods' connections with a password."""

    def __init__(
        self,
        folder: Path,
        port: int | None = None,
        *,
        pods_at: str | None = None,
        pods_cidr: str | None = None,
    ) -> None:
        self.folder = folder.resolve()
        self.pods_at = pods_at
        self.pods_cidr = pods_cidr
        self._port = port or 0
        self._process: processes.Supervised | None = None
        self._user: pwd.struct_passwd | None = None  # the OS user the server runs as, as root

    @property
    def host(self) -> str:
        """Where the server listens."""
        return "127.0.0.1"

    @property
    def port(self) -> int:
        """The server's TCP port (chosen at start, kept in the folder for the next)."""
        return self._port

    @property
    def superuser(self) -> str:
        """The superuser's name."""
        return "postgres"

    @property
    def password(self) -> str:
        """The superuser's password."""
        return (self.folder / "password").read_text()

    @property
    def log_file(self) -> Path:
        """The server's log."""
        return self.folder / "postgres.log"

    @property
    def home(self) -> Path:
        """Where the data and the socket are: the folder, or (as root) the folder it links to."""
        return (self.folder / "home").resolve()

    def dsn(
        self, database: str = "postgres", user: str | None = None, password: str | None = None
    ) -> str:
        """A libpq URI to `database`, as the superuser unless `user` (and `password`) are given."""
        name = user or self.superuser
        secret = password if password is not None else (self.password if user is None else "")
        auth = f"{quote(name, safe='')}:{quote(secret, safe='')}@" if secret else f"{name}@"
        return f"postgresql://{auth}{self.host}:{self.port}/{quote(database, safe='')}"

    def start(self, timeout: float = 60.0) -> PostgresServer:
        """Start the server (creating its cluster on first use) and return once it serves."""
        binaries = bindir()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._prepare_home()
        self._choose_port()
        if not (self.home / "data" / "PG_VERSION").exists():
            self._initdb(binaries)
        hba = PG_HBA
        if self.pods_cidr:
            hba += f"host all all {self.pods_cidr} scram-sha-256\n"
            hba += f"host replication all {self.pods_cidr} scram-sha-256\n"  # Debezium's
        (self.home / "data" / "pg_hba.conf").write_text(hba)
        self._chown(self.home / "data" / "pg_hba.conf")
        settings = {
            **SETTINGS,
            **({"listen_addresses": f"127.0.0.1,{self.pods_at}"} if self.pods_at else {}),
            "port": str(self.port),
            "unix_socket_directories": str(self.home / "run"),
        }
        command = [str(binaries / "postgres"), "-D", str(self.home / "data")]
        command += [arg for key, value in settings.items() for arg in ("-c", f"{key}={value}")]
        user = (self._user.pw_uid, self._user.pw_gid) if self._user is not None else None
        # Stopped with SIGINT (fast shutdown) to the postmaster alone, which ends its backends.
        self._process = processes.start(
            command, log=self.log_file, stop_signal=signal.SIGINT, whole_group=False, user=user
        )
        atexit.register(self.stop)
        self._wait_until_serving(timeout)
        return self

    def _prepare_home(self) -> None:
        link = self.folder / "home"
        if os.geteuid() == 0:
            try:
                self._user = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresError(
                    f"as root, PostgreSQL runs as the postgres user, who is missing: {INSTALL_HINT}"
                ) from None
        if link.exists():
            return
        if self._user is None or _reachable_by_others(self.folder):
            link.mkdir()
        else:
            elsewhere = Path(tempfile.mkdtemp(prefix="distributary-postgres-"))
            atexit.register(shutil.rmtree, elsewhere, ignore_errors=True)
            link.symlink_to(elsewhere)
        (self.home / "run").mkdir(exist_ok=True)
        for path in (self.home, self.home / "run"):
            self._chown(path)

    def _chown(self, path: Path) -> None:
        if self._user is not None:
            os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def _child_setup(self) -> None:
        """In initdb's process: become the postgres user (as root)."""
        if self._user is not None:
            os.setgroups([])
            os.setgid(self._user.pw_gid)
            os.setuid(self._user.pw_uid)

    def _choose_port(self) -> None:
        saved = self.folder / "port"
        if not self._port:
            self._port = int(saved.read_text()) if saved.exists() else free_port()
        saved.write_text(f"{self._port}\n")

    def _initdb(self, binaries: Path) -> None:
        password = secrets.token_urlsafe(18)
        fd = os.open(self.folder / "password", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(password)
        pwfile = self.home / "initdb-password"
        pwfile.write_text(password + "\n")
        pwfile.chmod(0o600)
        self._chown(pwfile)
        try:
            result = subprocess.run(
                [
                    str(binaries / "initdb"),
                    "-D",
                    str(self.home / "data"),
                    "-U",
                    self.superuser,
                    f"--pwfile={pwfile}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--no-locale",
                    "--no-sync",
                ],
                capture_output=True,
                text=True,
                check=False,
                preexec_fn=self._child_setup,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise PostgresError(
                f"initdb in {self.home / 'data'} failed: {(result.stdout + result.stderr)[-800:]}"
            )

    def _wait_until_serving(self, timeout: float) -> None:
        assert self._process is not None

        def serving() -> bool:
            with (
                contextlib.suppress(psycopg.OperationalError),
                psycopg.connect(self.dsn(), connect_timeout=2),
            ):
                return True
            return False

        if self._process.wait_until_serving(serving, timeout, interval=0.1):
            return
        if self._process.poll() is not None:
            raise PostgresError(
                f"PostgreSQL exited with code {self._process.returncode} while starting; "
                f"see {self.log_file}"
            )
        self.kill()
        raise PostgresError(f"PostgreSQL did not start within {timeout:.0f}s; see {self.log_file}")

    def execute(self, sql: str, params: Any = None, *, database: str = "postgres") -> list[Any]:
        """Run one statement as the superuser (autocommit); the rows it returns, if any."""
        with psycopg.connect(self.dsn(database), autocommit=True) as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def create_database(self, name: str) -> str:
        """Create database `name` (if it is not there yet); its DSN."""
        exists = self.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if not exists:
            self.execute(f'CREATE DATABASE "{name}"')
        return self.dsn(name)

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the server down (fast shutdown: sessions are ended), killing it if it hangs."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        process.stop(timeout)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self.stop)
        process.kill()

    def __enter__(self) -> PostgresServer:
        return self.start() if self._process is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
