"""The ``target`` and ``restore`` sections of a config file."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from kbackup.core.config import KAFKA_INT64_MAX, KafkaConnection, StrictModel, check_patterns
from kbackup.core.sizes import SizeBytes
from kbackup.core.times import require_zone
from kbackup.format.record_match import RecordMatchSettings
from kbackup.restore.record_filters import FilterAction, parse_time_ms

#: Where restores keep their progress on the target (exactly-once mode); see docs/restore.md.
DEFAULT_PROGRESS_TOPIC = "kafka-backup.restore-progress"

#: What a restore does with target topics that use LogAppendTime (``restore.log_append_time``).
LogAppendTimePolicy = Literal["keep-original", "switch-after", "rewrite"]

#: Existing target topics that differ from the backup's topics (``restore.existing_topics``).
ExistingTopicsPolicy = Literal["validate", "apply", "fail"]

#: What a restore does to the target topics it writes before its first record (``restore.purge_target``).
PurgeTarget = Literal["none", "records", "topics"]
ProducerCompression = Literal["none", "lz4", "zstd", "snappy", "gzip"]
#: Chosen by measurement (docs/restore.md, "Where the time per record goes").
DEFAULT_PRODUCER_COMPRESSION: ProducerCompression = "lz4"

#: Producer properties the restore sets itself: its transactions and delivery guarantees need them.
RESTORE_PRODUCER_KEYS = frozenset({"transactional.id", "enable.idempotence", "acks"})

_TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


def check_topic_name(name: str) -> str:
    """Kafka's rule for topic names (letters, digits, '.', '_', '-'; at most 249)."""
    if not _TOPIC_NAME.match(name) or name in (".", ".."):
        raise ValueError(f"{name!r} is not a valid Kafka topic name (use A-Z a-z 0-9 . _ -, at most 249)")
    return name


class OffsetRange(StrictModel):
    """Source offsets to restore of one partition: ``start <= offset < end`` (either side open)."""

    start: int | None = Field(
        default=None, ge=0, le=KAFKA_INT64_MAX, description="First source offset restored; unset: the first."
    )
    end: int | None = Field(
        default=None,
        ge=0,
        le=KAFKA_INT64_MAX,
        description="Source offset where the range ends (exclusive).",
    )

    @model_validator(mode="after")
    def _ordered(self) -> OffsetRange:
        if self.start is not None and self.end is not None and self.end < self.start:
            raise ValueError(f"end {self.end} is below start {self.start}")
        return self


def _time_ms(value: Any) -> Any:
    """A ``time_window_*`` key: epoch ms or ISO-8601, within Kafka's signed 64-bit range."""
    if value is None or isinstance(value, bool):
        return value
    parsed = parse_time_ms(value)
    # Kafka timestamps are signed 64-bit milliseconds; larger numbers cannot select anything.
    if not -KAFKA_INT64_MAX <= parsed <= KAFKA_INT64_MAX:
        raise ValueError(f"{parsed} is outside Kafka's timestamp range (signed 64-bit milliseconds)")
    return parsed


def _check_window(start: int | None, end: int | None) -> None:
    if start is not None and end is not None and end <= start:
        raise ValueError(f"time_window_end ({end}) must be after time_window_start ({start})")


class FilterRuleSettings(RecordMatchSettings):
    """One rule of ``restore.filters``: which records of which topics are dropped or tombstoned."""

    action: FilterAction = Field(
        description=(
            "`drop`: the matched records are not produced. `tombstone`: they are produced with a null "
            "value, keeping their key, their own headers and the origin headers."
        ),
    )
    topics: list[str] = Field(
        default_factory=list,
        description="Source topics the rule applies to: full-match regular expressions. Empty: all.",
    )
    time_window_start: int | None = Field(
        default=None,
        description=(
            "The rule matches only records with a timestamp at or after this: epoch ms or ISO-8601 "
            "(no zone: UTC)."
        ),
    )
    time_window_end: int | None = Field(
        default=None,
        description="The rule matches only records with a timestamp before this (epoch ms or ISO-8601).",
    )

    @field_validator("time_window_start", "time_window_end", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return _time_ms(value)

    @field_validator("topics")
    @classmethod
    def _patterns(cls, patterns: list[str]) -> list[str]:
        return check_patterns(patterns)

    @model_validator(mode="after")
    def _matches_something(self) -> FilterRuleSettings:
        _check_window(self.time_window_start, self.time_window_end)
        if self.is_empty() and self.time_window_start is None and self.time_window_end is None:
            raise ValueError(
                f"a {self.action} rule needs keys, keys_file, headers or a time window "
                "(restore.topics chooses whole topics)"
            )
        return self

    def applies_to(self, source_topic: str) -> bool:
        return not self.topics or any(re.fullmatch(pattern, source_topic) for pattern in self.topics)


class RestoreSettings(StrictModel):
    """How a backup is replayed (keys follow the seed tool's ``restore:`` section).

    Per-topic settings (``partitions``, ``partition_mapping``, ``offset_ranges``,
    ``target_partitions``, ``repartition`` as a list) are keyed by the *source*
    topic name, as the backup knows it, whatever ``topic_mapping`` renames it to.
    """

    include_original_offset_header: bool | None = Field(
        default=None,
        description=(
            "Stamp `x-kafka-backup-*` origin headers on every restored record. Unset: as the backup "
            "says, `backup.include_offset_headers` of its newest increment (true for backups that did "
            "not record it). `three-phase-restore` and `drill` refuse to run with them off."
        ),
    )
    topic_mapping: dict[str, str] = Field(
        default_factory=dict, description="Rename topics: `{source_topic: target_topic}`."
    )
    create_topics: bool = Field(
        default=True,
        description="Create target topics that do not exist (with the source's partition count and configs).",
    )
    copy_topic_configs: bool = Field(
        default=True,
        description="Give created topics the source topic's configs (those that were not broker defaults).",
    )
    exclude_topic_configs: list[str] = Field(
        default_factory=list,
        description="Topic configs never copied to created topics (besides those Kafka 4 no longer knows).",
    )
    replication_factor: int | None = Field(
        default=None,
        ge=1,
        le=32,
        description="Replication factor of created topics; unset: the target's default.",
    )
    log_append_time: LogAppendTimePolicy = Field(
        default="keep-original",
        description=(
            "Target topics that would use `message.timestamp.type: LogAppendTime` (copied from the "
            "source, or the target's default), where the broker would stamp every restored record with "
            "the restore time. `keep-original`: create them as CreateTime, so every record keeps its "
            "original timestamp, and refuse an existing LogAppendTime topic. `switch-after`: the same, "
            "then switch them to LogAppendTime once their records are restored (records produced later "
            "get the broker's time). `rewrite`: keep LogAppendTime and let the broker rewrite the "
            "timestamps (the original stays in `x-kafka-backup-timestamp`)."
        ),
    )
    existing_topics: ExistingTopicsPolicy = Field(
        default="validate",
        description=(
            "Target topics that already exist and whose configs (those set on the topic, compared "
            "with the backup's after `exclude_topic_configs`) or partition count differ from the "
            "backup's. `validate`: warn about each difference and restore into the topic as it is. "
            "`apply`: before the first record, set the backup's configs on it and add partitions up "
            "to the backup's count (a count above it cannot be lowered, and `message.timestamp.type` "
            "stays with `log_append_time`). `fail`: stop before anything is written, naming the "
            "topics and their differences."
        ),
    )

    topics: list[str] = Field(
        default_factory=list,
        description=(
            "Source topics to restore: full-match regular expressions "
            "(a plain name matches itself). Empty: all."
        ),
    )
    partitions: dict[str, list[int]] = Field(
        default_factory=dict,
        description="Source partitions to restore per source topic (others of that topic are skipped).",
    )
    partition_mapping: dict[str, dict[int, int]] = Field(
        default_factory=dict,
        description=(
            "Explicit routing `{source_topic: {source_partition: target_partition}}`; unlisted "
            "partitions keep their number."
        ),
    )
    repartition: bool | list[str] = Field(
        default=False,
        description=(
            "Repartition by key (Kafka's murmur2) where source and target partition counts differ: "
            "true for every topic, or a list of source topics."
        ),
    )
    target_partitions: dict[str, int] = Field(
        default_factory=dict,
        description=(
            "Partition count of topics the restore creates, per source topic (default: the source's)."
        ),
    )
    time_window_start: int | None = Field(
        default=None,
        description="Only records with a timestamp at or after this: epoch ms or ISO-8601 (no zone: UTC).",
    )
    time_window_end: int | None = Field(
        default=None,
        description="Only records with a timestamp before this: epoch ms or ISO-8601 (no zone: UTC).",
    )
    as_of: datetime | None = Field(
        default=None,
        description=(
            "Restore the cluster as it was at this time (ISO 8601 with its zone, `2026-11-27T13:59:00Z`): "
            "the records stamped at or before it; with `three-phase-restore` the groups at their "
            "positions of then too (`offset_reset.as_of`). Not with `time_window_end`."
        ),
    )
    offset_ranges: dict[str, dict[int, OffsetRange]] = Field(
        default_factory=dict,
        description="Source offset ranges `{source_topic: {partition: {start, end}}}` (end exclusive).",
    )
    filters: list[FilterRuleSettings] = Field(
        default_factory=list,
        description=(
            "Rules that drop records of the selection, or restore them as tombstones, by key (`keys`, "
            "`keys_file`: text, `hex:`, `base64:` or `sha256:` entries), by header value (`headers`) "
            'and/or by time window, per topic or for all (docs/restore.md, "Filters"). Keys are never '
            "printed."
        ),
    )

    exactly_once: bool | Literal["auto"] = Field(
        default="auto",
        description=(
            "Records and progress committed together in Kafka transactions on the target. `auto`: when "
            "the target can run transactions, else the idempotent mode (with a warning)."
        ),
    )
    transaction_max_records: int = Field(
        default=200_000, ge=1, description="A transaction is committed after this many records ..."
    )
    transaction_max_ms: int = Field(
        default=2_000, ge=10, description="... or this many milliseconds, whichever comes first."
    )
    progress_topic: str = Field(
        default=DEFAULT_PROGRESS_TOPIC,
        description="Compacted topic on the target holding each restore's progress (exactly-once mode).",
    )
    verify_checksums: bool = Field(
        default=True,
        description=(
            "Check every selected segment's SHA-256 before the first record is produced (reads the "
            "selection twice; off: each segment is still checked before its records are produced)."
        ),
    )
    timeout_secs: float = Field(
        default=120,
        gt=0,
        le=3600,
        description=(
            "Seconds to wait for committed progress, a "
            "transaction coordinator, or delivery of the last records."
        ),
    )
    compression: ProducerCompression = Field(
        default=DEFAULT_PRODUCER_COMPRESSION,
        description=(
            "Compression of the batches the restore produces (the producer's `compression.type`; "
            "`producer_properties` goes over it). CPU against bytes on the wire and on the target's "
            'disks: measured in docs/restore.md, "Where the time per record goes".'
        ),
    )
    producer_properties: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "librdkafka properties for the restore's producer, over kafka-backup's throughput defaults."
        ),
    )
    max_bytes_per_second: SizeBytes | None = Field(
        default=None,
        description=(
            "Rate limit of the produce: bytes of keys and values a second, a number or a size "
            "(`50MiB`, `200MB`); unset: no limit. On the Spark engine it is split evenly over the "
            'tasks that run at once (docs/restore.md, "Rate limits").'
        ),
    )
    workers: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        default="auto",
        description=(
            "Worker processes of the local engine, each restoring one source partition at a time with "
            "its own producer. `auto`: one per two cores, no more than the source partitions, and 1 (this "
            'process) for a restore under 100,000 records (docs/restore.md, "Workers").'
        ),
    )
    max_records_per_second: int | None = Field(
        default=None,
        ge=1,
        description="Rate limit of the produce in records a second (with the byte limit: both hold).",
    )
    purge_target: PurgeTarget = Field(
        default="none",
        description=(
            "Before the first record, empty the existing target topics the restore writes. `records`: "
            "delete their records up to each partition's end offset (DeleteRecords). `topics`: "
            "delete each topic and create it again as the restore creates a missing one (the "
            "backup's configs and partition count). Done once per restore: a rerun that continues "
            'it does not purge again (docs/restore.md, "Purging the target").'
        ),
    )
    force_purge: bool = Field(
        default=False,
        description="Purge even while a consumer group has active members on a purged topic.",
    )

    @field_validator("time_window_start", "time_window_end", mode="before")
    @classmethod
    def _time(cls, value: Any) -> Any:
        return _time_ms(value)

    @field_validator("topic_mapping")
    @classmethod
    def _target_names(cls, mapping: dict[str, str]) -> dict[str, str]:
        for target in mapping.values():
            check_topic_name(target)
        return mapping

    @field_validator("progress_topic")
    @classmethod
    def _progress_name(cls, name: str) -> str:
        return check_topic_name(name)

    @field_validator("topics")
    @classmethod
    def _patterns(cls, patterns: list[str]) -> list[str]:
        return check_patterns(patterns)

    @field_validator("partitions")
    @classmethod
    def _partition_lists(cls, value: dict[str, list[int]]) -> dict[str, list[int]]:
        for topic, partitions in value.items():
            if not partitions or any(p < 0 for p in partitions):
                raise ValueError(f"{topic}: expected a non-empty list of partition numbers >= 0")
        return value

    @field_validator("partition_mapping")
    @classmethod
    def _partition_maps(cls, value: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
        for topic, mapping in value.items():
            if any(p < 0 or q < 0 for p, q in mapping.items()):
                raise ValueError(f"{topic}: partition numbers must be >= 0")
        return value

    @field_validator("target_partitions")
    @classmethod
    def _counts(cls, value: dict[str, int]) -> dict[str, int]:
        for topic, count in value.items():
            if count < 1:
                raise ValueError(f"{topic}: a topic needs at least 1 partition")
        return value

    @field_validator("as_of")
    @classmethod
    def _zoned(cls, value: datetime | None) -> datetime | None:
        return require_zone(value)

    @model_validator(mode="after")
    def _window(self) -> RestoreSettings:
        if self.as_of is not None and self.time_window_end is not None:
            raise ValueError("as_of and time_window_end both end the records restored: give one of them")
        _check_window(self.time_window_start, self.time_end)
        return self

    @property
    def time_end(self) -> int | None:
        """Records are restored if stamped before this (epoch ms): ``time_window_end``, or the
        millisecond after ``as_of`` (a record stamped at ``as_of`` itself is restored)."""
        if self.as_of is not None:
            return math.floor(self.as_of.timestamp() * 1000) + 1
        return self.time_window_end

    def repartitions(self, source_topic: str) -> bool:
        if isinstance(self.repartition, bool):
            return self.repartition
        return source_topic in self.repartition


TargetSettings = KafkaConnection
