"""What the bare client loops (``_client_floor``, ``_consumer_floor``) measure of their own span."""

from __future__ import annotations

import resource
from typing import Any


def cpu_seconds() -> float:
    """User and system CPU seconds of every thread of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def span_result(records: int, seconds: float, cpu: float) -> dict[str, Any]:
    """The one JSON line a loop prints: its records, its span's seconds and CPU, its peak RSS."""
    return {
        "records": records,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
