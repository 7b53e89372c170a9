"""What a restore run did: records and bytes per topic, mode, transactions, and what earlier runs did."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kbackup.core.throttle import throttled_text
from kbackup.restore.compaction import CompactionFacts


@dataclass
class TopicTotals:
    source_topic: str
    target_topic: str
    #: Records produced (and, in the exactly-once mode, committed) by this run.
    records: int = 0
    #: Key and value bytes of those records.
    bytes: int = 0
    #: Restored by earlier runs of the same restore (exactly-once progress), if known.
    earlier: int | None = 0
    #: Selected records this run had to restore, if known (those the filter rules drop left out).
    expected: int | None = 0
    #: Selected records this run read that a rule of ``restore.filters`` dropped ...
    dropped: int = 0
    #: ... or restored as tombstones (counted in ``records`` too).
    tombstoned: int = 0


@dataclass
class RestoreSummary:
    restore_id: str
    backup_id: str
    mode: str
    target: str
    topics: list[TopicTotals]
    created_topics: list[str]
    transactions: int
    seconds: float
    #: The restore continued where an earlier run stopped.
    resumed: bool
    #: Records found already on the target and not produced again (idempotent resume).
    already_landed: int
    #: Records whose timestamp was <= 0, produced with the restore time instead.
    timestamps_not_kept: int
    warnings: list[str] = field(default_factory=list)
    verified: bool = False
    #: Per compacted target topic: records the target's cleaner may remove, and why.
    compaction: list[CompactionFacts] = field(default_factory=list)
    #: Topics set to LogAppendTime once their records were restored (``log_append_time: switch-after``).
    switched_to_log_append_time: list[str] = field(default_factory=list)
    #: What ``restore.existing_topics: apply`` changed on existing topics, a line per topic.
    existing_topics_changed: list[str] = field(default_factory=list)
    #: Seconds the produce waited on its rate limits (on Spark: the tasks' waits added up).
    throttled_secs: float = 0.0
    #: What ``restore.purge_target`` purged before the first record, a line per topic.
    purged: list[str] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(topic.records for topic in self.topics)

    @property
    def bytes(self) -> int:
        return sum(topic.bytes for topic in self.topics)

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "restore_id": self.restore_id,
            "backup_id": self.backup_id,
            "mode": self.mode,
            "target": self.target,
            "records": self.records,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records_per_second, 1),
            "transactions": self.transactions,
            "resumed": self.resumed,
            "already_landed": self.already_landed,
            "timestamps_not_kept": self.timestamps_not_kept,
            "verified": self.verified,
            "created_topics": self.created_topics,
            "topics": [
                {
                    "source_topic": t.source_topic,
                    "target_topic": t.target_topic,
                    "records": t.records,
                    "bytes": t.bytes,
                    "restored_by_earlier_runs": t.earlier,
                    "expected": t.expected,
                    "dropped_by_filters": t.dropped,
                    "tombstoned_by_filters": t.tombstoned,
                }
                for t in self.topics
            ],
            "compaction": [facts.to_dict() for facts in self.compaction],
            "switched_to_log_append_time": self.switched_to_log_append_time,
            "existing_topics_changed": self.existing_topics_changed,
            "throttled_seconds": round(self.throttled_secs, 3),
            "purged": self.purged,
            "warnings": self.warnings,
        }

    def lines(self) -> list[str]:
        lines = [
            f"restored {self.records:,} record(s) ({self.bytes / 1e6:,.1f} MB of keys and values) "
            f"in {self.seconds:,.1f}s, {self.records_per_second:,.0f} records/s, mode {self.mode}"
            + (f", {self.transactions} transaction(s)" if self.mode == "exactly-once" else ""),
        ]
        if self.resumed:
            lines.append(
                "  continued an earlier run of the same restore"
                + (
                    f" ({self.already_landed:,} record(s) found already on the target)"
                    if self.already_landed
                    else ""
                )
            )
        for topic in self.topics:
            earlier = f", {topic.earlier:,} by earlier runs" if topic.earlier else ""
            filtered = "".join(
                f", {count:,} {what} by restore.filters"
                for what, count in (("dropped", topic.dropped), ("tombstoned", topic.tombstoned))
                if count
            )
            lines.append(
                f"  {topic.source_topic} -> {topic.target_topic}: {topic.records:,} record(s)"
                + earlier
                + filtered
            )
        if self.created_topics:
            lines.append(f"  created topics: {', '.join(self.created_topics)}")
        for purged in self.purged:
            lines.append(f"  purged before the first record (restore.purge_target): {purged}")
        throttled = throttled_text(self.throttled_secs, "restore.max_bytes_per_second/max_records_per_second")
        if throttled is not None:
            lines.append(f"  {throttled}")
        for change in self.existing_topics_changed:
            lines.append(f"  changed to the backup's (restore.existing_topics: apply): {change}")
        if self.switched_to_log_append_time:
            lines.append(
                "  switched to LogAppendTime after the restore: "
                + ", ".join(self.switched_to_log_append_time)
            )
        for facts in self.compaction:
            lines.append(
                f"  {facts.topic} is compacted: the target's cleaner may remove {facts.may_remove:,} of the "
                f"{facts.records:,} record(s) restored ({facts.why})"
            )
        if self.timestamps_not_kept:
            lines.append(
                f"  {self.timestamps_not_kept:,} record(s) had no timestamp (<= 0) and got the restore time"
            )
        for warning in self.warnings:
            lines.append(f"  warning: {warning}")
        return lines
