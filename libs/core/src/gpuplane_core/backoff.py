"""Exponential backoff with full jitter, shared by every reconnect loop
(Kubernetes watches, gRPC allocation streams) so they behave alike."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial: float = 0.2
    maximum: float = 30.0
    multiplier: float = 2.0

    def delays(self) -> Iterator[float]:
        """Endless delays: uniform in [0, min(maximum, initial * multiplier**n)]."""
        cap = self.initial
        while True:
            yield random.uniform(0, cap)
            cap = min(self.maximum, cap * self.multiplier)
