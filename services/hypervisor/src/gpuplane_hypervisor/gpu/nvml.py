"""NVIDIA devices through NVML (pynvml, package nvidia-ml-py). The only module importing pynvml.

Every NVML call is guarded: an error on one device marks that device
unhealthy with the NVML message instead of failing the agent. Health comes
from NVML for real: critical XID events, pending retired pages, remapping
failures and a lost GPU all make ``Healthy`` false with a reason.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pynvml

from gpuplane_hypervisor.domain.gpu_models import max_tflops
from gpuplane_hypervisor.domain.models import DeviceInfo, DeviceSample, ProcessSample
from gpuplane_hypervisor.gpu.backend import BackendError, BackendUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")

# XIDs caused by applications, not by the device (same list as NVIDIA's k8s device plugin).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlBackend:
    name = "nvml"

    def __init__(self, sysfs_root: str = "/sys") -> None:
        self._sysfs = Path(sysfs_root)
        self._lock = threading.Lock()
        self._handles: dict[str, Any] = {}
        self._xid: dict[str, str] = {}  # uuid -> last critical XID reason (sticky until restart)
        self._events: Any = None
        self._last_util_ts: dict[str, int] = {}
        self._started = False

    def init(self) -> None:
        try:
            pynvml.nvmlInit()
        except (pynvml.NVMLError, OSError) as e:  # OSError: libnvidia-ml.so missing
            raise BackendUnavailable(f"NVML init failed: {e}") from e
        self._started = True
        try:
            self._events = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as e:
            log.warning("NVML event set unavailable, XID health disabled: %s", e)
            self._events = None

    def _guard(self, fn: Callable[..., Any], default: T, *args: Any) -> Any:
        """``fn(*args)``, or ``default`` when NVML fails or does not support the call."""
        try:
            return fn(*args)
        except pynvml.NVMLError_NotSupported:
            return default
        except pynvml.NVMLError as e:
            log.debug("NVML call failed: %s", e)
            return default

    def _numa_node(self, handle: Any) -> int:
        try:
            return int(pynvml.nvmlDeviceGetNumaNodeId(handle))
        except (pynvml.NVMLError, AttributeError):
            pass
        pci = self._guard(pynvml.nvmlDeviceGetPciInfo, None, handle)
        bus = _text(pci.busId) if pci is not None else ""
        if bus:
            # NVML gives an 8-digit domain; sysfs uses 4.
            path = self._sysfs / "bus/pci/devices" / bus.lower()[-12:] / "numa_node"
            try:
                return int(path.read_text().strip())
            except (OSError, ValueError):
                return -1
        return -1

    def _health(self, uuid: str, handle: Any) -> str:
        """Empty when healthy, else why not."""
        if uuid in self._xid:
            return self._xid[uuid]
        pending = self._guard(pynvml.nvmlDeviceGetRetiredPagesPendingStatus, 0, handle)
        if pending:
            return "retired pages pending (reset the GPU)"
        rows = self._guard(pynvml.nvmlDeviceGetRemappedRows, None, handle)
        if rows is not None and len(rows) >= 4 and rows[3]:
            return "row remapping failed"
        return ""

    def _poll_xids(self) -> None:
        if self._events is None:
            return
        while True:
            try:
                data = pynvml.nvmlEventSetWait(self._events, 0)
            except pynvml.NVMLError_Timeout:
                return
            except pynvml.NVMLError as e:
                log.debug("NVML event wait failed: %s", e)
                return
            xid = int(data.eventData)
            if xid in APPLICATION_XIDS:
                continue
            try:
                uuid = _text(pynvml.nvmlDeviceGetUUID(data.device)).lower()
            except pynvml.NVMLError:
                continue
            self._xid[uuid] = f"critical XID {xid}"

    def discover(self) -> list[DeviceInfo]:
        with self._lock:
            try:
                count = pynvml.nvmlDeviceGetCount()
            except pynvml.NVMLError as e:
                raise BackendError(f"NVML device count failed: {e}") from e
            driver = _text(self._guard(pynvml.nvmlSystemGetDriverVersion, ""))
            devices: list[DeviceInfo] = []
            handles: dict[str, Any] = {}
            for i in range(count):
                try:
                    handle = pynvml.nvmlDeviceGetHandleByIndex(i)
                    uuid = _text(pynvml.nvmlDeviceGetUUID(handle)).lower()
                except pynvml.NVMLError as e:
                    # A device that cannot even say its UUID is reported as unhealthy by index.
                    devices.append(
                        DeviceInfo(f"unknown-{i}", "NVIDIA", "unknown", i, -1, 0, 0.0, False, f"NVML: {e}")
                    )
                    continue
                if uuid not in self._handles and self._events is not None:
                    self._guard(
                        pynvml.nvmlDeviceRegisterEvents,
                        None,
                        handle,
                        pynvml.nvmlEventTypeXidCriticalError,
                        self._events,
                    )
                handles[uuid] = handle
                try:
                    model = _text(pynvml.nvmlDeviceGetName(handle))
                    total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
                    reason = self._health(uuid, handle)
                except pynvml.NVMLError_GpuIsLost:
                    model, total, reason = "unknown", 0, "GPU is lost"
                except pynvml.NVMLError as e:
                    model, total, reason = "unknown", 0, f"NVML: {e}"
                props = {"driverVersion": driver}
                pci = self._guard(pynvml.nvmlDeviceGetPciInfo, None, handle)
                bus = _text(pci.busId) if pci is not None else ""
                if bus:
                    props["pciBusId"] = bus
                cc = self._guard(pynvml.nvmlDeviceGetCudaComputeCapability, None, handle)
                if cc:
                    props["computeCapability"] = f"{cc[0]}.{cc[1]}"
                devices.append(
                    DeviceInfo(
                        uuid=uuid,
                        vendor="NVIDIA",
                        model=model,
                        index=int(self._guard(pynvml.nvmlDeviceGetIndex, i, handle)),
                        numa_node=self._numa_node(handle),
                        total_memory_bytes=total,
                        max_tflops=max_tflops(model),
                        healthy=not reason,
                        unhealthy_reason=reason,
                        properties=props,
                    )
                )
            self._handles = handles
            return devices

    def _processes(self, uuid: str, handle: Any) -> tuple[ProcessSample, ...]:
        procs = self._guard(pynvml.nvmlDeviceGetComputeRunningProcesses, [], handle)
        sm: dict[int, float] = {}
        last = self._last_util_ts.get(uuid, 0)
        samples = self._guard(pynvml.nvmlDeviceGetProcessUtilization, [], handle, last)
        for s in samples:
            sm[int(s.pid)] = float(s.smUtil)
            self._last_util_ts[uuid] = max(self._last_util_ts.get(uuid, 0), int(s.timeStamp))
        out = {}
        for p in procs:
            mem = p.usedGpuMemory
            out[int(p.pid)] = ProcessSample(int(p.pid), int(mem) if mem else 0, sm.get(int(p.pid), 0.0))
        return tuple(out[pid] for pid in sorted(out))

    def sample(self) -> list[DeviceSample]:
        with self._lock:
            self._poll_xids()
            out = []
            for uuid, handle in self._handles.items():
                mem = self._guard(pynvml.nvmlDeviceGetMemoryInfo, None, handle)
                util = self._guard(pynvml.nvmlDeviceGetUtilizationRates, None, handle)
                out.append(
                    DeviceSample(
                        uuid,
                        int(mem.used) if mem is not None else 0,
                        float(util.gpu) if util is not None else 0.0,
                        self._processes(uuid, handle),
                    )
                )
            return out

    def shutdown(self) -> None:
        with self._lock:
            if self._events is not None:
                self._guard(pynvml.nvmlEventSetFree, None, self._events)
                self._events = None
            if self._started:
                self._guard(pynvml.nvmlShutdown, None)
                self._started = False
