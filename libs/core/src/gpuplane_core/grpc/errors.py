"""Map `GpuplaneError` to gRPC status and back, once, for every service.

Servers install `ErrorMappingInterceptor` so handlers just raise domain errors;
clients call `error_from_rpc` so they can `except NotFound` instead of
inspecting status codes. The class, code and field travel as trailing metadata
because several classes share one status (NotReady and UpstreamError are both
UNAVAILABLE) and codes may be customised per raise.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

import grpc
import grpc.aio

from gpuplane_core.errors import ALL_ERRORS, GpuplaneError, InternalError, UpstreamError

log = logging.getLogger(__name__)

CODE_KEY = "gpuplane-error-code"
FIELD_KEY = "gpuplane-error-field"
CLASS_KEY = "gpuplane-error-class"
# What callers see instead of the message of a bug.
INTERNAL_MESSAGE = "internal error"

_KNOWN: tuple[type[GpuplaneError], ...] = (*ALL_ERRORS, GpuplaneError)
_BY_NAME: dict[str, type[GpuplaneError]] = {cls.__name__: cls for cls in _KNOWN}
_BY_CODE: dict[str, type[GpuplaneError]] = {}


def grpc_code(err: GpuplaneError | type[GpuplaneError]) -> grpc.StatusCode:
    """The gRPC status of an error (errors.py names it, so domain code needs no grpc import)."""
    return grpc.StatusCode[err.grpc_status]


_BY_STATUS: dict[grpc.StatusCode, type[GpuplaneError]] = {}
for _cls in ALL_ERRORS:
    _BY_CODE.setdefault(_cls.default_code, _cls)
    if _cls is not InternalError:  # first (most general) class wins for a shared status
        _BY_STATUS.setdefault(grpc_code(_cls), _cls)


def _ascii(value: str) -> str:
    """Metadata values must be printable ASCII; escape anything else."""
    return value.encode("ascii", "backslashreplace").decode("ascii")


def _known_class(err: GpuplaneError) -> type[GpuplaneError]:
    """Nearest class the client can rebuild (subclasses defined elsewhere map to their base)."""
    return next(cls for cls in type(err).__mro__ if cls in _KNOWN)  # GpuplaneError always matches


def status_for(err: GpuplaneError) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """The status, details and trailing metadata a server sends for `err`."""
    hidden = grpc_code(err) == grpc.StatusCode.INTERNAL
    trailers = [(CLASS_KEY, _known_class(err).__name__), (CODE_KEY, _ascii(err.code))]
    if err.field:
        trailers.append((FIELD_KEY, _ascii(err.field)))
    return grpc_code(err), INTERNAL_MESSAGE if hidden else err.message, tuple(trailers)


async def _abort(context: grpc.aio.ServicerContext, exc: Exception, method: str) -> NoReturn:
    """Turn an exception raised by a handler into the matching gRPC status."""
    if isinstance(exc, GpuplaneError):
        err = exc
        if grpc_code(err) == grpc.StatusCode.INTERNAL:
            log.error("gRPC %s failed: %s", method, err.message, exc_info=exc)
        else:
            log.debug("gRPC %s answered %s: %s", method, err.grpc_status, err.message)
    else:
        log.error("gRPC %s raised an unexpected exception", method, exc_info=exc)
        err = InternalError(INTERNAL_MESSAGE)
    code, details, trailers = status_for(err)
    await context.abort(code, details, trailers)
    raise AssertionError("context.abort returned")  # pragma: no cover - abort always raises


Behavior = Callable[..., Any]


def _wrap(behavior: Behavior, method: str) -> Behavior:
    """Wrap one aio handler, keeping its kind (coroutine or async generator).

    The aio server dispatches on that kind, so the wrapper must match it.
    Sync handlers (run in a thread pool) are left as they are.
    """
    if inspect.isasyncgenfunction(behavior):

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                async for response in behavior(request, context):
                    yield response
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await _abort(context, exc, method)

        return stream

    if inspect.iscoroutinefunction(behavior):

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                return await behavior(request, context)
            except grpc.aio.AbortError:
                raise
            except Exception as exc:
                await _abort(context, exc, method)

        return unary

    return behavior


class ErrorMappingInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]  # grpc ships no stubs
    """Server interceptor: raised errors become gRPC statuses with stable codes."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method: str = handler_call_details.method
        if handler.unary_unary:
            factory, behavior = grpc.unary_unary_rpc_method_handler, handler.unary_unary
        elif handler.unary_stream:
            factory, behavior = grpc.unary_stream_rpc_method_handler, handler.unary_stream
        elif handler.stream_unary:
            factory, behavior = grpc.stream_unary_rpc_method_handler, handler.stream_unary
        else:
            factory, behavior = grpc.stream_stream_rpc_method_handler, handler.stream_stream
        return factory(
            _wrap(behavior, method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )


def _trailers(rpc: grpc.aio.AioRpcError) -> dict[str, str]:
    metadata = rpc.trailing_metadata() or ()
    return {str(k): v for k, v in metadata if isinstance(v, str)}


def error_from_rpc(rpc: grpc.aio.AioRpcError) -> GpuplaneError:
    """Rebuild the domain error a peer raised (client side).

    Uses the class and code trailers when the peer runs `ErrorMappingInterceptor`;
    otherwise falls back on the status (a client-side deadline becomes `Timeout`,
    an unreachable peer `UpstreamError`). Raise the result `from` the RPC error.
    """
    status: grpc.StatusCode = rpc.code()
    trailers = _trailers(rpc)
    code = trailers.get(CODE_KEY)
    cls = _BY_NAME.get(trailers.get(CLASS_KEY, "")) or _BY_CODE.get(code or "")
    if cls is None:
        cls = _BY_STATUS.get(status, UpstreamError)
        code = code if code is not None else cls.default_code
    message = rpc.details() or f"peer answered {status.name}"
    return cls(
        message,
        code=code,
        field=trailers.get(FIELD_KEY),
        details={"grpc_status": status.name},
    )
