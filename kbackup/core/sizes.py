"""Sizes written the way operators write them: ``500MB``, ``10GiB``, ``1.5TB``, or a number of bytes."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?i?b?)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4, "p": 1000**5, "pb": 1000**5,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
    "ti": 1024**4, "tib": 1024**4, "pi": 1024**5, "pib": 1024**5,
}  # fmt: skip


def parse_size(text: str | int) -> int:
    """Bytes in ``text``: a number with an optional unit (``500MB``, ``10GiB``, ``1.5TB``), exact
    (decimal arithmetic: ``1.001KB`` is 1001 bytes); a fraction of a byte is rounded down."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a size: write a number of bytes or a number and a unit")
    if isinstance(text, int):
        if text <= 0:
            raise ValueError(f"{text}: a size must be above zero")
        return text
    match = _SIZE.match(text)
    unit = (match.group(2) or "").lower() if match else None
    if match is None or unit not in _SIZE_UNITS or len(match.group(1)) > 40:
        raise ValueError(f"{text!r} is not a size: write a number and a unit, e.g. 500MB, 10GiB, 2TB")
    size = int(Decimal(match.group(1)) * _SIZE_UNITS[unit])
    if size <= 0:
        raise ValueError(f"{text!r}: a size must be above zero")
    return size


def _size_or_none(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, str | int):
        raise ValueError(f"{value!r} is not a size: write a number of bytes or a number and a unit")
    return parse_size(value)


#: A config field of bytes that takes ``50MiB`` as well as ``52428800``.
SizeBytes = Annotated[int, BeforeValidator(_size_or_none)]
