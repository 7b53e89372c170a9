"""Pure decisions of a retention policy: which backups stay, where each partition's window starts.

No storage here: the planner (kbackup.prune.plan) reads the backups and hands these functions what
the manifests say, so the rules are tested on their own (tests/unit/test_prune_policy.py).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kbackup.core.durations import Duration
from kbackup.core.types import TopicPartitionKey
from kbackup.prune.settings import RetentionSettings

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: Each calendar rule: its name and the bucket a backup's time falls into.
_BUCKETS: tuple[tuple[str, Callable[[datetime], str]], ...] = (
    ("hourly", lambda moment: moment.strftime("%Y-%m-%d %H")),
    ("daily", lambda moment: moment.strftime("%Y-%m-%d")),
    ("weekly", lambda moment: "{}-W{:02d}".format(*moment.isocalendar()[:2])),
    ("monthly", lambda moment: moment.strftime("%Y-%m")),
)


def kept_backups(times: dict[str, datetime], policy: RetentionSettings) -> dict[str, list[str]]:
    """The backup ids ``policy``'s rules across backups keep, each with the rules that keep it.

    ``times``: each backup id's last committed increment. Like restic's ``forget``: newest first,
    ``keep_last`` the N newest, ``keep_within`` those within the duration of the newest, each
    calendar rule the newest backup of each of the last N hours/days/weeks/months that have one.
    Without any rule across backups every backup is kept.
    """
    if not policy.across_backups:
        return {backup_id: ["no rule across backups"] for backup_id in times}
    newest_first = sorted(times, key=lambda backup_id: (times[backup_id], backup_id), reverse=True)
    reasons: dict[str, list[str]] = {}
    if policy.keep_last:
        for backup_id in newest_first[: policy.keep_last]:
            reasons.setdefault(backup_id, []).append(f"last {policy.keep_last}")
    if policy.keep_within is not None and newest_first:
        newest = times[newest_first[0]].timestamp()
        span = Duration.seconds_in(policy.keep_within)
        for backup_id in newest_first:
            if newest - times[backup_id].timestamp() <= span:
                reasons.setdefault(backup_id, []).append(f"within {policy.keep_within}")
    for name, bucket_of in _BUCKETS:
        wanted = getattr(policy, f"keep_{name}")
        if not wanted:
            continue
        seen: set[str] = set()
        for backup_id in newest_first:
            bucket = bucket_of(times[backup_id].astimezone(UTC))
            if bucket in seen:
                continue
            if len(seen) == wanted:
                break
            seen.add(bucket)
            reasons.setdefault(backup_id, []).append(f"{name} {bucket}")
    return reasons


@dataclass(frozen=True)
class SegmentAge:
    """What the window rules need of one segment of one partition."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    size_bytes: int
    #: The newest record's time (ms); the segment goes only if all its records are old enough.
    max_timestamp_ms: int


def window_cuts(
    segments: Sequence[SegmentAge], policy: RetentionSettings, now: datetime
) -> dict[TopicPartitionKey, int]:
    """How many of each partition's oldest segments go: the longest run from the oldest whose
    records all lie before the cut time, then (``max_total_bytes``) the globally oldest remaining
    heads until the rest fits. Only a prefix of a partition ever goes, so what remains of it is
    one unbroken range that restores on its own.

    ``segments`` are the segments the backup holds now; the answer maps a partition to the
    number of its segments (in offset order) that go, for partitions that lose any.
    """
    by_partition: dict[TopicPartitionKey, list[SegmentAge]] = {}
    for segment in segments:
        by_partition.setdefault((segment.topic, segment.partition), []).append(segment)
    for items in by_partition.values():
        items.sort(key=lambda segment: segment.first_offset)
    cuts: dict[TopicPartitionKey, int] = {}
    cut_time = policy.cut_time(now)
    if cut_time is not None:
        # Whole milliseconds, exactly (a float product can land a hair above the cut).
        cut_ms = (cut_time - _EPOCH) // timedelta(milliseconds=1)
        for key, items in by_partition.items():
            count = 0
            while count < len(items) and items[count].max_timestamp_ms < cut_ms:
                count += 1
            if count:
                cuts[key] = count
    limit = policy.total_bytes_limit
    if limit is not None:
        remaining = sum(
            segment.size_bytes for key, items in by_partition.items() for segment in items[cuts.get(key, 0) :]
        )
        heads = [
            (items[cuts.get(key, 0)].max_timestamp_ms, key)
            for key, items in by_partition.items()
            if cuts.get(key, 0) < len(items)
        ]
        heapq.heapify(heads)
        while remaining > limit and heads:
            _, key = heapq.heappop(heads)
            items = by_partition[key]
            index = cuts.get(key, 0)
            remaining -= items[index].size_bytes
            cuts[key] = index + 1
            if index + 1 < len(items):
                heapq.heappush(heads, (items[index + 1].max_timestamp_ms, key))
    return cuts
