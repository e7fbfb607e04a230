"""Helm, built from its Go module like the control-plane binaries.

The chart tests and `make chart-test` need a `helm` binary; this machine (and CI)
has none, so it is built through the same wrapper-module path and cache as
kube-apiserver: `~/.cache/gpuplane/devcluster/helm-<version>/bin/helm`.
Override the version with GPUPLANE_HELM_VERSION.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from devcluster.build import BuildError, Progress, bin_dir, build_component, is_built
from devcluster.versions import Component

DEFAULT_HELM_VERSION = "v3.22.0"
# Kubernetes version helm assumes for `helm template`/`helm lint` without a cluster
# (its Makefile derives it from the client-go it links: v0.37 -> 1.37).
_K8S_MAJOR, _K8S_MINOR = "1", "37"


def helm_component(version: str | None = None) -> Component:
    v = version or os.environ.get("GPUPLANE_HELM_VERSION", DEFAULT_HELM_VERSION)
    major = v.lstrip("v").split(".")[0]
    mod = f"helm.sh/helm/v{major}"
    return Component(
        name="helm",
        module=mod,
        version=v,
        binaries={"cmd/helm": "helm"},
        sibling_version=v,
        ldflags=(
            f"-X {mod}/internal/version.version={v}",
            f"-X {mod}/internal/version.gitTreeState=clean",
            f"-X {mod}/pkg/lint/rules.k8sVersionMajor={_K8S_MAJOR}",
            f"-X {mod}/pkg/lint/rules.k8sVersionMinor={_K8S_MINOR}",
            f"-X {mod}/pkg/chartutil.k8sVersionMajor={_K8S_MAJOR}",
            f"-X {mod}/pkg/chartutil.k8sVersionMinor={_K8S_MINOR}",
        ),
    )


def helm_binary(version: str | None = None) -> Path:
    """Where the cached helm binary lives (it may not be built yet)."""
    return bin_dir(helm_component(version)) / "helm"


def build_helm(progress: Progress | None = None, force: bool = False) -> Path:
    progress = progress or (lambda m: print(m, file=sys.stderr, flush=True))
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain is needed to build helm; install Go first")
    return build_component(helm_component(), progress, force) / "helm"


def helm_path(build: bool = True, progress: Progress | None = None) -> Path:
    """The helm binary for tests and scripts, built (once, cached) when missing."""
    comp = helm_component()
    if is_built(comp):
        return bin_dir(comp) / "helm"
    if not build:
        raise BuildError(f"helm {comp.version} is not built; run `devcluster build --helm`")
    return build_helm(progress)
