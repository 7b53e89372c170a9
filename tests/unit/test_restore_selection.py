"""Time windows and offset ranges: parsing, and which segments and records they select."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kbackup.restore.record_filters import RecordFilter, parse_time_ms
from tests.support.manifest_entries import segment


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1763780100000, 1763780100000),
        ("1763780100000", 1763780100000),
        ("2025-11-22T03:15:00Z", 1763781300000),
        ("2025-11-22T03:15:00.250+00:00", 1763781300250),
        ("2025-11-22T04:15:00+01:00", 1763781300000),
        ("2025-11-22T03:15:00", 1763781300000),  # no zone: UTC
        ("2025-11-22", 1763769600000),
    ],
)
def test_parse_time_ms(value: object, expected: int) -> None:
    assert parse_time_ms(value) == expected


@pytest.mark.parametrize("value", ["yesterday", "2025-13-01T00:00:00Z", 1.5, None])
def test_parse_time_ms_rejects_what_is_not_a_time(value: object) -> None:
    with pytest.raises(ValueError, match="epoch milliseconds or an ISO-8601 time"):
        parse_time_ms(value)


def test_segment_overlap_and_inside_by_offsets_and_time() -> None:
    window = RecordFilter(100, 200, time_start=1000, time_end=2000)
    assert window.segment_overlaps(segment(150, 250, 1000, 1500))
    assert not window.segment_inside(segment(150, 250, 1000, 1500))
    assert window.segment_inside(segment(100, 199, 1000, 1999))
    assert not window.segment_overlaps(segment(0, 99, 1000, 1500))
    assert not window.segment_overlaps(segment(200, 300, 1000, 1500))
    assert not window.segment_overlaps(segment(100, 150, 0, 999))
    assert not window.segment_overlaps(segment(100, 150, 2000, 3000))
    assert not window.segment_inside(segment(100, 150, 999, 1500))


def test_mask_selects_offsets_and_window_and_is_none_when_all_pass() -> None:
    offsets = pa.array([10, 11, 15, 20, 21], pa.int64())
    times = pa.array([5, 50, 10, 7, 100], pa.int64())
    every = RecordFilter(0, 100)
    assert every.mask(offsets, times, 0) is None
    assert every.count(offsets, times) == 5
    selected = RecordFilter(11, 21, time_start=7, time_end=60)
    mask = selected.mask(offsets, times, 11)
    assert mask is not None
    assert mask.to_pylist() == [False, True, True, True, False]
    # A resumed restore starts above the range's start.
    assert selected.count(offsets, times, offset_start=16) == 1
