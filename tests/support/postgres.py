"""A throwaway PostgreSQL server for the tests, started from Debian's server binaries.

Needs the Debian package `postgresql` (binaries under /usr/lib/postgresql/<version>/bin; set
PROBER_PG_BIN to use another directory). The cluster lives in a temporary directory, listens on
a free port on 127.0.0.1 (its unix socket also goes in the temporary directory), trusts local
connections, runs without fsync, and is removed at the end. Run as root, the server runs as the
`postgres` OS user, because initdb and postgres refuse to run as root.

Use it from a test module:

    from tests.support.postgres import postgres_url  # noqa: F401

    def test_something(postgres_url): ...             # postgresql+psycopg://postgres@127.0.0.1:PORT/prober_test

`create_database(postgres_url, name)` makes another empty database on the same server.

Missing binaries FAIL the tests rather than skip them: CI must run them.
"""

from __future__ import annotations

import glob
import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

DEBIAN_PACKAGE = "postgresql"
DATABASE = "prober_test"


class PostgresUnavailable(RuntimeError):
    pass


def find_bindir() -> Path:
    """The directory holding initdb and pg_ctl: $PROBER_PG_BIN, else the newest Debian version."""
    override = os.environ.get("PROBER_PG_BIN")
    candidates = [override] if override else sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda path: _version_key(Path(path).parent.name), reverse=True)
    for candidate in candidates:
        bindir = Path(candidate)
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    where = f"PROBER_PG_BIN={override}" if override else "/usr/lib/postgresql/*/bin"
    raise PostgresUnavailable(f"PostgreSQL server binaries (initdb, pg_ctl) not found in {where}; install the "
                              f"Debian package: apt-get install -y {DEBIAN_PACKAGE}")


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresCluster:
    """One temporary cluster: `start()`, `url(dbname)`, `create_database(name)`, `stop()`."""

    def __init__(self, bindir: Path | None = None) -> None:
        self.bindir = bindir or find_bindir()
        self.base = Path(tempfile.mkdtemp(prefix="prober-pg-"))
        self.data = self.base / "data"
        self.sockets = self.base / "sockets"
        self.log = self.base / "server.log"
        self.port: int | None = None
        self._user: dict[str, int] = {}
        if os.geteuid() == 0:
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                raise PostgresUnavailable("running as root, but there is no `postgres` OS user to run the server "
                                          f"as (the Debian package {DEBIAN_PACKAGE} creates it)") from None
            self._user = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
            os.chown(self.base, account.pw_uid, account.pw_gid)
        self.sockets.mkdir(mode=0o700)
        if self._user:
            os.chown(self.sockets, self._user["user"], self._user["group"])

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        # Output goes to a file, not a pipe: the server must not inherit a pipe we wait on.
        with open(self.base / "commands.log", "a") as out:
            return subprocess.run([str(self.bindir / args[0]), *args[1:]], cwd=self.base, stdout=out,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **self._user)

    def _tail(self, path: Path, lines: int = 15) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def start(self) -> None:
        if self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
                     "--no-locale", "--no-sync").returncode != 0:
            raise PostgresUnavailable(f"initdb failed:\n{self._tail(self.base / 'commands.log')}")
        for _ in range(3):   # the free port can be taken between choosing and binding it
            self.port = _free_port()
            options = (f"-p {self.port} -k {shlex.quote(str(self.sockets))} -c listen_addresses=127.0.0.1 "
                       "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
            if self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options,
                         "-w", "-t", "60", "start").returncode == 0:
                return
        raise PostgresUnavailable(f"pg_ctl start failed:\n{self._tail(self.log)}")

    def url(self, dbname: str = DATABASE) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, name: str) -> str:
        return create_database(self.url(), name)

    def stop(self) -> None:
        if self.data.exists():
            if self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop").returncode != 0:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.base, ignore_errors=True)


# One server per test session, however many test modules import the fixture: pytest makes a
# separate session fixture for each importing module, so they share the cluster and the last
# one to finish stops it.
_shared: PostgresCluster | None = None
_users = 0


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A postgresql+psycopg URL of a database on a throwaway server, shared by the session."""
    global _shared, _users
    if _shared is None:
        cluster, problem = None, None
        try:
            cluster = PostgresCluster()
            cluster.start()
            cluster.create_database(DATABASE)
        except Exception as exc:
            problem = str(exc)
            if cluster is not None:
                cluster.stop()
        if problem is not None:
            pytest.fail(f"PostgreSQL for the tests: {problem}", pytrace=False)
        _shared = cluster
    _users += 1
    try:
        yield _shared.url()
    finally:
        _users -= 1
        if _users == 0:
            _shared.stop()
            _shared = None


def create_database(url: str, name: str) -> str:
    """Create database `name` on the server of `url` (a postgresql URL); return the new database's URL."""
    import psycopg
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    with psycopg.connect(host=parsed.host, port=parsed.port, user=parsed.username, dbname="postgres",
                         autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return parsed.set(database=name).render_as_string(hide_password=False)


def create_password_user(url: str, user: str, password: str) -> str:
    """A login role that must give its password (scram-sha-256 over TCP, unlike the trusted
    superuser) and a database it owns, on the server of `url`; return that database's URL with
    the password in it."""
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    with psycopg.connect(host=parsed.host, port=parsed.port, user=parsed.username, dbname="postgres",
                         autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(user), sql.Literal(password)))
        conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(user), sql.Identifier(user)))
        hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
        # pg_hba.conf is read top down: this line must come before the file's trust lines.
        hba.write_text(f"host all {user} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
        conn.execute("SELECT pg_reload_conf()")
    return parsed.set(username=user, password=password, database=user).render_as_string(hide_password=False)
