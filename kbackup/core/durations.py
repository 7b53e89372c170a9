"""Durations written the way operators write them: ``90s``, ``15m``, ``2h``, ``1d``, ``1h30m``."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

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


class Duration(str):
    """A duration as it was written (``7d``: kept as text, so a retention record says what was
    asked for), parsed once, when a config is validated: ``seconds`` says how long it is."""

    seconds: float

    def __new__(cls, text: str) -> Duration:
        seconds = parse_duration(text)
        duration = super().__new__(cls, text)
        duration.seconds = seconds
        return duration

    @staticmethod
    def seconds_in(text: str) -> float:
        """The seconds of a ``DurationText`` field: read from the validated value, parsed only if
        it is a plain string (a default that was never validated)."""
        return text.seconds if isinstance(text, Duration) else parse_duration(text)


#: A config field holding a duration: a string for its callers and its JSON schema (so a model
#: still takes ``"7d"``), checked and parsed once at validation with parse_duration's message.
DurationText = Annotated[str, AfterValidator(Duration)]


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
