"""Prometheus gauges per device and per worker, computed from the agent's state at scrape time
(a custom collector, so the polling loop does no metric bookkeeping)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuplane_hypervisor.agent import Agent
from gpuplane_hypervisor.domain.workers import effective_limit, tflops_limit

P = "gpuplane_hypervisor_"


class AgentCollector(Collector):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def collect(self) -> Iterator[Metric]:
        a = self.agent
        labels = ["node", "uuid", "model", "index"]
        total = GaugeMetricFamily(P + "device_memory_total_bytes", "Device memory.", labels=labels)
        used = GaugeMetricFamily(P + "device_memory_used_bytes", "Device memory in use.", labels=labels)
        util = GaugeMetricFamily(
            P + "device_utilization_percent", "Device compute utilisation.", labels=labels
        )
        healthy = GaugeMetricFamily(P + "device_healthy", "1 when the device is healthy.", labels=labels)
        node = a.settings.node_name
        for d in a.devices.values():
            lv = [node, d.uuid, d.model, str(d.index)]
            total.add_metric(lv, d.total_memory_bytes)
            healthy.add_metric(lv, 1.0 if d.healthy else 0.0)
            s = a.samples.get(d.uuid)
            if s is not None:
                used.add_metric(lv, s.memory_used_bytes)
                util.add_metric(lv, s.utilization_percent)
        yield from (total, used, util, healthy)

        wl = ["node", "worker_uid", "namespace", "pod"]
        mem = GaugeMetricFamily(
            P + "worker_memory_bytes", "Device memory used by a worker's processes.", labels=[*wl, "uuid"]
        )
        comp = GaugeMetricFamily(
            P + "worker_compute_percent", "Compute used by a worker's processes.", labels=[*wl, "uuid"]
        )
        tfl = GaugeMetricFamily(P + "worker_tflops_limit", "Per-GPU TFLOPs limit.", labels=wl)
        vram = GaugeMetricFamily(P + "worker_vram_limit_bytes", "Per-GPU VRAM limit.", labels=wl)
        by_pod: dict[str, set[int]] = {}
        for r in a.registrations.values():
            by_pod.setdefault(r.pod_uid, set()).add(r.host_pid)
        for alloc in a.allocations.allocations.values():
            lv = [node, alloc.pod_uid, alloc.namespace, alloc.pod_name]
            first = a.devices.get(alloc.gpu_uuids[0]) if alloc.gpu_uuids else None
            t = tflops_limit(alloc, first)
            if t is not None:
                tfl.add_metric(lv, t)
            v = effective_limit(alloc).vram
            if v is not None:
                vram.add_metric(lv, v)
            pids = by_pod.get(alloc.pod_uid, set())
            for uuid in alloc.gpu_uuids:
                s = a.samples.get(uuid)
                procs = [p for p in (s.processes if s else ()) if p.pid in pids]
                mem.add_metric([*lv, uuid], sum(p.memory_bytes for p in procs))
                comp.add_metric([*lv, uuid], sum(p.compute_percent for p in procs))
        yield from (mem, comp, tfl, vram)


def install_agent_metrics(registry: CollectorRegistry, agent: Agent) -> None:
    registry.register(AgentCollector(agent))
