"""Domain rule errors → the one gpuplane error hierarchy (which maps to HTTP and gRPC)."""

from __future__ import annotations

from gpuplane_core.errors import Conflict, GpuplaneError, InvalidSpec, NotFound, Unprocessable
from gpuplane_lens.domain.errors import LensRuleError


def domain_to_core(err: LensRuleError) -> GpuplaneError:
    if err.kind == "conflict":
        return Conflict(err.message, code=err.code, field=err.field)
    if err.kind == "bad_request":
        return InvalidSpec(err.message, code=err.code, field=err.field)
    if err.kind == "not_found":
        return NotFound(err.message, code=err.code, field=err.field)
    return Unprocessable(err.message, code=err.code, field=err.field)
