"""What a backup run reports: each increment it committed, and what it could not back up in full."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CommittedIncrement:
    increment: int
    run_id: str
    manifest_key: str
    records: int
    bytes: int
    segments: int
    #: Groups in the increment's snapshot (None: the increment has no snapshot).
    consumer_groups: int | None
    #: The run stopped before the end offsets it read; the increment ends where it got to.
    partial: bool
    #: Per kind of cluster metadata (acls, scram_users, broker_configs): status and count.
    cluster_metadata: dict[str, dict[str, str | int]] | None = None
    #: Readings of the groups in its group history (None: the run keeps no group history).
    group_history_readings: int | None = None


@dataclass
class BackupSummary:
    backup_id: str
    storage_url: str
    source_cluster_id: str
    mode: str
    topics: list[str] = field(default_factory=list)
    partitions: int = 0
    increments: list[CommittedIncrement] = field(default_factory=list)
    seconds: float = 0.0
    #: A snapshot run was interrupted (SIGINT/SIGTERM) before it reached its end offsets.
    stopped_early: bool = False
    #: The last checkpoint found nothing new since this increment, and committed none.
    nothing_new_since: int | None = None
    #: What this run did not back up in full (a dropped topic, group offsets beyond the data): the
    #: run still commits what it copied, and then exits with IncompleteBackupError's code.
    problems: list[str] = field(default_factory=list)
    #: What this run did back up but could not back up all of, which does not make it incomplete
    #: (a kind of cluster metadata its principal may not read): said once each, exit code 0.
    warnings: list[str] = field(default_factory=list)
    #: Seconds the copy waited on ``backup.max_bytes_per_second`` (on Spark: the tasks' waits added up).
    throttled_secs: float = 0.0

    @property
    def records(self) -> int:
        return sum(item.records for item in self.increments)

    @property
    def bytes(self) -> int:
        return sum(item.bytes for item in self.increments)

    @property
    def segments(self) -> int:
        return sum(item.segments for item in self.increments)

    def to_dict(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "storage": self.storage_url,
            "source_cluster_id": self.source_cluster_id,
            "mode": self.mode,
            "topics": self.topics,
            "partitions": self.partitions,
            "increments": [item.__dict__ for item in self.increments],
            "records": self.records,
            "bytes": self.bytes,
            "segments": self.segments,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records / self.seconds, 1) if self.seconds > 0 else None,
            "stopped_early": self.stopped_early,
            "nothing_new_since": self.nothing_new_since,
            "problems": self.problems,
            "warnings": self.warnings,
            "throttled_seconds": round(self.throttled_secs, 3),
        }
