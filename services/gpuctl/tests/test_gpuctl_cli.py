"""The `gpuctl` CLI as a subprocess against a running gpuctl server on the devcluster.

Job commands, `get pools|nodes|quotas|ns` and `label node`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml
from gpuctl_helpers import job_yaml

GPUCTL = str(Path(sys.executable).parent / "gpuctl")


async def gpuctl(*args: str, server: str | None, timeout: float = 90) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "GPUCTL_SERVER"}
    if server:
        env["GPUCTL_SERVER"] = server
    proc = await asyncio.create_subprocess_exec(
        GPUCTL, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_create_wait_get_describe_logs_delete(gpuctl_url: str, namespace: str, tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(job_yaml("training", "cli-train", namespace, gpu=1))
    b.write_text(job_yaml("inference", "cli-serve", namespace, service="service: {port: 8000}"))

    rc, out, err = await gpuctl("create", "-f", str(a), "-f", str(b), "--wait", server=gpuctl_url)
    assert rc == 0, err
    assert f"job/cli-train created in namespace {namespace}" in out
    assert f"job/cli-serve created in namespace {namespace}" in out
    # progress while waiting, one line per status change, ending in Running / Completed
    assert f"{namespace}/cli-serve: Running" in err
    assert f"{namespace}/cli-train: Completed" in err or f"{namespace}/cli-train: Running" in err

    rc, out, _ = await gpuctl("get", "jobs", "-n", namespace, server=gpuctl_url)
    assert rc == 0
    header, *rows = out.splitlines()
    assert header.split()[:5] == ["JOB", "ID", "NAME", "NAMESPACE", "KIND"]
    assert {r.split()[1] for r in rows} == {"cli-train", "cli-serve"}

    rc, out, _ = await gpuctl(
        "get", "jobs", "-n", namespace, "--kind", "inference", "-o", "json", server=gpuctl_url
    )
    data = json.loads(out)
    assert rc == 0 and data["total"] == 1 and data["items"][0]["name"] == "cli-serve"

    rc, out, _ = await gpuctl("describe", "job", "cli-serve", "-n", namespace, server=gpuctl_url)
    assert rc == 0
    assert "Kind:          inference (Deployment)" in out and "NodePort:" in out and "Events:" in out

    rc, out, _ = await gpuctl(
        "describe", "job", "cli-serve", "-n", namespace, "-o", "yaml", server=gpuctl_url
    )
    assert rc == 0 and yaml.safe_load(out)["yaml_content"]["service"]["port"] == 8000

    rc, out, _ = await gpuctl("logs", "cli-train", "-n", namespace, "--tail", "1", server=gpuctl_url)
    assert rc == 0 and out.splitlines() == ["devcluster: still running"]

    # -f on a finished pod follows the stream to its end and exits 0
    rc, out, _ = await gpuctl("logs", "cli-train", "-n", namespace, "-f", server=gpuctl_url)
    assert rc == 0 and len(out.splitlines()) == 3

    rc, out, _ = await gpuctl("delete", "job", "cli-serve", "-n", namespace, "--force", server=gpuctl_url)
    assert rc == 0 and out.strip() == "job/cli-serve terminating"


async def test_failures_exit_non_zero_with_one_line(gpuctl_url: str, namespace: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(job_yaml("training", "x", namespace).replace("memory: 1Gi", "memory: 1Gi, typo: 1"))
    rc, out, err = await gpuctl("create", "-f", str(bad), server=gpuctl_url)
    assert rc == 1 and out == ""
    assert err == "error: unknown key 'typo' at resources.typo (HTTP 400)\n"

    rc, _, err = await gpuctl("describe", "job", "nope", "-n", namespace, server=gpuctl_url)
    assert rc == 1 and err == f"error: job nope not found in namespace {namespace} (HTTP 404)\n"

    rc, _, err = await gpuctl("create", "-f", str(tmp_path / "missing.yaml"), server=gpuctl_url)
    assert rc == 1 and err.startswith("error: cannot read") and err.count("\n") == 1

    rc, _, err = await gpuctl("get", "jobs", server="http://127.0.0.1:9")
    assert rc == 1 and err.startswith("error: cannot reach gpuctl server http://127.0.0.1:9")


async def test_batch_create_with_a_failing_file(gpuctl_url: str, namespace: str, tmp_path: Path) -> None:
    ok, bad = tmp_path / "ok.yaml", tmp_path / "bad.yaml"
    ok.write_text(job_yaml("training", "cli-ok", namespace))
    bad.write_text("kind: nope\n")
    rc, out, err = await gpuctl("create", "-f", str(ok), "-f", str(bad), server=gpuctl_url)
    assert rc == 1
    assert "job/cli-ok created" in out
    assert f"error: {bad}:" in err and "1 of 2 jobs failed" in err


async def test_server_flag_beats_environment(gpuctl_url: str, namespace: str) -> None:
    rc, out, _ = await gpuctl(
        "--server", gpuctl_url, "get", "jobs", "-n", namespace, "-o", "json", server="http://127.0.0.1:9"
    )
    assert rc == 0 and json.loads(out)["total"] == 0


async def test_get_pools_nodes_quotas_ns_and_label(
    gpuctl_url: str, make_gpu_nodes: Any, kube_api: Any
) -> None:
    import httpx
    from kubernetes_asyncio import client

    n1, n2 = await make_gpu_nodes(2, gpus=4, model="A100")
    pool, team = f"cli-{os.urandom(3).hex()}", f"cli-team-{os.urandom(3).hex()}"
    async with httpx.AsyncClient(base_url=gpuctl_url + "/api/v1") as h:
        assert (await h.post("/pools", json={"name": pool, "nodes": [n1, n2]})).status_code == 201
        quota = (
            f"kind: quota\nversion: v0.1\nquota: {{name: cq}}\nnamespace: {{{team}: {{gpu: 2, cpu: 8}}}}\n"
        )
        assert (await h.post("/quotas", json={"yamlContent": quota})).status_code == 201
    try:
        rc, out, err = await gpuctl("get", "pools", server=gpuctl_url)
        assert rc == 0, err
        row = next(r.split() for r in out.splitlines() if r.startswith(pool + " "))
        assert row[:6] == [pool, "active", "8", "0", "8", "A100"]

        rc, out, _ = await gpuctl("get", "nodes", "--pool", pool, server=gpuctl_url)
        header, *rows = out.splitlines()
        assert rc == 0 and header.split()[:2] == ["NAME", "STATUS"]
        assert [r.split()[0] for r in rows] == sorted([n1, n2])
        # GPU TOTAL/USED/FREE, type, pool, cpu and memory as requested/allocatable
        assert rows[0].split()[1:] == ["Ready", "4", "0", "4", "A100", pool, "0/96", "0/1024Gi"]

        rc, out, _ = await gpuctl(
            "get", "nodes", "--gpu-type", "A100", "--pool", pool, "-o", "json", server=gpuctl_url
        )
        assert rc == 0 and json.loads(out)["total"] == 2

        rc, out, _ = await gpuctl("get", "quotas", "-n", team, server=gpuctl_url)
        assert rc == 0 and out.splitlines()[1].split() == [f"cq-{team}", team, "8", "<none>", "2"]

        rc, out, _ = await gpuctl("get", "ns", server=gpuctl_url)
        assert rc == 0 and team in {r.split()[0] for r in out.splitlines()[1:]}

        rc, out, err = await gpuctl("label", "node", n1, "team=red", "tier=gold", server=gpuctl_url)
        assert rc == 0, err
        assert out.splitlines() == [f"node/{n1} label team set", f"node/{n1} label tier set"]
        labels = (await client.CoreV1Api(kube_api).read_node(n1)).metadata.labels
        assert labels["team"] == "red" and labels["tier"] == "gold"
        rc, _, err = await gpuctl("label", "node", n1, "team=blue", server=gpuctl_url)
        assert rc == 1 and "already exists" in err and "(HTTP 409)" in err
        rc, _, err = await gpuctl("label", "node", n1, "team=blue", "--overwrite", server=gpuctl_url)
        assert rc == 0, err
        rc, out, _ = await gpuctl("label", "node", n1, "team", "--delete", server=gpuctl_url)
        assert rc == 0 and out.strip() == f"node/{n1} label team removed"
        rc, _, err = await gpuctl("label", "node", n1, "kubernetes.io/os=x", "--overwrite", server=gpuctl_url)
        assert rc == 1 and "system label" in err and "(HTTP 403)" in err
    finally:
        async with httpx.AsyncClient(base_url=gpuctl_url + "/api/v1") as h:
            await h.delete(f"/pools/{pool}")
            await h.delete(f"/namespaces/{team}")
