"""The node-local state file: process registrations and the last allocations seen.

Written atomically (temp file, fsync, rename) so a crash never leaves half a
file; a hypervisor restart reloads it and keeps serving what it knew.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuplane_hypervisor.domain.models import Allocation, Registration, Resources

log = logging.getLogger(__name__)
VERSION = 1


@dataclass
class NodeState:
    registrations: list[Registration] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)
    revision: int = 0


def _allocation(raw: dict[str, Any]) -> Allocation:
    return Allocation(
        **{
            **raw,
            "gpu_names": tuple(raw["gpu_names"]),
            "gpu_uuids": tuple(raw["gpu_uuids"]),
            "request": Resources(**raw["request"]),
            "limit": Resources(**raw["limit"]),
        }
    )


class StateFile:
    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def load(self) -> NodeState:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return NodeState()
        except (OSError, ValueError) as e:
            # A corrupt file must not keep the agent down; the limiters re-register.
            log.error("state file %s unreadable, starting empty: %s", self.path, e)
            return NodeState()
        try:
            return NodeState(
                registrations=[Registration(**r) for r in raw.get("registrations", [])],
                allocations=[_allocation(a) for a in raw.get("allocations", [])],
                revision=int(raw.get("revision", 0)),
            )
        except (TypeError, KeyError, ValueError) as e:
            log.error("state file %s has an unexpected shape, starting empty: %s", self.path, e)
            return NodeState()

    def save(self, state: NodeState) -> None:
        body = {
            "version": VERSION,
            "registrations": [asdict(r) for r in state.registrations],
            "allocations": [asdict(a) for a in state.allocations],
            "revision": state.revision,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(body, f, separators=(",", ":"))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
