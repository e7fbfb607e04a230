"""One local Kubernetes control plane: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok, all on loopback.

`up` is idempotent: a running cluster is reused (seconds), a stopped one is
started from its existing state, a new one gets fresh PKI and etcd data.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from devcluster import k8s_ops
from devcluster.build import bin_dir, build_all
from devcluster.kubeconfig import admin_ssl_context, write_admin_kubeconfig
from devcluster.nodes import NodeShape
from devcluster.paths import state_root
from devcluster.pki import ensure_pki
from devcluster.processes import ProcessTable
from devcluster.services import free_port
from devcluster.versions import etcd, kubernetes, kwok

Progress = Callable[[str], None]
T = TypeVar("T")

ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
LOG_LINES = [
    "devcluster: container started",
    "devcluster: this pod runs on a kwok node; these lines are served by kwok's ClusterLogs",
    "devcluster: still running",
]


def _stderr(msg: str) -> None:
    print(f"devcluster: {msg}", file=sys.stderr, flush=True)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion, also when called from inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(asyncio.run(coro))
        except BaseException as e:  # re-raised in the caller's thread
            error.append(e)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if error:
        raise error[0]
    return result[0]


def _post_json(url: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        result: dict[str, Any] = json.loads(r.read())
        return result


@dataclass
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int

    @classmethod
    def allocate(cls) -> Ports:
        return cls(*(free_port() for _ in range(6)))


def find_crd_dir() -> Path | None:
    """charts/gpuplane/crds of the checkout this package runs from (or cwd's)."""
    import os

    env = os.environ.get("GPUPLANE_CRDS_DIR")
    if env:
        return Path(env)
    for base in (Path(__file__).resolve(), Path.cwd().resolve()):
        for parent in (base, *base.parents):
            cand = parent / "charts" / "gpuplane" / "crds"
            if cand.is_dir():
                return cand
    return None


class DevCluster:
    def __init__(self, name: str = "default", state_dir: Path | None = None) -> None:
        self.name = name
        self.state = state_dir or state_root(name)
        self.procs = ProcessTable(self.state)
        self.pki = ensure_pki(self.state / "pki") if self.state.exists() else None

    # -- paths -------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.state / "kubeconfig"

    @property
    def ports_file(self) -> Path:
        return self.state / "ports.json"

    def ports(self) -> Ports | None:
        try:
            return Ports(**json.loads(self.ports_file.read_text()))
        except FileNotFoundError:
            return None

    @property
    def server(self) -> str:
        ports = self.ports()
        if ports is None:
            raise RuntimeError(f"devcluster {self.name!r} has never been started")
        return f"https://127.0.0.1:{ports.apiserver}"

    # -- health ------------------------------------------------------------
    def _get(self, url: str, timeout: float = 2.0) -> int:
        assert self.pki is not None
        try:
            with urllib.request.urlopen(url, timeout=timeout, context=admin_ssl_context(self.pki)) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except (urllib.error.URLError, OSError):
            return 0

    def apiserver_ready(self) -> bool:
        return self.ports() is not None and self._get(f"{self.server}/readyz") == 200

    def is_running(self) -> bool:
        return all(self.procs.alive(p) for p in ORDER) and self.apiserver_ready()

    def _wait(self, what: str, check: Callable[[], bool], proc: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if not self.procs.alive(proc):
                raise RuntimeError(f"{proc} exited while waiting for {what}:\n{self.procs.log_tail(proc)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready after {timeout}s:\n{self.procs.log_tail(proc)}")
            time.sleep(0.2)

    # -- lifecycle ---------------------------------------------------------
    def up(
        self,
        *,
        gpu_nodes: int = 3,
        gpus_per_node: int = 8,
        gpu_model: str = "H100",
        cpu_nodes: int = 1,
        progress: Progress = _stderr,
        timeout: float = 180,
    ) -> DevCluster:
        t0 = time.monotonic()
        build_all(progress)
        if self.is_running():
            progress(f"cluster {self.name!r} already running at {self.server}")
        else:
            self._start(progress, timeout)
        run_async(self._setup(gpu_nodes, NodeShape(gpus_per_node, gpu_model), cpu_nodes, progress, timeout))
        progress(f"cluster {self.name!r} ready in {time.monotonic() - t0:.1f}s; KUBECONFIG={self.kubeconfig}")
        return self

    async def _setup(
        self, gpu_nodes: int, shape: NodeShape, cpu_nodes: int, progress: Progress, timeout: float
    ) -> None:
        api = await k8s_ops.api_client(self.kubeconfig)
        try:
            crd_dir = find_crd_dir()
            if crd_dir is not None:
                await k8s_ops.apply_crds(api, crd_dir, progress)
            else:
                progress("warning: charts/gpuplane/crds not found; CRDs not installed")
            names = await k8s_ops.ensure_nodes(
                api, gpu_nodes=gpu_nodes, shape=shape, cpu_nodes=cpu_nodes, progress=progress
            )
            await k8s_ops.wait_nodes_ready(api, names, progress, timeout)
            await k8s_ops.wait_default_serviceaccount(api, timeout)
        finally:
            await api.close()

    def _start(self, progress: Progress, timeout: float) -> None:
        for p in ORDER:  # leftovers of a half-started cluster
            self.procs.stop(p)
        self.state.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.pki = ensure_pki(self.state / "pki")
        ports = Ports.allocate()
        self.ports_file.write_text(json.dumps(asdict(ports)))
        write_admin_kubeconfig(self.kubeconfig, self.pki, self.server, f"devcluster-{self.name}")
        k8s_bin, etcd_bin, kwok_bin = bin_dir(kubernetes()), bin_dir(etcd()), bin_dir(kwok())

        progress(f"starting etcd on 127.0.0.1:{ports.etcd_client}")
        self.procs.start("etcd", self._etcd_args(etcd_bin / "etcd", ports))
        self._wait("etcd", lambda: self._etcd_healthy(ports), "etcd", timeout)

        progress(f"starting kube-apiserver on 127.0.0.1:{ports.apiserver}")
        self.procs.start("kube-apiserver", self._apiserver_args(k8s_bin / "kube-apiserver", ports))
        self._wait("kube-apiserver", self.apiserver_ready, "kube-apiserver", timeout)

        progress("starting kube-controller-manager, kube-scheduler and kwok")
        self.procs.start(
            "kube-controller-manager", self._kcm_args(k8s_bin / "kube-controller-manager", ports)
        )
        self.procs.start("kube-scheduler", self._scheduler_args(k8s_bin / "kube-scheduler", ports))
        self.procs.start("kwok", self._kwok_args(kwok_bin / "kwok", ports))
        for name, port in (
            ("kube-controller-manager", ports.controller_manager),
            ("kube-scheduler", ports.scheduler),
        ):
            self._wait(name, lambda p=port: self._get(f"https://127.0.0.1:{p}/healthz") == 200, name, timeout)
        self._wait(
            "kwok", lambda: self._get(f"http://127.0.0.1:{ports.kwok}/healthz") == 200, "kwok", timeout
        )

    def down(self, progress: Progress = _stderr) -> None:
        for p in reversed(ORDER):
            self.procs.stop(p)
        shutil.rmtree(self.state, ignore_errors=True)
        progress(f"cluster {self.name!r} stopped and its state removed")

    def stop_component(self, name: str) -> None:
        """Stop one component (fault tests); `restart_component` brings it back."""
        self.procs.stop(name)

    def restart_component(self, name: str, timeout: float = 60) -> None:
        ports = self.ports()
        assert ports is not None
        k8s_bin = bin_dir(kubernetes())
        argv = {
            "etcd": lambda: self._etcd_args(bin_dir(etcd()) / "etcd", ports),
            "kube-apiserver": lambda: self._apiserver_args(k8s_bin / "kube-apiserver", ports),
            "kube-controller-manager": lambda: self._kcm_args(k8s_bin / "kube-controller-manager", ports),
            "kube-scheduler": lambda: self._scheduler_args(k8s_bin / "kube-scheduler", ports),
            "kwok": lambda: self._kwok_args(bin_dir(kwok()) / "kwok", ports),
        }[name]()
        self.procs.stop(name)
        self.procs.start(name, argv)
        if name == "kube-apiserver":
            self._wait("kube-apiserver", self.apiserver_ready, name, timeout)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to now (fault tests: old resourceVersions become 410 Gone)."""
        ports = self.ports()
        assert ports is not None
        base = f"http://127.0.0.1:{ports.etcd_client}/v3/kv"
        head = _post_json(f"{base}/range", {"key": "AA=="})  # any key: the header has the revision
        revision = int(head["header"]["revision"])
        _post_json(f"{base}/compaction", {"revision": str(revision), "physical": True})
        return revision

    # -- component command lines ------------------------------------------
    def _etcd_healthy(self, ports: Ports) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ports.etcd_client}/health", timeout=2) as r:
                return b'"true"' in r.read()
        except (urllib.error.URLError, OSError):
            return False

    def _etcd_args(self, binary: Path, ports: Ports) -> list[str]:
        client_url = f"http://127.0.0.1:{ports.etcd_client}"
        peer_url = f"http://127.0.0.1:{ports.etcd_peer}"
        return [
            str(binary),
            "--name=devcluster",
            f"--data-dir={self.state / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=devcluster={peer_url}",
            "--quota-backend-bytes=4294967296",
            "--unsafe-no-fsync",  # a throwaway dev/test store: speed over durability
            "--log-level=warn",
        ]

    def _apiserver_args(self, binary: Path, ports: Ports) -> list[str]:
        assert self.pki is not None
        pki = self.pki
        return [
            str(binary),
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports.apiserver}",
            f"--cert-dir={self.state / 'apiserver'}",
            f"--tls-cert-file={pki.path('apiserver.crt')}",
            f"--tls-private-key-file={pki.path('apiserver.key')}",
            f"--client-ca-file={pki.ca_cert}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--authorization-mode=Node,RBAC",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--kubelet-preferred-address-types=InternalIP",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--max-requests-inflight=1000",
            "--max-mutating-requests-inflight=500",
            "--profiling=false",
            "--v=1",
        ]

    def _kube_common(self, ports_field: int) -> list[str]:
        assert self.pki is not None
        kc = str(self.kubeconfig)
        return [
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports_field}",
            # Serve with our CA's certificate so health checks can verify it.
            f"--tls-cert-file={self.pki.path('apiserver.crt')}",
            f"--tls-private-key-file={self.pki.path('apiserver.key')}",
            "--leader-elect=false",
            "--v=1",
        ]

    def _kcm_args(self, binary: Path, ports: Ports) -> list[str]:
        assert self.pki is not None
        return [
            str(binary),
            *self._kube_common(ports.controller_manager),
            f"--service-account-private-key-file={self.pki.sa_key}",
            f"--root-ca-file={self.pki.ca_cert}",
            f"--cluster-signing-cert-file={self.pki.ca_cert}",
            f"--cluster-signing-key-file={self.pki.ca_key}",
            "--kube-api-qps=500",
            "--kube-api-burst=1000",
            "--concurrent-gc-syncs=50",
            "--concurrent-namespace-syncs=20",
        ]

    def _scheduler_args(self, binary: Path, ports: Ports) -> list[str]:
        return [str(binary), *self._kube_common(ports.scheduler)]

    def _kwok_config(self, ports: Ports) -> Path:
        assert self.pki is not None
        logs_file = self.state / "pod.log"
        logs_file.write_text(
            "".join(f"2026-01-01T00:00:0{i}.000000000Z stdout F {line}\n" for i, line in enumerate(LOG_LINES))
        )
        docs: list[Any] = [
            {
                "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
                "kind": "KwokConfiguration",
                "options": {
                    "manageAllNodes": True,
                    "nodeIP": "127.0.0.1",
                    "nodePort": ports.kwok,
                    "serverAddress": f"127.0.0.1:{ports.kwok}",
                    "tlsCertFile": str(self.pki.path("kwok.crt")),
                    "tlsPrivateKeyFile": str(self.pki.path("kwok.key")),
                    "cidr": "10.244.0.1/16",
                    "nodeLeaseDurationSeconds": 40,
                    # kwok applies none of its documented defaults to a config file's
                    # options, so everything it needs is spelled out here.
                    "enableDebuggingHandlers": True,  # serves pods/log (ClusterLogs)
                    "enableProfilingHandler": False,
                    "enablePodsOnNodeSyncListPager": True,
                    "enablePodsOnNodeSyncStreamWatch": False,
                    "nodeLeaseParallelism": 16,
                    "nodePlayStageParallelism": 16,
                    "podPlayStageParallelism": 16,
                    "podsOnNodeSyncParallelism": 8,
                    "enableCRDs": [],
                },
            },
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterLogs",
                "metadata": {"name": "all-pods"},
                "spec": {"logs": [{"containers": [], "logsFile": str(logs_file), "follow": True}]},
            },
        ]
        stages = resources.files("devcluster") / "kwok"
        for f in ("node-stages.yaml", "pod-stages.yaml"):
            docs.extend(d for d in yaml.safe_load_all(stages.joinpath(f).read_text()) if d)
        path = self.state / "kwok.yaml"
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        return path

    def _kwok_args(self, binary: Path, ports: Ports) -> list[str]:
        return [
            str(binary),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={self._kwok_config(ports)}",
            "--manage-all-nodes=true",
        ]
