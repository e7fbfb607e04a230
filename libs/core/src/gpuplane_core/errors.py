"""The one domain error hierarchy shared by every service.

Domain and adapter code raise these; `http_errors` maps them once to the
documented HTTP error shapes and `grpc.errors` maps them once to gRPC status
codes. Each class carries both mappings so they cannot drift apart; the gRPC
one is the status code's *name*, so this module (and the pure domain code
that raises these errors) does not depend on grpc.
"""

from __future__ import annotations

from typing import Any, ClassVar


class GpuplaneError(Exception):
    """Base class. `code` is a stable machine-readable code (Lens exposes it)."""

    http_status: ClassVar[int] = 500
    grpc_status: ClassVar[str] = "INTERNAL"
    default_code: ClassVar[str] = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.field = field
        self.details = details or {}

    def __str__(self) -> str:
        return self.message


class InvalidSpec(GpuplaneError):
    """The caller sent something malformed (bad YAML, unknown key, bad value)."""

    http_status = 400
    grpc_status = "INVALID_ARGUMENT"
    default_code = "invalid_spec"


class Unprocessable(InvalidSpec):
    """Well-formed but semantically unusable input (Lens answers these with 422)."""

    http_status = 422
    default_code = "unprocessable"


class Unauthorized(GpuplaneError):
    http_status = 401
    grpc_status = "UNAUTHENTICATED"
    default_code = "unauthorized"


class Forbidden(GpuplaneError):
    http_status = 403
    grpc_status = "PERMISSION_DENIED"
    default_code = "forbidden"


class NotFound(GpuplaneError):
    http_status = 404
    grpc_status = "NOT_FOUND"
    default_code = "not_found"


class Conflict(GpuplaneError):
    http_status = 409
    grpc_status = "ALREADY_EXISTS"
    default_code = "conflict"


class PayloadTooLarge(InvalidSpec):
    http_status = 413
    default_code = "payload_too_large"


class InsufficientCapacity(GpuplaneError):
    """A request that can never fit (quota, pool size, filters)."""

    http_status = 422
    grpc_status = "RESOURCE_EXHAUSTED"
    default_code = "insufficient_capacity"


class NotImplementedYet(GpuplaneError):
    http_status = 501
    grpc_status = "UNIMPLEMENTED"
    default_code = "not_implemented"


class UpstreamError(GpuplaneError):
    """A dependency (Kubernetes API, a managed cluster, a peer service) failed."""

    http_status = 502
    grpc_status = "UNAVAILABLE"
    default_code = "upstream_error"


class NotReady(GpuplaneError):
    """This instance cannot answer now (not leader, not initialised, watch broken)."""

    http_status = 503
    grpc_status = "UNAVAILABLE"
    default_code = "not_ready"


class Timeout(GpuplaneError):
    http_status = 504
    grpc_status = "DEADLINE_EXCEEDED"
    default_code = "timeout"


class InternalError(GpuplaneError):
    """A bug. Its message is never shown to callers."""


ALL_ERRORS: tuple[type[GpuplaneError], ...] = (
    InvalidSpec,
    Unprocessable,
    Unauthorized,
    Forbidden,
    NotFound,
    Conflict,
    PayloadTooLarge,
    InsufficientCapacity,
    NotImplementedYet,
    UpstreamError,
    NotReady,
    Timeout,
    InternalError,
)
