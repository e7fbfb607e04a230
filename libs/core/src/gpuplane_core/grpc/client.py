"""Retry and deadline policy of every internal gRPC flow, in one place.

Retries are done by gRPC itself from the channel's service config
(`retryPolicy`, with retry throttling), never by hand-written loops, so every
caller of a flow behaves the same. Long-lived streams (WatchAllocations) are
not retried by the channel; their callers reconnect with `backoff_delays`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypedDict

import grpc
import grpc.aio

from gpuplane_core.backoff import Backoff

_PKG = "gpuplane.controller.v1"

# Keep idle connections (a quiet watch stream) alive through NAT and proxies; the
# server side must permit these pings (see server.SERVER_OPTIONS).
KEEPALIVE_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)
# Large clusters (thousands of GPUs) exceed gRPC's 4 MiB default in a listing.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class FlowPolicy:
    """How calls of one flow are timed and retried.

    `methods` selects what the policy covers: "pkg.Service" (every method) or
    "pkg.Service/Method". `deadline_s` None means no deadline (streams).
    """

    name: str
    methods: tuple[str, ...]
    deadline_s: float | None
    max_attempts: int = 4
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    backoff_multiplier: float = 2.0
    retryable_status_codes: tuple[grpc.StatusCode, ...] = (grpc.StatusCode.UNAVAILABLE,)
    # Wait for the channel to connect (until the deadline) rather than fail fast.
    wait_for_ready: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.max_attempts <= 5:  # gRPC caps attempts at 5
            raise ValueError(f"{self.name}: max_attempts must be 1..5")
        if self.initial_backoff_s <= 0 or self.max_backoff_s < self.initial_backoff_s:
            raise ValueError(f"{self.name}: need 0 < initial_backoff_s <= max_backoff_s")
        if self.backoff_multiplier < 1:
            raise ValueError(f"{self.name}: backoff_multiplier must be >= 1")


# hypervisor -> controller unary calls. The controller may be restarting or
# failing over; waiting for it beats dropping a heartbeat.
NODE_AGENT = FlowPolicy(
    name="node-agent",
    methods=(f"{_PKG}.NodeAgentService/RegisterNode", f"{_PKG}.NodeAgentService/Heartbeat"),
    deadline_s=5.0,
    max_attempts=4,
    initial_backoff_s=0.2,
    max_backoff_s=2.0,
    wait_for_ready=True,
)
# hypervisor -> controller allocation stream: no deadline, no channel retry
# (a stream that delivered events cannot be replayed); the caller reconnects
# with backoff_delays(WATCH_ALLOCATIONS) and resume_revision.
WATCH_ALLOCATIONS = FlowPolicy(
    name="watch-allocations",
    methods=(f"{_PKG}.NodeAgentService/WatchAllocations",),
    deadline_s=None,
    max_attempts=1,
    initial_backoff_s=0.5,
    max_backoff_s=30.0,
    wait_for_ready=True,
)
# gpuctl/lens -> controller reads; cheap and idempotent, so retry quickly.
CAPACITY = FlowPolicy(
    name="capacity",
    methods=(f"{_PKG}.CapacityService/GetPoolCapacity", f"{_PKG}.CapacityService/ListGpuAllocations"),
    deadline_s=5.0,
    max_attempts=3,
    initial_backoff_s=0.1,
    max_backoff_s=1.0,
)
# gpuctl -> controller dry-run scheduling before admitting a job; runs every
# filter over every GPU, so it gets more time and fewer attempts.
SIMULATE = FlowPolicy(
    name="simulate",
    methods=(f"{_PKG}.CapacityService/SimulateSchedule",),
    deadline_s=15.0,
    max_attempts=2,
    initial_backoff_s=0.2,
    max_backoff_s=1.0,
)
ALL_POLICIES: tuple[FlowPolicy, ...] = (NODE_AGENT, WATCH_ALLOCATIONS, CAPACITY, SIMULATE)


def _duration(seconds: float) -> str:
    """Service-config duration syntax ("0.25s")."""
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


def _method_config(policy: FlowPolicy) -> dict[str, Any]:
    names = []
    for selector in policy.methods:
        service, _, method = selector.partition("/")
        names.append({"service": service, "method": method} if method else {"service": service})
    config: dict[str, Any] = {"name": names, "waitForReady": policy.wait_for_ready}
    if policy.deadline_s is not None:
        config["timeout"] = _duration(policy.deadline_s)
    if policy.max_attempts > 1:
        config["retryPolicy"] = {
            "maxAttempts": policy.max_attempts,
            "initialBackoff": _duration(policy.initial_backoff_s),
            "maxBackoff": _duration(policy.max_backoff_s),
            "backoffMultiplier": policy.backoff_multiplier,
            "retryableStatusCodes": [code.name for code in policy.retryable_status_codes],
        }
    return config


def service_config(*policies: FlowPolicy) -> str:
    """The gRPC service config JSON for a channel carrying these flows."""
    config = {
        "methodConfig": [_method_config(p) for p in policies],
        # Stop retrying when most calls fail, so retries cannot amplify an outage.
        "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1},
    }
    return json.dumps(config, sort_keys=True)


def channel_options(*policies: FlowPolicy) -> list[tuple[str, Any]]:
    """Channel arguments: retries on, our service config, keepalive, message size."""
    return [
        ("grpc.enable_retries", 1),
        ("grpc.service_config", service_config(*policies)),
        # Our config is authoritative; do not take one from DNS TXT records.
        ("grpc.service_config_disable_resolution", 1),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        *KEEPALIVE_OPTIONS,
    ]


def make_channel(target: str, policy: FlowPolicy, *more: FlowPolicy) -> grpc.aio.Channel:
    """An insecure aio channel to `target` applying the given flows' policies.

    Pass several policies when one channel carries several flows (gpuctl uses
    CAPACITY and SIMULATE on its controller channel).
    """
    return grpc.aio.insecure_channel(target, options=channel_options(policy, *more))


class CallOptions(TypedDict):
    """Keyword arguments for a stub call: `stub.Method(request, **call_options(policy))`."""

    timeout: float | None
    wait_for_ready: bool


def call_options(policy: FlowPolicy) -> CallOptions:
    """Per-call deadline (the channel config sets it too; this makes it explicit)."""
    return CallOptions(timeout=policy.deadline_s, wait_for_ready=policy.wait_for_ready)


def backoff_delays(policy: FlowPolicy) -> Iterator[float]:
    """Endless reconnect delays for a stream of this flow (exponential, capped, jittered).

    Delegates to `gpuplane_core.backoff` so gRPC streams and Kubernetes watches
    reconnect alike. Start a fresh generator once the stream is healthy again.
    """
    return Backoff(
        initial=policy.initial_backoff_s,
        maximum=policy.max_backoff_s,
        multiplier=policy.backoff_multiplier,
    ).delays()
