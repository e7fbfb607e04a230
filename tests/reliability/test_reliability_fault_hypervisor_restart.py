"""Fault: the hypervisor (node agent) is SIGKILLed and restarted, twice.

What must hold:
- after each restart, the process registration (a real process in the pod's cgroup and its own
  PID namespace) and the worker the controller streams for the pod are back, from the node-local
  state file and the controller's allocation stream;
- the controller does not mark the node's GPUs Unknown while the hypervisor is merely restarting
  (down for less than the heartbeat timeout), and when it stays down it marks them Unknown only
  after the heartbeat timeout has passed; once it is back they are Running again.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from controller_testkit import GROUP, VERSION, create_pod, wait_bound
from fault_kit import kill9, wait_for
from hypervisor_pidns import pod_container
from kubernetes_asyncio import client

from devcluster.cluster import DevCluster
from devcluster.services import ServiceProcess

HEARTBEAT_TIMEOUT = 20.0  # above a service restart on a loaded 2-core machine
HEARTBEAT_INTERVAL = 1


async def _gpu_phases(custom: client.CustomObjectsApi, node: str) -> dict[str, str]:
    objs = await custom.list_cluster_custom_object(
        GROUP, VERSION, "gpus", label_selector=f"tensor-fusion.ai/node={node}"
    )
    return {o["metadata"]["name"]: (o.get("status") or {}).get("phase", "") for o in objs["items"]}


class PhaseLog:
    """Polls the node's GPU phases, remembering when each phase was first seen."""

    def __init__(self, custom: client.CustomObjectsApi, node: str) -> None:
        self.custom, self.node = custom, node
        self.seen: list[tuple[float, set[str]]] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        async def run() -> None:
            while True:
                phases = set((await _gpu_phases(self.custom, self.node)).values())
                self.seen.append((time.monotonic(), phases))
                await asyncio.sleep(0.2)

        self._task = asyncio.ensure_future(run())

    def first_unknown(self) -> float | None:
        return next((t for t, p in self.seen if "Unknown" in p), None)

    def timeline(self, since: float) -> list[str]:
        out: list[str] = []
        for t, p in self.seen:
            label = ",".join(sorted(p))
            if not out or not out[-1].endswith(label):
                out.append(f"{t - since:+.1f}s {label}")
        return out

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


@pytest.mark.slow
@pytest.mark.timeout(400)
async def test_hypervisor_restart_restores_registrations_and_unknown_only_after_heartbeat_timeout(
    devcluster: DevCluster,
    kube_api: Any,
    namespace: str,
    make_gpu_nodes: Any,
    mint_token: Any,
    tmp_path: Path,
) -> None:
    pool = f"hyp-{secrets.token_hex(3)}"
    (node,) = await make_gpu_nodes(1, labels={"test-pool": pool})
    custom = client.CustomObjectsApi(kube_api)
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "test-pool", "operator": "In", "values": [pool]}]}
        ]
    }
    await custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "gpupools",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "GPUPool",
            "metadata": {"name": pool},
            "spec": {"nodeManagerConfig": {"nodeSelector": selector}},
        },
    )
    controller = ServiceProcess.controller(
        devcluster.kubeconfig,
        env={
            "GPUPLANE_CONTROLLER_HEARTBEAT_TIMEOUT_SECONDS": str(HEARTBEAT_TIMEOUT),
            "GPUPLANE_CONTROLLER_HEARTBEAT_INTERVAL_SECONDS": str(HEARTBEAT_INTERVAL),
        },
    )
    hyp = ServiceProcess("tf-hypervisor", "GPUPLANE_HYPERVISOR_", devcluster.kubeconfig)
    phases = PhaseLog(custom, node)
    try:
        controller.start()
        hyp.args = [
            "--node-name", node,
            "--host", "127.0.0.1",
            "--port", str(hyp.http_port),
            "--backend", "simulated",
            "--simulated-devices", "2xH100-80GB",
            "--controller", controller.grpc_target,
            "--state-file", str(tmp_path / "state.json"),
        ]  # fmt: skip
        await asyncio.to_thread(hyp.start)

        async def gpus_running() -> bool:
            p = await _gpu_phases(custom, node)
            return len(p) == 2 and set(p.values()) == {"Running"}

        await wait_for(gpus_running, 60, "the node's GPUs Running from the hypervisor's report")
        await create_pod(kube_api, namespace, "frac", pool, tflops_request="100", vram_request="10Gi")
        pod = await wait_bound(kube_api, namespace, "frac", timeout=60)
        uid = pod.metadata.uid
        token = await mint_token(namespace, pod=pod)
        http = httpx.AsyncClient(base_url=hyp.url, timeout=10)

        async def worker() -> dict[str, Any] | None:
            try:
                r = await http.get(f"/api/v1/workers/{uid}")
            except httpx.HTTPError:
                return None
            return r.json()["data"] if r.status_code == 200 else None

        await wait_for(worker, 30, "the pod as a worker on the hypervisor")
        with pod_container(uid) as ctr:
            reg = await http.post(
                "/api/v1/process",
                params={"container_name": "main", "container_pid": ctr.worker_container_pid},
                headers={"Authorization": f"Bearer {token}"},
            )
            assert reg.status_code == 200, reg.text
            want_procs = [{"HostPID": ctr.worker_host_pid, "ContainerPID": 2, "ContainerName": "main"}]
            before = await worker()
            assert before is not None and before["Processes"] == want_procs
            phases.start()

            # 1. A restart: the GPUs go Unknown only if it took longer than the heartbeat timeout.
            kill9(hyp)
            killed = time.monotonic()
            await asyncio.to_thread(hyp.start)
            down = time.monotonic() - killed
            back = await wait_for(worker, 30, "the worker back after the restart")
            assert back["Processes"] == want_procs, back
            assert back["AllocatedDevices"] == before["AllocatedDevices"]
            await asyncio.sleep(HEARTBEAT_TIMEOUT)
            unknown = phases.first_unknown()
            if down < HEARTBEAT_TIMEOUT - 2:
                assert unknown is None, f"Unknown during a {down:.1f}s restart: {phases.timeline(killed)}"
            else:  # the machine was too slow to restart within the timeout: Unknown is right, but not early
                assert unknown is None or unknown >= killed + HEARTBEAT_TIMEOUT - HEARTBEAT_INTERVAL - 0.5
            await wait_for(gpus_running, 30, "the GPUs Running after the restart")
            await phases.stop()
            phases = PhaseLog(custom, node)
            phases.start()

            # 2. Down for longer than the timeout: Unknown, but not before the timeout.
            kill9(hyp)
            killed = time.monotonic()
            await wait_for(
                lambda: asyncio.sleep(0, phases.first_unknown()), HEARTBEAT_TIMEOUT + 30, "Unknown GPUs"
            )
            after = phases.first_unknown()
            assert after is not None
            # The last heartbeat was at most one interval before the kill.
            earliest = killed + HEARTBEAT_TIMEOUT - HEARTBEAT_INTERVAL - 0.5
            assert after >= earliest, (
                f"Unknown {after - killed:.1f}s after the kill: {phases.timeline(killed)}"
            )
            await asyncio.to_thread(hyp.start)
            await wait_for(gpus_running, 30, "the GPUs Running again once the hypervisor is back")
            back = await wait_for(worker, 30, "the worker back after the second restart")
            assert back["Processes"] == want_procs, back
        await http.aclose()
    finally:
        await phases.stop()
        hyp.stop()
        controller.stop()
        for name in await _gpu_phases(custom, node):
            await custom.delete_cluster_custom_object(GROUP, VERSION, "gpus", name)
        await custom.delete_cluster_custom_object(GROUP, VERSION, "gpupools", pool)
        try:  # the controller created it from the hypervisor's registration
            await custom.delete_cluster_custom_object(GROUP, VERSION, "gpunodes", node)
        except client.ApiException:
            pass
