"""Pod manifests sent to simulate-schedule (HTTP body or gRPC bytes), YAML or JSON."""

from __future__ import annotations

from typing import Any

from gpuplane_core.yaml_limits import load_bounded


def parse_manifest(body: bytes) -> Any:
    # Bounded: deep nesting or an alias bomb is a 400 naming `body`, never a RecursionError (500).
    return load_bounded(body, field="body")
