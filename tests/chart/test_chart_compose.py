"""docker-compose.yaml and services/*/Dockerfile: structure checks everywhere; `docker compose`
config and a real `up` where a Docker engine exists (the `docker` marker skips otherwise)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_kit import ROOT, SERVICES

COMPOSE = ROOT / "docker-compose.yaml"
ONE_SHOT = {"k3s-crds"}  # runs to completion; the others are long-running and health-checked


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def test_root_dockerfile_is_gone() -> None:
    assert not (ROOT / "Dockerfile").exists()


def test_every_service_has_a_healthcheck_and_a_dockerfile() -> None:
    services = _compose()["services"]
    assert set(SERVICES) <= set(services)
    for name, svc in services.items():
        if name in ONE_SHOT:
            continue
        test = svc.get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), f"{name} has no healthcheck"
        build = svc.get("build")
        if build:
            assert (ROOT / build.get("context", ".") / build["dockerfile"]).is_file(), name
    for name in SERVICES:
        assert services[name]["build"]["dockerfile"] == f"services/{name}/Dockerfile"
    assert services["k3s"]["profiles"] == ["k3s"]


def test_compose_env_names_match_settings() -> None:
    services = _compose()["services"]
    for name, (prefix, _, _) in SERVICES.items():
        from importlib import import_module

        fields = set(import_module(SERVICES[name][1]).Settings.model_fields)
        for var in services[name].get("environment", {}):
            if var == "NODE_NAME":
                continue
            assert var.startswith(prefix) and var[len(prefix) :].lower() in fields, f"{name}: {var}"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_dockerfile(name: str) -> None:
    text = (ROOT / "services" / name / "Dockerfile").read_text()
    _, module, script = SERVICES[name]
    assert len(re.findall(r"^FROM ", text, re.M)) >= 2, "multi-stage"
    assert f"uv sync --frozen --package gpuplane-{name} --no-dev --no-editable" in text
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1].split(":")[0] not in ("0", "root")
    assert "HEALTHCHECK" in text
    settings = __import__(module, fromlist=["Settings"]).Settings
    http = settings.model_fields["http_port"].default
    grpc = settings.model_fields["grpc_port"].default
    assert re.search(rf"^EXPOSE {http} {grpc}$", text, re.M)
    assert f'ENTRYPOINT ["{script}"]' in text
    scripts = tomllib.loads((ROOT / "services" / name / "pyproject.toml").read_text())["project"]["scripts"]
    assert script in scripts


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {"**/.venv", ".git", "**/tests"} <= set(ignored)


# --- with a Docker engine ---------------------------------------------------------------------


def _docker(
    *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["docker", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.docker
def test_compose_config() -> None:
    for profile in ([], ["--profile", "k3s"]):
        r = _docker("compose", *profile, "config", "--quiet")
        assert r.returncode == 0, r.stderr


@pytest.mark.docker
@pytest.mark.slow
def test_compose_stack_comes_up(tmp_path: Path) -> None:
    """Build the images and run the self-contained stack (k3s profile) until every service is healthy."""
    project = f"gpuplane-test-{os.getpid()}"
    env = {"GPUPLANE_KUBECONFIG_PATH": "/k3s/kubeconfig.yaml", "KUBECONFIG": str(tmp_path / "unused")}
    (tmp_path / "unused").write_text("")
    up = _docker(
        "compose",
        "-p",
        project,
        "--profile",
        "k3s",
        "up",
        "--build",
        "--detach",
        "--wait",
        timeout=1800,
        env=env,
    )
    try:
        assert up.returncode == 0, up.stderr[-4000:]
        for port in (8080, 8001, 8000, 8090):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                assert resp.status == 200
    finally:
        _docker("compose", "-p", project, "--profile", "k3s", "down", "--volumes", timeout=300, env=env)


def test_make_images_says_when_docker_is_missing() -> None:
    if shutil.which("docker") is not None and _docker("info", timeout=30).returncode == 0:
        pytest.skip("a Docker engine is here: `make images` would build")
    t0 = time.monotonic()
    r = subprocess.run(["make", "-s", "images"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0
    assert "no Docker engine on this machine" in r.stdout
    assert time.monotonic() - t0 < 30
