"""Every service's OpenAPI schema fuzzed with schemathesis against the real server.

For each documented operation a fixed, derandomized budget of positive (schema-valid) and
negative (schema-invalid) requests is sent to the service running as its console script on the
devcluster. What must hold for every request: no 5xx, a documented status code, a documented
content type, and a body that matches the documented schema for that status (the error shape
included). Failures are collected over all operations and reported together.
"""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from reliability_kit import LoggedService
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES_PER_MODE = 10
CHECKS = [status_code_conformance, content_type_conformance, response_schema_conformance]
# 5xx answers that the specs themselves document for an operation: the contract, not a crash.
DOCUMENTED_5XX = {
    ("GET", "/api/node-scaler"): (503, "node scaler not enabled"),
    ("POST", "/api/simulate-schedule"): (500, "scheduler framework not found"),
}


def check_no_server_error(case: Any, response: Any) -> None:
    if response.status_code < 500:
        return
    allowed = DOCUMENTED_5XX.get((case.method.upper(), case.operation.path))
    if allowed and response.status_code == allowed[0] and allowed[1] in response.text:
        return
    raise AssertionError(
        f"server error {response.status_code}: {response.text[:300]}\n{case.as_curl_command()}"
    )


def _fixed_path_parameters(op: Any) -> dict[str, str] | None:
    """Deletes get names that cannot exist, so the fuzzer never removes real objects (the
    GET on the same path fuzzes the parameter parsing itself)."""
    if op.method.upper() != "DELETE":
        return None
    names = [p.name for p in op.path_parameters]
    return {n: f"fuzz-absent-{secrets.token_hex(3)}" for n in names} or None


def _property(strategy: Any, base_url: str, checks: list[Any], examples: int) -> Any:
    """The hypothesis test of one operation in one generation mode."""

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy)
    def run(case: Any) -> None:
        response = case.call(base_url=base_url, timeout=20)
        check_no_server_error(case, response)
        case.validate_response(response, checks=checks)

    return run


def fuzz(base_url: str, examples: int = EXAMPLES_PER_MODE) -> list[str]:
    schema = schemathesis.openapi.from_url(f"{base_url}/openapi.json")
    failures: list[str] = []
    for result in schema.get_all_operations():
        op = result.ok()
        # Without query parameters or a body there is nothing schema-invalid to send (any path
        # string is valid); the positive run covers those operations.
        modes = [GenerationMode.POSITIVE]
        if len(op.query) or len(op.body):
            modes.append(GenerationMode.NEGATIVE)
        for mode in modes:
            checks = CHECKS + ([negative_data_rejection] if mode is GenerationMode.NEGATIVE else [])
            strategy = op.as_strategy(generation_mode=mode, path_parameters=_fixed_path_parameters(op))
            run = _property(strategy, base_url, checks, examples)
            started = time.monotonic()
            try:
                run()
            except Unsatisfiable:
                continue  # every parameter accepts any value: no negative case exists
            except (Exception, BaseExceptionGroup) as e:  # one failing operation must not hide others
                failures.append(f"{op.method.upper()} {op.path} [{mode.value}]: {e}")
            finally:
                if os.environ.get("FUZZ_TIMES"):
                    print(f"{time.monotonic() - started:6.2f}s {op.method.upper()} {op.path} [{mode.value}]")
    return failures


@pytest.mark.parametrize("name", ["controller", "hypervisor", "gpuctl", "lens"])
def test_openapi_fuzz_no_5xx_and_schema_conformant(services: dict[str, LoggedService], name: str) -> None:
    fuzzed = services[name]
    failures = fuzz(fuzzed.url)
    assert fuzzed.alive()
    assert not failures, "\n\n".join(failures)
