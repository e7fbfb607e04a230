"""The real NVML backend on a GPU machine: inventory against nvidia-smi, and a real CUDA
process's memory in the per-process accounting.

Runs as one short script on a GPU machine without network:
    uv run pytest services/hypervisor/tests/test_hypervisor_nvml.py -q
The root conftest skips it where NVML cannot initialise.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuplane_hypervisor.gpu.nvml import NvmlBackend

pytestmark = pytest.mark.gpu
MIB = 1024**2
ALLOC_MIB = 256

# Allocates ALLOC_MIB on device 0 through the CUDA driver API (libcuda ships with the driver,
# so no toolkit, torch or network is needed), prints "ready", then holds it until stdin closes.
CUDA_HOLDER = f"""
import ctypes, sys
cuda = ctypes.CDLL("libcuda.so.1")
def ok(rc, what):
    if rc != 0:
        print(f"{{what}} failed: {{rc}}", flush=True); sys.exit(3)
ok(cuda.cuInit(0), "cuInit")
dev = ctypes.c_int()
ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
ctx = ctypes.c_void_p()
ok(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
ptr = ctypes.c_uint64()
ok(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t({ALLOC_MIB} * 1024 * 1024)), "cuMemAlloc")
print("ready", flush=True)
sys.stdin.read()
"""


def nvidia_smi() -> list[dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not installed")
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    rows = []
    for line in out.strip().splitlines():
        index, uuid, name, mem = (part.strip() for part in line.split(","))
        rows.append({"index": index, "uuid": uuid, "name": name, "memory_mib": mem})
    return rows


@pytest.fixture
def backend() -> Iterator[NvmlBackend]:
    b = NvmlBackend()
    b.init()
    yield b
    b.shutdown()


def test_inventory_matches_nvidia_smi(backend: NvmlBackend) -> None:
    smi = nvidia_smi()
    devices = backend.discover()
    assert len(devices) == len(smi)
    by_uuid = {d.uuid: d for d in devices}
    for row in smi:
        dev = by_uuid[row["uuid"].lower()]  # UUIDs are lower-cased at discovery
        assert dev.index == int(row["index"])
        assert dev.model == row["name"]
        assert abs(dev.total_memory_bytes // MIB - int(row["memory_mib"])) <= 1
        assert dev.vendor == "NVIDIA"
        assert dev.healthy or dev.unhealthy_reason  # never unhealthy without a reason
        assert dev.numa_node >= -1
    samples = backend.sample()
    assert {s.uuid for s in samples} == set(by_uuid)


def test_a_real_cuda_process_shows_in_process_accounting(backend: NvmlBackend) -> None:
    devices = backend.discover()
    first = min(devices, key=lambda d: d.index)
    holder = subprocess.Popen(
        [sys.executable, "-c", CUDA_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline().strip()
        if line != "ready":
            holder.kill()
            pytest.skip(f"could not allocate through libcuda: {line or holder.wait()}")
        # PIDs only match when we share the host's PID namespace (NVML reports host PIDs).
        nspid = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("NSpid:"))
        same_pid_ns = len(nspid.split()) == 2
        deadline = time.monotonic() + 20
        found = None
        while time.monotonic() < deadline and found is None:
            sample = next(s for s in backend.sample() if s.uuid == first.uuid)
            for p in sample.processes:
                if (p.pid == holder.pid or not same_pid_ns) and p.memory_bytes >= ALLOC_MIB * MIB:
                    found = p
            time.sleep(0.2)
        assert found is not None, "the CUDA process's memory never appeared in NVML accounting"
        assert sample.memory_used_bytes >= found.memory_bytes
        assert 0.0 <= found.compute_percent <= 100.0
    finally:
        if holder.stdin:
            holder.stdin.close()
        holder.wait(timeout=30)
