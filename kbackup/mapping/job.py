"""The Spark job: read target partitions with Spark's Kafka source and turn origin headers into ranges.

Shape of the job, chosen so it scales with the records and collects only
the ranges:

1. ``spark.read.format("kafka")`` with ``assign`` and explicit
   ``startingOffsets``/``endingOffsets`` per partition (read before the
   scan, so the result covers exactly what the mapping file says it covers),
   ``includeHeaders`` and ``isolation.level=read_committed`` (aborted
   records are never mapped; transaction markers are never records, so
   they are holes).
2. A projection evaluated in the JVM: the last value of each
   ``x-kafka-backup-*`` header (so a header restore appended after one the
   record already had wins; see :func:`origin_of`), decoded from ASCII
   decimal; only records whose origin cluster is the wanted one are mapped
   (the first pass counts the others per cluster, so a scan that finds none
   of the wanted cluster can name the clusters the headers do carry).
3. First pass, entirely in the JVM (:func:`offset_groups`): a hash
   aggregate by (Spark task, target topic, target partition, source topic,
   source partition, target offset minus source offset) into min/max target
   offset and count. Spark aggregates each task's records in the task
   (partial aggregate) before the exchange, so what crosses the shuffle is
   one row per group per task, never a record; records are neither sorted
   nor shuffled. Malformed records fall into one group per target
   partition with null source columns, so they are counted and located in
   the same read.
4. The driver (:mod:`kbackup.mapping.offset_groups`) combines the rows of a
   group across tasks. A group whose count equals its target-offset span is
   exactly one maximal run, and becomes a range as it is. A target
   partition with a group that has fewer records than its span (the same
   difference recurring after equal holes on both sides) is scanned again,
   alone with the others like it, by the exact path: ``mapInArrow`` with
   :func:`kbackup.mapping.arrow_ranges.scan_batches`, each task folding its
   Kafka partition's records, in offset order, into ranges. Hole-free and
   ordinary restores never take this second pass.
5. The driver joins pieces of one run that the exact path cut at batch or
   task boundaries (:func:`kbackup.offsets.ranges.merge_touching`). The
   result does not depend on the order in which records arrive; order only
   keeps the number of pieces small, and the tasks report any record that
   came out of order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kbackup.core.logs import get_logger
from kbackup.format.mapping_file import ScannedPartition
from kbackup.format.origin import ORIGIN_HEADER_PREFIX, ORIGIN_HEADERS
from kbackup.mapping import arrow_ranges
from kbackup.mapping.offset_groups import GROUPS_SCHEMA, GroupsRead, read_groups
from kbackup.offsets.ranges import OffsetRange, merge_touching

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = get_logger("mapping.job")

#: Origin header names in the order restore appends them, and the struct fields they are read into.
#: Column names for the five origin headers, in the order restore appends them.
ORIGIN_FIELDS = tuple(name.removeprefix(ORIGIN_HEADER_PREFIX) for name in ORIGIN_HEADERS)

#: Kafka consumer settings for a bulk sequential read, before the user's ``mapping.kafka_options``.
READ_DEFAULTS = {
    "kafka.max.poll.records": "10000",
    "kafka.max.partition.fetch.bytes": str(8 * 1024 * 1024),
    "kafka.fetch.max.bytes": str(64 * 1024 * 1024),
    "kafka.receive.buffer.bytes": str(1024 * 1024),
}

#: Session settings the exact path needs while it runs (restored afterwards on a shared session).
JOB_SQL_CONF = {
    # Fewer, larger batches: fewer range pieces to join on the driver.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
}


@dataclass(frozen=True)
class ScanResult:
    """What the scan found: the ranges, and records it could not use."""

    ranges: list[OffsetRange]
    #: Restored records (of the wanted cluster) whose other origin headers were missing or not numbers.
    malformed_records: int
    #: Where the first of them is: (target topic, partition, offset).
    first_malformed: tuple[str, int, int] | None
    #: Records that arrived out of offset order within a task of the exact path (0 unless Spark's
    #: source changes; the first pass does not depend on order).
    unordered_records: int
    #: Rows the tasks returned before the driver joined them: one per (Spark task, group) from the
    #: first pass, plus the range pieces of the exact path.
    pieces: int
    #: Target partitions that had a gappy group and took the exact path (second pass).
    rescanned_partitions: int = 0
    #: Records restored from other origin clusters, by cluster (x-kafka-backup-cluster).
    other_clusters: dict[str, int] = field(default_factory=dict)


def read_options(
    kafka_options: Mapping[str, str],
    partitions: Sequence[ScannedPartition],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> dict[str, str]:
    """Spark Kafka source options that read exactly these partitions between their offsets."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for item in partitions:
        assign.setdefault(item.topic, []).append(item.partition)
        starting.setdefault(item.topic, {})[str(item.partition)] = item.start_offset
        ending.setdefault(item.topic, {})[str(item.partition)] = item.end_offset
    options = {
        **READ_DEFAULTS,
        **kafka_options,
        "assign": json.dumps(assign),
        "startingOffsets": json.dumps(starting),
        "endingOffsets": json.dumps(ending),
        "includeHeaders": "true",
        # Never map aborted records, whatever kafka_options say.
        "kafka.isolation.level": "read_committed",
        # Records deleted between reading the offsets and scanning them must fail the scan:
        # the mapping would otherwise claim to cover records it never saw.
        "failOnDataLoss": "true",
    }
    if min_partitions is not None:
        options["minPartitions"] = str(min_partitions)
    if max_records_per_partition is not None:
        options["maxRecordsPerPartition"] = str(max_records_per_partition)
    return options


def origin_of(headers: Any) -> Any:
    """A struct of the last value of each origin header (binary; null where a header is missing).

    Restore appends the five origin headers, in the order of ORIGIN_HEADERS,
    after a record's own headers: when the last five headers are exactly
    those, they are the last of their names, and reading them by position
    costs nothing. Any other record (its own stale origin headers, another
    tool's order) takes the general path, which walks all headers and keeps
    the last value of each name. ``try_element_at``, because Spark may
    evaluate the positional look-ups for short header lists too.
    """
    from pyspark.sql import functions as F

    tail = [
        F.try_element_at(headers, F.lit(index - len(ORIGIN_HEADERS))) for index in range(len(ORIGIN_HEADERS))
    ]
    in_order = F.size(headers) >= len(ORIGIN_HEADERS)
    for header, name in zip(tail, ORIGIN_HEADERS, strict=True):
        in_order = in_order & (header.getField("key") == name)
    by_position = F.struct(
        *[header.getField("value").alias(field) for header, field in zip(tail, ORIGIN_FIELDS, strict=True)]
    )
    nothing = F.struct(*[F.lit(None).cast("binary").alias(field) for field in ORIGIN_FIELDS])

    def keep_last(found: Any, header: Any) -> Any:
        return F.struct(
            *[
                F.when(header.getField("key") == name, header.getField("value"))
                .otherwise(found.getField(field))
                .alias(field)
                for name, field in zip(ORIGIN_HEADERS, ORIGIN_FIELDS, strict=True)
            ]
        )

    return F.when(in_order, by_position).otherwise(F.aggregate(headers, nothing, keep_last))


def origins(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    """Every target record that has an origin cluster header: its place and its ``origin`` struct."""
    from pyspark.sql import functions as F

    reader = spark.read.format("kafka")
    for key, value in options.items():
        reader = reader.option(key, value)
    records = reader.load()
    headers_type = dict(records.dtypes).get("headers")
    if headers_type != "array<struct<key:string,value:binary>>":
        raise RuntimeError(f"Spark's Kafka source gave headers as {headers_type}, expected key/value structs")
    origin = records.select("topic", "partition", "offset", origin_of(F.col("headers")).alias("origin"))
    return origin.where(F.col("origin.cluster").isNotNull())


def _record_columns(wanted: Any) -> list[Any]:
    """Target place and source place of a record; the source columns null unless ``wanted`` holds."""
    from pyspark.sql import functions as F

    return [
        F.col("topic").cast("string").alias("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("bigint").alias("offset"),
        F.when(wanted, F.col("origin.topic").cast("string")).alias("source_topic"),
        # try_cast: a damaged header becomes null and is reported, instead of failing the job.
        F.when(wanted, F.col("origin.partition").cast("string").try_cast("int")).alias("source_partition"),
        F.when(wanted, F.col("origin.offset").cast("string").try_cast("bigint")).alias("source_offset"),
    ]


def _of_cluster(source_cluster: str) -> Any:
    from pyspark.sql import functions as F

    return F.col("origin.cluster") == F.lit(bytearray(source_cluster.encode()))


def restored_records(spark: SparkSession, options: Mapping[str, str], source_cluster: str) -> DataFrame:
    """The target records whose origin cluster is ``source_cluster``, in the columns of INPUT_SCHEMA."""
    from pyspark.sql import functions as F

    wanted = _of_cluster(source_cluster)
    return origins(spark, options).where(wanted).select(*_record_columns(F.lit(True)))


def restored_and_foreign_records(
    spark: SparkSession, options: Mapping[str, str], source_cluster: str
) -> DataFrame:
    """Like :func:`restored_records`, plus the records of other origin clusters, with their
    ``foreign_cluster`` set and null source columns (the first pass counts them per cluster)."""
    from pyspark.sql import functions as F

    wanted = _of_cluster(source_cluster)
    return origins(spark, options).select(
        *_record_columns(wanted),
        F.when(~wanted, F.col("origin.cluster").cast("string")).alias("foreign_cluster"),
    )


@contextmanager
def session_conf(spark: SparkSession, values: Mapping[str, str]) -> Iterator[None]:
    """Set SQL settings for the duration of the job, then put back what was there."""
    previous: dict[str, str | None] = {key: spark.conf.get(key, None) for key in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _ship_range_builder_by_value() -> None:
    """Pickle the per-task code by value, so Spark executors need pyarrow but not kafka-backup."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(arrow_ranges)  # type: ignore[no-untyped-call]


def offset_groups(records: DataFrame) -> DataFrame:
    """The first pass: restored records grouped per task by where they came from and how far they moved.

    Columns of :data:`kbackup.mapping.offset_groups.GROUPS_SCHEMA`. The task
    id is a grouping key so that the driver sees how the work was split
    (the ``pieces`` of :class:`ScanResult`); it costs nothing, since Spark's
    partial aggregate already keeps one row per group per task.
    """
    from pyspark.sql import functions as F

    readable = (
        F.col("source_topic").isNotNull()
        & F.col("source_partition").isNotNull()
        & F.col("source_offset").isNotNull()
    )
    return records.groupBy(
        F.spark_partition_id().alias("task"),
        F.col("topic"),
        F.col("partition"),
        # Null source columns mark the malformed records' group (when() without otherwise is null),
        # or, with foreign_cluster set, the group of another cluster's records.
        F.when(readable, F.col("source_topic")).alias("source_topic"),
        F.when(readable, F.col("source_partition")).alias("source_partition"),
        F.when(readable, F.col("offset") - F.col("source_offset")).alias("difference"),
        F.col("foreign_cluster"),
    ).agg(
        F.min("offset").alias("low"),
        F.max("offset").alias("high"),
        F.count(F.lit(1)).alias("records"),
    )


@dataclass(frozen=True)
class FirstPass:
    groups: GroupsRead
    #: Rows the tasks returned: one per (Spark task, group).
    task_rows: int


def first_pass(spark: SparkSession, options: Mapping[str, str], source_cluster: str) -> FirstPass:
    """Run the JVM aggregation and read its groups on the driver."""
    task_groups = offset_groups(restored_and_foreign_records(spark, options, source_cluster)).toArrow()
    return FirstPass(
        read_groups(task_groups.select(GROUPS_SCHEMA.names).cast(GROUPS_SCHEMA)), task_groups.num_rows
    )


@dataclass(frozen=True)
class ExactScan:
    ranges: list[OffsetRange]
    unordered_records: int
    pieces: int


def exact_scan(spark: SparkSession, options: Mapping[str, str], source_cluster: str) -> ExactScan:
    """The second pass: fold each task's records, in offset order, into ranges (malformed ones skipped)."""
    _ship_range_builder_by_value()
    with session_conf(spark, JOB_SQL_CONF):
        pieces = (
            restored_records(spark, options, source_cluster)
            .mapInArrow(arrow_ranges.scan_batches, arrow_ranges.OUTPUT_DDL)
            .toArrow()
        )
    rows = pieces.to_pylist()
    ranges = [
        OffsetRange(
            row["source_topic"],
            row["source_partition"],
            row["target_topic"],
            row["target_partition"],
            row["source_start"],
            row["source_end"],
            row["target_start"],
            row["target_end"],
        )
        for row in rows
        if row["kind"] == "range"
    ]
    unordered = sum(row["records"] for row in rows if row["kind"] == "unordered")
    if unordered:
        log.warning(
            "%d records reached the range builder out of offset order; joined on the driver", unordered
        )
    return ExactScan(ranges, unordered, len(ranges))


def scan_ranges(
    spark: SparkSession,
    kafka_options: Mapping[str, str],
    partitions: Sequence[ScannedPartition],
    source_cluster: str,
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> ScanResult:
    """Run the job over the partitions that have records, and return the joined ranges."""
    to_read = [item for item in partitions if item.end_offset > item.start_offset]
    if not to_read:
        return ScanResult([], 0, None, 0, 0)
    split = {"min_partitions": min_partitions, "max_records_per_partition": max_records_per_partition}
    options = read_options(kafka_options, to_read, **split)
    first = first_pass(spark, options, source_cluster)
    groups = first.groups
    ranges = groups.ranges
    exact = ExactScan([], 0, 0)
    if groups.gappy_targets:
        rescan = [item for item in to_read if (item.topic, item.partition) in groups.gappy_targets]
        log.info("%d target partition(s) have runs split by equal holes: exact scan", len(rescan))
        exact = exact_scan(spark, read_options(kafka_options, rescan, **split), source_cluster)
        ranges = ranges + exact.ranges
    return ScanResult(
        ranges=merge_touching(ranges),
        malformed_records=groups.malformed_records,
        first_malformed=groups.first_malformed,
        unordered_records=exact.unordered_records,
        pieces=first.task_rows + exact.pieces,
        rescanned_partitions=len(groups.gappy_targets),
        other_clusters=groups.other_clusters,
    )
