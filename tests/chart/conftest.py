"""Fixtures of the chart tests: the helm binary, built once from its Go module and cached."""

from __future__ import annotations

import pytest
from chart_kit import Helm


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    from devcluster.build import BuildError
    from devcluster.helm import helm_path

    try:
        # Built on first use (a few minutes, progress on stderr), then cached per version.
        binary = helm_path(build=True)
    except BuildError as e:
        pytest.fail(f"cannot build helm: {e}")
    return Helm(binary, tmp_path_factory.mktemp("helm-home"))
