"""`make run`: the local devcluster plus every service as a process.

Starts (or reuses) the devcluster with simulated GPU nodes, starts each
service's console script against it, waits for their health endpoints,
prints the URLs, and stops the services on Ctrl-C (the cluster keeps running
so the next `make run` starts in seconds; `make cluster-down` removes it).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from devcluster.cluster import DevCluster

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / ".run" / "logs"

# (name, console script, env prefix, http port, grpc port, health path)
SERVICES = [
    ("controller", "tf-controller", "GPUPLANE_CONTROLLER_", 8080, 9090, "/readyz"),
    ("hypervisor", "tf-hypervisor", "GPUPLANE_HYPERVISOR_", 8001, 9091, "/readyz"),
    ("gpuctl", "gpuctl-server", "GPUPLANE_GPUCTL_", 8000, 9092, "/readyz"),
    ("lens", "lens-server", "GPUPLANE_LENS_", 8090, 9093, "/readyz"),
]


def _die_with_parent() -> None:
    """Linux: the service gets SIGTERM if this runner dies, so no orphan keeps its port."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def main() -> int:
    cluster = DevCluster("default").up(gpu_nodes=3, gpus_per_node=8, gpu_model="H100")
    LOGS.mkdir(parents=True, exist_ok=True)
    procs: list[tuple[str, subprocess.Popen[bytes]]] = []
    bin_dir = Path(sys.executable).parent
    for name, script, prefix, http, grpc, _ in SERVICES:
        env = {
            **os.environ,
            "KUBECONFIG": str(cluster.kubeconfig),
            f"{prefix}HTTP_HOST": "127.0.0.1",
            f"{prefix}HTTP_PORT": str(http),
            f"{prefix}GRPC_PORT": str(grpc),
            f"{prefix}LOG_JSON": "false",
        }
        log = open(LOGS / f"{name}.log", "ab")
        procs.append(
            (
                name,
                subprocess.Popen(
                    [str(bin_dir / script)], env=env, stdout=log, stderr=log, preexec_fn=_die_with_parent
                ),
            )
        )

    def stop(*_: object) -> None:
        # Ctrl-C and SIGTERM reach us twice (directly and forwarded by `uv run`): finish stopping.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for _n, p in procs:
            p.terminate()
        for _n, p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    deadline = time.monotonic() + 60
    for (name, _s, _p, http, _g, path), (_n, proc) in zip(SERVICES, procs, strict=True):
        while not healthy(f"http://127.0.0.1:{http}{path}"):
            if proc.poll() is not None or time.monotonic() > deadline:
                stop()
                print(f"{name} failed to start; see {LOGS / (name + '.log')}", file=sys.stderr)
                return 1
            time.sleep(0.2)

    print("\ngpuplane is running on the local devcluster:\n")
    print(f"  KUBECONFIG={cluster.kubeconfig}")
    for name, _s, _p, http, _g, _h in SERVICES:
        print(f"  {name:<11} http://127.0.0.1:{http}   (docs: /docs, metrics: /metrics)")
    print(f"\n  logs: {LOGS}\n  Ctrl-C stops the services; `make cluster-down` removes the cluster.\n")
    # Explicit: a shell starts background jobs with SIGINT ignored, and Python keeps that.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        while all(p.poll() is None for _n, p in procs):
            time.sleep(0.5)
        dead = [n for n, p in procs if p.poll() is not None]
        print(f"stopped unexpectedly: {', '.join(dead)}; see {LOGS}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nstopping services ...")
        return 0
    finally:
        stop()


if __name__ == "__main__":
    sys.exit(main())
