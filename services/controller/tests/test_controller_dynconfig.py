"""`GET /api/config`: the dynamic config from a ConfigMap or a file, hot-reloaded without restart;
an invalid update is rejected (Event, metric) and the config in force stays. Also the node
scaler's 503 when the controller runs without -enable-auto-expander."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from controller_testkit import create_pod, eventually, wait_bound, wait_unschedulable
from kubernetes_asyncio import client

from devcluster.services import ServiceProcess
from gpuplane_controller.domain.dynconfig import DynamicConfig, parse_config
from gpuplane_core.errors import InvalidSpec


def test_parse_rejects_unknown_keys_and_names_the_field() -> None:
    cfg = parse_config("metricsTTL: 7d\nscheduler: {vramWeight: 0.5, tflopsWeight: 0.5}\n")
    assert cfg.as_json()["metricsTTL"] == "7d"
    assert cfg.as_json()["scheduler"] == {"vramWeight": 0.5, "tflopsWeight": 0.5, "maxWorkerPerNode": 256}
    assert parse_config("") == DynamicConfig()
    for text, field in [
        ("metricsTtl: 7d", "metricsTtl"),
        ("metricsTTL: soon", "metricsTTL"),
        ("scheduler: {vramWeight: 1.5}", "scheduler.vramWeight"),
        ("alertRules: [{name: a, query: q, threshold: 1, severty: P1}]", "alertRules.0.severty"),
        ("alertRules: [{name: a, query: q, threshold: 1}, {name: a, query: r, threshold: 2}]", "alertRules"),
        ("[1, 2]", "config"),
        ("a: [", "config"),
    ]:
        with pytest.raises(InvalidSpec) as e:
            parse_config(text)
        assert e.value.field == field, text


async def _config(http: httpx.AsyncClient, proc: ServiceProcess) -> dict[str, Any]:
    r = await http.get(f"{proc.url}/api/config")
    assert r.status_code == 200
    body: dict[str, Any] = r.json()
    assert set(body) == {"config"}
    return body["config"]  # type: ignore[no-any-return]


async def test_configmap_hot_reload_and_invalid_update_kept_out(
    devcluster: Any, kube_api: Any, namespace: str
) -> None:
    core = client.CoreV1Api(kube_api)
    cm = "tf-dynamic-config"
    await core.create_namespaced_config_map(
        namespace, {"metadata": {"name": cm}, "data": {"config.yaml": "metricsTTL: 7d\n"}}
    )
    proc = ServiceProcess.controller(
        devcluster.kubeconfig,
        env={
            "GPUPLANE_CONTROLLER_DYNAMIC_CONFIG_CONFIGMAP": cm,
            "GPUPLANE_CONTROLLER_DYNAMIC_CONFIG_NAMESPACE": namespace,
            "GPUPLANE_CONTROLLER_LEADER_ELECT": "false",
        },
    )
    with proc:
        async with httpx.AsyncClient(timeout=10) as http:
            assert await eventually(lambda: _ttl_is(http, proc, "7d"))

            # Not started with -enable-auto-expander.
            r = await http.get(f"{proc.url}/api/node-scaler")
            assert r.status_code == 503 and r.json() == {"error": "node scaler not enabled"}

            new = "metricsTTL: 14d\nscheduler:\n  vramWeight: 0.4\n  tflopsWeight: 0.6\n"
            await core.patch_namespaced_config_map(cm, namespace, {"data": {"config.yaml": new}})
            await eventually(lambda: _ttl_is(http, proc, "14d"))
            assert (await _config(http, proc))["scheduler"]["vramWeight"] == 0.4

            await core.patch_namespaced_config_map(
                cm, namespace, {"data": {"config.yaml": "metricsTTL: 1d\nmetricsTTLL: 2d\n"}}
            )

            async def rejected() -> bool:
                evs = await core.list_namespaced_event(namespace)
                return any(
                    e.reason == "InvalidDynamicConfig" and "metricsTTLL" in e.message for e in evs.items
                )

            await eventually(rejected)
            assert (await _config(http, proc))["metricsTTL"] == "14d"  # the old config stays
            metrics = (await http.get(f"{proc.url}/metrics")).text
            assert "gpuplane_controller_dynamic_config_rejected_total 1.0" in metrics

            # A later valid update is taken again.
            await core.patch_namespaced_config_map(
                cm, namespace, {"data": {"config.yaml": "metricsTTL: 3d\n"}}
            )
            await eventually(lambda: _ttl_is(http, proc, "3d"))


async def _ttl_is(http: httpx.AsyncClient, proc: ServiceProcess, ttl: str) -> bool:
    return (await _config(http, proc))["metricsTTL"] == ttl


async def test_file_config_via_flag_hot_reload(devcluster: Any, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("metricsFormat: json\n")
    proc = ServiceProcess.controller(
        devcluster.kubeconfig, args=["-config", str(path), "-leader-elect=false"]
    )
    proc.env["GPUPLANE_CONTROLLER_DYNAMIC_CONFIG_POLL_SECONDS"] = "0.2"
    with proc:
        async with httpx.AsyncClient(timeout=10) as http:
            assert (await _config(http, proc))["metricsFormat"] == "json"
            path.write_text("metricsFormat: otel\nalertRules:\n- {name: hot, query: q, threshold: 90}\n")

            async def reloaded() -> bool:
                cfg = await _config(http, proc)
                return cfg["metricsFormat"] == "otel" and cfg["alertRules"][0]["name"] == "hot"

            await eventually(reloaded)
            path.write_text("metricsFormat: xml\n")  # invalid: rejected
            await asyncio.sleep(1.5)
            assert (await _config(http, proc))["metricsFormat"] == "otel"


async def test_scheduler_defaults_from_the_config_apply_without_restart(
    devcluster: Any, kube_api: Any, namespace: str, make_pool: Any, tmp_path: Path
) -> None:
    """`scheduler.maxWorkerPerNode` caps workers per node at once, and raising it lets the
    waiting pod in (no restart, no pod change)."""
    pool = await make_pool(nodes=1, gpus_per_node=1)
    path = tmp_path / "config.yaml"
    path.write_text("scheduler: {maxWorkerPerNode: 1}\n")
    proc = ServiceProcess.controller(
        devcluster.kubeconfig, args=["-config", str(path), "-leader-elect=false"]
    )
    proc.env["GPUPLANE_CONTROLLER_DYNAMIC_CONFIG_POLL_SECONDS"] = "0.2"
    with proc:
        await create_pod(kube_api, namespace, "first", pool.name, tflops_request="10", vram_request="1Gi")
        await wait_bound(kube_api, namespace, "first", timeout=30)
        await create_pod(kube_api, namespace, "second", pool.name, tflops_request="10", vram_request="1Gi")
        message = await wait_unschedulable(kube_api, namespace, "second", timeout=30)
        assert "worker" in message.lower(), message
        path.write_text("scheduler: {maxWorkerPerNode: 4}\n")
        second = await wait_bound(kube_api, namespace, "second", timeout=30)
        assert second.spec.node_name == (await wait_bound(kube_api, namespace, "first")).spec.node_name
