"""Overview figures that come from outside the Kubernetes API objects: node disk from each
kubelet's Summary API (through the apiserver's node proxy) and memory usage from the
cluster's Prometheus (through the apiserver's service proxy).

The apiserver refuses to proxy to loopback addresses, so both endpoints listen on this
machine's outbound address and the cluster points at it: the nodes' InternalIP and kubelet
port are patched (kwok does not serve /stats/summary), and the Prometheus Service has no
selector, only an Endpoints object. A private cluster is used because the overview reports
disk only when every Ready node answered, and patching shared nodes would break their pod logs.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kubernetes_asyncio import client, config
from lens_testkit import MakeLens, poll

from devcluster.cluster import DevCluster

GIB = 1024**3
# Per node: capacity, used, available (available < capacity - used, like real filesystems).
DISKS = {"capacityBytes": 100 * GIB, "usedBytes": 30 * GIB, "availableBytes": 65 * GIB}
MEMORY_PERCENT = 37.25


def _outbound_ip() -> str | None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("198.51.100.1", 9))  # no packet is sent; this only picks the route
        ip = str(s.getsockname()[0])
    except OSError:
        return None
    finally:
        s.close()
    return None if ip.startswith("127.") else ip


class _Sources:
    """A kubelet Summary endpoint (TLS) and a Prometheus query endpoint (HTTP) on one address."""

    def __init__(self, ip: str, cert: str, key: str) -> None:
        self.queries: list[str] = []
        self.summary_nodes: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path == "/stats/summary":
                    outer.summary_nodes.append(self.headers.get("Host", ""))
                    body: dict[str, Any] = {"node": {"nodeName": "x", "fs": DISKS}}
                elif url.path == "/api/v1/query":
                    outer.queries.append(parse_qs(url.query).get("query", [""])[0])
                    body = {
                        "status": "success",
                        "data": {
                            "resultType": "vector",
                            "result": [{"metric": {}, "value": [0, str(MEMORY_PERCENT)]}],
                        },
                    }
                else:
                    self.send_error(404)
                    return
                raw = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *_args: Any) -> None:
                pass

        self.kubelet = ThreadingHTTPServer((ip, 0), Handler)
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(cert, key)
        self.kubelet.socket = tls.wrap_socket(self.kubelet.socket, server_side=True)
        self.prometheus = ThreadingHTTPServer((ip, 0), Handler)
        self._threads = [
            threading.Thread(target=srv.serve_forever, daemon=True) for srv in (self.kubelet, self.prometheus)
        ]
        for t in self._threads:
            t.start()

    def close(self) -> None:
        for srv in (self.kubelet, self.prometheus):
            srv.shutdown()
            srv.server_close()


async def _prometheus_service(core: client.CoreV1Api, ip: str, port: int, node: str) -> None:
    """Service monitoring/prometheus:9090 backed by a pod whose IP is ``ip``: the service proxy
    only forwards to endpoint addresses that are pods' IPs, so the kwok-run pod gets ours."""
    await core.create_namespace({"metadata": {"name": "monitoring"}})
    pod = {
        "metadata": {"name": "prometheus-0", "labels": {"app": "prometheus"}},
        "spec": {
            "nodeName": node,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "prometheus", "image": "prom/prometheus"}],
        },
    }
    await core.create_namespaced_pod("monitoring", pod)

    async def running() -> bool:
        got = await core.read_namespaced_pod("prometheus-0", "monitoring")
        return bool(got.status and got.status.phase == "Running")

    await poll(running, bool)  # kwok has written its own status; ours must come after it
    await core.patch_namespaced_pod_status(
        "prometheus-0",
        "monitoring",
        {"status": {"podIP": ip, "podIPs": [{"ip": ip}]}},
        _content_type="application/merge-patch+json",
    )
    await core.create_namespaced_service(
        "monitoring", {"metadata": {"name": "prometheus"}, "spec": {"ports": [{"name": "web", "port": 9090}]}}
    )
    address = {"ip": ip, "targetRef": {"kind": "Pod", "name": "prometheus-0", "namespace": "monitoring"}}
    await core.create_namespaced_endpoints(
        "monitoring",
        {
            "metadata": {"name": "prometheus"},
            "subsets": [{"addresses": [address], "ports": [{"name": "web", "port": port}]}],
        },
    )


@pytest.fixture(scope="module")
def sources_cluster() -> Iterator[DevCluster]:
    if _outbound_ip() is None:
        if os.environ.get("CI"):
            pytest.fail("no non-loopback IPv4 address: the apiserver cannot proxy to loopback")
        pytest.skip("no non-loopback IPv4 address: the apiserver cannot proxy to loopback")
    cluster = DevCluster(f"lens-src-{secrets.token_hex(2)}").up(gpu_nodes=2, gpus_per_node=8, cpu_nodes=0)
    try:
        yield cluster
    finally:
        cluster.down()


async def test_overview_reads_disk_from_kubelets_and_memory_from_prometheus(
    sources_cluster: DevCluster, make_lens: MakeLens
) -> None:
    ip = _outbound_ip()
    assert ip is not None and sources_cluster.pki is not None
    src = _Sources(ip, str(sources_cluster.pki.path("kwok.crt")), str(sources_cluster.pki.path("kwok.key")))
    api = await config.new_client_from_config(str(sources_cluster.kubeconfig))
    try:
        core = client.CoreV1Api(api)
        nodes = [n.metadata.name for n in (await core.list_node()).items]
        assert len(nodes) == 2
        for name in nodes:
            await core.patch_node_status(
                name,
                {
                    "status": {
                        "addresses": [{"type": "InternalIP", "address": ip}],
                        "daemonEndpoints": {"kubeletEndpoint": {"Port": src.kubelet.server_address[1]}},
                    }
                },
            )
        await _prometheus_service(core, ip, src.prometheus.server_address[1], nodes[0])

        lens = await make_lens(prometheus_service="monitoring/prometheus:9090")
        cid = (await lens.register("sources", sources_cluster.kubeconfig.read_bytes()))["cluster"]["id"]

        async def hardware() -> dict[str, Any]:
            r = await lens.request("GET", "/api/cluster/overview", params={"clusterId": cid})
            assert r.status_code == 200, r.text
            hw: dict[str, Any] = r.json()["kubernetes"]["hardware"]
            return hw

        hw = await poll(
            hardware, lambda h: h["diskBytes"] is not None and h["memoryUsagePercent"] is not None
        )
        assert hw["diskBytes"] == 2 * DISKS["capacityBytes"]
        assert hw["diskUsedBytes"] == 2 * DISKS["usedBytes"]
        assert hw["diskAvailableBytes"] == 2 * DISKS["availableBytes"]
        assert hw["diskUsagePercent"] == 30.0
        assert hw["memoryUsagePercent"] == round(MEMORY_PERCENT, 1)
        assert hw["memoryAvailableBytes"] == int(hw["memoryBytes"] * (1 - MEMORY_PERCENT / 100))
        assert len(src.summary_nodes) >= 2  # every Ready node's kubelet was asked
        assert src.queries and "node_memory_MemAvailable_bytes" in src.queries[0]
    finally:
        await api.close()
        src.close()
