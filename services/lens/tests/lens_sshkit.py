"""A real SSH server on loopback for the bootstrap tests (asyncssh).

Each "node" is an asyncssh server on 127.0.0.1 with its own generated host key. Commands run
for real in /bin/bash, with a per-node directory of stub programs first on PATH: that is how a
node gets a denied sudo, a bad hostname, an unsupported OS (a `cat` that shows another
/etc/os-release) or an existing kubelet. SFTP is served too (ansible's fetch uses it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

SUDO_OK = """#!/bin/sh
# Passwordless sudo: drop the options, run the command as this user.
while [ $# -gt 0 ]; do
  case "$1" in
    -u|-g|-p|-C|-D|-U|-r|-t|-h) shift 2 ;;
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
exec "$@"
"""
SUDO_DENIED = """#!/bin/sh
echo "sudo: a password is required" >&2
exit 1
"""
UBUNTU = 'PRETTY_NAME="Ubuntu 24.04.1 LTS"\nID=ubuntu\nVERSION_ID="24.04"\n'
WINDOWS_ISH = 'PRETTY_NAME="Slackware 15.0"\nID=slackware\nVERSION_ID="15.0"\n'


def cat_stub(os_release: str) -> str:
    return f"""#!/bin/sh
if [ "$1" = /etc/os-release ]; then
cat <<'OSREL'
{os_release}OSREL
exit 0
fi
exec /bin/cat "$@"
"""


def hostname_stub(name: str) -> str:
    return f"#!/bin/sh\necho '{name}'\n"


KUBELET_STUB = "#!/bin/sh\necho kubelet v1.30.0\n"


@dataclass
class SshNode:
    port: int
    fingerprint: str
    algorithm: str
    bin_dir: Path
    server: Any
    processes: set[asyncio.subprocess.Process] = field(default_factory=set)

    def stub(self, name: str, script: str) -> None:
        path = self.bin_dir / name
        path.write_text(script)
        path.chmod(path.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)


class SshKit:
    """Starts nodes; one client key pair (OpenSSH format) authorises on all of them."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.client_key = asyncssh.generate_private_key("ssh-ed25519")
        self.private_key = self.client_key.export_private_key("openssh").decode()
        self.password = "node-password"
        self.nodes: list[SshNode] = []
        self.auth_attempts = 0

    async def start(
        self,
        *,
        sudo: str = SUDO_OK,
        hostname: str = "node-a",
        os_release: str = UBUNTU,
        kubelet: bool = False,
    ) -> SshNode:
        bin_dir = self.tmp / f"node-{len(self.nodes)}-bin"
        bin_dir.mkdir(parents=True)
        node = await self._serve(bin_dir, 0)
        node.stub("sudo", sudo)
        node.stub("hostname", hostname_stub(hostname))
        node.stub("cat", cat_stub(os_release))
        if kubelet:
            node.stub("kubelet", KUBELET_STUB)
        self.nodes.append(node)
        return node

    async def replace_host_key(self, node: SshNode) -> str:
        """Serve the same port with a new host key (a re-installed or impostor machine)."""
        node.server.close()
        await node.server.wait_closed()
        fresh = await self._serve(node.bin_dir, node.port)
        node.server, node.fingerprint = fresh.server, fresh.fingerprint
        return node.fingerprint

    async def _serve(self, bin_dir: Path, port: int) -> SshNode:
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        node_ref: dict[str, SshNode] = {}
        authorized = asyncssh.import_authorized_keys(self.client_key.export_public_key("openssh").decode())
        password = self.password
        kit = self

        class Server(asyncssh.SSHServer):
            def begin_auth(self, username: str) -> bool:
                kit.auth_attempts += 1
                return True

            def password_auth_supported(self) -> bool:
                return True

            def validate_password(self, username: str, pw: str) -> bool:
                return pw == password

        async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
            await _run_command(process, node_ref["node"])

        server = await asyncssh.create_server(
            Server,
            "127.0.0.1",
            port,
            reuse_address=True,
            server_host_keys=[host_key],
            authorized_client_keys=authorized,
            process_factory=handle,
            encoding=None,
            sftp_factory=True,
            allow_scp=True,
        )
        node = SshNode(
            port=server.sockets[0].getsockname()[1],
            fingerprint=host_key.get_fingerprint("sha256"),
            algorithm=host_key.get_algorithm(),
            bin_dir=bin_dir,
            server=server,
        )
        node_ref["node"] = node
        return node

    async def close(self) -> None:
        for node in self.nodes:
            for proc in list(node.processes):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            node.server.close()
            await node.server.wait_closed()


async def _run_command(process: asyncssh.SSHServerProcess[bytes], node: SshNode) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{node.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    proc = await asyncio.create_subprocess_exec(
        "/bin/bash",
        "-c",
        process.command or "exec /bin/bash",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    node.processes.add(proc)
    assert proc.stdin and proc.stdout and proc.stderr

    async def feed() -> None:
        try:
            while data := await process.stdin.read(65536):
                proc.stdin.write(data)  # type: ignore[union-attr]
                await proc.stdin.drain()  # type: ignore[union-attr]
        except (asyncssh.Error, ConnectionError, BrokenPipeError):
            pass
        finally:
            with contextlib.suppress(Exception):
                proc.stdin.close()  # type: ignore[union-attr]

    async def pump(src: asyncio.StreamReader, dst: Any) -> None:
        while data := await src.read(65536):
            dst.write(data)

    feeder = asyncio.create_task(feed())
    try:
        await asyncio.gather(pump(proc.stdout, process.stdout), pump(proc.stderr, process.stderr))
        rc = await proc.wait()
        process.exit(rc if rc >= 0 else 255)
    except (asyncssh.Error, ConnectionError):
        pass
    finally:
        feeder.cancel()
        # The client went away (e.g. a cancelled job): the "remote" command stops too.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        node.processes.discard(proc)
