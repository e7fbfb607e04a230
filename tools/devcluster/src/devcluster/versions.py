"""Pinned versions of the control-plane components devcluster builds.

Kept in one place so the builder, the runner and the tests agree. Override with
GPUPLANE_K8S_VERSION / GPUPLANE_ETCD_VERSION / GPUPLANE_KWOK_VERSION to try neighbours.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Component:
    """One Go main package (or several) built from one upstream module."""

    name: str
    module: str
    version: str
    # package path inside the module -> binary name
    binaries: dict[str, str]
    # version given to the module's own local `replace` targets (staging modules etc.)
    sibling_version: str
    ldflags: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


def kubernetes(version: str | None = None) -> Component:
    v = version or os.environ.get("GPUPLANE_K8S_VERSION", "v1.34.4")
    major, minor = v.lstrip("v").split(".")[:2]
    cv = "k8s.io/component-base/version"
    return Component(
        name="kubernetes",
        module="k8s.io/kubernetes",
        version=v,
        binaries={
            "cmd/kube-apiserver": "kube-apiserver",
            "cmd/kube-controller-manager": "kube-controller-manager",
            "cmd/kube-scheduler": "kube-scheduler",
        },
        sibling_version=f"v0.{minor}.{v.split('.')[2]}",
        ldflags=(
            f"-X {cv}.gitVersion={v}",
            f"-X {cv}.gitMajor={major}",
            f"-X {cv}.gitMinor={minor}",
            f"-X {cv}.gitTreeState=clean",
        ),
    )


def etcd(version: str | None = None) -> Component:
    v = version or os.environ.get("GPUPLANE_ETCD_VERSION", "v3.6.16")
    return Component(
        name="etcd",
        module="go.etcd.io/etcd/server/v3",
        version=v,
        binaries={"": "etcd"},
        sibling_version=v,
    )


def kwok(version: str | None = None) -> Component:
    v = version or os.environ.get("GPUPLANE_KWOK_VERSION", "v0.8.0")
    return Component(
        name="kwok",
        module="sigs.k8s.io/kwok",
        version=v,
        binaries={"cmd/kwok": "kwok"},
        sibling_version=v,
        ldflags=(f"-X sigs.k8s.io/kwok/pkg/consts.Version={v}",),
    )


def all_components() -> list[Component]:
    return [etcd(), kwok(), kubernetes()]
