"""Where devcluster keeps binaries (per version, shared) and cluster state."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    env = os.environ.get("GPUPLANE_DEVCLUSTER_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpuplane" / "devcluster"


def state_root(name: str = "default") -> Path:
    env = os.environ.get("GPUPLANE_DEVCLUSTER_STATE")
    if env:
        return Path(env) / name
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gpuplane" / "devcluster" / name
