"""Build the aio gRPC server every service uses, with error mapping installed.

One constructor so every server shares the same interceptor, keepalive
tolerance (clients ping idle watch streams) and message size limits.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import Any

import grpc
import grpc.aio

from gpuplane_core.grpc.client import MAX_MESSAGE_BYTES
from gpuplane_core.grpc.errors import ErrorMappingInterceptor

log = logging.getLogger(__name__)

# Accept the client keepalive pings of client.KEEPALIVE_OPTIONS instead of
# answering them with GOAWAY "too_many_pings".
SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 2),
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)

_ports: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


def make_server(
    port: int,
    host: str = "0.0.0.0",
    *,
    interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.aio.Server:
    """An unstarted aio server bound to host:port (port 0 picks a free one, see `bound_port`).

    `ErrorMappingInterceptor` runs innermost, after any extra `interceptors`.
    The standard health service is registered when grpcio-health-checking is installed.
    """
    server = grpc.aio.server(
        interceptors=[*interceptors, ErrorMappingInterceptor()],
        options=[*SERVER_OPTIONS, *options],
    )
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"gRPC server could not bind {host}:{port}")
    _ports[server] = bound
    _add_health(server)
    return server


def bound_port(server: grpc.aio.Server) -> int:
    """The port `make_server` bound (the real one when it was asked for port 0)."""
    return _ports[server]


def _add_health(server: grpc.aio.Server) -> None:
    try:
        from grpc_health.v1 import health, health_pb2_grpc
    except ImportError:
        log.debug("grpcio-health-checking not installed; no grpc.health.v1 service")
        return
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
