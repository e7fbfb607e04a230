"""Simulated devices, chosen explicitly by configuration (kwok nodes, tests, benchmarks).

Devices come from a spec like ``4xH100-80GB``; UUIDs derive from the node name
and index so they are stable across restarts. Per-process usage is set
deterministically, either in-process (`set_process`) or through a JSON usage
file that another process writes::

    {"<device uuid>": {"<host pid>": {"memoryBytes": 1073741824, "computePercent": 12.5}},
     "health": {"<device uuid>": "reason it is unhealthy"}}
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid as uuidlib
from pathlib import Path

from gpuplane_hypervisor.domain.gpu_models import max_tflops
from gpuplane_hypervisor.domain.models import DeviceInfo, DeviceSample, ProcessSample
from gpuplane_hypervisor.domain.simulated_spec import parse_simulated_devices

log = logging.getLogger(__name__)
_NS = uuidlib.UUID("5d6c1f52-4a53-4f0e-9a3e-6b1c2c7f0e11")


class SimulatedBackend:
    name = "simulated"

    def __init__(self, spec: str, node_name: str, usage_file: str | None = None) -> None:
        self._groups = parse_simulated_devices(spec)
        self._node = node_name
        self._usage_file = Path(usage_file) if usage_file else None
        self._file_mtime: int | None = None
        self._file_usage: dict[str, dict[int, ProcessSample]] = {}
        self._file_health: dict[str, str] = {}
        self._lock = threading.Lock()
        self._usage: dict[str, dict[int, ProcessSample]] = {}
        self._health: dict[str, str] = {}
        self._devices: list[DeviceInfo] = []
        index = 0
        for group in self._groups:
            for _ in range(group.count):
                uid = f"gpu-{uuidlib.uuid5(_NS, f'{node_name}/{index}')}"
                self._devices.append(
                    DeviceInfo(
                        uuid=uid,
                        vendor="NVIDIA",
                        model=group.model,
                        index=index,
                        numa_node=0,
                        total_memory_bytes=group.memory_bytes,
                        max_tflops=max_tflops(group.model),
                        healthy=True,
                        properties={"simulated": "true"},
                    )
                )
                index += 1
        # Like a two-socket server: the first half of the devices on NUMA node 0, the rest on 1.
        half = max(1, len(self._devices) // 2)
        self._devices = [
            DeviceInfo(**{**d.__dict__, "numa_node": 0 if d.index < half else 1}) for d in self._devices
        ]

    # -- test / operator controls ------------------------------------------------------------
    def set_process(self, device_uuid: str, pid: int, memory_bytes: int, compute_percent: float) -> None:
        with self._lock:
            self._usage.setdefault(device_uuid, {})[pid] = ProcessSample(pid, memory_bytes, compute_percent)

    def clear_process(self, device_uuid: str, pid: int) -> None:
        with self._lock:
            self._usage.get(device_uuid, {}).pop(pid, None)

    def set_unhealthy(self, device_uuid: str, reason: str | None) -> None:
        """Mark a device unhealthy with ``reason`` (None makes it healthy again)."""
        with self._lock:
            if reason is None:
                self._health.pop(device_uuid, None)
            else:
                self._health[device_uuid] = reason

    # -- GpuBackend ------------------------------------------------------------------------------
    def init(self) -> None:
        return None

    def _reload_file(self) -> None:
        if self._usage_file is None:
            return
        try:
            mtime = os.stat(self._usage_file).st_mtime_ns
        except FileNotFoundError:
            self._file_usage, self._file_health, self._file_mtime = {}, {}, None
            return
        if mtime == self._file_mtime:
            return
        try:
            raw = json.loads(self._usage_file.read_text())
            health = {str(k): str(v) for k, v in raw.pop("health", {}).items()}
            usage = {
                str(dev): {
                    int(pid): ProcessSample(
                        int(pid), int(v.get("memoryBytes", 0)), float(v.get("computePercent", 0.0))
                    )
                    for pid, v in per_pid.items()
                }
                for dev, per_pid in raw.items()
            }
        except (ValueError, AttributeError, TypeError) as e:
            log.warning("simulated usage file %s unreadable: %s", self._usage_file, e)
            return
        self._file_usage, self._file_health, self._file_mtime = usage, health, mtime

    def discover(self) -> list[DeviceInfo]:
        with self._lock:
            self._reload_file()
            health = {**self._file_health, **self._health}
            return [
                DeviceInfo(**{**d.__dict__, "healthy": False, "unhealthy_reason": health[d.uuid]})
                if d.uuid in health
                else d
                for d in self._devices
            ]

    def sample(self) -> list[DeviceSample]:
        with self._lock:
            self._reload_file()
            out = []
            for d in self._devices:
                procs = {**self._file_usage.get(d.uuid, {}), **self._usage.get(d.uuid, {})}
                ordered = tuple(procs[p] for p in sorted(procs))
                used = min(d.total_memory_bytes, sum(p.memory_bytes for p in ordered))
                util = min(100.0, sum(p.compute_percent for p in ordered))
                out.append(DeviceSample(d.uuid, used, util, ordered))
            return out

    def shutdown(self) -> None:
        return None
