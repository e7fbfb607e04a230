"""Helpers shared by the gpuctl tests (a uniquely named module, importable from the tests)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn

from gpuplane_gpuctl.main import build_app
from gpuplane_gpuctl.settings import Settings


class ServerThread:
    """uvicorn on 127.0.0.1, ephemeral port, in its own thread and event loop."""

    def __init__(self, settings: Settings) -> None:
        config = uvicorn.Config(
            build_app(settings), host="127.0.0.1", port=0, log_config=None, access_log=False, lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="gpuctl-test-server")

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("gpuctl test server did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def __exit__(self, *_: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def make_settings(devcluster: Any, **kw: Any) -> Settings:
    return Settings(
        kubeconfig=str(devcluster.kubeconfig), http_port=8000, grpc_port=9092, log_json=False, **kw
    )


async def eventually(
    check: Callable[[], Awaitable[Any]], timeout: float = 30.0, what: str = "condition"
) -> Any:
    """Retry `check` until it returns a truthy value (cluster state settles asynchronously)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.25)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def job_yaml(
    kind: str,
    name: str,
    namespace: str,
    *,
    gpu: int = 0,
    extra: str = "",
    service: str | None = None,
) -> str:
    svc = (
        service
        if service is not None
        else ("" if kind in ("training", "notebook") else "service: {port: 8000}")
    )
    return (
        f"kind: {kind}\nversion: v0.1\n"
        f"job: {{name: {name}, namespace: {namespace}}}\n"
        "environment: {image: busybox:1.36, command: [sh, -c, 'echo hello']}\n"
        f"resources: {{cpu: 1, memory: 1Gi, gpu: {gpu}}}\n"
        f"{svc}\n{extra}"
    )


async def create_gpu_pool(
    api: Any, pool: str, nodes: list[str], tflops: str, vram: str, per_node: int
) -> list[str]:
    """A GPUPool over `nodes` (labelled test-pool=<pool>) with GPU objects as a hypervisor reports them."""
    from kubernetes_asyncio import client

    g, v = "tensor-fusion.ai", "v1"
    custom = client.CustomObjectsApi(api)
    selector = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "test-pool", "operator": "In", "values": [pool]}]}
        ]
    }
    await custom.create_cluster_custom_object(
        g, v, "gpupools",
        {"apiVersion": f"{g}/{v}", "kind": "GPUPool", "metadata": {"name": pool},
         "spec": {"nodeManagerConfig": {"nodeSelector": selector}}},
    )  # fmt: skip
    names = []
    for node in nodes:
        for i in range(per_node):
            name = f"{node}-gpu-{i}"
            names.append(name)
            await custom.create_cluster_custom_object(
                g, v, "gpus", {"apiVersion": f"{g}/{v}", "kind": "GPU", "metadata": {"name": name}}
            )
            status = {
                "phase": "Running", "vendor": "NVIDIA", "model": "H100", "uuid": name, "index": i,
                "capacity": {"tflops": tflops, "vram": vram}, "available": {"tflops": tflops, "vram": vram},
                "nodeSelector": {"kubernetes.io/hostname": node},
            }  # fmt: skip
            await custom.patch_cluster_custom_object_status(
                g, v, "gpus", name, {"status": status}, _content_type="application/merge-patch+json"
            )
    return names


async def delete_gpu_pool(api: Any, pool: str, gpus: list[str]) -> None:
    from kubernetes_asyncio import client

    custom = client.CustomObjectsApi(api)
    for n in gpus:
        await custom.delete_cluster_custom_object("tensor-fusion.ai", "v1", "gpus", n)
    await custom.delete_cluster_custom_object("tensor-fusion.ai", "v1", "gpupools", pool)
