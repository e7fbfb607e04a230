"""Bootstrap jobs: a real ansible-playbook runs a stand-in for Kubespray's cluster.yml over SSH
(StrictHostKeyChecking, known_hosts from the pins) against a loopback asyncssh node."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from lens_sshkit import SshKit, SshNode
from lens_testkit import Lens, MakeLens, poll, problem

from gpuplane_lens.domain.bootstrap import PHASES

BASE = "/api/cluster/bootstrap"
ADMIN_CONF = "apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n"

# Real ansible-playbook runs (20-40 s in all): part of `make test`, since they are the bootstrap's proof.


def _kubespray(tmp: Path, remote_root: Path, *, hang: bool = False) -> Path:
    """A directory standing in for the Kubespray checkout: cluster.yml connects to every node
    over SSH with become, then the first control plane writes admin.conf and the play fetches it
    to ``artifacts_dir`` as Kubespray's ``kubeconfig_localhost`` does."""
    d = tmp / ("kubespray-hang" if hang else "kubespray")
    d.mkdir()
    py = sys.executable
    work = (
        "        - name: hang\n          ansible.builtin.command: sleep 300\n"
        if hang
        else ("        - name: settle\n          ansible.builtin.command: sleep 2\n")
    )
    (d / "cluster.yml").write_text(
        f"""
- name: nodes answer over SSH
  hosts: k8s_cluster
  gather_facts: false
  vars:
    ansible_python_interpreter: {py}
  tasks:
    - name: become works
      ansible.builtin.command: id -un
    - name: proxy settings
      ansible.builtin.debug:
        msg: "no_proxy={{{{ no_proxy | default('-') }}}} http_proxy={{{{ http_proxy | default('-') }}}}"
{work.replace("        ", "    ")}
- name: control plane kubeconfig
  hosts: kube_control_plane[0]
  gather_facts: false
  vars:
    ansible_python_interpreter: {py}
  tasks:
    - name: kubeconfig dir
      ansible.builtin.file:
        path: {remote_root}/etc/kubernetes
        state: directory
    - name: write admin.conf
      ansible.builtin.copy:
        dest: {remote_root}/etc/kubernetes/admin.conf
        content: {json.dumps(ADMIN_CONF)}
        mode: "0600"
    - name: hand it to the controller
      ansible.builtin.fetch:
        src: {remote_root}/etc/kubernetes/admin.conf
        dest: "{{{{ artifacts_dir }}}}/admin.conf"
        flat: true
"""
    )
    return d


def _body(kit: SshKit, nodes: list[tuple[SshNode, list[str]]]) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "host": "127.0.0.1",
                "port": n.port,
                "roles": r,
                "username": "root",
                "privateKey": kit.private_key,
            }
            for n, r in nodes
        ],
        "hostKeys": [{"host": "127.0.0.1", "port": n.port, "fingerprint": n.fingerprint} for n, _ in nodes],
    }


async def _start(lens: Lens, body: dict[str, Any], proxy: dict[str, Any] | None = None) -> str:
    pre = await lens.request("POST", f"{BASE}/preflight", json=body)
    assert pre.json()["allPassed"] is True, pre.text
    resp = await lens.request("POST", BASE, json={**body, **({"proxy": proxy} if proxy else {})})
    assert resp.status_code == 200, resp.text
    job_id: str = resp.json()["bootstrapId"]
    assert job_id.startswith("bootstrap-") and len(job_id) == len("bootstrap-") + 12
    return job_id


async def _status(lens: Lens, job_id: str) -> dict[str, Any]:
    resp = await lens.request("GET", f"{BASE}/{job_id}")
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    assert set(body) == {"id", "phase", "logTail", "error", "kubeconfig"}
    return body


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_bootstrap_runs_every_phase_and_hands_kubeconfig_once(
    make_lens: MakeLens, ssh_kit: SshKit, tmp_path: Path
) -> None:
    kubespray = _kubespray(tmp_path, tmp_path / "remote")
    lens = await make_lens(kubespray_dir=kubespray)
    cp = await ssh_kit.start(hostname="cp-0")
    worker = await ssh_kit.start(hostname="w-0")
    proxy = {"mode": "custom", "httpProxy": "http://proxy.example:3128", "noProxy": ".svc"}
    body = _body(ssh_kit, [(cp, ["control-plane"]), (worker, ["worker"])])
    body["nodes"][1]["password"] = ssh_kit.password  # key for ssh, password for sudo: no sshpass needed
    job_id = await _start(lens, body, proxy)

    seen: list[str] = []
    deadline = time.monotonic() + 240
    while True:
        st = await _status(lens, job_id)
        if not seen or seen[-1] != st["phase"]:
            seen.append(st["phase"])
        if st["phase"] in ("succeeded", "failed", "cancelled") or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert st["phase"] == "succeeded", st
    assert seen == sorted(seen, key=PHASES.index) and "running" in seen  # phases only move forward
    assert st["kubeconfig"] == ADMIN_CONF  # the first read after success hands it over
    assert st["error"] is None
    tail = st["logTail"]
    assert "PLAY [nodes answer over SSH]" in tail and "hand it to the controller" in tail
    assert f"127-0-0-1-{cp.port}" in tail and f"127-0-0-1-{worker.port}" in tail
    assert "PRIVATE KEY" not in tail and ssh_kit.password not in tail
    # The rendered inventory reached ansible: proxy vars, no_proxy extended with the nodes.
    assert "http_proxy=http://proxy.example:3128" in tail
    assert f"no_proxy=.svc,127.0.0.1,localhost,127-0-0-1-{cp.port},127-0-0-1-{worker.port}" in tail
    again = await _status(lens, job_id)
    assert again["phase"] == "succeeded" and again["kubeconfig"] is None and again["logTail"] == tail
    # Secrets (keys, inventory, known_hosts, the kubeconfig copy) are gone with the work directory.
    assert not (lens.settings.data_dir / "bootstrap" / job_id).exists()
    problem(await lens.request("POST", f"{BASE}/{job_id}/cancel"), 409, "bootstrap_finished")
    problem(await lens.request("GET", f"{BASE}/bootstrap-000000000000"), 404, "bootstrap_not_found")

    # The job and its log survive a restart; the kubeconfig stays handed over.
    await lens.stop()
    lens2 = await make_lens(kubespray_dir=kubespray)
    after = await _status(lens2, job_id)
    assert after["phase"] == "succeeded" and after["logTail"] == tail and after["kubeconfig"] is None


async def test_host_key_change_fails_the_job(make_lens: MakeLens, ssh_kit: SshKit, tmp_path: Path) -> None:
    """The job checks the pins again: a node whose host key changed after preflight is refused
    before ansible-playbook ever runs."""
    lens = await make_lens(kubespray_dir=_kubespray(tmp_path, tmp_path / "remote"))
    cp = await ssh_kit.start(hostname="cp-0")
    body = _body(ssh_kit, [(cp, ["control-plane"])])
    pre = await lens.request("POST", f"{BASE}/preflight", json=body)
    assert pre.json()["allPassed"] is True
    new_fp = await ssh_kit.replace_host_key(cp)  # same address, another machine now
    assert new_fp != body["hostKeys"][0]["fingerprint"]
    resp = await lens.request("POST", BASE, json=body)
    assert resp.status_code == 200, resp.text
    job_id = resp.json()["bootstrapId"]
    st = await poll(
        lambda: _status(lens, job_id), lambda s: s["phase"] in ("succeeded", "failed"), timeout=180
    )
    assert st["phase"] == "failed" and "host key mismatch" in st["error"] and new_fp in st["error"]
    assert "PLAY" not in st["logTail"] and st["kubeconfig"] is None


async def test_cancel_kills_the_process_group(make_lens: MakeLens, ssh_kit: SshKit, tmp_path: Path) -> None:
    lens = await make_lens(kubespray_dir=_kubespray(tmp_path, tmp_path / "remote", hang=True))
    cp = await ssh_kit.start(hostname="cp-0")
    job_id = await _start(lens, _body(ssh_kit, [(cp, ["control-plane", "worker"])]))
    jobs = lens.app.state.bootstrap.jobs
    row = await poll(
        lambda: jobs.get(job_id), lambda r: r.pid is not None and r.phase == "running", timeout=180
    )
    workdir = Path(row.workdir)
    # Secrets are 0600 files while the job runs.
    key_files = list((workdir / "keys").iterdir())
    assert key_files and all((p.stat().st_mode & 0o777) == 0o600 for p in key_files)
    assert (workdir / "inventory.yml").stat().st_mode & 0o777 == 0o600
    await poll(lambda: _status(lens, job_id), lambda s: "TASK [hang]" in s["logTail"], timeout=180)
    assert _group_alive(row.pid)

    resp = await lens.request("POST", f"{BASE}/{job_id}/cancel")
    assert resp.status_code == 204 and resp.content == b""
    st = await _status(lens, job_id)
    assert st["phase"] == "cancelled" and st["kubeconfig"] is None
    await poll(lambda: asyncio.sleep(0, not _group_alive(row.pid)), bool, timeout=30)
    await poll(lambda: asyncio.sleep(0, workdir.exists()), lambda e: not e, timeout=30)
    final = await _status(lens, job_id)
    assert final["phase"] == "cancelled" and "TASK [hang]" in final["logTail"]
    assert (await lens.request("POST", f"{BASE}/{job_id}/cancel")).status_code == 204  # idempotent


async def test_restart_marks_running_jobs_failed(
    make_lens: MakeLens, ssh_kit: SshKit, tmp_path: Path
) -> None:
    kubespray = _kubespray(tmp_path, tmp_path / "remote", hang=True)
    data = tmp_path / "lens-data"
    lens = await make_lens(data_dir=data, kubespray_dir=kubespray)
    cp = await ssh_kit.start(hostname="cp-0")
    job_id = await _start(lens, _body(ssh_kit, [(cp, ["control-plane"])]))
    jobs = lens.app.state.bootstrap.jobs
    row = await poll(
        lambda: jobs.get(job_id), lambda r: r.pid is not None and r.phase == "running", timeout=180
    )

    # A crash leaves a job row "running" and its ansible-playbook orphaned: simulate the row and the
    # orphan (a process whose command line names the job's inventory, in its own process group).
    crashed = "bootstrap-0123456789ab"
    crashed_dir = data / "bootstrap" / crashed
    crashed_dir.mkdir(parents=True)
    orphan = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "import time; time.sleep(300)",
        f"{crashed_dir}/inventory.yml",
        start_new_session=True,
    )
    try:
        await jobs.create(crashed, "[]")
        await jobs.update(crashed, phase="running", pid=orphan.pid, workdir=str(crashed_dir))

        await lens.stop()  # a clean stop ends its own job
        assert not _group_alive(row.pid)
        lens2 = await make_lens(data_dir=data, kubespray_dir=kubespray)
        st = await _status(lens2, job_id)
        assert st["phase"] == "failed" and "Lens shut down" in st["error"]
        st = await _status(lens2, crashed)
        assert st["phase"] == "failed"
        assert (
            "Lens restarted" in st["error"]
            and f"pid {orphan.pid}" in st["error"]
            and "terminated" in st["error"]
        )
        assert await asyncio.wait_for(orphan.wait(), 10) == -signal.SIGKILL
        assert not crashed_dir.exists()
    finally:
        if orphan.returncode is None:
            orphan.kill()


async def test_ansible_refuses_a_changed_host_key(
    make_lens: MakeLens, ssh_kit: SshKit, tmp_path: Path
) -> None:
    """ansible's own ssh runs with StrictHostKeyChecking and the job's known_hosts: a key that
    changes after provisioning makes the playbook fail instead of trusting the new key."""
    marker = tmp_path / "go"
    kubespray = _kubespray(tmp_path, tmp_path / "remote")
    playbook = kubespray / "cluster.yml"
    gate = f"""
- name: wait for the test
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: {sys.executable}
  tasks:
    - name: gate
      ansible.builtin.wait_for:
        path: {marker}
        timeout: 170
"""
    playbook.write_text(gate + playbook.read_text())
    lens = await make_lens(kubespray_dir=kubespray)
    cp = await ssh_kit.start(hostname="cp-0")
    job_id = await _start(lens, _body(ssh_kit, [(cp, ["control-plane"])]))
    await poll(lambda: _status(lens, job_id), lambda s: "TASK [gate]" in s["logTail"], timeout=180)
    await ssh_kit.replace_host_key(cp)
    marker.touch()
    st = await poll(
        lambda: _status(lens, job_id), lambda s: s["phase"] in ("succeeded", "failed"), timeout=180
    )
    assert st["phase"] == "failed" and "ansible-playbook exited with status" in st["error"], st
    assert (
        "REMOTE HOST IDENTIFICATION HAS CHANGED" in st["logTail"]
        or "Host key verification failed" in st["logTail"]
    )
    assert st["kubeconfig"] is None
