"""Build the control-plane binaries from Go modules through wrapper modules.

`go install k8s.io/kubernetes/cmd/...@v` refuses modules that carry `replace`
directives, so each component gets a tiny wrapper module that requires the
upstream module and re-points its local replaces (staging modules for
Kubernetes, sibling modules for etcd) at published versions.
Binaries are cached per version outside the repo; a warm build is a no-op.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from devcluster.paths import cache_root
from devcluster.versions import Component, all_components

Progress = Callable[[str], None]

_LOCAL_REPLACE = re.compile(r"^\s*(\S+)\s*=>\s*\.{1,2}/\S*\s*$")


def bin_dir(component: Component) -> Path:
    return cache_root() / component.key / "bin"


def is_built(component: Component) -> bool:
    d = bin_dir(component)
    return all((d / b).is_file() and os.access(d / b, os.X_OK) for b in component.binaries.values())


def _go(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(["go", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"go {' '.join(args)} failed in {cwd}:\n{proc.stderr[-4000:]}")
    return proc.stdout


class BuildError(RuntimeError):
    pass


def _local_replaces(gomod_text: str) -> list[str]:
    """Module paths the upstream go.mod replaces with local directories."""
    mods: list[str] = []
    in_block = False
    for line in gomod_text.splitlines():
        s = line.strip()
        if s.startswith("replace ("):
            in_block = True
            continue
        if in_block and s == ")":
            in_block = False
            continue
        if s.startswith("replace "):
            s = s[len("replace ") :]
        elif not in_block:
            continue
        m = _LOCAL_REPLACE.match(s)
        # etcd guards against bad imports with `=> ./FORBIDDEN_DEPENDENCY`; those are not siblings.
        if m and "FORBIDDEN" not in s:
            mods.append(m.group(1))
    return mods


def _wrapper_gomod(component: Component, upstream_gomod: str) -> str:
    tools = "\n".join(f"tool {_pkg(component, p)}" for p in component.binaries)
    replaces = "\n".join(f"\t{m} => {m} {component.sibling_version}" for m in _local_replaces(upstream_gomod))
    out = [
        "module gpuplane.local/devcluster/" + component.name,
        "",
        "go 1.24.0",
        "",
        f"require {component.module} {component.version}",
        "",
        tools,
    ]
    if replaces:
        out += ["", "replace (", replaces, ")"]
    return "\n".join(out) + "\n"


def _pkg(component: Component, sub: str) -> str:
    return f"{component.module}/{sub}" if sub else component.module


def build_component(component: Component, progress: Progress, force: bool = False) -> Path:
    """Build one component's binaries into the cache; returns the bin dir."""
    out = bin_dir(component)
    if is_built(component) and not force:
        progress(f"{component.key}: cached in {out}")
        return out
    work = cache_root() / component.key / "wrapper"
    shutil.rmtree(work, ignore_errors=True)  # a stale wrapper go.mod would break `go mod download`
    work.mkdir(parents=True)
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-buildvcs=false -mod=mod"}
    t0 = time.monotonic()

    progress(f"{component.key}: [1/4] fetching {component.module}@{component.version}")
    info = json.loads(_go(["mod", "download", "-json", f"{component.module}@{component.version}"], work, env))
    upstream_gomod = Path(info["GoMod"]).read_text()
    (work / "go.mod").write_text(_wrapper_gomod(component, upstream_gomod))
    (work / "go.sum").touch()

    progress(f"{component.key}: [2/4] resolving and downloading dependencies")
    _go(["mod", "tidy"], work, env)

    pkgs = [_pkg(component, p) for p in component.binaries]
    deps = _go(["list", "-deps", *pkgs], work, env).split()
    total = len(deps)
    progress(
        f"{component.key}: [3/4] compiling {total} packages for {', '.join(component.binaries.values())}"
    )
    tmp = out.with_name("bin.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for sub, name in component.binaries.items():
        _compile(component, _pkg(component, sub), tmp / name, work, env, total, progress)

    progress(f"{component.key}: [4/4] installing into {out}")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    progress(f"{component.key}: built in {time.monotonic() - t0:.0f}s")
    return out


def _compile(
    component: Component,
    pkg: str,
    dest: Path,
    work: Path,
    env: dict[str, str],
    total: int,
    progress: Progress,
) -> None:
    ldflags = " ".join(("-s", "-w", *component.ldflags))
    cmd = ["go", "build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(dest), pkg]
    proc = subprocess.Popen(cmd, cwd=work, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    done, last = 0, 0.0
    tail: list[str] = []
    for line in proc.stderr:
        tail = [*tail, line][-40:]
        done += 1
        now = time.monotonic()
        if now - last > 10:
            progress(f"{component.key}:       {dest.name}: compiled {done} packages (of up to {total})")
            last = now
    if proc.wait() != 0:
        raise BuildError(f"building {pkg} failed:\n{''.join(tail)}")
    progress(f"{component.key}:       {dest.name}: done")


def build_all(progress: Progress | None = None, force: bool = False) -> dict[str, Path]:
    progress = progress or (lambda m: print(m, file=sys.stderr, flush=True))
    if shutil.which("go") is None:
        raise BuildError("the Go toolchain (1.24+) is needed to build the local cluster; install Go first")
    return {c.name: build_component(c, progress, force) for c in all_components()}
