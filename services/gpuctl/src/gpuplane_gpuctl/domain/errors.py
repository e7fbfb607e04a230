"""Errors raised by the pure job-spec code.

The domain may not import gpuplane_core.errors (it pulls in grpc, which the
import contract forbids here), so the API layer maps these to InvalidSpec (400).
"""

from __future__ import annotations


class SpecError(ValueError):
    """A job document the user must fix; `field` is the dotted path of the culprit."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
