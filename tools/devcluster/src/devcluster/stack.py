"""The whole gpuplane platform as local processes on a devcluster: what `make run` starts.

`Platform` brings up (or reuses) a devcluster with simulated GPU nodes, makes
sure a default GPUPool covers them, then starts every service through its
console script: the controller as N replicas (Lease leader election, each
with its own identity and ports), one hypervisor per GPU node (simulated
backend, pointed at the controllers' gRPC), gpuctl and lens. It waits for
every `/readyz` and writes `endpoints.json` next to the logs.

`scripts/run_platform.py` (`make run`) and the end-to-end tests both drive
this class, so the tests run exactly what a user runs; only the cluster name,
the ports (`Ports.ephemeral`) and the state directory differ.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcluster.cluster import ORDER, DevCluster, run_async
from devcluster.nodes import GPU_MODELS, MANAGED_LABEL
from devcluster.services import free_port

Progress = Callable[[str], None]

GPU_NODE_PREFIX = "gpu-node"  # devcluster's GPU node names: gpu-node-0, gpu-node-1, ...
POOL_NAME = "default-pool"
IDENTITY_ENV = "GPUPLANE_CONTROLLER_LEADER_IDENTITY"
LEASE = ("default", "gpuplane-controller-leader")  # the controller's default Lease namespace/name
EXAMPLE_TRAINING_JOB = "train-resnet"  # job.name in examples/training.yaml (the banner's example)
MAX_STANDARD_HYPERVISORS = 50  # 8001..8050: below the controller's 8080


def _stderr(msg: str) -> None:
    print(f"platform: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Ports:
    """HTTP (and the controllers' gRPC) ports of every service."""

    controller_http: tuple[int, ...]
    controller_grpc: tuple[int, ...]
    hypervisor_http: tuple[int, ...]
    gpuctl_http: int
    lens_http: int

    @classmethod
    def standard(cls, gpu_nodes: int, replicas: int = 2) -> Ports:
        """The documented ports: controller 8080, 8081, ...; hypervisors 8001, 8002, ...;
        gpuctl 8000; lens 8090; controller gRPC 9090, 9091, ..."""
        if gpu_nodes > MAX_STANDARD_HYPERVISORS:
            raise ValueError(f"at most {MAX_STANDARD_HYPERVISORS} GPU nodes with the standard ports")
        if not 1 <= replicas <= 9:
            raise ValueError("controller replicas must be 1..9 with the standard ports")
        return cls(
            controller_http=tuple(8080 + i for i in range(replicas)),
            controller_grpc=tuple(9090 + i for i in range(replicas)),
            hypervisor_http=tuple(8001 + i for i in range(gpu_nodes)),
            gpuctl_http=8000,
            lens_http=8090,
        )

    @classmethod
    def ephemeral(cls, gpu_nodes: int, replicas: int = 2) -> Ports:
        """Free loopback ports picked now (tests; several platforms on one machine)."""
        return cls(
            controller_http=tuple(free_port() for _ in range(replicas)),
            controller_grpc=tuple(free_port() for _ in range(replicas)),
            hypervisor_http=tuple(free_port() for _ in range(gpu_nodes)),
            gpuctl_http=free_port(),
            lens_http=free_port(),
        )

    def all(self) -> list[int]:
        return [
            *self.controller_http,
            *self.controller_grpc,
            *self.hypervisor_http,
            self.gpuctl_http,
            self.lens_http,
        ]


@dataclass
class Service:
    """One service process: its console script, environment and HTTP port."""

    name: str
    script: str
    http_port: int
    env: dict[str, str]
    grpc_port: int | None = None
    node: str | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def kind(self) -> str:
        return self.name.split("-", 1)[0]


def simulated_devices(gpus_per_node: int, gpu_model: str) -> str:
    """The hypervisor's simulated inventory matching a devcluster GPU node, e.g. ``8xH100-80GB``."""
    model = GPU_MODELS[gpu_model]
    return f"{gpus_per_node}x{model.name}-{round(model.memory_mib / 1024)}GB"


def plan(
    *,
    kubeconfig: Path,
    ports: Ports,
    state_dir: Path,
    nodes: list[str],
    devices: str,
    identity_prefix: str = "controller",
) -> list[Service]:
    """What to start, in start order (pure: no process is started)."""
    if len(nodes) != len(ports.hypervisor_http):
        raise ValueError(f"{len(nodes)} GPU nodes but {len(ports.hypervisor_http)} hypervisor ports")
    base = {"KUBECONFIG": str(kubeconfig)}
    # Every replica's gRPC address: clients pick the first that answers and fail over to the next.
    controller_targets = "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports.controller_grpc)
    services: list[Service] = []
    for i, (http, grpc) in enumerate(zip(ports.controller_http, ports.controller_grpc, strict=True)):
        p = "GPUPLANE_CONTROLLER_"
        services.append(
            Service(
                name=f"controller-{i}",
                script="tf-controller",
                http_port=http,
                grpc_port=grpc,
                env={
                    **base,
                    f"{p}HTTP_HOST": "127.0.0.1",
                    f"{p}HTTP_PORT": str(http),
                    f"{p}GRPC_HOST": "127.0.0.1",
                    f"{p}GRPC_PORT": str(grpc),
                    f"{p}LOG_JSON": "false",
                    # Lease holder identity: distinct per replica (in a pod it is the pod name).
                    IDENTITY_ENV: f"{identity_prefix}-{i}",
                },
            )
        )
    for node, http in zip(nodes, ports.hypervisor_http, strict=True):
        p = "GPUPLANE_HYPERVISOR_"
        node_dir = state_dir / "hypervisor" / node
        services.append(
            Service(
                name=f"hypervisor-{node}",
                script="tf-hypervisor",
                http_port=http,
                node=node,
                env={
                    **base,
                    f"{p}HTTP_HOST": "127.0.0.1",
                    f"{p}HTTP_PORT": str(http),
                    f"{p}LOG_JSON": "false",
                    f"{p}NODE_NAME": node,
                    f"{p}BACKEND": "simulated",
                    f"{p}SIMULATED_DEVICES": devices,
                    f"{p}CONTROLLER": controller_targets,
                    f"{p}STATE_FILE": str(node_dir / "state.json"),
                    f"{p}SHM_HOST_ROOT": str(node_dir / "shm"),
                    f"{p}POOL": POOL_NAME,
                    # kwok nodes have no kubelet pod cgroups to check a registered PID against.
                    f"{p}POD_CGROUP_CHECK": "false",
                },
            )
        )
    services.append(
        Service(
            name="gpuctl",
            script="gpuctl-server",
            http_port=ports.gpuctl_http,
            env={
                **base,
                "GPUPLANE_GPUCTL_HTTP_HOST": "127.0.0.1",
                "GPUPLANE_GPUCTL_HTTP_PORT": str(ports.gpuctl_http),
                "GPUPLANE_GPUCTL_LOG_JSON": "false",
                "GPUPLANE_GPUCTL_CONTROLLER_ADDRESS": controller_targets,
            },
        )
    )
    services.append(
        Service(
            name="lens",
            script="lens-server",
            http_port=ports.lens_http,
            env={
                **base,
                "GPUPLANE_LENS_HTTP_HOST": "127.0.0.1",
                "GPUPLANE_LENS_HTTP_PORT": str(ports.lens_http),
                "GPUPLANE_LENS_LOG_JSON": "false",
                "GPUPLANE_LENS_DATA_DIR": str(state_dir / "lens"),
            },
        )
    )
    return services


def default_pool(nodes_label: str = MANAGED_LABEL) -> dict[str, Any]:
    """The GPUPool every devcluster GPU node belongs to; pods without a pool annotation land here."""
    return {
        "apiVersion": "tensor-fusion.ai/v1",
        "kind": "GPUPool",
        "metadata": {"name": POOL_NAME, "annotations": {"tensor-fusion.ai/is-default-pool": "true"}},
        "spec": {
            "nodeManagerConfig": {
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": nodes_label, "operator": "In", "values": ["true"]},
                                {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
                            ]
                        }
                    ]
                }
            },
            "componentConfig": {"hypervisor": {"portNumber": 8001}},
        },
    }


async def _ensure_pool(kubeconfig: Path) -> None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    from devcluster.k8s_ops import api_client

    api = await api_client(kubeconfig)
    try:
        custom = client.CustomObjectsApi(api)
        try:
            await custom.create_cluster_custom_object("tensor-fusion.ai", "v1", "gpupools", default_pool())
        except ApiException as e:
            if e.status != 409:  # already there (a previous run): keep it, users may have edited it
                raise
    finally:
        await api.close()


async def lease_holder(kubeconfig: Path) -> str | None:
    from kubernetes_asyncio import client
    from kubernetes_asyncio.client.exceptions import ApiException

    from devcluster.k8s_ops import api_client

    api = await api_client(kubeconfig)
    try:
        lease = await client.CoordinationV1Api(api).read_namespaced_lease(LEASE[1], LEASE[0])
        return str(lease.spec.holder_identity or "") or None
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    finally:
        await api.close()


def _die_with_parent() -> None:
    """Linux: the child gets SIGTERM when the thread that started it dies (no orphan keeps a port)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def port_in_use(port: int) -> bool:
    """Whether a server could not listen on 127.0.0.1:port now (TIME_WAIT leftovers don't count:
    servers bind with SO_REUSEADDR, as done here)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class PlatformError(RuntimeError):
    pass


class Platform:
    def __init__(
        self,
        cluster: str = "default",
        *,
        ports: Ports | None = None,
        state_dir: Path,
        gpu_nodes: int = 3,
        gpus_per_node: int = 8,
        gpu_model: str = "H100",
        replicas: int = 2,
        progress: Progress = _stderr,
    ) -> None:
        if gpu_model not in GPU_MODELS:
            raise ValueError(f"unknown GPU model {gpu_model!r}; known: {', '.join(GPU_MODELS)}")
        self.cluster = DevCluster(cluster)
        self.ports = ports or Ports.standard(gpu_nodes, replicas)
        if len(self.ports.controller_http) != replicas or len(self.ports.hypervisor_http) != gpu_nodes:
            raise ValueError("ports do not match the number of controller replicas and GPU nodes")
        self.state_dir = state_dir
        self.log_dir = state_dir / "logs"
        self.gpu_nodes = gpu_nodes
        self.gpus_per_node = gpus_per_node
        self.gpu_model = gpu_model
        self.progress = progress
        self.nodes = [f"{GPU_NODE_PREFIX}-{i}" for i in range(gpu_nodes)]
        self.started_cluster = False
        """Whether `start` found the cluster stopped (then `stop_cluster` leaves things as found)."""
        self.services = plan(
            kubeconfig=self.cluster.kubeconfig,
            ports=self.ports,
            state_dir=state_dir,
            nodes=self.nodes,
            devices=simulated_devices(gpus_per_node, gpu_model),
            identity_prefix=f"{cluster}-controller",
        )

    # -- start ---------------------------------------------------------------
    def start(self, timeout: float = 180.0) -> Platform:
        """Cluster up (reused when running), default pool, every service started and ready."""
        busy = [p for p in self.ports.all() if port_in_use(p)]
        if busy:
            raise PlatformError(
                f"port(s) {', '.join(map(str, busy))} already in use (is another `make run` running?)"
            )
        self.started_cluster = not self.cluster.is_running()
        self.cluster.up(
            gpu_nodes=self.gpu_nodes,
            gpus_per_node=self.gpus_per_node,
            gpu_model=self.gpu_model,
            progress=self.progress,
        )
        run_async(_ensure_pool(self.cluster.kubeconfig))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for svc in self.services:
            if svc.node:
                (self.state_dir / "hypervisor" / svc.node).mkdir(parents=True, exist_ok=True)
        (self.state_dir / "lens").mkdir(parents=True, exist_ok=True, mode=0o700)
        self.progress(f"starting {len(self.services)} services (logs in {self.log_dir})")
        try:
            for svc in self.services:
                self._spawn(svc)
            self._wait_ready(timeout)
        except BaseException:
            self.stop_services()
            raise
        self.endpoints_file.write_text(json.dumps(self.endpoints(), indent=2) + "\n")
        return self

    def _spawn(self, svc: Service) -> None:
        exe = Path(sys.executable).parent / svc.script
        # PR_SET_PDEATHSIG follows the starting *thread*: only safe from the main thread.
        main_thread = threading.current_thread() is threading.main_thread()
        with open(self.log_dir / f"{svc.name}.log", "ab") as log:
            svc.proc = subprocess.Popen(
                [str(exe)],
                env={**os.environ, **svc.env},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: a terminal Ctrl-C reaches only the runner, which then stops
                # every service with one SIGTERM (no double-signal races in uvicorn).
                start_new_session=True,
                preexec_fn=_die_with_parent if main_thread else None,
            )

    def _wait_ready(self, timeout: float) -> None:
        t0 = time.monotonic()
        pending = list(self.services)
        while pending:
            for svc in list(pending):
                assert svc.proc is not None
                if svc.proc.poll() is not None:
                    raise PlatformError(
                        f"{svc.name} exited with code {svc.proc.returncode} before it was ready; "
                        f"last lines of {self.log_dir / (svc.name + '.log')}:\n"
                        f"{_tail(self.log_dir / f'{svc.name}.log')}"
                    )
                if _ready(svc.url):
                    pending.remove(svc)
                    self.progress(f"{svc.name} ready at {svc.url} ({time.monotonic() - t0:.1f}s)")
            if pending and time.monotonic() - t0 > timeout:
                names = ", ".join(s.name for s in pending)
                raise PlatformError(f"not ready after {timeout:.0f}s: {names}; see {self.log_dir}")
            if pending:
                time.sleep(0.25)

    # -- stop ----------------------------------------------------------------
    def dead(self) -> list[Service]:
        return [s for s in self.services if s.proc is not None and s.proc.poll() is not None]

    def stop_services(self, grace: float = 15.0) -> None:
        """SIGTERM every service, wait for all, SIGKILL what is left: no process keeps a port."""
        running = [s for s in self.services if s.proc is not None]
        for svc in running:
            assert svc.proc is not None
            if svc.proc.poll() is None:
                svc.proc.terminate()
        deadline = time.monotonic() + grace
        for svc in running:
            assert svc.proc is not None
            try:
                svc.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.progress(f"{svc.name} did not stop in {grace:.0f}s; killing it")
                svc.proc.kill()
                svc.proc.wait()
            svc.proc = None

    def stop_cluster(self) -> None:
        """Stop the control-plane processes but keep the cluster's state (next start: seconds)."""
        for name in reversed(ORDER):
            self.cluster.stop_component(name)

    # -- what to tell the user -------------------------------------------------
    def leader(self) -> str | None:
        """The controller replica holding the leader Lease now (None while none does)."""
        holder = run_async(lease_holder(self.cluster.kubeconfig))
        return next((s.name for s in self.services if s.env.get(IDENTITY_ENV) == holder), None)

    @property
    def endpoints_file(self) -> Path:
        return self.state_dir / "endpoints.json"

    def endpoints(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster.name,
            "kubeconfig": str(self.cluster.kubeconfig),
            "logs": str(self.log_dir),
            "pool": POOL_NAME,
            "services": [
                {
                    "name": s.name,
                    "kind": s.kind,
                    "url": s.url,
                    "pid": s.proc.pid if s.proc else None,
                    **({"grpc": f"127.0.0.1:{s.grpc_port}"} if s.grpc_port else {}),
                    **({"identity": s.env[IDENTITY_ENV]} if IDENTITY_ENV in s.env else {}),
                    **({"node": s.node} if s.node else {}),
                }
                for s in self.services
            ],
        }

    def banner(self, leader: str | None = None) -> str:
        """What `make run` prints once everything is ready; `leader`: see `leader()`."""
        gpuctl = next(s for s in self.services if s.name == "gpuctl")
        lens = next(s for s in self.services if s.name == "lens")
        env = "" if gpuctl.http_port == 8000 else f"GPUCTL_SERVER={gpuctl.url} "
        lines = [
            "",
            f"gpuplane is running on devcluster {self.cluster.name!r} "
            f"({self.gpu_nodes} nodes x {self.gpus_per_node} simulated {self.gpu_model}, "
            f"GPUPool {POOL_NAME!r}):",
            "",
            f"  export KUBECONFIG={self.cluster.kubeconfig}",
            "",
        ]
        for s in self.services:
            what = s.name
            if s.grpc_port:
                what += f" (gRPC :{s.grpc_port}{', leader' if s.name == leader else ''})"
            lines.append(f"  {what:<32} {s.url}   docs {s.url}/docs   metrics {s.url}/metrics")
        lines.append(f"  controller leader election: Lease {LEASE[0]}/{LEASE[1]}")
        lines += [
            "",
            "  Try it:",
            f"    {env}uv run gpuctl create -f examples/training.yaml",
            f"    {env}uv run gpuctl create -f examples/inference-fractional.yaml --wait",
            f"    {env}uv run gpuctl get jobs",
            f"    {env}uv run gpuctl logs {EXAMPLE_TRAINING_JOB}",
            f"    curl -s {self.services[0].url}/api/allocation",
            f"    curl -s {next(s.url for s in self.services if s.node)}/api/v1/workers",
            f"    curl -s -F name=local -F file=@{self.cluster.kubeconfig} {lens.url}/api/cluster/clusters",
            "",
            f"  logs: {self.log_dir}   endpoints: {self.endpoints_file}",
            "  Ctrl-C stops "
            + (
                "everything; the cluster's state is kept (`make cluster-down` deletes it)."
                if self.started_cluster
                else "the services; the cluster was running before and keeps running."
            ),
            "",
        ]
        return "\n".join(lines)
