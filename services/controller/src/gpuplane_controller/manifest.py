"""Pod manifests sent to simulate-schedule (HTTP body or gRPC bytes), YAML or JSON."""

from __future__ import annotations

from typing import Any

import yaml

from gpuplane_core.errors import InvalidSpec


def parse_manifest(body: bytes) -> Any:
    try:
        return yaml.safe_load(body.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as e:
        raise InvalidSpec(
            f"request body is not valid YAML or JSON: {type(e).__name__}", field="body"
        ) from None
