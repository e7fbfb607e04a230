"""The stack profile (versions file) and Kubernetes version comparison."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpuplane_lens.domain.errors import rule_error

_REQUIRED = (
    "llm_d",
    "min_k8s_version",
    "llm_d_router",
    "llm_d_lensmark",
    "llm_d_inference_payload_processor",
    "k8s_gateway_api",
    "k8s_gateway_api_inference_extension",
)
_PROVIDERS = ("istio", "envoy_gateway", "envoy_ai_gateway", "agentgateway")
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class StackProfile:
    raw: dict[str, Any]

    @property
    def llm_d(self) -> str:
        return str(self.raw["llm_d"])

    @property
    def llm_d_benchmark(self) -> str:
        return str(self.raw["llm_d_lensmark"])

    @property
    def router(self) -> str:
        return str(self.raw["llm_d_router"])

    @property
    def payload_processor(self) -> str:
        return str(self.raw["llm_d_inference_payload_processor"])

    @property
    def min_k8s_version(self) -> str:
        return str(self.raw["min_k8s_version"])

    @property
    def gateway_api(self) -> str:
        return str(self.raw["k8s_gateway_api"])

    @property
    def gateway_api_inference_extension(self) -> str:
        return str(self.raw["k8s_gateway_api_inference_extension"])


def parse_profile(doc: Any) -> StackProfile:
    """Validate the versions file: every key present, strings only, no unknown keys."""
    if not isinstance(doc, dict):
        raise rule_error("versions file must be a mapping", code="invalid_versions_file")
    allowed = {*_REQUIRED, "gateway_providers"}
    unknown = sorted(set(doc) - allowed)
    if unknown:
        raise rule_error(f"unknown keys in versions file: {unknown}", code="invalid_versions_file")
    for key in _REQUIRED:
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise rule_error(f"versions file: {key} must be a non-empty string", code="invalid_versions_file")
    providers = doc.get("gateway_providers")
    if not isinstance(providers, dict) or set(providers) != set(_PROVIDERS):
        raise rule_error(
            f"versions file: gateway_providers must have exactly {list(_PROVIDERS)}",
            code="invalid_versions_file",
        )
    if not all(isinstance(v, str) and v for v in providers.values()):
        raise rule_error(
            "versions file: gateway provider versions must be strings", code="invalid_versions_file"
        )
    if parse_k8s_version(doc["min_k8s_version"]) is None:
        raise rule_error("versions file: min_k8s_version is not a version", code="invalid_versions_file")
    return StackProfile(dict(doc))


def parse_k8s_version(text: str) -> tuple[int, int, int] | None:
    match = _VERSION.match(text.strip())
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def short_version(major: str, minor: str, git_version: str) -> str | None:
    """``"1.34"`` from the apiserver's /version (minor may carry a ``+`` suffix)."""
    parsed = parse_k8s_version(git_version)
    if parsed is not None:
        return f"{parsed[0]}.{parsed[1]}"
    digits = re.sub(r"\D", "", minor)
    return f"{major}.{digits}" if major.isdigit() and digits else None


def supported(git_version: str, minimum: str) -> bool:
    have = parse_k8s_version(git_version)
    need = parse_k8s_version(minimum)
    return have is not None and need is not None and have >= need
