"""Kubeconfig encryption at rest: Fernet with a key ring kept outside the database.

The first key encrypts; every key decrypts, so rotation is "put a new key first,
restart" — `Store.rotate_keys` then re-encrypts every row with it and the old key
can be dropped afterwards.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from gpuplane_core.errors import InternalError


class KeyRing:
    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise ValueError("at least one encryption key is required")
        try:
            self._fernets = [Fernet(k.strip().encode()) for k in keys]
        except ValueError:
            raise ValueError("encryption keys must be url-safe base64 Fernet keys (32 bytes)") from None
        self._multi = MultiFernet(self._fernets)
        self.size = len(self._fernets)

    def encrypt(self, plaintext: str) -> bytes:
        return self._multi.encrypt(plaintext.encode("utf-8"))

    def decrypt(self, token: bytes) -> str:
        try:
            return self._multi.decrypt(bytes(token)).decode("utf-8")
        except InvalidToken:
            raise InternalError("stored kubeconfig cannot be decrypted with the configured keys") from None

    def rotate(self, token: bytes) -> bytes:
        """Re-encrypt ``token`` under the primary key (no-op in effect if it already is)."""
        try:
            return self._multi.rotate(bytes(token))
        except InvalidToken:
            raise InternalError("stored kubeconfig cannot be decrypted with the configured keys") from None

    def is_primary(self, token: bytes) -> bool:
        try:
            self._fernets[0].decrypt(bytes(token))
        except InvalidToken:
            return False
        return True


def load_or_create_key_file(path: Path) -> list[str]:
    """Keys from ``path`` (one per line, newest first); a fresh key is written 0600 when missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        key = Fernet.generate_key().decode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
        return [key]
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise PermissionError(f"key file {path} must not be readable by group or others (mode {mode:o})")
    return [
        line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]
