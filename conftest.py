"""Repository-wide pytest hooks: skip hardware-bound markers cleanly where the hardware is missing."""

from __future__ import annotations

import shutil
import subprocess
from functools import cache

import pytest


@cache
def _docker_engine() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@cache
def _nvml() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:  # any NVML or import failure means: no usable GPU here
        return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("docker") and not _docker_engine():
            item.add_marker(pytest.mark.skip(reason="no Docker engine on this machine"))
        if item.get_closest_marker("gpu") and not _nvml():
            item.add_marker(pytest.mark.skip(reason="no NVIDIA GPU / NVML on this machine"))
