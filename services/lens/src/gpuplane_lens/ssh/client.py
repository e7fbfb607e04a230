"""Pinned SSH through asyncssh.

Every connection: the presented host key's SHA256 fingerprint must equal the pin (constant-time
compare), no agent, no ~/.ssh keys, known_hosts or config files are consulted, and only the
credentials from the request are offered.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncssh

from gpuplane_lens.domain.bootstrap import Node, fingerprint_matches
from gpuplane_lens.domain.hostspec import Target


@dataclass(frozen=True)
class HostKey:
    target: Target
    algorithm: str | None = None
    fingerprint: str | None = None
    error: str | None = None


class HostKeyMismatch(Exception):
    """The host presented a key other than the pinned one."""


def _describe(err: BaseException) -> str:
    if isinstance(err, asyncio.TimeoutError | TimeoutError):
        return "Connection timed out"
    if isinstance(err, ConnectionRefusedError):
        return "Connection refused"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__


async def read_host_key(target: Target, timeout: float) -> HostKey:
    """The server's host key, read in the key exchange; nothing is authenticated or sent."""
    try:
        key = await asyncio.wait_for(
            asyncssh.get_server_host_key(target.host, target.port, config=None), timeout
        )
    except Exception as err:
        return HostKey(target, error=_describe(err))
    if key is None:
        return HostKey(target, error="the server offered no host key")
    return HostKey(target, algorithm=key.get_algorithm(), fingerprint=key.get_fingerprint("sha256"))


async def read_host_keys(targets: list[Target], timeout: float) -> list[HostKey]:
    return list(await asyncio.gather(*(read_host_key(t, timeout) for t in targets)))


def private_key_problem(text: str) -> str | None:
    """Why ``text`` is not a usable unencrypted private key (None when it is)."""
    try:
        asyncssh.import_private_key(text)
    except asyncssh.KeyImportError as err:
        return f"not a usable private key: {err}"
    return None


class _PinnedClient(asyncssh.SSHClient):
    def __init__(self, pin: str) -> None:
        self.pin = pin
        self.presented: str | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        self.presented = key.get_fingerprint("sha256")
        return fingerprint_matches(self.pin, self.presented)


async def connect_pinned(node: Node, pin: str, timeout: float) -> asyncssh.SSHClientConnection:
    """Open an authenticated connection whose host key matches ``pin``; HostKeyMismatch otherwise."""
    creds = node.credentials
    client_keys = [asyncssh.import_private_key(creds.private_key)] if creds.private_key else None
    client = _PinnedClient(pin)
    try:
        conn, _ = await asyncio.wait_for(
            asyncssh.create_connection(
                lambda: client,
                node.target.host,
                node.target.port,
                username=node.username,
                # Empty trusted lists: the pin check in validate_host_public_key decides alone.
                known_hosts=([], [], []),
                client_keys=client_keys,
                password=creds.password,
                agent_path=None,
                agent_forwarding=False,
                config=None,
                gss_auth=False,
                host_based_auth=False,
                kbdint_auth=False,
                passphrase=None,
            ),
            timeout,
        )
    except asyncssh.HostKeyNotVerifiable:
        raise HostKeyMismatch(
            f"host key of {node.target.address} is {client.presented}, not the pinned {pin}"
        ) from None
    return conn


@dataclass(frozen=True)
class CommandResult:
    exit_status: int
    stdout: str
    stderr: str


async def run(conn: asyncssh.SSHClientConnection, command: str, timeout: float) -> CommandResult:
    result = await asyncio.wait_for(conn.run(command, check=False, stdin=asyncssh.DEVNULL), timeout)
    out = result.stdout if isinstance(result.stdout, str) else ""
    err = result.stderr if isinstance(result.stderr, str) else ""
    return CommandResult(result.exit_status if result.exit_status is not None else -1, out, err)


async def known_hosts_line(node: Node, pin: str, timeout: float) -> str:
    """A known_hosts line holding the host's verified key, for ansible's ssh (StrictHostKeyChecking)."""
    async with await connect_pinned(node, pin, timeout) as conn:
        key = conn.get_server_host_key()
        if key is None:
            raise HostKeyMismatch(f"{node.target.address} did not present a host key")
        public = key.export_public_key("openssh").decode().split()
    t = node.target
    name = t.host if t.port == 22 else f"[{t.host}]:{t.port}"
    return f"{name} {public[0]} {public[1]}\n"
