"""The images' build stage without Docker: run each Dockerfile's own `uv sync` line on a copy of
the build context (as .dockerignore leaves it) into a fresh venv, then check the console
script runs from it with no source tree around (what the runtime stage gets)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from chart_kit import ROOT, SERVICES

pytestmark = pytest.mark.slow


def _context(dest: Path) -> None:
    """Copy what the Dockerfiles COPY, minus the .dockerignore patterns (`**/x` = anywhere)."""
    patterns = [p for p in (ROOT / ".dockerignore").read_text().split() if not p.startswith("#")]
    anywhere = {p[3:] for p in patterns if p.startswith("**/")}
    top = {p for p in patterns if not p.startswith("**/")}

    def ignore(_dir: str, names: list[str]) -> set[str]:
        return {n for n in names if n in anywhere or (n.endswith(".pyc") and "*.pyc" in anywhere)}

    for item in ("pyproject.toml", "uv.lock", "libs", "services", "tools"):
        assert item not in top
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=ignore)
        else:
            shutil.copy2(src, dest / item)


def _uv_sync_args(name: str) -> list[str]:
    text = (ROOT / "services" / name / "Dockerfile").read_text().replace("\\\n", " ")
    m = re.search(r"\buv (sync [^\n&]+)", text)
    assert m, "no uv sync line"
    return m.group(1).split()


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_build_stage(name: str, tmp_path: Path) -> None:
    uv = shutil.which("uv")
    assert uv is not None, "uv not on PATH: the images install with it, and `make install` needs it too"
    ctx = tmp_path / "src"
    ctx.mkdir()
    _context(ctx)
    venv = tmp_path / "app" / ".venv"
    env = {
        **os.environ,
        "UV_PROJECT_ENVIRONMENT": str(venv),
        "UV_LINK_MODE": "copy",
        "UV_PYTHON": sys.executable,
    }
    env.pop("VIRTUAL_ENV", None)
    r = subprocess.run(
        [uv, *_uv_sync_args(name)], cwd=ctx, env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    shutil.rmtree(ctx)  # the runtime stage has only the venv

    script = venv / "bin" / SERVICES[name][2]
    assert script.is_file()
    # Only this service's workspace packages are installed (non-editable: real files).
    site = next((venv / "lib").glob("python3*/site-packages"))
    others = {f"gpuplane_{o}" for o in SERVICES if o != name}
    assert (site / f"gpuplane_{name}").is_dir()
    assert not others & {p.name for p in site.iterdir()}
    assert not list(site.glob("*.pth")) or all("src" not in p.read_text() for p in site.glob("*.pth"))

    py = venv / "bin" / "python"
    r = subprocess.run(
        [str(py), "-c", f"import gpuplane_{name}.main"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    if name == "lens":
        _lens_serves_its_healthcheck(venv, tmp_path)


def _lens_serves_its_healthcheck(venv: Path, tmp_path: Path) -> None:
    """Lens needs no cluster: start its console script from the venv and run the Dockerfile's
    HEALTHCHECK command against it."""
    from devcluster.services import free_port

    port = free_port()
    run_env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "GPUPLANE_LENS_HTTP_HOST": "127.0.0.1",
        "GPUPLANE_LENS_HTTP_PORT": str(port),
        "GPUPLANE_LENS_GRPC_PORT": str(free_port()),
        "GPUPLANE_LENS_DATA_DIR": str(tmp_path / "data"),
    }
    log = (tmp_path / "lens.log").open("wb")
    proc = subprocess.Popen(
        [str(venv / "bin" / "lens-server")], env=run_env, cwd=tmp_path, stdout=log, stderr=log
    )
    try:
        healthcheck = re.search(
            r'CMD \["python", "-c", "(.+)"\]', (ROOT / "services/lens/Dockerfile").read_text()
        )
        assert healthcheck
        deadline = time.monotonic() + 60
        while True:
            hc = subprocess.run(
                [str(venv / "bin" / "python"), "-c", healthcheck.group(1)],
                env=run_env,
                capture_output=True,
                timeout=30,
            )
            if hc.returncode == 0:
                break
            assert proc.poll() is None, (tmp_path / "lens.log").read_text()[-2000:]
            assert time.monotonic() < deadline, hc.stderr
            time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
