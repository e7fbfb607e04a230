"""Background `git clone --depth 1 --branch <ref>` of the pinned llm-d and llm-d-benchmark refs.

Checkouts are shared by every cluster (they depend only on the pinned ref) and land in
``<cache>/<repo>/<ref>`` atomically: a clone goes to a temporary directory first and is
renamed into place, so a path that exists is a complete checkout, also after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

logger = logging.getLogger(__name__)

_SAFE_REF = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")


@dataclass
class Download:
    ref: str
    state: str  # idle | downloading | ready | failed
    path: str | None = None
    error: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"ref": self.ref, "state": self.state, "path": self.path, "error": self.error}


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        host = parts.hostname or ""
        netloc = host + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return url


class Downloads:
    def __init__(self, cache_dir: Path, timeout: float) -> None:
        self.cache_dir = cache_dir
        self.timeout = timeout
        self._state: dict[tuple[str, str], Download] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}

    def target(self, repo: str, ref: str) -> Path:
        return self.cache_dir / repo / ref.replace("/", "_")

    def status(self, repo: str, ref: str) -> Download:
        key = (repo, ref)
        current = self._state.get(key)
        if current is not None:
            return current
        path = self.target(repo, ref)
        if path.is_dir():
            return Download(ref, "ready", str(path))
        return Download(ref, "idle")

    def ready_path(self, repo: str, ref: str) -> str | None:
        d = self.status(repo, ref)
        return d.path if d.state == "ready" else None

    def start(self, repo: str, url: str, ref: str) -> Download:
        """Idempotent: a running or finished download is left alone; a failed one is retried."""
        current = self.status(repo, ref)
        if current.state in ("downloading", "ready"):
            return current
        key = (repo, ref)
        state = Download(ref, "downloading")
        self._state[key] = state
        self._tasks[key] = asyncio.create_task(
            self._run(repo, url, ref, state), name=f"download-{repo}-{ref}"
        )
        return state

    async def _run(self, repo: str, url: str, ref: str, state: Download) -> None:
        target = self.target(repo, ref)
        try:
            if not _SAFE_REF.match(ref) or ".." in ref:
                raise ValueError(f"unsafe ref {ref!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
            try:
                await self._clone(url, ref, tmp / "checkout")
                os.replace(tmp / "checkout", target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            state.state, state.path, state.error = "ready", str(target), None
        except asyncio.CancelledError:
            state.state, state.error = "failed", "cancelled"
            raise
        except Exception as exc:  # any failure is reported through the status, never lost
            state.state, state.path, state.error = "failed", None, str(exc)[:1000]
            logger.warning("download of %s %s failed: %s", repo, ref, state.error)

    async def _clone(self, url: str, ref: str, dest: Path) -> None:
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
        proc = await asyncio.create_subprocess_exec(
            "git", "clone", "--quiet", "--depth", "1", "--branch", ref, "--", url, str(dest),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )  # fmt: skip
        try:
            async with asyncio.timeout(self.timeout):
                _, stderr = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise RuntimeError(f"git clone timed out after {self.timeout:.0f}s") from None
        if proc.returncode != 0:
            message = stderr.decode("utf-8", "replace").strip().splitlines()
            detail = message[-1] if message else f"exit code {proc.returncode}"
            detail = detail.replace(url, _without_credentials(url))
            raise RuntimeError(f"git clone of {_without_credentials(url)} at {ref} failed: {detail}")

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
