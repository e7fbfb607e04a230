"""Kubernetes API errors become domain errors, once, with the apiserver's message."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from gpuplane_core.errors import (
    Conflict,
    Forbidden,
    GpuplaneError,
    InvalidSpec,
    NotFound,
    NotReady,
    Timeout,
    Unprocessable,
    UpstreamError,
)
from gpuplane_core.k8s.errors import k8s_errors, translate_api_exception


def _exc(status: int, message: str | None = "boom") -> ApiException:
    e = ApiException(status=status, reason="Reason")
    e.body = json.dumps({"kind": "Status", "message": message}) if message else None
    return e


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, InvalidSpec),
        (401, UpstreamError),
        (403, Forbidden),
        (404, NotFound),
        (409, Conflict),
        (422, Unprocessable),
        (429, NotReady),
        (500, UpstreamError),
        (503, UpstreamError),
        (504, Timeout),
    ],
)
def test_status_maps_to_domain_error(status: int, cls: type[GpuplaneError]) -> None:
    err = translate_api_exception(_exc(status))
    assert type(err) is cls
    assert "boom" in err.message


def test_not_found_names_the_object_and_reason_is_the_fallback() -> None:
    assert translate_api_exception(_exc(404), "pool p1").message == "pool p1 not found"
    assert translate_api_exception(_exc(409, None)).message == "Reason"


async def test_context_manager_translates_and_chains() -> None:
    with pytest.raises(Conflict) as info:
        async with k8s_errors():
            raise _exc(409, 'namespaces "x" already exists')
    assert info.value.message == 'namespaces "x" already exists'
    assert isinstance(info.value.__cause__, ApiException)
