"""Every benchmark script still imports against the current code (they only run in `make bench`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = [*sorted(BENCH.glob("bench_*.py")), BENCH / "run.py"]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_bench_script_imports_and_has_a_main(script: Path) -> None:
    spec = importlib.util.spec_from_file_location(f"bench_import_check_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # module level only: `main()` runs under __main__ alone
    assert callable(getattr(module, "main", None)), f"{script.name} has no main()"
