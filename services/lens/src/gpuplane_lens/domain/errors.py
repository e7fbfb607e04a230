"""Errors raised by the pure domain code.

The domain may not import gpuplane_core.errors (it pulls in grpc, which the import
contract forbids here); `gpuplane_lens.errors.domain_to_core` maps these once.
"""

from __future__ import annotations

from typing import Literal

Kind = Literal["invalid", "bad_request", "conflict", "not_found"]


class LensRuleError(ValueError):
    """A request the user must fix. `code` is the stable machine code Lens documents."""

    def __init__(self, message: str, *, code: str, kind: Kind = "invalid", field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.kind = kind
        self.field = field
