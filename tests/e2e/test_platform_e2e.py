"""The README's example on what `make run` starts: jobs through the gpuctl CLI, the fractional
job's allocation in the controller and on its node's hypervisor, and the cluster in Lens."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from e2e_platform import ROOT, RunningPlatform, eventually

from devcluster.stack import lease_holder

pytestmark = pytest.mark.cluster

EXAMPLES = ROOT / "examples"


def _example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def test_all_services_answer_their_documented_surfaces(platform: RunningPlatform) -> None:
    services = platform.endpoints["services"]
    assert [s["kind"] for s in services].count("controller") == 2
    assert sorted(s["node"] for s in platform.services("hypervisor")) == [
        "gpu-node-0",
        "gpu-node-1",
        "gpu-node-2",
    ]
    with httpx.Client(timeout=10) as http:
        for s in services:
            for path in ("/readyz", "/metrics", "/docs", "/openapi.json"):
                r = http.get(s["url"] + path)
                assert r.status_code == 200, f"{s['name']} {path}: {r.status_code}"
        # Every hypervisor serves its node's simulated devices (8 simulated H100 per node).
        for hyp in platform.services("hypervisor"):
            devices = http.get(hyp["url"] + "/api/v1/devices").json()["data"]
            assert len(devices) == 8 and all(d["Healthy"] for d in devices)


async def test_one_controller_replica_leads(platform: RunningPlatform) -> None:
    identities = {s["identity"]: s["name"] for s in platform.services("controller")}
    assert len(identities) == 2, "each replica needs its own Lease identity"
    deadline = time.monotonic() + 60
    while (holder := await lease_holder(platform.kubeconfig)) is None:
        assert time.monotonic() < deadline, "no controller replica took the leader Lease"
        await asyncio.sleep(0.5)
    assert holder in identities


def test_readme_example(platform: RunningPlatform) -> None:
    training = _example("training.yaml")["job"]["name"]
    fractional_doc = _example("inference-fractional.yaml")
    fractional = fractional_doc["job"]["name"]
    share = fractional_doc["resources"]["gpuShare"]

    # Submit both through the CLI; the fractional one is admitted only after the controller's
    # dry run, then placed by tensor-fusion-scheduler. --wait returns once it is Running.
    r = platform.gpuctl("create", "-f", "examples/training.yaml", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["name"] == training
    r = platform.gpuctl("create", "-f", "examples/inference-fractional.yaml", "--wait", "--timeout", "120")
    assert r.returncode == 0, r.stderr
    assert f"job/{fractional} created" in r.stdout

    # Both show up in `gpuctl get jobs`: the inference pod Running; the training pod Running or,
    # since kwok completes Job pods after a second, already Completed.
    def listed() -> dict[str, dict[str, Any]] | None:
        out = platform.gpuctl("get", "jobs", "-o", "json")
        assert out.returncode == 0, out.stderr
        items = {i["name"]: i for i in json.loads(out.stdout)["items"]}
        ok = items.get(fractional, {}).get("status") == "Running" and items.get(training, {}).get(
            "status"
        ) in ("Running", "Completed")
        return items if ok else None

    items = eventually(listed, 90, "both jobs Running")
    assert items[fractional]["kind"] == "inference" and items[training]["kind"] == "training"
    frac_pod, frac_node = items[fractional]["jobId"], items[fractional]["node"]
    assert frac_node.startswith("gpu-node-")

    # Logs of both, through the CLI.
    for job in (training, fractional):
        out = platform.gpuctl("logs", job, "--tail", "10")
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip(), f"no log lines for {job}"

    with httpx.Client(timeout=10) as http:
        # The controller's allocator holds the share on a GPU of that node.
        def allocated() -> dict[str, Any] | None:
            state = http.get(platform.services("controller")[0]["url"] + "/api/allocation").json()
            return next((a for a in state["allocation"].values() if a["podMeta"]["name"] == frac_pod), None)

        alloc = eventually(allocated, 30, "the allocation in /api/allocation")
        assert alloc["nodeName"] == frac_node and len(alloc["gpuNames"]) == 1
        assert float(alloc["request"]["tflops"]) == float(share["tflops"])
        assert alloc["poolName"] == platform.endpoints["pool"]

        # ... and the hypervisor of that node serves it as a worker on that GPU.
        hyp = next(h for h in platform.services("hypervisor") if h["node"] == frac_node)

        def worker() -> dict[str, Any] | None:
            workers = http.get(hyp["url"] + "/api/v1/workers").json()["data"]
            return next((w for w in workers if w["WorkerName"] == frac_pod), None)

        w = eventually(worker, 30, f"the worker on {frac_node}'s hypervisor")
        assert w["GPUNames"] == alloc["gpuNames"] and len(w["AllocatedDevices"]) == 1
        assert w["QoS"] == share["qos"] and w["Requests"]["tflops"] == float(share["tflops"])
        # No other node's hypervisor claims it.
        for other in platform.services("hypervisor"):
            if other["node"] != frac_node:
                names = [x["WorkerName"] for x in http.get(other["url"] + "/api/v1/workers").json()["data"]]
                assert frac_pod not in names

        # Register the local cluster in Lens (multipart kubeconfig upload) and read its overview.
        lens = platform.url("lens")
        r = http.post(
            f"{lens}/api/cluster/clusters",
            data={"name": "local devcluster"},
            files={"file": ("kubeconfig", Path(platform.kubeconfig).read_bytes())},
        )
        assert r.status_code in (200, 201), r.text
        cluster = r.json()["cluster"]
        assert cluster["ready"] is True
        r = http.get(f"{lens}/api/cluster/overview", params={"clusterId": cluster["id"]}, timeout=30)
        assert r.status_code == 200, r.text
        k8s = r.json()["kubernetes"]
        gpu_nodes = sorted(n["name"] for n in k8s["nodes"] if n["gpu"])
        assert gpu_nodes == ["gpu-node-0", "gpu-node-1", "gpu-node-2"]
        assert k8s["hardware"]["gpuNodes"] == 3 and k8s["hardware"]["totalGpuCount"] == 24
        namespaces = {ns["name"]: ns for ns in k8s["namespaces"]}
        assert fractional in [d["name"] for d in namespaces["default"]["deployments"]]

        # Deleting the fractional job through the CLI frees its share in the controller.
        r = platform.gpuctl("delete", "job", fractional)
        assert r.returncode == 0, r.stderr
        eventually(lambda: allocated() is None, 60, "the allocation released after delete")


# Last in this file: it leaves one controller replica.
async def test_controller_failover_keeps_the_platform_working(platform: RunningPlatform) -> None:
    first, second = platform.services("controller")
    # Stop the replica every client talks to first (its gRPC address leads the target list);
    # when it also leads, the other must take the Lease over.
    os.kill(int(first["pid"]), signal.SIGTERM)  # as a rolling update stops a pod
    deadline = time.monotonic() + 60
    while await lease_holder(platform.kubeconfig) != second["identity"]:
        assert time.monotonic() < deadline, "the remaining replica did not hold the leader Lease"
        await asyncio.sleep(0.5)

    # It schedules a new fractional job: gpuctl and the hypervisors, configured with every
    # replica's gRPC address, have moved over to it.
    doc = _example("inference-fractional.yaml")
    doc["job"]["name"] = "after-failover"
    r = await asyncio.to_thread(
        platform.gpuctl_stdin, yaml.safe_dump(doc), "create", "-f", "-", "--wait", "--timeout", "120"
    )
    assert r.returncode == 0, r.stderr

    def worker_on_some_node() -> dict[str, Any] | None:
        with httpx.Client(timeout=10) as http:
            for hyp in platform.services("hypervisor"):
                for w in http.get(hyp["url"] + "/api/v1/workers").json()["data"]:
                    if w["Workload"] == "after-failover" or w["WorkerName"].startswith("after-failover-"):
                        return dict(w)
        return None

    await asyncio.to_thread(eventually, worker_on_some_node, 60, "the new job's worker on its hypervisor")
