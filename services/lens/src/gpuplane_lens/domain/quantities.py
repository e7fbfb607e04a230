"""Kubernetes quantities as the overview needs them, tolerant of junk (a bad node never fails a read)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

_SUFFIXES: dict[str, Decimal | int] = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}


def parse_decimal(value: Any) -> Decimal:
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix) and suffix != text:
            try:
                return Decimal(text[: -len(suffix)]) * Decimal(_SUFFIXES[suffix])
            except InvalidOperation:
                return Decimal(0)
    try:
        return Decimal(text)
    except InvalidOperation:
        return Decimal(0)


def parse_count(value: Any) -> int:
    return max(int(parse_decimal(value)), 0)


def parse_memory_bytes(value: Any) -> int:
    return max(int(parse_decimal(value)), 0)


def parse_cpu(value: Any) -> float:
    return float(parse_decimal(value))
