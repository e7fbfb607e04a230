"""gRPC plumbing against a real aio server on 127.0.0.1: error mapping, deadlines, retries.

The servicers below are tiny fakes of the controller; everything else (channel
policy, interceptor, server builder) is the production code.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import grpc
import grpc.aio
import pytest

from gpuplane.controller.v1 import (
    capacity_pb2,
    capacity_pb2_grpc,
    node_agent_pb2,
    node_agent_pb2_grpc,
    types_pb2,
)
from gpuplane_core import errors
from gpuplane_core.grpc.client import (
    CAPACITY,
    SIMULATE,
    WATCH_ALLOCATIONS,
    FlowPolicy,
    backoff_delays,
    call_options,
    make_channel,
    service_config,
)
from gpuplane_core.grpc.errors import (
    CLASS_KEY,
    CODE_KEY,
    FIELD_KEY,
    INTERNAL_MESSAGE,
    error_from_rpc,
    grpc_code,
)
from gpuplane_core.grpc.server import bound_port, make_server

PKG = "gpuplane.controller.v1"
ERRORS_BY_NAME = {cls.__name__: cls for cls in errors.ALL_ERRORS}


def _policy(deadline_s: float | None = 5.0, max_attempts: int = 1) -> FlowPolicy:
    """A test flow over every method of both services."""
    return FlowPolicy(
        name="test",
        methods=(f"{PKG}.CapacityService", f"{PKG}.NodeAgentService"),
        deadline_s=deadline_s,
        max_attempts=max_attempts,
        initial_backoff_s=0.01,
        max_backoff_s=0.05,
    )


class FakeCapacity(capacity_pb2_grpc.CapacityServiceServicer):
    """Answers by input: a few magic pool / node / manifest values fail on purpose."""

    def __init__(self) -> None:
        self.attempts: Counter[bytes] = Counter()

    async def GetPoolCapacity(
        self, request: capacity_pb2.GetPoolCapacityRequest, context: grpc.aio.ServicerContext
    ) -> capacity_pb2.GetPoolCapacityResponse:
        if request.pool == "missing":
            raise errors.NotFound("pool missing does not exist ✗", field="pool")
        if request.pool == "boom":
            raise RuntimeError("secret stack detail")
        if request.pool == "custom":
            raise errors.NotFound("no such pool", code="pool_not_found")
        if request.pool.startswith("raise:"):
            raise ERRORS_BY_NAME[request.pool[6:]](f"{request.pool[6:]} happened", field="spec.x")
        pool = capacity_pb2.PoolCapacity(
            name=request.pool or "default",
            total_tflops="624",
            total_vram="160Gi",
            available_tflops="311.5",
            available_vram="80Gi",
            gpu_count=2,
            allocated_gpu_count=1,
            gpu_models=["A100"],
        )
        return capacity_pb2.GetPoolCapacityResponse(pools=[pool])

    async def ListGpuAllocations(
        self, request: capacity_pb2.ListGpuAllocationsRequest, context: grpc.aio.ServicerContext
    ) -> capacity_pb2.ListGpuAllocationsResponse:
        if request.node_name == "slow":
            await asyncio.sleep(10)
        gpu = capacity_pb2.GpuAllocation(
            gpu_name="gpu-0",
            node_name=request.node_name,
            capacity=types_pb2.Resources(tflops="312", vram="80Gi"),
            workers=[
                capacity_pb2.WorkerRef(
                    pod_uid="uid-1", request=types_pb2.Resources(tflops="100m", vram="1Gi")
                )
            ],
        )
        return capacity_pb2.ListGpuAllocationsResponse(gpus=[gpu])

    async def SimulateSchedule(
        self, request: capacity_pb2.SimulateScheduleRequest, context: grpc.aio.ServicerContext
    ) -> capacity_pb2.SimulateScheduleResponse:
        self.attempts[request.pod_manifest] += 1
        if request.pod_manifest.startswith(b"flaky") and self.attempts[request.pod_manifest] == 1:
            raise errors.NotReady("not the leader yet")
        return capacity_pb2.SimulateScheduleResponse(
            schedulable=True,
            node_name="node-a",
            gpu_names=["gpu-0"],
            filter_stages=[capacity_pb2.FilterStage(name="PhaseFilter", before_count=2, after_count=1)],
        )


def _events() -> list[node_agent_pb2.AllocationEvent]:
    E = node_agent_pb2.AllocationEvent
    alloc = node_agent_pb2.Allocation(
        pod_uid="uid-1",
        gpu_names=["gpu-0"],
        request=types_pb2.Resources(tflops="10", vram="4Gi"),
        qos=types_pb2.QOS_LEVEL_HIGH,
        isolation=types_pb2.ISOLATION_MODE_SOFT,
    )
    return [
        E(type=E.TYPE_RESET, revision=7),
        E(type=E.TYPE_ADDED, revision=7, allocation=alloc),
        E(type=E.TYPE_SYNCED, revision=7),
    ]


class GenNodeAgent(node_agent_pb2_grpc.NodeAgentServiceServicer):
    """WatchAllocations as an async generator."""

    async def WatchAllocations(
        self, request: node_agent_pb2.WatchAllocationsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[node_agent_pb2.AllocationEvent]:
        if request.node_name == "unknown":
            raise errors.NotFound(f"node {request.node_name} not registered", field="node_name")
        for event in _events():
            yield event
        raise errors.NotReady("watch broken")


class WriterNodeAgent(node_agent_pb2_grpc.NodeAgentServiceServicer):
    """WatchAllocations as a coroutine using context.write (the other aio style)."""

    async def WatchAllocations(  # type: ignore[override]  # context.write style returns None
        self, request: node_agent_pb2.WatchAllocationsRequest, context: grpc.aio.ServicerContext
    ) -> None:
        if request.node_name == "unknown":
            raise errors.NotFound(f"node {request.node_name} not registered", field="node_name")
        for event in _events():
            await context.write(event)
        raise errors.NotReady("watch broken")


@pytest.fixture(scope="module")
async def capacity() -> AsyncIterator[tuple[str, FakeCapacity]]:
    servicer = FakeCapacity()
    server = make_server(0, "127.0.0.1")
    capacity_pb2_grpc.add_CapacityServiceServicer_to_server(servicer, server)
    await server.start()
    yield f"127.0.0.1:{bound_port(server)}", servicer
    await server.stop(grace=None)


@pytest.fixture(params=[GenNodeAgent, WriterNodeAgent])
async def node_agent(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    server = make_server(0, "127.0.0.1")
    node_agent_pb2_grpc.add_NodeAgentServiceServicer_to_server(request.param(), server)
    await server.start()
    yield f"127.0.0.1:{bound_port(server)}"
    await server.stop(grace=None)


async def _fail(call: object) -> grpc.aio.AioRpcError:
    """Await a call that must fail, returning its RPC error."""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    return info.value


async def test_data_round_trips(capacity: tuple[str, FakeCapacity]) -> None:
    async with make_channel(capacity[0], CAPACITY, SIMULATE) as channel:
        stub = capacity_pb2_grpc.CapacityServiceStub(channel)
        reply = await stub.GetPoolCapacity(
            capacity_pb2.GetPoolCapacityRequest(pool="p1"), **call_options(CAPACITY)
        )
        assert [p.name for p in reply.pools] == ["p1"]
        assert reply.pools[0].available_tflops == "311.5"
        listing = await stub.ListGpuAllocations(capacity_pb2.ListGpuAllocationsRequest(node_name="n"))
        assert listing.gpus[0].workers[0].request.tflops == "100m"
        sim = await stub.SimulateSchedule(capacity_pb2.SimulateScheduleRequest(pod_manifest=b"kind: Pod"))
        assert sim.schedulable and sim.filter_stages[0].after_count == 1


async def test_not_found_maps_both_ways(capacity: tuple[str, FakeCapacity]) -> None:
    async with make_channel(capacity[0], CAPACITY) as channel:
        stub = capacity_pb2_grpc.CapacityServiceStub(channel)
        rpc = await _fail(stub.GetPoolCapacity(capacity_pb2.GetPoolCapacityRequest(pool="missing")))
    assert rpc.code() == grpc.StatusCode.NOT_FOUND
    assert rpc.details() == "pool missing does not exist ✗"
    trailers = dict(rpc.trailing_metadata() or ())
    assert trailers[CODE_KEY] == "not_found" and trailers[FIELD_KEY] == "pool"
    err = error_from_rpc(rpc)
    assert type(err) is errors.NotFound
    assert (err.message, err.code, err.field) == ("pool missing does not exist ✗", "not_found", "pool")


async def test_custom_code_survives(capacity: tuple[str, FakeCapacity]) -> None:
    async with make_channel(capacity[0], CAPACITY) as channel:
        stub = capacity_pb2_grpc.CapacityServiceStub(channel)
        rpc = await _fail(stub.GetPoolCapacity(capacity_pb2.GetPoolCapacityRequest(pool="custom")))
    err = error_from_rpc(rpc)
    assert type(err) is errors.NotFound and err.code == "pool_not_found" and err.field is None


async def test_unexpected_exception_is_internal_and_hidden(capacity: tuple[str, FakeCapacity]) -> None:
    async with make_channel(capacity[0], CAPACITY) as channel:
        stub = capacity_pb2_grpc.CapacityServiceStub(channel)
        rpc = await _fail(stub.GetPoolCapacity(capacity_pb2.GetPoolCapacityRequest(pool="boom")))
    assert rpc.code() == grpc.StatusCode.INTERNAL
    assert rpc.details() == INTERNAL_MESSAGE
    assert "secret" not in str(rpc.debug_error_string())
    err = error_from_rpc(rpc)
    assert type(err) is errors.InternalError and err.code == "internal_error"


@pytest.mark.parametrize("cls", errors.ALL_ERRORS, ids=lambda c: c.__name__)
async def test_every_error_class_round_trips(
    capacity: tuple[str, FakeCapacity], cls: type[errors.GpuplaneError]
) -> None:
    async with make_channel(capacity[0], _policy()) as channel:
        stub = capacity_pb2_grpc.CapacityServiceStub(channel)
        rpc = await _fail(
            stub.GetPoolCapacity(capacity_pb2.GetPoolCapacityRequest(pool=f"raise:{cls.__name__}"))
        )
    assert rpc.code() == grpc_code(cls)
    assert dict(rpc.trailing_metadata() or ())[CLASS_KEY] == cls.__name__
    err = error_from_rpc(rpc)
    assert type(err) is cls
    assert err.code == cls.default_code and err.field == "spec.x"
    hidden = grpc_code(cls) == grpc.StatusCode.INTERNAL
    assert err.message == (INTERNAL_MESSAGE if hidden else f"{cls.__name__} happened")


async def test_channel_deadline_applies_without_call_timeout(capacity: tuple[str, FakeCapacity]) -> None:
    async with make_channel(capacity[0], _policy(deadline_s=0.3)) as channel:
        stub = capacity_pb2_grpc.CapacityServiceStub(channel)
        loop = asyncio.get_running_loop()
        started = loop.time()
        rpc = await _fail(stub.ListGpuAllocations(capacity_pb2.ListGpuAllocationsRequest(node_name="slow")))
    assert rpc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert loop.time() - started < 3
    assert type(error_from_rpc(rpc)) is errors.Timeout


async def test_call_options_deadline(capacity: tuple[str, FakeCapacity]) -> None:
    policy = _policy(deadline_s=0.2)
    async with make_channel(capacity[0], CAPACITY) as channel:
        stub = capacity_pb2_grpc.CapacityServiceStub(channel)
        call = stub.ListGpuAllocations(
            capacity_pb2.ListGpuAllocationsRequest(node_name="slow"), **call_options(policy)
        )
        rpc = await _fail(call)
    assert rpc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert isinstance(error_from_rpc(rpc), errors.Timeout)


async def test_unavailable_is_retried_by_channel_policy(capacity: tuple[str, FakeCapacity]) -> None:
    servicer = capacity[1]
    async with make_channel(capacity[0], SIMULATE) as channel:
        stub = capacity_pb2_grpc.CapacityServiceStub(channel)
        reply = await stub.SimulateSchedule(
            capacity_pb2.SimulateScheduleRequest(pod_manifest=b"flaky-1"), **call_options(SIMULATE)
        )
    assert reply.schedulable
    assert servicer.attempts[b"flaky-1"] == 2


async def test_without_retries_not_ready_reaches_caller(capacity: tuple[str, FakeCapacity]) -> None:
    servicer = capacity[1]
    async with make_channel(capacity[0], _policy(max_attempts=1)) as channel:
        stub = capacity_pb2_grpc.CapacityServiceStub(channel)
        rpc = await _fail(
            stub.SimulateSchedule(capacity_pb2.SimulateScheduleRequest(pod_manifest=b"flaky-2"))
        )
    assert servicer.attempts[b"flaky-2"] == 1
    assert rpc.code() == grpc.StatusCode.UNAVAILABLE
    assert type(error_from_rpc(rpc)) is errors.NotReady


async def test_watch_stream_maps_errors(node_agent: str) -> None:
    async with make_channel(node_agent, WATCH_ALLOCATIONS) as channel:
        stub = node_agent_pb2_grpc.NodeAgentServiceStub(channel)
        received: list[node_agent_pb2.AllocationEvent] = []
        call = stub.WatchAllocations(node_agent_pb2.WatchAllocationsRequest(node_name="n1"))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for event in call:
                received.append(event)
        assert received == _events()
        err = error_from_rpc(info.value)
        assert type(err) is errors.NotReady and err.message == "watch broken"

        call = stub.WatchAllocations(node_agent_pb2.WatchAllocationsRequest(node_name="unknown"))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in call:
                pytest.fail("no events expected")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        err = error_from_rpc(info.value)
        assert type(err) is errors.NotFound and err.field == "node_name"


async def test_unregistered_service_is_not_implemented(capacity: tuple[str, FakeCapacity]) -> None:
    async with make_channel(capacity[0], _policy()) as channel:
        stub = node_agent_pb2_grpc.NodeAgentServiceStub(channel)
        rpc = await _fail(stub.Heartbeat(node_agent_pb2.HeartbeatRequest(node_name="n")))
    assert rpc.code() == grpc.StatusCode.UNIMPLEMENTED
    assert type(error_from_rpc(rpc)) is errors.NotImplementedYet


async def test_status_fallback_without_interceptor() -> None:
    """A peer without our interceptor (no trailers) still maps by status."""

    class Plain(FakeCapacity):
        async def GetPoolCapacity(
            self, request: capacity_pb2.GetPoolCapacityRequest, context: grpc.aio.ServicerContext
        ) -> capacity_pb2.GetPoolCapacityResponse:
            await context.abort(grpc.StatusCode.NOT_FOUND, "plain not found")
            raise AssertionError

    server = grpc.aio.server()
    capacity_pb2_grpc.add_CapacityServiceServicer_to_server(Plain(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with make_channel(f"127.0.0.1:{port}", _policy()) as channel:
            stub = capacity_pb2_grpc.CapacityServiceStub(channel)
            rpc = await _fail(stub.GetPoolCapacity(capacity_pb2.GetPoolCapacityRequest()))
    finally:
        await server.stop(grace=None)
    err = error_from_rpc(rpc)
    assert type(err) is errors.NotFound and err.message == "plain not found" and err.code == "not_found"


async def test_unreachable_peer_is_upstream_error() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with make_channel(f"127.0.0.1:{port}", _policy(deadline_s=2.0)) as channel:
        stub = capacity_pb2_grpc.CapacityServiceStub(channel)
        rpc = await _fail(stub.GetPoolCapacity(capacity_pb2.GetPoolCapacityRequest()))
    assert rpc.code() == grpc.StatusCode.UNAVAILABLE
    assert type(error_from_rpc(rpc)) is errors.UpstreamError


def test_service_config_encodes_retry_policy() -> None:
    config = json.loads(service_config(CAPACITY, SIMULATE, WATCH_ALLOCATIONS))
    capacity, simulate, watch = config["methodConfig"]
    assert capacity["name"][0] == {"service": f"{PKG}.CapacityService", "method": "GetPoolCapacity"}
    assert capacity["timeout"] == "5s"
    assert capacity["retryPolicy"] == {
        "maxAttempts": 3,
        "initialBackoff": "0.1s",
        "maxBackoff": "1s",
        "backoffMultiplier": 2.0,
        "retryableStatusCodes": ["UNAVAILABLE"],
    }
    assert simulate["timeout"] == "15s"
    assert "timeout" not in watch and "retryPolicy" not in watch
    assert config["retryThrottling"]["maxTokens"] > 0


def test_flow_policy_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        FlowPolicy(name="x", methods=(), deadline_s=1, max_attempts=6)
    with pytest.raises(ValueError):
        FlowPolicy(name="x", methods=(), deadline_s=1, initial_backoff_s=2, max_backoff_s=1)


def test_backoff_delays_grow_with_jitter_and_cap() -> None:
    delays: Iterator[float] = backoff_delays(WATCH_ALLOCATIONS)
    got = [next(delays) for _ in range(30)]
    p = WATCH_ALLOCATIONS
    caps = [min(p.max_backoff_s, p.initial_backoff_s * p.backoff_multiplier**n) for n in range(30)]
    assert all(0 <= d <= cap for d, cap in zip(got, caps, strict=True))
    assert max(got[-10:]) > p.initial_backoff_s  # grew past the first step
    assert len(set(got)) > 1  # jittered, not lock-step
