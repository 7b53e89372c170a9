"""Durations written the way operators write them: ``90s``, ``15m``, ``2h``, ``1d``, ``1h30m``."""

from __future__ import annotations

import re

#: Seconds per unit. Months and years are left out: their length varies.
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: Longer durations are refused: no policy needs them, and dates that far back do not exist.
MAX_SECONDS = 1000 * 365 * 86400
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> float:
    """Seconds in ``text``: one or more number-unit pairs (``1h30m``); a bare number is seconds.

    Raises ``ValueError`` naming the value for anything else, and for a duration of zero.
    """
    value = text.strip().lower()
    seconds: float
    if re.fullmatch(r"\d+(?:\.\d+)?", value):
        seconds = float(value)
    else:
        parts = _PART.findall(value)
        if not value or "".join(number + unit for number, unit in parts) != value:
            raise ValueError(
                f"{text!r} is not a duration: write a number and a unit s, m, h, d or w, "
                "e.g. 15m, 2h, 1d, 1h30m"
            )
        seconds = sum(float(number) * UNIT_SECONDS[unit] for number, unit in parts)
    if seconds <= 0:
        raise ValueError(f"{text!r}: a duration must be above zero")
    if not seconds <= MAX_SECONDS:
        raise ValueError(f"{text!r}: a duration must be at most 1000 years")
    return seconds


def format_duration(seconds: float) -> str:
    """A short human reading of a duration: ``0.5s``, ``45s``, ``4m 12s``, ``2h 3m``, ``3d 4h``."""
    if seconds < 10:
        # Sub-second limits are for tests and tight checks: "0s over --max-age 0s" would say nothing.
        return f"{max(0.0, seconds):.1f}".rstrip("0").rstrip(".") + "s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes}m {secs}s" if secs else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"
