"""Lens rule violations as the shared gpuplane errors, each with its documented stable `code`."""

from __future__ import annotations

from typing import Literal

from gpuplane_core.errors import Conflict, GpuplaneError, InvalidSpec, NotFound, Unprocessable

Kind = Literal["invalid", "bad_request", "conflict", "not_found"]
_BY_KIND: dict[str, type[GpuplaneError]] = {
    "invalid": Unprocessable,  # 422: well-formed but unusable (Lens's default for rule violations)
    "bad_request": InvalidSpec,  # 400
    "conflict": Conflict,  # 409
    "not_found": NotFound,  # 404
}


def rule_error(message: str, *, code: str, kind: Kind = "invalid", field: str | None = None) -> GpuplaneError:
    """A request the user must fix; `code` is the stable machine code Lens documents."""
    return _BY_KIND[kind](message, code=code, field=field)
