"""Kubernetes resource quantities (``500m``, ``32Gi``, ``1e3``) as exact ``Decimal`` values.

Grammar (a superset of the Kubernetes one: ``n`` and ``u`` are accepted too)::

    quantity ::= [+-] number [suffix | ("e" | "E") [+-] digits]
    number   ::= digits | digits "." [digits] | "." digits
    suffix   ::= n u m k M G T P E | Ki Mi Gi Ti Pi Ei

Values are kept exact (no float, no context rounding) so that comparisons of
capacity against requests never suffer from binary rounding. Garbage input
raises :class:`~gpuplane_core.errors.InvalidSpec`, which every API maps to a 400.

``format_quantity`` follows the Kubernetes canonical form: an integer mantissa
with the largest suffix that keeps it an integer, so ``1.5T`` is written
``1500G`` and ``0.5`` is ``500m``. Values finer than ``1n`` fall back to an
exponent (``15e-10``), as do huge ones whose zeros would not fit in 64 characters,
so ``parse_quantity(format_quantity(x)) == x`` for every value whose significant
digits fit in the 64-character limit.
"""

from __future__ import annotations

import math
import re
from decimal import Context, Decimal, Inexact, InvalidOperation, Overflow

from gpuplane_core.errors import InvalidSpec

QuantityLike = str | int | float | Decimal

MAX_QUANTITY_CHARS = 64
"""Longer strings are rejected outright: no real quantity is that long."""

MAX_MAGNITUDE = 128
"""Largest accepted |exponent| of the value, so ``1e999999999`` cannot make ``to_bytes`` build a huge int."""

_DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: dict[str, int] = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_BINARY_BY_POWER = {power: suffix for suffix, power in _BINARY_SUFFIXES.items()}

# Binary suffixes come first so "Mi" is not read as "M" followed by garbage.
_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE](?P<exp>[+-]?[0-9]+))?"
)

# Enough precision for 63 digits times 1024**6; Inexact is trapped so nothing is silently rounded.
_EXACT = Context(prec=200, Emax=10**6, Emin=-(10**6), traps=[InvalidOperation, Inexact, Overflow])

_HINT = (
    "expected a number with an optional suffix (n u m k M G T P E Ki Mi Gi Ti Pi Ei) "
    "or exponent, e.g. 500m, 32Gi, 1e3"
)


def _invalid(value: object, why: str) -> InvalidSpec:
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return InvalidSpec(f"invalid quantity {shown}: {why}")


def parse_quantity(value: QuantityLike) -> Decimal:
    """Parse a Kubernetes quantity exactly. Negative values are allowed, as in Kubernetes."""
    if isinstance(value, bool):
        raise _invalid(value, "booleans are not quantities")
    if isinstance(value, int):
        result = Decimal(value)
    elif isinstance(value, float):
        # repr() is the shortest round-tripping string: 0.1 stays 0.1, not 0.1000000000000000055...
        result = Decimal(repr(value))
    elif isinstance(value, Decimal):
        result = value
    elif isinstance(value, str):
        result = _parse_str(value)
    else:
        raise _invalid(value, f"unsupported type {type(value).__name__}")
    if not result.is_finite():
        raise _invalid(value, "not a finite number")
    if result and abs(result.adjusted()) > MAX_MAGNITUDE:
        raise _invalid(value, "out of range")
    return result


def _parse_str(text: str) -> Decimal:
    if not text:
        raise _invalid(text, "empty")
    if len(text) > MAX_QUANTITY_CHARS:
        raise _invalid(text, f"longer than {MAX_QUANTITY_CHARS} characters")
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise _invalid(text, _HINT)
    number = match["sign"] + match["number"]
    suffix, exp = match["suffix"], match["exp"]
    if exp is not None:
        if len(exp.lstrip("+-")) > 4:
            raise _invalid(text, "exponent out of range")
        return Decimal(f"{number}e{exp}")
    if suffix in _BINARY_SUFFIXES:
        return _EXACT.multiply(Decimal(number), Decimal(1024 ** _BINARY_SUFFIXES[suffix]))
    return Decimal(f"{number}e{_DECIMAL_SUFFIXES[suffix or '']}")


def parse_non_negative_quantity(value: QuantityLike) -> Decimal:
    """Like :func:`parse_quantity` but rejects negative values (requests, limits, capacities)."""
    result = parse_quantity(value)
    if result < 0:
        raise _invalid(value, "must not be negative")
    return result


def _integer_and_exponent(value: Decimal) -> tuple[int, int]:
    """Split ``value`` into ``(c, e)`` with ``value == c * 10**e`` and ``c`` not a multiple of 10."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite values only
    coefficient = int("".join(map(str, digits))) if digits else 0
    if coefficient == 0:
        return 0, 0
    while coefficient % 10 == 0:
        coefficient //= 10
        exponent += 1
    return (-coefficient if sign else coefficient), exponent


def format_quantity(value: Decimal | int, binary: bool = False) -> str:
    """Format ``value`` in Kubernetes canonical form: integer mantissa, largest possible suffix.

    Examples: ``0.5 -> "500m"``, ``1500000000000 -> "1500G"``, ``34359738368 -> "34359738368"``
    but with ``binary=True`` ``-> "32Gi"``. With ``binary=True`` a non-integer, or an integer
    that is not a multiple of 1024, falls back to the decimal form (as Kubernetes does).
    """
    value = Decimal(value)
    if not value.is_finite():
        raise ValueError(f"cannot format non-finite quantity {value}")
    if binary and value == value.to_integral_value(context=_EXACT) and value:
        mantissa, power = int(value), 0
        while power < 6 and mantissa % 1024 == 0:
            mantissa //= 1024
            power += 1
        if power:
            return f"{mantissa}{_BINARY_BY_POWER[power]}"
    coefficient, exponent = _integer_and_exponent(value)
    if coefficient == 0:
        return "0"
    scientific = f"{coefficient}e{exponent}"
    if exponent < -9:
        return scientific
    suffix, scale = max(((s, p) for s, p in _DECIMAL_SUFFIXES.items() if p <= exponent), key=lambda sp: sp[1])
    canonical = f"{coefficient * 10 ** (exponent - scale)}{suffix}"
    # Very large values (e.g. 1e100) would need a long run of zeros; the exponent form stays parseable.
    return canonical if len(canonical) <= MAX_QUANTITY_CHARS else scientific


def to_bytes(value: QuantityLike) -> int:
    """Whole bytes, rounded up (``1.5`` -> ``2``), as Kubernetes does for memory."""
    return math.ceil(parse_quantity(value))


def to_milli(value: QuantityLike) -> int:
    """Milli-units rounded up (``"0.1"`` -> ``100``, ``"1n"`` -> ``1``), as Kubernetes ``MilliValue``."""
    return math.ceil(parse_quantity(value).scaleb(3, context=_EXACT))
