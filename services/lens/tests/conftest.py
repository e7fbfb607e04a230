"""Lens test fixtures: a real PostgreSQL server, Lens app instances, and kubeconfigs.

PostgreSQL: Debian's server binaries (package ``postgresql``) are started once per session
on 127.0.0.1 with an ephemeral port and a throw-away data directory. Without them the
PostgreSQL variants are skipped locally, but FAIL under CI (``CI`` set), where .ci/run
installs the package.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from lens_testkit import Lens, MakeLens, kubeconfig_with

from devcluster.services import free_port
from gpuplane_lens.main import build_app
from gpuplane_lens.settings import Settings

PG_INSTALL_HINT = (
    "apt-get install -y postgresql (Debian) — the Lens store tests need a real PostgreSQL server"
)


def _pg_bindir() -> Path | None:
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(os.path.realpath(pg_ctl)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(candidates[-1]).parent if candidates else None


def _as_postgres(cmd: list[str]) -> list[str]:
    # initdb and postgres refuse to run as root.
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A base DSN (``postgresql+psycopg://postgres@127.0.0.1:<port>``) of a private server."""
    bindir = _pg_bindir()
    if bindir is None:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL server binaries not found: {PG_INSTALL_HINT}")
        pytest.skip(f"PostgreSQL server binaries not found: {PG_INSTALL_HINT}")
    tmp = Path(tempfile.mkdtemp(prefix="lens-pg-"))
    data = tmp / "data"
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres", "postgres")
    os.chmod(tmp, 0o700)
    subprocess.run(
        _as_postgres(
            [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
        ),
        check=True,
        capture_output=True,
    )
    port = free_port()
    opts = f"-c listen_addresses=127.0.0.1 -p {port} -k {tmp} -c fsync=off -c full_page_writes=off"
    subprocess.run(
        _as_postgres(
            [str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(tmp / "log"), "-w", "start"]
        ),
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            _as_postgres([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(tmp, ignore_errors=True)


def _create_pg_database(base: str) -> str:
    import sqlalchemy as sa

    name = f"lens_{secrets.token_hex(4)}"
    engine = sa.create_engine(f"{base}/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return f"{base}/{name}"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One store backend per parametrisation: SQLite file, or a fresh database on the server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'lens.db'}"
    base = request.getfixturevalue("postgres_server")
    return _create_pg_database(base)


@pytest.fixture
async def make_lens(tmp_path: Path) -> AsyncIterator[MakeLens]:
    """``await make_lens(data_dir=None, **settings)``: started apps are stopped at teardown."""
    stack = contextlib.AsyncExitStack()

    async def make(data_dir: Path | None = None, **overrides: Any) -> Lens:
        settings = Settings(data_dir=data_dir or tmp_path / "lens", lens_hosts=["10.1.2.3"], **overrides)
        app = build_app(settings)
        own = contextlib.AsyncExitStack()
        await own.enter_async_context(app.router.lifespan_context(app))
        client = await own.enter_async_context(
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://lens.test", timeout=60)
        )
        stack.push_async_callback(own.aclose)
        return Lens(app, client, settings, own)

    try:
        yield make
    finally:
        await stack.aclose()


@pytest.fixture
def unreachable_kubeconfig() -> bytes:
    """Nothing listens on port 1: every call fails at once with a connection error."""
    return kubeconfig_with("https://127.0.0.1:1")


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP port that accepts connections (kernel backlog) but never answers: calls time out."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"https://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


@pytest.fixture
def dev_kubeconfig(devcluster: Any) -> bytes:
    data: bytes = Path(devcluster.kubeconfig).read_bytes()
    return data


@pytest.fixture
async def ssh_kit(tmp_path: Path) -> AsyncIterator[Any]:
    """Real asyncssh servers on loopback posing as bootstrap target nodes (see lens_sshkit)."""
    from lens_sshkit import SshKit

    kit = SshKit(tmp_path / "ssh")
    try:
        yield kit
    finally:
        await kit.close()
