"""Regenerate the committed Python gRPC code from `proto/**/*.proto`.

Output goes to `libs/proto/src/` (messages `*_pb2.py`, stubs `*_pb2_grpc.py`
and mypy-protobuf type stubs `*.pyi`). The generated tree is committed so the
services import it without a build step; `--check` regenerates into a temp dir
and fails when the committed tree differs, which is how CI keeps the two in
step. Output only depends on the proto files and the pinned tool versions.

Usage: uv run python scripts/gen_protos.py [--check]
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT_ROOT = ROOT / "libs" / "proto" / "src"
# The top-level package the generated code lives in; it is wholly generated.
PACKAGE = "gpuplane"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")
MARKERS = ("__init__.py", "py.typed")


def _plugin(name: str) -> str:
    """Locate a protoc plugin next to this interpreter (the venv), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        sys.exit(f"gen_protos: {name} not found; run `uv sync` (mypy-protobuf is in the dev group)")
    return found


def generate(out: Path) -> None:
    """Run protoc over every proto file into `out` and add package markers."""
    import grpc_tools

    protos = sorted(p.relative_to(PROTO_ROOT).as_posix() for p in PROTO_ROOT.rglob("*.proto"))
    if not protos:
        sys.exit(f"gen_protos: no .proto files under {PROTO_ROOT}")
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    cmd = [
        sys.executable,
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *protos,
    ]
    done = subprocess.run(cmd, cwd=PROTO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"gen_protos: protoc failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    # Regular packages (not namespace packages) so mypy and hatch find them.
    pkg = out / PACKAGE
    for directory in sorted({pkg, *(f.parent for f in pkg.rglob("*_pb2.py"))}):
        for d in (directory, *directory.parents):
            if d == out:
                break
            (d / "__init__.py").touch()
    (pkg / "py.typed").touch()


def _is_generated(path: Path) -> bool:
    return path.name.endswith(GENERATED_SUFFIXES) or path.name in MARKERS


def _tree(base: Path) -> dict[str, bytes]:
    """Generated files under base/PACKAGE, keyed by relative posix path."""
    pkg = base / PACKAGE
    if not pkg.exists():
        return {}
    return {
        f.relative_to(base).as_posix(): f.read_bytes()
        for f in sorted(pkg.rglob("*"))
        if f.is_file() and "__pycache__" not in f.parts and _is_generated(f)
    }


def check(fresh: dict[str, bytes], committed: dict[str, bytes]) -> int:
    """Print a diff summary; return the exit status CI should see."""
    problems: list[str] = []
    for name in sorted(fresh.keys() - committed.keys()):
        problems.append(f"missing (not committed): {name}")
    for name in sorted(committed.keys() - fresh.keys()):
        problems.append(f"stale (no longer generated): {name}")
    for name in sorted(fresh.keys() & committed.keys()):
        if fresh[name] != committed[name]:
            diff = difflib.unified_diff(
                committed[name].decode(errors="replace").splitlines(),
                fresh[name].decode(errors="replace").splitlines(),
                f"committed/{name}",
                f"regenerated/{name}",
                lineterm="",
                n=1,
            )
            problems.append(f"differs: {name}\n" + "\n".join(list(diff)[:40]))
    if not problems:
        print(f"gen_protos: {len(fresh)} generated files up to date")
        return 0
    print("gen_protos: generated code is out of date; run `uv run python scripts/gen_protos.py`")
    print("\n".join(problems))
    return 1


def write(fresh_base: Path, fresh: dict[str, bytes]) -> None:
    """Replace the committed generated files with the fresh ones, dropping stale ones."""
    for name in _tree(OUT_ROOT).keys() - fresh.keys():
        (OUT_ROOT / name).unlink()
    for name in sorted(fresh):
        target = OUT_ROOT / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(fresh_base / name, target)
    print(f"gen_protos: wrote {len(fresh)} files under {OUT_ROOT.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed code is stale")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gen_protos_") as tmp:
        fresh_base = Path(tmp)
        generate(fresh_base)
        fresh = _tree(fresh_base)
        if args.check:
            return check(fresh, _tree(OUT_ROOT))
        write(fresh_base, fresh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
