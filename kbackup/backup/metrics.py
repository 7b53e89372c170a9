"""The metrics of a backup run (docs/observability.md, "Metrics of a backup"): what it copied,
how far behind the source it is, the increments it committed; served and written by
kbackup.core.metrics, with the health and the request counts every run has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Unpack

from kbackup import __version__
from kbackup.core.metrics import MetricDeclaration, RunMetrics, RunTiming, declare_metrics

#: Seconds an increment commit may take, from a few segments on a local disk to a large upload.
COMMIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

#: A backup's own metrics, in the order of the exposition.
BACKUP_METRICS = {
    "info": MetricDeclaration(
        "kafka_backup", "info", "The backup this process runs: its id, mode and kafka-backup version."
    ),
    "records": MetricDeclaration(
        "kafka_backup_records", "counter", "Records copied from the source into segments.", ("topic",)
    ),
    "segments": MetricDeclaration(
        "kafka_backup_segments", "counter", "Segment files written to storage.", ("topic",)
    ),
    "segment_bytes": MetricDeclaration(
        "kafka_backup_segment_bytes",
        "counter",
        "Bytes of segment files written to storage (compressed Parquet).",
        ("topic",),
    ),
    "lag_records": MetricDeclaration(
        "kafka_backup_lag_records",
        "gauge",
        "Records on the source not yet in a committed increment: the live end offset minus the "
        "committed end offset.",
        ("topic", "partition"),
    ),
    "lag_seconds": MetricDeclaration(
        "kafka_backup_lag_seconds",
        "gauge",
        "Age of the oldest record not yet in a committed increment (0: none).",
        ("topic", "partition"),
    ),
    "increments": MetricDeclaration(
        "kafka_backup_increments", "counter", "Increments this process committed."
    ),
    "last_increment": MetricDeclaration(
        "kafka_backup_last_increment_timestamp_seconds",
        "gauge",
        "When the backup's newest increment was committed (Unix time), by this run or an earlier one.",
    ),
    "commit_duration": MetricDeclaration(
        "kafka_backup_increment_commit_duration_seconds",
        "histogram",
        "Time to commit an increment: finish and upload its open segments, write its manifest.",
        buckets=COMMIT_BUCKETS,
    ),
    "rate_limit": MetricDeclaration(
        "kafka_backup_rate_limit_bytes_per_second",
        "gauge",
        "backup.max_bytes_per_second as set for this run (absent: no limit).",
    ),
    "throttled": MetricDeclaration(
        "kafka_backup_throttled_seconds",
        "counter",
        "Seconds the copy waited on its rate limit (backup.max_bytes_per_second).",
    ),
}


@dataclass
class _PartitionLag:
    records: Any
    seconds: Any
    #: When records were first seen waiting with none of them read (monotonic), for their age.
    behind_since: float | None = None


class BackupMetrics(RunMetrics):
    """The metrics of one ``backup`` run (one-shot or ``--follow``), and its health."""

    def __init__(self, backup_id: str, *, mode: str, **timing: Unpack[RunTiming]) -> None:
        super().__init__(backup_id, cluster="source", **timing)
        declared = declare_metrics(self.registry, BACKUP_METRICS)
        declared["info"].labels(backup_id).info({"mode": mode, "version": __version__})
        self._records = declared["records"]
        self._segments = declared["segments"]
        self._segment_bytes = declared["segment_bytes"]
        self._lag_records = declared["lag_records"]
        self._lag_seconds = declared["lag_seconds"]
        self._increments = declared["increments"].labels(backup_id)
        self._last_increment = declared["last_increment"]
        self._commit_duration = declared["commit_duration"].labels(backup_id)
        self._rate_limit = declared["rate_limit"]
        self._throttled = declared["throttled"].labels(backup_id)
        self._topic_records: dict[str, Any] = {}
        self._partitions: dict[tuple[str, int], _PartitionLag] = {}

    # -- copying (the consume loop and the upload thread) -------------------------------------------

    def records_copied(self, topic: str, count: int) -> None:
        """One batch of a topic's records went into segments."""
        counter = self._topic_records.get(topic)
        if counter is None:
            counter = self._topic_records[topic] = self._records.labels(self.backup_id, topic)
        counter.inc(count)

    def rate_limited(self, bytes_per_second: float) -> None:
        """The run's rate limit, set once before it copies."""
        self._rate_limit.labels(self.backup_id).set(bytes_per_second)

    def throttled(self, seconds: float) -> None:
        """The copy waited ``seconds`` on its rate limit."""
        self._throttled.inc(seconds)

    def segment_written(self, topic: str, size_bytes: int) -> None:
        self._segments.labels(self.backup_id, topic).inc()
        self._segment_bytes.labels(self.backup_id, topic).inc(size_bytes)

    def partition_lag(
        self, topic: str, partition: int, *, records: int, oldest_timestamp_ms: int | None
    ) -> None:
        """``records`` not yet committed; ``oldest_timestamp_ms``: the first of them read (None: none)."""
        key = (topic, partition)
        lag = self._partitions.get(key)
        if lag is None:
            labels = (self.backup_id, topic, str(partition))
            lag = self._partitions[key] = _PartitionLag(
                self._lag_records.labels(*labels), self._lag_seconds.labels(*labels)
            )
        lag.records.set(records)
        if records <= 0:
            lag.behind_since = None
            lag.seconds.set(0)
        elif oldest_timestamp_ms is not None and oldest_timestamp_ms >= 0:
            lag.behind_since = None
            lag.seconds.set(max(0.0, self._wall_clock() - oldest_timestamp_ms / 1000))
        else:
            # Records wait but none has been read yet: their age is at least the time they were seen.
            now = self._clock()
            if lag.behind_since is None:
                lag.behind_since = now
            lag.seconds.set(now - lag.behind_since)

    def forget_partition(self, topic: str, partition: int) -> None:
        """A partition no longer backed up (its topic was deleted) leaves the exposition."""
        if self._partitions.pop((topic, partition), None) is not None:
            labels = (self.backup_id, topic, str(partition))
            self._lag_records.remove(*labels)
            self._lag_seconds.remove(*labels)

    # -- increments ----------------------------------------------------------------------------------

    def backup_loaded(self, last_increment_unix: float | None) -> None:
        """The backup's newest increment before this run, if it has one."""
        if last_increment_unix is not None:
            self._last_increment.labels(self.backup_id).set(last_increment_unix)

    def increment_committed(self, duration_secs: float) -> None:
        self._increments.inc()
        self._commit_duration.observe(duration_secs)
        self._last_increment.labels(self.backup_id).set(self._wall_clock())
        self.health.turned(progressed=True)
        self.health.storage_answered()
        self.after_checkpoint()

    # The copy loop reports its source's answers and errors under these names.

    def source_answered(self) -> None:
        self.cluster_answered()

    def source_error(self, kind: str) -> None:
        self.cluster_error(kind)
