"""The HTTP API on the simulated backend: envelope, devices, workers, limiter, readiness, metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypervisor_testkit import GIB, agent_of, allocation, load, running

from gpuplane_hypervisor.gpu.simulated import SimulatedBackend
from gpuplane_hypervisor.main import parse_args
from gpuplane_hypervisor.settings import Settings

SettingsFactory = Callable[..., Settings]


async def test_devices_follow_the_simulated_inventory(settings_factory: SettingsFactory) -> None:
    async with running(settings_factory(simulated_devices="2xA100-40GB,1xL4-24GB")) as (_, client):
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        assert (await client.get("/readyz")).json() == {"status": "ready"}
        body = (await client.get("/api/v1/devices")).json()
        devices = body["data"]
        assert [d["Model"] for d in devices] == ["A100", "A100", "L4"]
        assert [d["Index"] for d in devices] == [0, 1, 2]
        first = devices[0]
        assert set(first) >= {
            "UUID",
            "Vendor",
            "Model",
            "Index",
            "NUMANode",
            "TotalMemoryBytes",
            "MaxTflops",
            "Healthy",
            "IsolationMode",
            "Properties",
        }
        assert first["UUID"] == first["UUID"].lower()
        assert first["TotalMemoryBytes"] == 40 * GIB and first["MaxTflops"] == 312.0 and first["Healthy"]
        one = await client.get(f"/api/v1/devices/{first['UUID'].upper()}")
        assert one.status_code == 200 and one.json()["data"]["UUID"] == first["UUID"]
        missing = await client.get("/api/v1/devices/gpu-nope")
        assert missing.status_code == 404 and set(missing.json()) == {"error"}


async def test_uuids_are_stable_per_node_and_differ_between_nodes(settings_factory: SettingsFactory) -> None:
    a = SimulatedBackend("2xH100-80GB", "node-a").discover()
    assert [d.uuid for d in a] == [d.uuid for d in SimulatedBackend("2xH100-80GB", "node-a").discover()]
    assert not {d.uuid for d in a} & {d.uuid for d in SimulatedBackend("2xH100-80GB", "node-b").discover()}


async def test_discover_now_reports_health_changes(settings_factory: SettingsFactory) -> None:
    async with running(settings_factory(discovery_interval=3600)) as (app, client):
        backend = agent_of(app).backend
        assert isinstance(backend, SimulatedBackend)
        uuid = (await client.get("/api/v1/devices")).json()["data"][2]["UUID"]
        backend.set_unhealthy(uuid, "critical XID 79")
        before = (await client.get(f"/api/v1/devices/{uuid}")).json()["data"]
        assert before["Healthy"] is True  # the periodic discovery is an hour away
        found = (await client.post("/api/v1/devices/discover")).json()["data"]
        (dev,) = [d for d in found if d["UUID"] == uuid]
        assert dev["Healthy"] is False and dev["UnhealthyReason"] == "critical XID 79"
        assert (await client.get(f"/api/v1/devices/{uuid}")).json()["data"]["Healthy"] is False


async def test_nvml_init_failure_is_reported_not_simulated(settings_factory: SettingsFactory) -> None:
    # This machine has no NVIDIA driver, so NVML init really fails here.
    pytest.importorskip("pynvml")
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("NVML works on this machine")
    except pynvml.NVMLError:
        pass
    async with running(settings_factory(backend="nvml", simulated_devices="")) as (_, client):
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and "NVML init failed" in ready.json()["error"]
        devices = await client.get("/api/v1/devices")
        assert devices.status_code == 503 and "NVML" in devices.json()["error"]
    async with running(settings_factory(backend="nvml", simulated_devices="", fail_on_init_error=False)) as (
        _,
        client,
    ):
        assert (await client.get("/readyz")).status_code == 200
        assert (await client.get("/api/v1/devices")).json() == {"data": []}


async def test_workers_envs_usage_and_not_implemented_actions(settings_factory: SettingsFactory) -> None:
    async with running(settings_factory()) as (app, client):
        agent = agent_of(app)
        uuids = list(agent.devices)
        load(agent, allocation("uid-a", uuids[:2], qos="low"), allocation("uid-b", uuids[2:3], qos="high"))
        workers = (await client.get("/api/v1/workers")).json()["data"]
        assert {w["WorkerUID"] for w in workers} == {"uid-a", "uid-b"}
        a = (await client.get("/api/v1/workers/uid-a")).json()["data"]
        assert a["AllocatedDevices"] == uuids[:2]
        assert a["Envs"]["NVIDIA_VISIBLE_DEVICES"] == ",".join(uuids[:2])
        assert a["Usage"] == {uuids[0]: {}, uuids[1]: {}}
        assert (await client.get("/api/v1/workers/nobody")).status_code == 404
        snap = await client.post("/api/v1/workers/uid-a/snapshot")
        assert snap.status_code == 501 and "error" in snap.json()
        assert (await client.post("/api/v1/workers/uid-a/resume")).status_code == 501
        assert (await client.post("/api/v1/workers/nobody/snapshot")).status_code == 404
        assert (await client.post("/api/v1/workers/nobody/resume")).status_code == 404


async def test_limiter_endpoints_without_token(settings_factory: SettingsFactory) -> None:
    async with running(settings_factory()) as (app, client):
        agent = agent_of(app)
        uuids = list(agent.devices)
        load(
            agent,
            allocation("uid-a", uuids[:1], qos="low"),
            allocation("uid-b", uuids[:1], qos="medium"),
            allocation("uid-c", uuids[1:2], qos="critical"),
        )
        listing = (await client.get("/api/v1/pod")).json()
        assert listing["success"] is True
        assert {p["pod_name"] for p in listing["data"]} == {"pod-uid-a", "pod-uid-b", "pod-uid-c"}
        # The token-protected forms answer 401 without a token.
        assert (await client.get("/api/v1/pod", params={"container_name": "main"})).status_code == 401
        reg = await client.post("/api/v1/process", params={"container_name": "main", "container_pid": 1})
        assert reg.status_code == 401 and reg.json() == {"error": "missing bearer token"}
        limiters = (await client.get("/api/v1/limiter")).json()["limiters"]
        assert {entry["worker_uid"] for entry in limiters} == {"uid-a", "uid-b", "uid-c"}
        assert all(entry["limits"]["compute_percent"] == 21 for entry in limiters)
        trap = await client.post("/api/v1/trap", json={"device_uuid": uuids[0]})
        assert trap.json() == {"message": "trap initiated", "snapshot_count": 2}
        assert (await client.post("/api/v1/trap")).json()["snapshot_count"] == 2
        bad = await client.post("/api/v1/trap", json={"device_uuid": uuids[0], "surprise": 1})
        assert bad.status_code == 400 and "surprise" in bad.json()["error"]
        assert (await client.post("/api/v1/trap", json={"device_uuid": "gpu-x"})).status_code == 404
        bad_pid = await client.post("/api/v1/process", params={"container_name": "m", "container_pid": "x"})
        assert bad_pid.status_code == 400 and "container_pid" in bad_pid.json()["error"]


async def test_prometheus_gauges_per_device_and_worker(settings_factory: SettingsFactory) -> None:
    async with running(settings_factory()) as (app, client):
        agent = agent_of(app)
        uuids = list(agent.devices)
        load(agent, allocation("uid-a", uuids[:1]))
        text = (await client.get("/metrics")).text
        assert (
            f'gpuplane_hypervisor_device_memory_total_bytes{{index="0",model="H100",node="gpu-node-0",uuid="{uuids[0]}"}}'
            in text
        )
        assert (
            "gpuplane_hypervisor_worker_tflops_limit"
            '{namespace="ns",node="gpu-node-0",pod="pod-uid-a",worker_uid="uid-a"} 200.0' in text
        )
        assert "gpuplane_hypervisor_device_healthy" in text


async def test_simulated_usage_file_is_read_by_another_process_contract(
    settings_factory: SettingsFactory, tmp_path: Path
) -> None:
    usage = tmp_path / "usage.json"
    async with running(settings_factory(simulated_usage_file=str(usage))) as (app, client):
        agent = agent_of(app)
        uuid = next(iter(agent.devices))
        usage.write_text(json.dumps({uuid: {"4321": {"memoryBytes": GIB, "computePercent": 12.5}}}))
        for _ in range(100):
            sample = agent.samples.get(uuid)
            if sample and sample.processes:
                break
            await asyncio.sleep(0.02)
        assert agent.samples[uuid].processes[0].pid == 4321
        assert agent.samples[uuid].memory_used_bytes == GIB
        text = (await client.get("/metrics")).text
        assert (
            "gpuplane_hypervisor_device_memory_used_bytes"
            f'{{index="0",model="H100",node="gpu-node-0",uuid="{uuid}"}} 1.073741824e+09' in text
        )


def test_cli_flags_override_env_and_bad_specs_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    monkeypatch.setenv("GPUPLANE_HYPERVISOR_DISCOVERY_INTERVAL", "7")
    s = Settings(
        **parse_args(["--backend", "simulated", "--simulated-devices", "4xH100-80GB", "--port", "9001"])
    )
    assert (s.node_name, s.http_port, s.discovery_interval, s.backend) == ("from-env", 9001, 7.0, "simulated")
    s = Settings(**parse_args(["--node-name", "flag", "--backend", "null", "--controller", "c:1"]))
    assert (s.node_name, s.controller) == ("flag", "c:1")
    monkeypatch.setenv(
        "GPUPLANE_HYPERVISOR_PRICING",
        '{"low": {"tflops_per_hour": 0.5, "vram_gib_per_hour": 0.1, "limits_over_requests": 0.2}}',
    )
    assert Settings(backend="null").pricing["low"].tflops_per_hour == 0.5
    monkeypatch.setenv(
        "GPUPLANE_HYPERVISOR_PRICING", '{"low": {"tflops_per_hour": 1, "vram_gib_per_hour": 1, "x": 1}}'
    )
    with pytest.raises(ValueError, match="x"):
        Settings(backend="null")
    monkeypatch.delenv("GPUPLANE_HYPERVISOR_PRICING")
    with pytest.raises(ValueError, match="simulated_devices"):
        Settings(backend="simulated")
    with pytest.raises(ValueError, match="is not <count>x<model>"):
        Settings(backend="simulated", simulated_devices="lots of gpus")
