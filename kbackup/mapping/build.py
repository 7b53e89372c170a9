"""Building an offset mapping: find the target partitions and their offsets, run the Spark job, check.

This is the library entry point behind ``show-offset-mapping`` (also run by spark-submit) and
phase 2 of the three-phase restore. It takes its own settings, never the whole config.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import (
    BackupIntegrityError,
    KafkaOperationError,
    KBackupError,
    NotFoundError,
    UsageError,
)
from kbackup.core.kafka import Admin, KafkaClients
from kbackup.core.logs import get_logger
from kbackup.core.progress import Progress
from kbackup.format.mapping_file import OffsetMapping, ScannedPartition, ScanStats
from kbackup.mapping.settings import MappingSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


log = get_logger("mapping")

CLIENT_ID = "kafka-backup-mapping"


@dataclass(frozen=True)
class ScanPlan:
    """The target partitions to scan and the offsets the scan covers, read before it starts."""

    target_cluster_id: str | None
    partitions: list[ScannedPartition]

    @property
    def offsets(self) -> int:
        return sum(item.end_offset - item.start_offset for item in self.partitions)


def plan_scan(
    connection: KafkaConnection, topics: Sequence[str] = (), *, all_topics: bool = False
) -> ScanPlan:
    """Reach the target cluster, resolve the topics, and read each partition's offsets.

    The end offsets are read with ``read_committed`` (the last stable
    offset), the same isolation the scan uses. Raises
    ``KafkaUnreachableError`` naming the servers within the connection's
    timeout, and ``NotFoundError`` for a topic the cluster does not have.
    """
    if all_topics == bool(topics):
        raise UsageError("give either --topic (one or more) or --all-topics")
    admin = Admin(KafkaClients(connection, client_id=CLIENT_ID))
    metadata = admin.metadata(action="read the topic list")
    if all_topics:
        names = sorted(name for name in metadata.topics if not name.startswith("__"))
    else:
        names = list(dict.fromkeys(topics))
        missing = [name for name in names if name not in metadata.topics]
        if missing:
            raise NotFoundError(
                f"topic(s) {', '.join(missing)} not found on {','.join(connection.bootstrap_servers)}",
                hint="check the names; a renamed restore writes to the target topic name",
            )
    partitions = [(name, p) for name in names for p in range(metadata.topics[name].partitions)]
    ranges = admin.partition_ranges(partitions)
    return ScanPlan(
        target_cluster_id=metadata.cluster_id,
        partitions=[
            ScannedPartition(topic, p, ranges[(topic, p)].log_start, ranges[(topic, p)].log_end)
            for topic, p in partitions
        ],
    )


def build_offset_mapping(
    connection: KafkaConnection,
    *,
    source_cluster: str,
    topics: Sequence[str] = (),
    all_topics: bool = False,
    settings: MappingSettings | None = None,
    spark: SparkSession | None = None,
    progress: Progress | None = None,
) -> OffsetMapping:
    """Scan restored topics on the target cluster into the offset mapping of ``source_cluster``.

    ``topics`` are target topic names (or ``all_topics``: every topic not
    starting with ``__``). Runs in ``spark`` if given, else in the active
    SparkSession, else in one started from ``settings`` (and stopped at the
    end). Spark is not started at all when every partition is empty.
    ``mapping.stats`` says how the scan went.
    """
    if not source_cluster:
        raise UsageError("give the origin cluster id of the restored records (--source-cluster)")
    settings = settings or MappingSettings()
    started = time.monotonic()
    plan = plan_scan(connection, topics, all_topics=all_topics)
    from kbackup.mapping.spark_kafka import spark_kafka_options

    kafka_options = spark_kafka_options(connection, settings.kafka_options)
    spark_started = time.monotonic()
    if plan.offsets == 0:
        from kbackup.mapping.job import ScanResult

        result = ScanResult([], 0, None, 0, 0)
    else:
        result = _run_job(spark, settings, kafka_options, plan, source_cluster, progress)
    spark_seconds = time.monotonic() - spark_started
    if not result.ranges and not result.malformed_records and result.other_clusters:
        # Most often a mistyped --source-cluster: an empty mapping would move every group to
        # nowhere. Say which origins the restored records do carry.
        found = ", ".join(
            f"{name!r} ({count:,} record(s))"
            for name, count in sorted(result.other_clusters.items(), key=lambda item: (-item[1], item[0]))
        )
        raise NotFoundError(
            f"no restored record of source cluster {source_cluster!r} in the {len(plan.partitions)} "
            f"partition(s) scanned; their x-kafka-backup-cluster headers name {found}",
            hint="give --source-cluster (or offset_reset.source_cluster) as one of those",
        )
    if result.malformed_records:
        assert result.first_malformed is not None
        topic, partition, offset = result.first_malformed
        raise BackupIntegrityError(
            f"{result.malformed_records} record(s) of source cluster {source_cluster!r} have missing or "
            f"non-numeric x-kafka-backup-topic/-partition/-offset headers, the first at {topic}[{partition}] "
            f"offset {offset}; a mapping without them would not be exact",
            hint="check what wrote those records; restore writes all five origin headers",
        )
    stats = ScanStats(
        topics=len({item.topic for item in plan.partitions}),
        partitions=len(plan.partitions),
        offsets_scanned=plan.offsets,
        pieces=result.pieces,
        seconds=time.monotonic() - started,
        spark_seconds=spark_seconds,
    )
    mapping = OffsetMapping(
        source_cluster=source_cluster,
        ranges=result.ranges,
        scanned=plan.partitions,
        target_cluster_id=plan.target_cluster_id,
        stats=stats,
    )
    log.info(
        "mapped %d records in %d ranges from %d offsets of %d partitions in %.1fs",
        mapping.records,
        len(mapping.ranges),
        stats.offsets_scanned,
        stats.partitions,
        stats.seconds,
    )
    return mapping


def _run_job(
    spark: SparkSession | None,
    settings: MappingSettings,
    kafka_options: dict[str, str],
    plan: ScanPlan,
    source_cluster: str,
    progress: Progress | None = None,
) -> Any:
    from pyspark.sql import SparkSession

    from kbackup.core.spark_progress import SparkTaskProgress
    from kbackup.mapping.job import scan_ranges
    from kbackup.mapping.spark_session import build_spark_session

    session = spark or SparkSession.getActiveSession()
    owned = session is None
    if session is None:
        session = build_spark_session(
            settings.spark_master, jars=settings.spark_jars, extra_conf=settings.spark_conf
        )
    description = f"Spark scan of {len(plan.partitions)} partition(s), tasks"
    try:
        with SparkTaskProgress(session, progress, description):
            return scan_ranges(
                session,
                kafka_options,
                plan.partitions,
                source_cluster,
                min_partitions=settings.min_partitions,
                max_records_per_partition=settings.max_records_per_partition,
            )
    except KBackupError:
        raise
    except Exception as exc:
        raise _spark_failure(exc, plan) from None
    finally:
        if owned:
            session.stop()


def _spark_failure(exc: Exception, plan: ScanPlan) -> KBackupError:
    """A failed Spark job as one line: the innermost Java/Python error, not Spark's pages of trace."""
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line for line in lines if "Exception:" in line or "Error:" in line]
    detail = (causes[-1] if causes else lines[0] if lines else type(exc).__name__)[:500]
    return KafkaOperationError(
        f"the Spark scan of {len(plan.partitions)} target partition(s) failed: {detail}",
        hint="run again with --debug for Spark's full error; check that Spark's executors reach the brokers",
        retryable=True,
    )
