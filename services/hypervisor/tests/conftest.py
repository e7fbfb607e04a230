"""Fixtures of the hypervisor tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypervisor_testkit import make_settings

from gpuplane_hypervisor.settings import Settings


@pytest.fixture
def settings_factory(tmp_path: Path) -> Callable[..., Settings]:
    def make(**overrides: Any) -> Settings:
        return make_settings(tmp_path, **overrides)

    return make
