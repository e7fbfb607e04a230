"""The node agent: device discovery and sampling, workers from the controller's allocations,
process registrations, metering. Created in the app lifespan and kept on ``app.state.agent``."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from gpuplane_core.auth import Identity
from gpuplane_core.errors import GpuplaneError, NotFound, NotReady, Unauthorized
from gpuplane_hypervisor.domain.allocations import AllocationState
from gpuplane_hypervisor.domain.cost import DEFAULT_PRICING, QosPrice, node_row, worker_rows
from gpuplane_hypervisor.domain.line_protocol import encode_all
from gpuplane_hypervisor.domain.models import (
    Allocation,
    AllocationEvent,
    DeviceInfo,
    DeviceSample,
    EventType,
    Registration,
)
from gpuplane_hypervisor.domain.procfs import choose_host_pid
from gpuplane_hypervisor.gpu.backend import BackendError, GpuBackend
from gpuplane_hypervisor.host.procfs import ProcFs
from gpuplane_hypervisor.settings import Settings
from gpuplane_hypervisor.store.metering import HttpWriteSink, LineFileSink
from gpuplane_hypervisor.store.state_file import NodeState, StateFile

log = logging.getLogger(__name__)
VERSION = "0.1.0"


class Agent:
    def __init__(self, settings: Settings, backend: GpuBackend | None, backend_error: str | None) -> None:
        self.settings = settings
        self.backend = backend
        self.backend_error = backend_error
        self.devices: dict[str, DeviceInfo] = {}
        self.samples: dict[str, DeviceSample] = {}
        self.allocations = AllocationState()
        self.registrations: dict[int, Registration] = {}
        self.devices_ready = False
        self.workers_ready = settings.controller is None
        self.state_file = StateFile(settings.state_file)
        self.procfs = ProcFs(settings.proc_root)
        self.on_inventory_change: Callable[[], None] | None = None
        self.poll_seconds_cpu = 0.0
        self.polls = 0
        # Bumped whenever devices, allocations or registrations change, so the API can reuse
        # rendered listings between changes (see api/deps.cached_json).
        self.generation = 0
        self.render_cache: dict[str, tuple[int, bytes]] = {}
        self._last_discovery = 0.0
        self._discover_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._file_sink = LineFileSink(settings.metrics_file) if settings.metrics_file else None
        self._http_sink: HttpWriteSink | None = None
        self._last_metering = time.monotonic()
        self.pricing: dict[str, QosPrice] = dict(DEFAULT_PRICING)
        for qos, price in settings.pricing.items():
            self.pricing[qos] = QosPrice(
                price.tflops_per_hour, price.vram_gib_per_hour, price.limits_over_requests
            )

    # -- lifecycle ---------------------------------------------------------------------------------
    def restore(self) -> None:
        state = self.state_file.load()
        alive = [r for r in state.registrations if self.procfs.start_ticks(r.host_pid) == r.start_ticks]
        self.registrations = {r.host_pid: r for r in alive}
        self.generation += 1
        if state.allocations or state.revision:
            self.allocations.restore(state.allocations, state.revision)
            # Serving what we knew before the restart counts as initialised.
            self.workers_ready = True
        if len(alive) != len(state.registrations):
            log.info("dropped %d registrations of exited processes", len(state.registrations) - len(alive))
            self.save_state()

    async def start(self) -> None:
        self.restore()
        if self.settings.metrics_write_url:
            self._http_sink = HttpWriteSink(self.settings.metrics_write_url)
        if self.backend is not None:
            try:
                await self.discover()
                await self.sample()
            except NotReady as e:
                # Not fatal: /readyz says why, and the poll loop retries discovery every interval.
                log.error("initial device discovery failed: %s", e)
        self._tasks.append(asyncio.create_task(self._poll_loop(), name="gpu-poll"))
        if self._file_sink or self._http_sink:
            self._tasks.append(asyncio.create_task(self._metering_loop(), name="metering"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._http_sink is not None:
            await self._http_sink.close()
        if self.backend is not None:
            await asyncio.to_thread(self.backend.shutdown)

    def readiness(self) -> str | None:
        if self.backend is None:
            return self.backend_error or "GPU backend unavailable"
        if not self.devices_ready:
            return "device discovery has not completed"
        if not self.workers_ready:
            return "waiting for the controller's allocation listing"
        return None

    # -- devices -------------------------------------------------------------------------------------
    def require_backend(self) -> GpuBackend:
        if self.backend is None:
            raise NotReady(self.backend_error or "GPU backend unavailable")
        return self.backend

    async def discover(self) -> list[DeviceInfo]:
        backend = self.require_backend()
        async with self._discover_lock:
            try:
                found = await asyncio.to_thread(backend.discover)
            except BackendError as e:
                raise NotReady(f"device discovery failed: {e}") from e
            new = {d.uuid: d for d in sorted(found, key=lambda d: d.index)}
            changed = new != self.devices
            if changed:
                self.generation += 1
            self.devices = new
            self.devices_ready = True
            self._last_discovery = time.monotonic()
            if changed and self.on_inventory_change is not None:
                self.on_inventory_change()
            return list(new.values())

    async def sample(self) -> None:
        backend = self.require_backend()
        started = time.process_time()
        try:
            found = await asyncio.to_thread(backend.sample)
        except BackendError as e:  # keep the last samples; NVML hiccups are transient
            log.warning("device sampling failed: %s", e)
            return
        self.samples = {s.uuid: s for s in found}
        self.poll_seconds_cpu += time.process_time() - started
        self.polls += 1

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.sample_interval)
            if self.backend is None:
                continue
            try:
                if time.monotonic() - self._last_discovery >= self.settings.discovery_interval:
                    await self.discover()
                await self.sample()
                self._prune_exited()
            except GpuplaneError as e:
                log.warning("poll failed: %s", e)

    # -- workers -------------------------------------------------------------------------------------
    def apply_event(self, event: AllocationEvent) -> None:
        changed = self.allocations.apply(event)
        if changed:
            self.generation += 1
        if event.type is EventType.SYNCED:
            self.workers_ready = True
        if changed or event.type is EventType.SYNCED:
            self._drop_orphan_registrations()
            self.save_state()

    def worker(self, pod_uid: str) -> Allocation:
        alloc = self.allocations.get(pod_uid)
        if alloc is None:
            raise NotFound(f"worker {pod_uid} has no allocation on this node", code="worker_not_found")
        return alloc

    def save_state(self) -> None:
        try:
            self.state_file.save(
                NodeState(
                    registrations=list(self.registrations.values()),
                    allocations=list(self.allocations.allocations.values()),
                    revision=self.allocations.revision,
                )
            )
        except OSError as e:
            log.error("could not write state file %s: %s", self.state_file.path, e)

    def _drop_orphan_registrations(self) -> None:
        current = self.allocations.allocations
        for pid, reg in list(self.registrations.items()):
            if reg.pod_uid not in current:
                del self.registrations[pid]
                self.generation += 1

    def _prune_exited(self) -> None:
        gone = [pid for pid, r in self.registrations.items() if self.procfs.start_ticks(pid) != r.start_ticks]
        for pid in gone:
            del self.registrations[pid]
            self.generation += 1
        if gone:
            self.save_state()

    # -- limiter ------------------------------------------------------------------------------------
    def pod_allocation(self, identity: Identity) -> Allocation:
        """The allocation of the pod the reviewed token belongs to (never anything the caller claims)."""
        uid = identity.pod_uid
        if not uid:
            raise Unauthorized("token is not bound to a pod")
        alloc = self.allocations.get(uid)
        if alloc is None:
            raise NotFound(f"pod {identity.pod_name or uid} has no GPU allocation on this node")
        return alloc

    async def register_process(
        self, identity: Identity, container_name: str, container_pid: int
    ) -> Registration:
        alloc = self.pod_allocation(identity)
        candidates = await asyncio.to_thread(self.procfs.candidates, container_pid)
        check = self.settings.pod_cgroup_check
        chosen = choose_host_pid(candidates, container_pid, alloc.pod_uid, check)
        reg = Registration(
            host_pid=chosen.host_pid,
            container_pid=container_pid,
            container_name=container_name,
            pod_uid=alloc.pod_uid,
            pod_name=alloc.pod_name,
            namespace=alloc.namespace,
            start_ticks=chosen.start_ticks,
        )
        self.registrations[reg.host_pid] = reg
        self.generation += 1
        self.save_state()
        return reg

    # -- metering -----------------------------------------------------------------------------------
    def metering_payload(self, now_ns: int | None = None) -> str:
        now = time.monotonic()
        seconds, self._last_metering = now - self._last_metering, now
        ts = now_ns if now_ns is not None else time.time_ns()
        allocs = list(self.allocations.allocations.values())
        running = {r.pod_uid for r in self.registrations.values()}
        rows = worker_rows(
            allocs, self.pricing, seconds, {a.pod_uid: a.pod_uid in running for a in allocs}, ts
        )
        rows.append(
            node_row(
                self.settings.node_name,
                self.settings.pool or next((a.pool for a in allocs if a.pool), ""),
                list(self.devices.values()),
                allocs,
                seconds,
                self.settings.node_cost_per_hour,
                ts,
            )
        )
        return encode_all(rows)

    async def flush_metering(self) -> None:
        payload = self.metering_payload()
        if self._file_sink is not None:
            await asyncio.to_thread(self._file_sink.write, payload)
        if self._http_sink is not None:
            await self._http_sink.write(payload)

    async def _metering_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.metrics_interval)
            try:
                await self.flush_metering()
            except (GpuplaneError, OSError) as e:
                log.warning("metering write failed: %s", e)
