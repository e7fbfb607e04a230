"""Bootstrap: host keys, preflight and Kubespray jobs (ansible-playbook in its own process group).

Jobs are rows in the Lens store: phase, error, log tail and the encrypted kubeconfig survive a
restart; a job that was running when Lens stopped is marked failed at the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuplane_core.errors import Conflict, NotFound, NotReady, Unprocessable
from gpuplane_lens.domain.bootstrap import (
    CHECK_LABELS,
    TERMINAL,
    Check,
    Node,
    NodeRow,
    append_tail,
    check_pins,
    expand_rows,
    node_state,
    os_supported,
    parse_os_release,
    preflight_key,
    role_problems,
)
from gpuplane_lens.domain.hostspec import Target, expand, is_rfc1123_hostname
from gpuplane_lens.domain.inventory import ProxySettings, render_inventory
from gpuplane_lens.settings import Settings
from gpuplane_lens.ssh.client import (
    HostKey,
    HostKeyMismatch,
    connect_pinned,
    known_hosts_line,
    private_key_problem,
    read_host_keys,
    run,
)
from gpuplane_lens.store.jobs import JobStore

logger = logging.getLogger(__name__)

_KUBE_PATHS = ("/etc/kubernetes/admin.conf", "/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/config.yaml")
_KUBE_CHECK = (
    "for p in " + " ".join(_KUBE_PATHS) + '; do test -e "$p" && echo "$p"; done; '
    "command -v kubelet kubeadm 2>/dev/null; true"
)


@dataclass(frozen=True)
class NodeResult:
    node: Node
    checks: list[Check]

    @property
    def state(self) -> str:
        return node_state(self.checks)


def _check(check_id: str, ok: bool, detail: str | None = None) -> Check:
    return Check(check_id, CHECK_LABELS[check_id], "passed" if ok else "failed", detail)


def _skipped(check_id: str) -> Check:
    return Check(check_id, CHECK_LABELS[check_id], "skipped", "SSH connection failed")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_workdir_processes(workdir: str) -> None:
    """SIGKILL every process whose command line names the job's work directory. ansible-playbook's
    workers call setsid(), so they and their ssh children leave the playbook's process group and
    would outlive a group kill (orphans after a Lens crash or a cancel)."""
    marker = (workdir.rstrip("/") + "/").encode()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_secret(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def _write_workdir(workdir: Path, nodes: list[Node], known_hosts: str, proxy: ProxySettings | None) -> Path:
    """The job's directory (0700): keys and passwords in 0600 files, known_hosts from the pins."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True, mode=0o700)
    for sub in ("keys", "host_vars", "artifacts", "tmp"):
        (workdir / sub).mkdir(mode=0o700)
    key_files: dict[str, str] = {}
    for n in nodes:
        creds = n.credentials
        if creds.private_key:
            path = workdir / "keys" / f"{n.name}.key"
            _write_secret(path, creds.private_key.rstrip("\n") + "\n")
            key_files[n.name] = str(path)
        if creds.password:
            # host_vars next to the inventory are loaded by ansible; never on a command line. With a
            # key the password only serves sudo (ansible_password would make ssh go through sshpass).
            secret = {"ansible_become_password": creds.password}
            if not creds.private_key:
                secret["ansible_password"] = creds.password
            _write_secret(workdir / "host_vars" / f"{n.name}.yml", yaml.safe_dump(secret))
    (workdir / "known_hosts").write_text(known_hosts)
    doc = render_inventory(nodes, key_files=key_files, artifacts_dir=str(workdir / "artifacts"), proxy=proxy)
    inventory = workdir / "inventory.yml"
    _write_secret(inventory, yaml.safe_dump(doc, sort_keys=False))
    return inventory


def _read_admin_conf(workdir: Path) -> str | None:
    admin = workdir / "artifacts" / "admin.conf"
    return admin.read_text() if admin.is_file() else None


class Bootstrapper:
    def __init__(self, jobs: JobStore, settings: Settings) -> None:
        self.jobs = jobs
        self.settings = settings
        self.timeout = settings.bootstrap_check_timeout_s
        self.root = settings.data_dir / "bootstrap"
        self._passed: dict[str, float] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._pgids: dict[str, int] = {}

    # -- host keys ------------------------------------------------------------------------------

    async def host_keys(self, rows: list[tuple[str, int]]) -> list[HostKey]:
        targets = [t for ts in expand(rows) for t in ts]
        return await read_host_keys(targets, self.timeout)

    # -- preflight ------------------------------------------------------------------------------

    def nodes(
        self, rows: list[NodeRow], pins: list[tuple[str, int, str]]
    ) -> tuple[list[Node], dict[Target, str]]:
        for i, row in enumerate(rows):
            key = row.credentials.private_key
            problem = private_key_problem(key) if key else None
            if problem is not None:
                raise Unprocessable(problem, code="invalid_private_key", field=f"nodes[{i}].privateKey")
        nodes: list[Node] = expand_rows(rows)
        by_target: dict[Target, str] = check_pins(nodes, pins)
        return nodes, by_target

    async def _check_node(self, node: Node, pin: str, role_detail: str | None) -> NodeResult:
        roles = _check("roles", role_detail is None, role_detail)
        try:
            conn = await connect_pinned(node, pin, self.timeout)
        except HostKeyMismatch as err:
            ssh = _check("ssh", False, f"host key mismatch: {err}")
        except Exception as err:
            detail = (
                "Connection timed out" if isinstance(err, TimeoutError) else str(err) or type(err).__name__
            )
            ssh = _check("ssh", False, detail)
        else:
            async with conn:
                checks = await asyncio.gather(
                    self._sudo(conn), self._hostname(conn), self._os(conn), self._kubernetes(conn)
                )
            return NodeResult(node, [_check("ssh", True, "reachable"), *checks, roles])
        skipped = [_skipped(c) for c in ("sudo", "hostname", "os", "kubernetes")]
        return NodeResult(node, [ssh, *skipped, roles])

    async def _guarded(self, check_id: str, coro: Any) -> Check:
        try:
            result: Check = await coro
            return result
        except Exception as err:
            detail = "timed out" if isinstance(err, TimeoutError) else str(err) or type(err).__name__
            return _check(check_id, False, detail)

    async def _sudo(self, conn: Any) -> Check:
        async def go() -> Check:
            r = await run(conn, "sudo -n true", self.timeout)
            return _check(
                "sudo",
                r.exit_status == 0,
                None if r.exit_status == 0 else (r.stderr.strip() or "sudo -n true failed")[:300],
            )

        return await self._guarded("sudo", go())

    async def _hostname(self, conn: Any) -> Check:
        async def go() -> Check:
            r = await run(conn, "hostname", self.timeout)
            name = r.stdout.strip()
            ok = r.exit_status == 0 and is_rfc1123_hostname(name)
            return _check("hostname", ok, name[:253] if ok else f"{name[:253]!r} is not an RFC 1123 hostname")

        return await self._guarded("hostname", go())

    async def _os(self, conn: Any) -> Check:
        async def go() -> Check:
            r = await run(conn, "cat /etc/os-release", self.timeout)
            ok, detail = (
                os_supported(parse_os_release(r.stdout))
                if r.exit_status == 0
                else (False, "no /etc/os-release")
            )
            return _check("os", ok, detail)

        return await self._guarded("os", go())

    async def _kubernetes(self, conn: Any) -> Check:
        async def go() -> Check:
            r = await run(conn, _KUBE_CHECK, self.timeout)
            found = [line for line in r.stdout.splitlines() if line.strip()]
            return _check("kubernetes", not found, f"found {', '.join(found)}" if found else "none found")

        return await self._guarded("kubernetes", go())

    async def _run_preflight(self, nodes: list[Node], pins: dict[Target, str]) -> list[NodeResult]:
        problems = role_problems(nodes)
        role_detail = "; ".join(problems) if problems else None
        return list(await asyncio.gather(*(self._check_node(n, pins[n.target], role_detail) for n in nodes)))

    async def preflight(self, rows: list[NodeRow], pins: list[tuple[str, int, str]]) -> list[NodeResult]:
        nodes, by_target = self.nodes(rows, pins)
        results = await self._run_preflight(nodes, by_target)
        if all(r.state == "passed" for r in results):
            self._passed[preflight_key(nodes, by_target)] = time.monotonic()
        return results

    # -- jobs -----------------------------------------------------------------------------------

    async def create(
        self, rows: list[NodeRow], pins: list[tuple[str, int, str]], proxy: ProxySettings | None
    ) -> str:
        nodes, by_target = self.nodes(rows, pins)
        passed_at = self._passed.get(preflight_key(nodes, by_target))
        if passed_at is None or time.monotonic() - passed_at > self.settings.bootstrap_preflight_valid_s:
            raise Conflict(
                "run a preflight of these nodes and host keys first; bootstrap needs it to pass",
                code="bootstrap_preflight_required",
            )
        if self.settings.kubespray_dir is None or not (self.settings.kubespray_dir / "cluster.yml").is_file():
            raise NotReady(
                "no Kubespray checkout is configured (GPUPLANE_LENS_KUBESPRAY_DIR)", code="kubespray_missing"
            )
        if any(n.credentials.password and not n.credentials.private_key for n in nodes) and not shutil.which(
            "sshpass"
        ):
            # ansible's ssh connection can only log in with a password through sshpass.
            raise Unprocessable(
                "password logins need sshpass on the Lens host; give these nodes a privateKey",
                code="bootstrap_password_unsupported",
                field="nodes",
            )
        job_id = f"bootstrap-{secrets.token_hex(6)}"
        public = [
            {"host": n.target.host, "port": n.target.port, "roles": list(n.roles), "username": n.username}
            for n in nodes
        ]
        await self.jobs.create(job_id, json.dumps(public))
        task = asyncio.create_task(self._job(job_id, nodes, by_target, proxy))
        self._tasks[job_id] = task
        # Also forgets a task cancelled before it ever ran (its finally block never executes).
        task.add_done_callback(lambda _: self._tasks.pop(job_id, None))
        return job_id

    async def status(self, job_id: str) -> dict[str, Any]:
        row = await self.jobs.get(job_id)
        if row is None:
            raise NotFound(f"bootstrap job {job_id!r} not found", code="bootstrap_not_found")
        kubeconfig = await self.jobs.take_kubeconfig(job_id) if row.phase == "succeeded" else None
        return {
            "id": row.id,
            "phase": row.phase,
            "logTail": row.log_tail,
            "error": row.error,
            "kubeconfig": kubeconfig,
        }

    async def cancel(self, job_id: str) -> None:
        row = await self.jobs.get(job_id)
        if row is None:
            raise NotFound(f"bootstrap job {job_id!r} not found", code="bootstrap_not_found")
        if row.phase == "cancelled":
            return
        if row.phase in TERMINAL:
            raise Conflict(f"bootstrap job {job_id!r} already {row.phase}", code="bootstrap_finished")
        if not await self.jobs.update(
            job_id, phase="cancelled", error="cancelled by request", kubeconfig_enc=None
        ):
            return
        pgid = self._pgids.get(job_id)
        if pgid is not None:
            _kill_group(pgid, signal.SIGTERM)
        task = self._tasks.get(job_id)
        if task is not None:
            task.cancel()

    async def _phase(self, job_id: str, phase: str, **values: Any) -> None:
        if not await self.jobs.update(job_id, phase=phase, **values):
            raise asyncio.CancelledError  # cancelled (or finished) meanwhile: stop here

    async def _fail(self, job_id: str, error: str) -> None:
        # A failed job never hands a kubeconfig over: drop any stored copy too.
        await self.jobs.update(job_id, phase="failed", error=error, kubeconfig_enc=None)

    async def _job(
        self, job_id: str, nodes: list[Node], pins: dict[Target, str], proxy: ProxySettings | None
    ) -> None:
        workdir = self.root / job_id
        try:
            await self._phase(job_id, "preflight")
            results = await self._run_preflight(nodes, pins)
            failed = [
                f"{r.node.target.address} {c.id}: {c.detail or c.status}"
                for r in results
                for c in r.checks
                if c.status == "failed"
            ]
            if failed:
                await self._fail(job_id, "preflight failed: " + "; ".join(failed))
                return
            await self._phase(job_id, "provisioning", workdir=str(workdir))
            inventory = await self._provision(workdir, nodes, pins, proxy)
            await self._phase(job_id, "running")
            rc, tail = await self._run_playbook(job_id, workdir, inventory)
            if rc != 0:
                await self.jobs.update(job_id, log_tail=tail)
                await self._fail(job_id, f"ansible-playbook exited with status {rc}")
                return
            kubeconfig = await asyncio.to_thread(_read_admin_conf, workdir)
            if kubeconfig is None:
                await self._fail(job_id, "ansible-playbook succeeded but wrote no artifacts/admin.conf")
                return
            await self._phase(job_id, "kubeconfig_ready", kubeconfig=kubeconfig, log_tail=tail)
            await self._phase(job_id, "succeeded", pid=None)
        except asyncio.CancelledError:
            pass  # the phase was set by cancel() or shutdown
        except HostKeyMismatch as err:
            await self._fail(job_id, f"host key mismatch: {err}")
        except Exception as err:
            logger.exception("bootstrap job %s failed", job_id)
            await self._fail(job_id, f"{type(err).__name__}: {err}")
        finally:
            await self._stop_group(job_id)
            _kill_workdir_processes(str(workdir))
            # Keys, passwords and the kubeconfig copy go with the work directory.
            shutil.rmtree(workdir, ignore_errors=True)
            self._tasks.pop(job_id, None)

    async def _stop_group(self, job_id: str) -> None:
        pgid = self._pgids.pop(job_id, None)
        if pgid is None:
            return
        _kill_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.bootstrap_cancel_grace_s
        # No event tells when a process group is empty: poll it briefly.
        while _group_alive(pgid) and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        _kill_group(pgid, signal.SIGKILL)

    async def _provision(
        self, workdir: Path, nodes: list[Node], pins: dict[Target, str], proxy: ProxySettings | None
    ) -> Path:
        lines = await asyncio.gather(*(known_hosts_line(n, pins[n.target], self.timeout) for n in nodes))
        return await asyncio.to_thread(_write_workdir, workdir, nodes, "".join(lines), proxy)

    def _ansible_env(self, workdir: Path) -> dict[str, str]:
        ssh_args = " ".join(
            [
                "-F /dev/null",
                "-o ControlMaster=no",
                "-o ControlPath=none",
                "-o StrictHostKeyChecking=yes",
                f"-o UserKnownHostsFile={workdir / 'known_hosts'}",
                "-o GlobalKnownHostsFile=/dev/null",
                "-o IdentitiesOnly=yes",
                "-o IdentityAgent=none",
                "-o ConnectTimeout=30",
            ]
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SSH_AUTH_SOCK"))}
        env.update(
            {
                "ANSIBLE_HOST_KEY_CHECKING": "True",
                "ANSIBLE_SSH_ARGS": ssh_args,
                "ANSIBLE_PIPELINING": "True",
                "ANSIBLE_LOCAL_TEMP": str(workdir / "tmp"),
                "ANSIBLE_RETRY_FILES_ENABLED": "False",
                "ANSIBLE_NOCOLOR": "1",
                "ANSIBLE_FORCE_COLOR": "0",
                "PYTHONUNBUFFERED": "1",
                "LANG": "C.UTF-8",
                "LC_ALL": "C.UTF-8",
            }
        )
        return env

    def _playbook_binary(self) -> str:
        configured = self.settings.ansible_playbook
        if configured:
            return configured
        beside = Path(sys.executable).parent / "ansible-playbook"
        return str(beside) if beside.exists() else (shutil.which("ansible-playbook") or "ansible-playbook")

    async def _run_playbook(self, job_id: str, workdir: Path, inventory: Path) -> tuple[int, str]:
        assert self.settings.kubespray_dir is not None
        proc = await asyncio.create_subprocess_exec(
            self._playbook_binary(),
            "-i",
            str(inventory),
            "-b",
            "cluster.yml",
            cwd=self.settings.kubespray_dir,
            env=self._ansible_env(workdir),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own process group: cancel kills ansible and every ssh child
        )
        self._pgids[job_id] = proc.pid
        await self.jobs.update(job_id, pid=proc.pid)
        assert proc.stdout is not None
        state = {"tail": "", "saved": ""}

        async def flush() -> None:
            # The tail is saved at most every 0.5 s, and also when output pauses (a long task).
            while True:
                await asyncio.sleep(0.5)
                if state["tail"] != state["saved"]:
                    state["saved"] = state["tail"]
                    await self.jobs.set_tail(job_id, state["saved"])

        flusher = asyncio.create_task(flush())
        try:
            while chunk := await proc.stdout.read(8192):
                state["tail"] = append_tail(state["tail"], chunk.decode(errors="replace"))
        finally:
            flusher.cancel()
            await asyncio.gather(flusher, return_exceptions=True)
        tail = state["tail"]
        rc = await proc.wait()
        await self.jobs.set_tail(job_id, tail)
        return rc, tail

    # -- lifecycle ------------------------------------------------------------------------------

    async def reconcile(self) -> int:
        """Jobs left unfinished by an earlier Lens process: stop what remains and mark them failed."""
        count = 0
        for row in await self.jobs.unfinished():
            reason = f"Lens restarted while the job was in phase {row.phase!r}"
            if row.pid is not None and _alive(row.pid) and self._is_our_playbook(row.pid, row.workdir):
                _kill_group(row.pid, signal.SIGKILL)
                reason += f"; its ansible-playbook (pid {row.pid}) was terminated"
            elif row.pid is not None:
                reason += f"; its ansible-playbook (pid {row.pid}) is gone"
            await self._fail(row.id, reason)
            if row.workdir:
                _kill_workdir_processes(row.workdir)
                shutil.rmtree(row.workdir, ignore_errors=True)
            count += 1
        return count

    @staticmethod
    def _is_our_playbook(pid: int, workdir: str | None) -> bool:
        # Guard against pid reuse: only a process whose command line names the job's inventory.
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            return False
        return bool(workdir) and f"{workdir}/inventory.yml" in cmdline

    async def close(self) -> None:
        for job_id in list(self._tasks):
            await self._fail(job_id, "Lens shut down while the job was running")
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
