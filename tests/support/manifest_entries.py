"""Manifest entries built by hand for tests of what reads them."""

from __future__ import annotations

from kbackup.format.manifest import SegmentEntry


def segment(first: int, last: int, low: int, high: int) -> SegmentEntry:
    return SegmentEntry(
        key=f"data/t/0/{first:020d}-r.parquet",
        topic="t",
        partition=0,
        first_offset=first,
        last_offset=last,
        record_count=last - first + 1,
        size_bytes=1,
        sha256="0" * 64,
        min_timestamp=low,
        max_timestamp=high,
    )
