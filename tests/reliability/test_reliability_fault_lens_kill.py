"""Fault: Lens is SIGKILLed in the middle of a cluster registration and of a bootstrap job.

What must hold after it restarts on the same data directory:
- registration: no half record. A registration whose checks had not finished leaves nothing in the
  store, so the same name registers again cleanly (no 409 from a ghost), and the database passes
  SQLite's integrity check.
- bootstrap: the job is reported `failed` with a reason naming the restart, its ansible-playbook
  process group (orphaned by the kill) is terminated, and its secret work directory is removed.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fault_kit import kill9, wait_for
from lens_sshkit import SshKit
from lens_testkit import kubeconfig_with

from devcluster.services import ServiceProcess

BASE = "/api/cluster"


def _lens(data: Path, **env: str) -> ServiceProcess:
    return ServiceProcess(
        "lens-server",
        "GPUPLANE_LENS_",
        "/nonexistent",  # Lens manages clusters from uploaded kubeconfigs, never its own
        env={"GPUPLANE_LENS_DATA_DIR": str(data), "GPUPLANE_LENS_LENS_HOSTS": '["10.1.2.3"]', **env},
    )


class HangingApiServer:
    """Accepts connections and never answers: a managed cluster's apiserver that hangs mid-call.
    It counts connections, so the test knows Lens is inside a call to it."""

    def __init__(self) -> None:
        self.connections = 0
        self._writers: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> str:
        async def hold(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            self.connections += 1
            self._writers.append(w)

        self.server = await asyncio.start_server(hold, "127.0.0.1", 0)
        return f"https://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *_: Any) -> None:
        for w in self._writers:
            w.close()
        self.server.close()


def _clusters_named(data: Path, name: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(data / "lens.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return list(db.execute("SELECT id, name FROM clusters WHERE name = ?", (name,)))


@pytest.mark.slow
async def test_kill_during_registration_leaves_no_half_record(tmp_path: Path) -> None:
    data = tmp_path / "lens"
    lens = _lens(data, GPUPLANE_LENS_PROBE_TIMEOUT_S="60")
    lens.start()
    try:
        hanging = HangingApiServer()
        async with hanging as server_url, httpx.AsyncClient(base_url=lens.url, timeout=90) as http:
            form = {"name": "half-registered", "gatewayPort": "30080"}
            files = {"file": ("kubeconfig", kubeconfig_with(server_url))}
            post = asyncio.ensure_future(http.post(f"{BASE}/clusters", data=form, files=files))
            # Lens is now checking the cluster (is the gateway NodePort free?): kill it there.
            await wait_for(lambda: asyncio.sleep(0, hanging.connections > 0), 30, "Lens calling the cluster")
            kill9(lens)
            with pytest.raises(httpx.HTTPError):
                await post  # the client never got an answer
            assert _clusters_named(data, "half-registered") == [], (
                "a registration that never finished was stored"
            )

            lens.start()
            listed = (await http.get(f"{BASE}/clusters", params={"includeDrafts": "true"})).json()["items"]
            assert [c["name"] for c in listed if c["name"] == "half-registered"] == []
            # The user retries: the name is free, and this time the registration completes.
            retry = await http.post(
                f"{BASE}/clusters",
                data={"name": "half-registered"},
                files={"file": ("kubeconfig", kubeconfig_with("https://127.0.0.1:1"))},
            )
            assert retry.status_code == 201, retry.text
            assert len(_clusters_named(data, "half-registered")) == 1
    finally:
        lens.stop()


def _kubespray(d: Path) -> Path:
    """A stand-in for Kubespray's cluster.yml: reach the nodes over SSH with become, then hang."""
    d.mkdir()
    (d / "cluster.yml").write_text(
        f"""
- name: nodes answer over SSH
  hosts: k8s_cluster
  gather_facts: false
  vars:
    ansible_python_interpreter: {sys.executable}
  tasks:
    - name: become works
      ansible.builtin.command: id -un
    - name: hang
      ansible.builtin.command: sleep 300
"""
    )
    return d


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = (
                Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            )
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(entry))
    return pids


@pytest.fixture
async def ssh_nodes(tmp_path: Path) -> AsyncIterator[SshKit]:
    kit = SshKit(tmp_path / "ssh")
    try:
        yield kit
    finally:
        await kit.close()


@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_kill_during_bootstrap_job_fails_it_with_reason_and_leaves_no_orphan(
    tmp_path: Path, ssh_nodes: SshKit
) -> None:
    data = tmp_path / "lens"
    lens = _lens(data, GPUPLANE_LENS_KUBESPRAY_DIR=str(_kubespray(tmp_path / "kubespray")))
    lens.start()
    orphans: list[int] = []
    try:
        node = await ssh_nodes.start(hostname="cp-0")
        body = {
            "nodes": [
                {
                    "host": "127.0.0.1",
                    "port": node.port,
                    "roles": ["control-plane", "worker"],
                    "username": "root",
                    "privateKey": ssh_nodes.private_key,
                }
            ],
            "hostKeys": [{"host": "127.0.0.1", "port": node.port, "fingerprint": node.fingerprint}],
        }
        async with httpx.AsyncClient(base_url=lens.url, timeout=60) as http:
            pre = await http.post(f"{BASE}/bootstrap/preflight", json=body)
            assert pre.json()["allPassed"] is True, pre.text
            start = await http.post(f"{BASE}/bootstrap", json=body)
            assert start.status_code == 200, start.text
            job = start.json()["bootstrapId"]

            async def hanging() -> bool:
                st = (await http.get(f"{BASE}/bootstrap/{job}")).json()
                return st["phase"] == "running" and "TASK [hang]" in st["logTail"]

            await wait_for(hanging, 240, "ansible running the hang task", 0.5)
            workdir = data / "bootstrap" / job
            orphans = _processes_mentioning(str(workdir))
            assert orphans, "no ansible-playbook process of the job found"

            kill9(lens)
            await asyncio.sleep(0.5)
            assert any(_alive(p) for p in orphans), "ansible died with Lens: no orphan to test"

            lens.start()
            st = (await http.get(f"{BASE}/bootstrap/{job}")).json()
            assert st["phase"] == "failed", st
            assert st["error"] and "Lens restarted" in st["error"], st
            assert st["kubeconfig"] is None

            async def orphans_gone() -> bool | list[str]:
                left = [_describe(p) for p in orphans if _alive(p)]
                return not left

            try:
                await wait_for(orphans_gone, 30, "the job's processes terminated")
            except AssertionError as e:
                left = [_describe(p) for p in orphans if _alive(p)]
                raise AssertionError(f"{e}; left: {left}; {st['error']}") from None
            assert not _processes_mentioning(str(workdir))
            await wait_for(lambda: asyncio.sleep(0, not workdir.exists()), 30, "work directory removed")
            # The job stays failed: a later read (and another restart) say the same.
            again = (await http.get(f"{BASE}/bootstrap/{job}")).json()
            assert again["phase"] == "failed" and again["error"] == st["error"]
    finally:
        lens.stop()
        for p in orphans:
            if _alive(p):
                os.kill(p, 9)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _describe(pid: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
        return f"{pid} pgid={os.getpgid(pid)} {cmd}"
    except OSError:
        return f"{pid} gone"
