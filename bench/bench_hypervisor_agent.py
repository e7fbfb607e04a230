"""Hypervisor agent overhead and HTTP serving speed, on the simulated backend (no cluster needed).

1. Polling-loop CPU: an in-process agent with 8 simulated devices x 64 processes
   (64 real `sleep` processes registered to 8 workers, each process on all 8 devices,
   so every poll samples 512 process entries and re-checks 64 registrations in /proc).
   Target: < 2% of one core at the default 1 s sampling interval.
2. `GET /api/v1/devices` and `GET /api/v1/workers` throughput and latency: `tf-hypervisor`
   as a separate process, fed 64 workers by a NodeAgentService peer over loopback gRPC,
   loaded from this (second) process with concurrent keep-alive clients.

Env: BENCH_SECONDS (per phase, default 10), BENCH_CONCURRENCY (default 16).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from devcluster.services import free_port
from gpuplane.controller.v1 import node_agent_pb2 as pb
from gpuplane.controller.v1 import node_agent_pb2_grpc as pb_grpc
from gpuplane.controller.v1 import types_pb2 as types
from gpuplane_core.grpc.server import bound_port, make_server
from gpuplane_hypervisor.agent import Agent
from gpuplane_hypervisor.domain.models import Allocation, AllocationEvent, EventType, Registration, Resources
from gpuplane_hypervisor.gpu.simulated import SimulatedBackend
from gpuplane_hypervisor.host.procfs import ProcFs
from gpuplane_hypervisor.settings import Settings

SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "16"))
DEVICES, PROCS, WORKERS = 8, 64, 8
GIB = 1024**3


async def polling_cpu(tmp: Path) -> tuple[float, float, float]:
    settings = Settings(
        node_name="bench-node",
        backend="simulated",
        simulated_devices=f"{DEVICES}xH100-80GB",
        state_file=str(tmp / "poll-state.json"),
        sample_interval=1.0,
        discovery_interval=60.0,
    )
    backend = SimulatedBackend(settings.simulated_devices, settings.node_name)
    agent = Agent(settings, backend, None)
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(PROCS)]  # noqa: ASYNC220 - setup
    try:
        await agent.start()
        uuids = list(agent.devices)
        procfs = ProcFs()
        for w in range(WORKERS):
            alloc = Allocation(
                f"uid-{w}", "bench", f"pod-{w}", (f"g{w}",), (uuids[w % DEVICES],),
                Resources(100.0, 8 * GIB), Resources(200.0, 16 * GIB), gpu_count=1,
            )  # fmt: skip
            agent.apply_event(AllocationEvent(EventType.ADDED, w + 1, alloc))
        for i, p in enumerate(sleepers):
            for uuid in uuids:
                backend.set_process(uuid, p.pid, GIB // 4, 1.0)
            agent.registrations[p.pid] = Registration(
                p.pid,
                1,
                "main",
                f"uid-{i % WORKERS}",
                f"pod-{i % WORKERS}",
                "bench",
                procfs.start_ticks(p.pid) or 0,
            )
        # Steady state at the default interval: whole-process CPU (includes the to_thread worker).
        await asyncio.sleep(1.5)
        cpu0, wall0, polls0 = time.process_time(), time.monotonic(), agent.polls
        await asyncio.sleep(SECONDS)
        cpu = time.process_time() - cpu0
        wall = time.monotonic() - wall0
        polls = agent.polls - polls0
        # Cost of one poll (sample + registration check), measured back to back.
        n = 200
        c0 = time.process_time()
        for _ in range(n):
            await agent.sample()
            agent._prune_exited()
        per_poll_ms = (time.process_time() - c0) / n * 1000
        assert len(agent.registrations) == PROCS, "registrations were pruned: the sleepers died?"
        assert sum(len(s.processes) for s in agent.samples.values()) == DEVICES * PROCS
        await agent.stop()
        return cpu / wall * 100, per_poll_ms, polls / wall
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


class Peer(pb_grpc.NodeAgentServiceServicer):
    def __init__(self, uuids: list[str]) -> None:
        self.uuids = uuids

    async def RegisterNode(self, request, context):  # type: ignore[no-untyped-def]
        return pb.RegisterNodeResponse(heartbeat_interval_seconds=10)

    async def Heartbeat(self, request, context):  # type: ignore[no-untyped-def]
        return pb.HeartbeatResponse()

    async def WatchAllocations(self, request, context):  # type: ignore[no-untyped-def]
        yield pb.AllocationEvent(type=pb.AllocationEvent.TYPE_RESET, revision=1)
        for i in range(64):
            yield pb.AllocationEvent(
                type=pb.AllocationEvent.TYPE_ADDED,
                revision=1,
                allocation=pb.Allocation(
                    pod_uid=f"uid-{i}", namespace="bench", pod_name=f"pod-{i}",
                    gpu_names=[f"g{i % DEVICES}"], gpu_uuids=[self.uuids[i % DEVICES]],
                    request=types.Resources(tflops="50", vram="4Gi"),
                    limit=types.Resources(tflops="100", vram="8Gi"),
                    qos=types.QOS_LEVEL_MEDIUM, isolation=types.ISOLATION_MODE_SOFT,
                    gpu_count=1, pool="bench",
                ),
            )  # fmt: skip
        yield pb.AllocationEvent(type=pb.AllocationEvent.TYPE_SYNCED, revision=1)
        await asyncio.Event().wait()


async def load(url: str) -> tuple[float, float, float, int]:
    latencies: list[float] = []
    errors = 0
    stop = time.monotonic() + SECONDS

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal errors
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            r = await client.get(url)
            latencies.append(time.perf_counter() - t0)
            errors += r.status_code != 200

    limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY)
    async with httpx.AsyncClient(limits=limits, timeout=10) as client:
        t0 = time.monotonic()
        await asyncio.gather(*(worker(client) for _ in range(CONCURRENCY)))
        wall = time.monotonic() - t0
    q = statistics.quantiles(latencies, n=100)
    return len(latencies) / wall, q[49] * 1000, q[98] * 1000, errors


async def http_load(tmp: Path) -> dict[str, tuple[float, float, float, int]]:
    node = "bench-node"
    uuids = [d.uuid for d in SimulatedBackend(f"{DEVICES}xH100-80GB", node).discover()]
    server = make_server(0, "127.0.0.1")
    pb_grpc.add_NodeAgentServiceServicer_to_server(Peer(uuids), server)
    await server.start()
    usage = {
        u: {str(100000 + p): {"memoryBytes": GIB // 4, "computePercent": 1.0} for p in range(PROCS)}
        for u in uuids
    }
    (tmp / "usage.json").write_text(json.dumps(usage))
    port = free_port()
    exe = os.path.join(os.path.dirname(sys.executable), "tf-hypervisor")
    env = {**os.environ, "GPUPLANE_HYPERVISOR_LOG_LEVEL": "WARNING", "KUBECONFIG": "/nonexistent"}
    proc = subprocess.Popen(  # noqa: ASYNC220 - setup, before timing
        [exe, "--node-name", node, "--host", "127.0.0.1", "--port", str(port), "--backend", "simulated",
         "--simulated-devices", f"{DEVICES}xH100-80GB", "--simulated-usage-file", str(tmp / "usage.json"),
         "--controller", f"127.0.0.1:{bound_port(server)}", "--state-file", str(tmp / "http-state.json")],
        env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as c:
            for _ in range(300):
                try:
                    if (await c.get(f"{base}/readyz")).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise SystemExit("tf-hypervisor did not become ready")
            workers = (await c.get(f"{base}/api/v1/workers")).json()["data"]
            assert len(workers) == 64, len(workers)
        return {path: await load(base + path) for path in ("/api/v1/devices", "/api/v1/workers")}
    finally:
        proc.terminate()
        proc.wait(10)
        await server.stop(0)


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print(
            f"polling loop: {DEVICES} devices x {PROCS} processes, {SECONDS:.0f}s at 1 s interval", flush=True
        )
        cpu_pct, per_poll_ms, rate = await polling_cpu(tmp)
        print(
            f"  CPU {cpu_pct:.2f}% of one core ({rate:.2f} polls/s), one poll costs {per_poll_ms:.2f} ms CPU"
        )
        print(
            f"HTTP load: {CONCURRENCY} concurrent clients, {SECONDS:.0f}s per endpoint, 64 workers",
            flush=True,
        )
        results = await http_load(tmp)
        for path, (rps, p50, p99, errors) in results.items():
            print(f"  {path}: {rps:.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms, {errors} errors")
    dev, wrk = results["/api/v1/devices"], results["/api/v1/workers"]
    verdict = "meets" if cpu_pct < 2.0 else "MISSES"
    print(
        f"SUMMARY: poll CPU {cpu_pct:.2f}% of a core ({verdict} <2%), {per_poll_ms:.2f} ms/poll; "
        f"devices {dev[0]:.0f} req/s p99 {dev[2]:.1f} ms; workers {wrk[0]:.0f} req/s p99 {wrk[2]:.1f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
