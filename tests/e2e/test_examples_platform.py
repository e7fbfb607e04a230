"""The files in examples/ against what `make run` starts: the job kinds through the gpuctl CLI,
the quota file through the gpuctl API, the pod manifest through the controller's dry run.
(training.yaml and inference-fractional.yaml are the README's example: test_platform_e2e.py.)"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import yaml
from e2e_platform import ROOT, RunningPlatform, eventually

pytestmark = pytest.mark.cluster

EXAMPLES = ROOT / "examples"


def _doc(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def test_inference_notebook_and_compute_examples_run(platform: RunningPlatform) -> None:
    files = ["inference.yaml", "notebook.yaml", "compute.yaml"]
    names = {_doc(f)["job"]["name"]: _doc(f) for f in files}
    args = [a for f in files for a in ("-f", f"examples/{f}")]
    r = platform.gpuctl("create", *args, "--wait", "--timeout", "120")
    assert r.returncode == 0, r.stderr

    def running() -> list[dict[str, Any]] | None:
        out = platform.gpuctl("get", "jobs", "-o", "json")
        assert out.returncode == 0, out.stderr
        pods = [p for p in json.loads(out.stdout)["items"] if p["name"] in names]
        want = sum(d.get("service", {}).get("replicas", 1) for d in names.values())
        return pods if len(pods) == want and all(p["status"] == "Running" for p in pods) else None

    for pod in eventually(running, 90, "every replica Running"):
        doc = names[pod["name"]]
        assert pod["kind"] == doc["kind"]
        # GPU jobs land on GPU nodes; the CPU-only compute job does not tolerate their taint.
        on_gpu_node = pod["node"].startswith("gpu-node-")
        assert on_gpu_node == bool(doc["resources"].get("gpu")), pod

    # Services get a NodePort; the notebook's is on 8888 unless the file says otherwise.
    out = platform.gpuctl("describe", "job", "jupyter", "-o", "json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["access_methods"]["node_port_access"]["node_port"]


def test_quota_example_limits_its_namespaces(platform: RunningPlatform) -> None:
    doc = _doc("quota.yaml")
    gpuctl_api = platform.url("gpuctl") + "/api/v1"
    with httpx.Client(timeout=30) as http:
        r = http.post(f"{gpuctl_api}/quotas", json={"yamlContent": (EXAMPLES / "quota.yaml").read_text()})
        assert r.status_code == 201, r.text
    out = platform.gpuctl("get", "quotas", "-o", "json")
    assert out.returncode == 0, out.stderr
    quotas = {q["namespace"]: q for q in json.loads(out.stdout)["items"]}
    for ns, limits in doc["namespace"].items():
        assert int(quotas[ns]["gpu"]) == limits["gpu"]

    # A job asking for more GPUs than team-bob's quota is refused, and nothing is created.
    ns, limit = "team-bob", doc["namespace"]["team-bob"]["gpu"]
    job = (
        f"kind: training\nversion: v0.1\njob: {{name: too-many-gpus, namespace: {ns}}}\n"
        f"environment: {{image: busybox}}\nresources: {{gpu: {limit + 1}, cpu: 1, memory: 1Gi}}\n"
    )
    r = platform.gpuctl_stdin(job, "create", "-f", "-")
    assert r.returncode == 1 and r.stderr.startswith("error:")
    out = platform.gpuctl("get", "jobs", "-n", ns, "-o", "json")
    assert json.loads(out.stdout)["items"] == []


def test_simulate_schedule_pod_example(platform: RunningPlatform) -> None:
    manifest = (EXAMPLES / "simulate-schedule-pod.yaml").read_bytes()
    pod = _doc("simulate-schedule-pod.yaml")
    ann = pod["metadata"]["annotations"]
    with httpx.Client(timeout=30) as http:
        # Every controller replica answers the dry run (it reads the same informers).
        for ctl in platform.services("controller"):

            def placed(url: str = ctl["url"]) -> dict[str, Any] | None:
                r = http.post(
                    f"{url}/api/simulate-schedule",
                    content=manifest,
                    headers={"Content-Type": "application/yaml"},
                )
                assert r.status_code == 200, r.text
                body: dict[str, Any] = r.json()
                return body if body["error"] is None else None

            result = eventually(placed, 30, f"{ctl['name']} to place the example pod")["scheduleResult"]
            assert result["suggestedHost"].startswith("gpu-node-")
            assert len(result["gpuNames"]) == int(ann["tensor-fusion.ai/gpu-count"])
            assert result["pool"] == ann["tensor-fusion.ai/gpupool"]
            # A dry run reserves nothing.
            state = http.get(f"{ctl['url']}/api/allocation").json()
            assert pod["metadata"]["name"] not in [a["podMeta"]["name"] for a in state["allocation"].values()]
