"""`make run`: the whole gpuplane platform on the local devcluster, as processes.

Starts (or reuses) the devcluster with simulated GPU nodes, then the
controller (2 replicas, leader election), one hypervisor per GPU node, gpuctl
and lens (see `devcluster.stack`), waits until every `/readyz` answers, prints
the URLs and an example, and runs until Ctrl-C (or SIGTERM). Then it stops
every service and, if this run started it, the cluster's processes; the
cluster's state is kept, so the next `make run` starts in seconds
(`make cluster-down` deletes it).

`--ephemeral-ports`, `--cluster` and `--state-dir` let the end-to-end tests
run this very script beside other clusters; the chosen endpoints are written
to `<state-dir>/endpoints.json`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from devcluster.nodes import GPU_MODELS
from devcluster.stack import Platform, PlatformError, Ports

ROOT = Path(__file__).resolve().parent.parent


class Stop(Exception):
    pass


_stopping = False


def _raise_stop(signum: int, _frame: object) -> None:
    # Ctrl-C reaches us more than once (from the terminal and forwarded by `uv run`/make):
    # only the first one interrupts; later ones must not break the shutdown half-way.
    global _stopping
    if not _stopping:
        _stopping = True
        raise Stop(signal.Signals(signum).name)


def main(argv: list[str] | None = None) -> int:
    global _stopping
    p = argparse.ArgumentParser(prog="run_platform", description=__doc__.split("\n\n")[0])
    p.add_argument("--cluster", default="default", help="devcluster name (default: default)")
    p.add_argument("--gpu-nodes", type=int, default=3)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--gpu-model", default="H100", choices=sorted(GPU_MODELS))
    p.add_argument("--replicas", type=int, default=2, help="controller replicas (default 2)")
    p.add_argument("--state-dir", type=Path, default=ROOT / ".run", help="logs, hypervisor and lens state")
    p.add_argument("--ephemeral-ports", action="store_true", help="free ports instead of the standard ones")
    p.add_argument(
        "--keep-cluster",
        action="store_true",
        help="leave the cluster running on exit (it is stopped only when this run started it)",
    )
    p.add_argument("--timeout", type=float, default=180, help="seconds to wait for every service")
    a = p.parse_args(argv)
    if a.gpu_nodes < 1 or a.replicas < 1:
        p.error("--gpu-nodes and --replicas must be at least 1")

    # A shell starts background jobs with SIGINT ignored, and Python keeps that: be explicit.
    signal.signal(signal.SIGINT, _raise_stop)
    signal.signal(signal.SIGTERM, _raise_stop)
    platform: Platform | None = None
    code = 0
    try:
        ports = (Ports.ephemeral if a.ephemeral_ports else Ports.standard)(a.gpu_nodes, a.replicas)
        platform = Platform(
            a.cluster,
            ports=ports,
            state_dir=a.state_dir.resolve(),
            gpu_nodes=a.gpu_nodes,
            gpus_per_node=a.gpus_per_node,
            gpu_model=a.gpu_model,
            replicas=a.replicas,
        )
        platform.start(timeout=a.timeout)
        print(platform.banner(platform.leader()), flush=True)
        # A service that exits is reported, and the rest keep running: stopping the leading
        # controller replica to watch the other take over is a fair thing to try.
        reported: set[str] = set()
        while len(reported) < len(platform.services):
            for s in platform.dead():
                if s.name not in reported:
                    reported.add(s.name)
                    rc = s.proc.returncode if s.proc else None
                    log = platform.log_dir / f"{s.name}.log"
                    print(f"{s.name} exited (code {rc}); see {log}", file=sys.stderr, flush=True)
            time.sleep(0.5)
        print("every service has exited", file=sys.stderr)
        code = 1
    except Stop:
        print("\nstopping ...", file=sys.stderr, flush=True)
    except (PlatformError, RuntimeError, TimeoutError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        code = 1
    finally:
        _stopping = True  # from here on, signals are ignored: the shutdown runs to its end
        if platform is not None:
            platform.stop_services()
            stop_cluster = platform.started_cluster and not a.keep_cluster
            if stop_cluster:
                platform.stop_cluster()
            print(
                "stopped" + ("" if stop_cluster else f"; cluster {a.cluster!r} keeps running"),
                file=sys.stderr,
                flush=True,
            )
    return code


if __name__ == "__main__":
    sys.exit(main())
