"""Every service's OpenAPI document states the error answers the shared handlers really send
(what the schemathesis fuzzing validates responses against)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI


def _apps(tmp: Path) -> dict[str, tuple[FastAPI, str]]:
    from gpuplane_controller.main import build_app as controller
    from gpuplane_gpuctl.main import build_app as gpuctl
    from gpuplane_hypervisor.main import build_app as hypervisor
    from gpuplane_hypervisor.settings import Settings as HypervisorSettings
    from gpuplane_lens.main import build_app as lens
    from gpuplane_lens.settings import Settings as LensSettings

    hv = HypervisorSettings(node_name="n", backend="null", state_file=str(tmp / "s.json"))
    return {
        "controller": (controller(), "simple"),
        "hypervisor": (hypervisor(hv), "simple"),
        "gpuctl": (gpuctl(), "simple"),
        "lens": (lens(LensSettings(data_dir=tmp / "lens")), "problem"),
    }


@pytest.mark.parametrize("name", ["controller", "hypervisor", "gpuctl", "lens"])
def test_every_operation_documents_the_served_error_shape(name: str, tmp_path: Path) -> None:
    app, style = _apps(tmp_path)[name]
    doc: dict[str, Any] = app.openapi()
    media, ref = (
        ("application/json", "#/components/schemas/Error")
        if style == "simple"
        else ("application/problem+json", "#/components/schemas/Problem")
    )
    schemas = doc["components"]["schemas"]
    assert "HTTPValidationError" not in schemas, "FastAPI's 422 shape is never served"
    required = set(schemas[ref.rsplit("/", 1)[1]]["required"])
    assert required == (
        {"error"} if style == "simple" else {"type", "status", "title", "detail", "code", "error"}
    )
    operations = [op for item in doc["paths"].values() for op in item.values() if isinstance(op, dict)]
    assert operations
    for op in operations:
        for code in ("4XX", "5XX"):
            assert op["responses"][code]["content"][media]["schema"] == {"$ref": ref}, (
                op["operationId"],
                code,
            )
        assert "422" not in op["responses"], "FastAPI's own 422 entry is replaced by 4XX"
