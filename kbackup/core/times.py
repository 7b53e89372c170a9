"""Times as kafka-backup writes and reads them: ISO 8601 in UTC, ending in ``Z``.

Every manifest, lease, progress file, log line and report writes its times with :func:`iso_utc`,
so the text is the same everywhere (``2026-11-22T03:15:00.123Z``: milliseconds unless a caller
asks for another precision). Reading needs no helper of ours: since Python 3.11
``datetime.fromisoformat`` reads a ``Z``; :func:`parse_iso` only adds that a time written
without a zone is in UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

#: The precisions of ``datetime.isoformat`` the project writes ("auto": seconds, or microseconds if any).
TimeSpec = Literal["auto", "seconds", "milliseconds"]


def iso_utc(moment: datetime | float, timespec: TimeSpec = "milliseconds") -> str:
    """``moment`` (an aware datetime, or seconds since the epoch) in UTC, ending in ``Z``."""
    if not isinstance(moment, datetime):
        moment = datetime.fromtimestamp(moment, UTC)
    return moment.astimezone(UTC).isoformat(timespec=timespec).replace("+00:00", "Z")


def iso_of_ms(millis: int) -> str:
    """Epoch milliseconds (a Kafka timestamp) as ``iso_utc`` writes them."""
    return iso_utc(millis / 1000)


def utc_now_iso() -> str:
    """Now, as ``iso_utc`` writes it."""
    return iso_utc(datetime.now(UTC))


def parse_iso(text: str) -> datetime:
    """An ISO 8601 time (``Z`` or an offset); one written without a zone is taken as UTC."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def require_zone(moment: datetime | None) -> datetime | None:
    """A point in time an operator names (``as_of``): refused without its zone, not taken as UTC,
    since a wrong guess moves a recovery by hours. Raises ``ValueError`` (a config validator's)."""
    if moment is not None and moment.tzinfo is None:
        raise ValueError(
            f"{moment.isoformat()} has no time zone: write it with Z (UTC) or an offset such as +01:00"
        )
    return moment
