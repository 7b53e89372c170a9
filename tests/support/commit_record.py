"""A group's commits as a test made them while ``backup --follow`` read the groups: the oracle of
the point-in-time tests (tests/integration/test_point_in_time_reset.py, test_drill_as_of.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

#: The follow run's ``backup.group_snapshot_interval`` in those tests.
INTERVAL_SECS = 0.5
#: A reading's own time (a listing and an offsets request) and the copy loop's poll (at most
#: 0.5 s), on a loaded machine.
READING_SECS = 4.0


@dataclass(frozen=True)
class Commit:
    sent: float
    acknowledged: float
    offset: int  # the same on both partitions


@dataclass(frozen=True)
class History:
    """A follow backup's folder, and the commits of one group of one topic while it ran."""

    store: Path
    topic: str
    group: str
    commits: list[Commit]


def check_position_of(history: History, at: float, offset: int) -> None:
    """``offset`` is a position the group had committed by ``at``, and no older than the precision."""
    committed = {c.offset: c for c in history.commits}
    assert offset in committed, offset
    assert committed[offset].sent <= at, "a position committed after the moment asked for"
    settled = [c.offset for c in history.commits if c.acknowledged <= at - INTERVAL_SECS - READING_SECS]
    assert offset >= max(settled, default=0), (offset, settled)
