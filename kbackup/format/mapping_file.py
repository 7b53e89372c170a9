"""The offset mapping as a value and as a file: JSON, CSV and Parquet, read and written.

The text table for people and the choice of ``--format`` are the CLI's (kbackup.cli.mapping_text).

JSON follows the shape users of header-based Kafka backup tools know (one
entry per source topic and target topic, with ``mappings`` of
``partition``/``source_range``/``target_range``), inside a document that
also says which source cluster it is for, when it was made, its format
version, and the target offsets it scanned, so that a reader knows what it
covers::

    {
      "format": "kafka-backup-offset-mapping",
      "format_version": 1,
      "created_at": "2026-11-22T03:00:00Z",
      "source_cluster": "prod-us-east-1",
      "target_cluster_id": "ETT2dB9JT5exKbDhFh3paQ",
      "scanned": [{"topic": "orders", "partition": 0, "start_offset": 0, "end_offset": 2656}],
      "topics": [
        {"topic": "orders", "source_cluster": "prod-us-east-1", "target_topic": "orders",
         "mappings": [{"partition": 0, "target_partition": 0,
                       "source_range": {"start": 12345, "end": 15000},
                       "target_range": {"start": 0, "end": 2655}}]}
      ]
    }

Range ``end`` values are inclusive (the last record's offset). Scanned
``end_offset`` values are Kafka end offsets: exclusive, the offset the next
record would get. ``topic`` in an entry is the source topic.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kbackup.core.config import KAFKA_INT32_MAX, KAFKA_INT64_MAX
from kbackup.core.errors import (
    BackupIntegrityError,
    NotFoundError,
    PreconditionError,
)
from kbackup.core.files import check_writable, write_file
from kbackup.core.times import iso_utc
from kbackup.core.types import TopicPartitionKey
from kbackup.format.documents import parse_json, validate
from kbackup.offsets.ranges import (
    OffsetRange,
    PartitionIndex,
    TargetPosition,
    index_by_target,
    target_order,
)

FORMAT_NAME = "kafka-backup-offset-mapping"
FORMAT_VERSION = 1
#: Parquet schema metadata key holding the document without its ranges.
PARQUET_METADATA_KEY = FORMAT_NAME.encode()
#: Columns of the CSV and Parquet forms, one row per range.
RANGE_COLUMNS = (
    "source_topic",
    "source_partition",
    "source_start",
    "source_end",
    "target_topic",
    "target_partition",
    "target_start",
    "target_end",
)

#: The file formats (the text table is for people: kbackup.cli.mapping_text).
MappingFileFormat = Literal["json", "csv", "parquet"]


@dataclass(frozen=True, slots=True)
class ScannedPartition:
    """A target partition the scan read, from ``start_offset`` (inclusive) to ``end_offset`` (exclusive)."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int


@dataclass(frozen=True)
class ScanStats:
    """How a mapping was built (shown in summaries; not part of the file)."""

    topics: int
    partitions: int
    offsets_scanned: int
    #: Range pieces the Spark tasks returned, before pieces of one run were joined.
    pieces: int
    seconds: float
    #: Of ``seconds``, the time from starting the Spark job (including Spark's start-up) to its end.
    spark_seconds: float


@dataclass
class OffsetMapping:
    """Every range of restored records from one source cluster found in the scanned target partitions."""

    source_cluster: str
    ranges: list[OffsetRange]
    scanned: list[ScannedPartition]
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC).replace(microsecond=0))
    target_cluster_id: str | None = None
    format_version: int = FORMAT_VERSION
    stats: ScanStats | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        self.ranges = sorted(self.ranges, key=target_order)
        self.scanned = sorted(self.scanned, key=lambda item: (item.topic, item.partition))

    # -- what the reset stage asks ------------------------------------------------------------

    @cached_property
    def _index(self) -> dict[TopicPartitionKey, PartitionIndex]:
        return index_by_target(self.ranges)

    @property
    def records(self) -> int:
        """How many restored records the ranges describe."""
        return sum(item.records for item in self.ranges)

    def scanned_end(self, target_topic: str, target_partition: int) -> int | None:
        """The end offset (exclusive) the scan of a target partition went up to, if it was scanned."""
        for item in self.scanned:
            if (item.topic, item.partition) == (target_topic, target_partition):
                return item.end_offset
        return None

    def target_partitions_of(self, source_topics: Iterable[str]) -> list[TopicPartitionKey]:
        """The target partitions holding restored records of any of these source topics."""
        wanted = set(source_topics)
        return sorted({item.target for item in self.ranges if item.source_topic in wanted})

    def source_end(self, source_topic: str, source_partition: int) -> int | None:
        """One past the highest source offset restored from a source partition (None if none was).

        A committed offset above it points past what was restored: the
        records in between are the recovery-point gap a plan must report.
        """
        ends = [
            item.source_end + 1 for item in self.ranges if item.source == (source_topic, source_partition)
        ]
        return max(ends) if ends else None

    def target_position(
        self, target_topic: str, target_partition: int, committed: Mapping[TopicPartitionKey, int]
    ) -> TargetPosition | None:
        """Where a group with these committed source offsets resumes in one target partition.

        ``committed`` maps (source topic, source partition) to the group's
        committed offset there; a source partition that is missing counts as
        "nothing processed". The position is the smallest target offset of a
        restored record whose source offset is at or after the committed
        offset of its own source partition, else one past the last restored
        record. None when the partition holds no restored record.
        """
        index = self._index.get((target_topic, target_partition))
        return None if index is None else index.position(committed)

    def target_positions(
        self, committed: Mapping[TopicPartitionKey, int]
    ) -> dict[TopicPartitionKey, TargetPosition]:
        """:meth:`target_position` for every target partition holding records of the committed topics."""
        topics = {topic for topic, _ in committed}
        positions = {}
        for target in self.target_partitions_of(topics):
            position = self.target_position(target[0], target[1], committed)
            if position is not None:
                positions[target] = position
        return positions

    def lookup(self, source_topic: str, source_partition: int, committed_offset: int) -> list[TargetPosition]:
        """Target positions for one committed offset of one source partition.

        One position per target partition that holds records of that source
        partition (one, unless the restore repartitioned): the smallest
        target offset of its records at or after ``committed_offset``, else
        one past the partition's last restored record. Records of other
        source partitions sharing a target partition are not considered;
        use :meth:`target_positions` with a group's whole set of committed
        offsets when a restore repartitioned.
        """
        source = (source_topic, source_partition)
        return [
            index.position_of_source(source, committed_offset)
            for _, index in sorted(self._index.items())
            if source in index.by_source
        ]

    def check_source_cluster(self, expected: str, *, where: str = "the offset mapping") -> None:
        if self.source_cluster != expected:
            raise PreconditionError(
                f"{where} is for source cluster {self.source_cluster!r}, not {expected!r}",
                hint="build the mapping again with --source-cluster " + expected,
            )

    # -- the JSON document --------------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """The document without its ranges (kept in Parquet metadata and the CSV's first line)."""
        return {
            "format": FORMAT_NAME,
            "format_version": self.format_version,
            "created_at": iso_utc(self.created_at, timespec="auto"),
            "source_cluster": self.source_cluster,
            "target_cluster_id": self.target_cluster_id,
            "scanned": [
                {
                    "topic": item.topic,
                    "partition": item.partition,
                    "start_offset": item.start_offset,
                    "end_offset": item.end_offset,
                }
                for item in self.scanned
            ],
        }

    def to_document(self) -> dict[str, Any]:
        entries: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for item in sorted(
            self.ranges,
            key=lambda r: (r.source_topic, r.target_topic, r.source_partition, r.target_partition),
        ):
            entries.setdefault((item.source_topic, item.target_topic), []).append(
                {
                    "partition": item.source_partition,
                    "target_partition": item.target_partition,
                    "source_range": {"start": item.source_start, "end": item.source_end},
                    "target_range": {"start": item.target_start, "end": item.target_end},
                }
            )
        document = self.header()
        document["topics"] = [
            {"topic": source, "source_cluster": self.source_cluster, "target_topic": target, "mappings": rows}
            for (source, target), rows in entries.items()
        ]
        return document


# -- writers ----------------------------------------------------------------------------------


def render_json(mapping: OffsetMapping) -> str:
    return json.dumps(mapping.to_document(), indent=2) + "\n"


def render_csv(mapping: OffsetMapping) -> str:
    """One row per range; the first line is ``# `` and the document header as JSON."""
    out = io.StringIO()
    out.write("# " + json.dumps(mapping.header(), separators=(",", ":")) + "\n")
    writer = csv.writer(out, lineterminator="\n")
    # The writer quotes a cell holding a "\n" (its line end) but not a lone "\r", which a reader takes
    # for a line end: a row with one has its text cells quoted, so every name reads back as written.
    quoting = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow(RANGE_COLUMNS)
    for item in mapping.ranges:
        row = [getattr(item, column) for column in RANGE_COLUMNS]
        (quoting if any(isinstance(cell, str) and "\r" in cell for cell in row) else writer).writerow(row)
    return out.getvalue()


def _arrow_table(mapping: OffsetMapping) -> Any:
    import pyarrow as pa

    types = {"source_partition": pa.int32(), "target_partition": pa.int32()}
    columns = {
        column: pa.array(
            [getattr(item, column) for item in mapping.ranges],
            types.get(column, pa.string() if column.endswith("topic") else pa.int64()),
        )
        for column in RANGE_COLUMNS
    }
    table = pa.table(columns)
    return table.replace_schema_metadata({PARQUET_METADATA_KEY: json.dumps(mapping.header()).encode()})


#: How a mapping file's errors name it.
MAPPING_OUTPUT = "show-offset-mapping --output"


def write_mapping(
    mapping: OffsetMapping, path: str | Path, output_format: MappingFileFormat, *, what: str = MAPPING_OUTPUT
) -> int:
    """Write the mapping to a file; returns its size in bytes. A file that cannot be written is a
    ConfigError naming it as ``what`` (``kbackup.core.files``), as :func:`check_writable_mapping`
    said before the scan."""
    if output_format == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        # Built in memory, then written as every named file is: a failing write is one line.
        sink = pa.BufferOutputStream()
        pq.write_table(_arrow_table(mapping), sink, compression="zstd")
        data = sink.getvalue().to_pybytes()
    else:
        data = {"json": render_json, "csv": render_csv}[output_format](mapping).encode("utf-8")
    write_file(Path(path), data, what)
    return len(data)


def check_writable_mapping(path: str | Path) -> None:
    """Refuse a mapping file that could not be written, before the scan that takes minutes."""
    check_writable(Path(path), MAPPING_OUTPUT)


# -- the reader -------------------------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Bounds(_Model):
    start: int = Field(ge=0, le=KAFKA_INT64_MAX)
    end: int = Field(ge=0, le=KAFKA_INT64_MAX)


class _RangeEntry(_Model):
    partition: int = Field(ge=0, le=KAFKA_INT32_MAX)
    target_partition: int = Field(ge=0, le=KAFKA_INT32_MAX)
    source_range: _Bounds
    target_range: _Bounds

    @model_validator(mode="after")
    def _same_length(self) -> _RangeEntry:
        source, target = self.source_range, self.target_range
        if source.end < source.start or source.end - source.start != target.end - target.start:
            raise ValueError(
                f"source_range {source.start}..{source.end} and target_range {target.start}..{target.end} "
                "must be non-empty and of the same length (ends are inclusive)"
            )
        return self


class _TopicEntry(_Model):
    topic: str = Field(min_length=1)
    source_cluster: str
    target_topic: str = Field(min_length=1)
    mappings: list[_RangeEntry]


class _Scanned(_Model):
    topic: str = Field(min_length=1)
    partition: int = Field(ge=0, le=KAFKA_INT32_MAX)
    start_offset: int = Field(ge=0, le=KAFKA_INT64_MAX)
    end_offset: int = Field(ge=0, le=KAFKA_INT64_MAX)


class _Header(_Model):
    format: Literal["kafka-backup-offset-mapping"]
    format_version: int
    created_at: datetime
    source_cluster: str = Field(min_length=1)
    target_cluster_id: str | None = None
    scanned: list[_Scanned]


class _Document(_Header):
    topics: list[_TopicEntry]


def _invalid(path: str, detail: str) -> BackupIntegrityError:
    return BackupIntegrityError(
        f"{path} is not a valid offset mapping: {detail}",
        hint="build it again with kafka-backup show-offset-mapping --output FILE",
    )


def _validate(model: type[_Header], data: Any, path: str) -> Any:
    if isinstance(data, dict) and data.get("format") == FORMAT_NAME:
        version = data.get("format_version")
        if version != FORMAT_VERSION:
            raise BackupIntegrityError(
                f"{path} is an offset mapping of format version {version!r}; "
                f"this kafka-backup reads version {FORMAT_VERSION}",
                hint="use the kafka-backup release that wrote it, or build the mapping again",
            )
    return validate(model, data, lambda problem: _invalid(path, problem))


def _from_parts(header: _Header, ranges: list[OffsetRange], path: str) -> OffsetMapping:
    try:
        # A time at the ends of the calendar with an offset (0001-01-01T00:00:00+01:00) has no UTC.
        created_at = header.created_at.astimezone(UTC)
    except (OverflowError, ValueError):
        raise _invalid(path, f"created_at {header.created_at.isoformat()} is not a time in UTC") from None
    mapping = OffsetMapping(
        source_cluster=header.source_cluster,
        ranges=ranges,
        scanned=[
            ScannedPartition(s.topic, s.partition, s.start_offset, s.end_offset) for s in header.scanned
        ],
        created_at=created_at,
        target_cluster_id=header.target_cluster_id,
        format_version=header.format_version,
    )
    scanned = {(s.topic, s.partition): s for s in mapping.scanned}
    previous: OffsetRange | None = None
    for item in mapping.ranges:
        bounds = scanned.get(item.target)
        if bounds is None:
            raise _invalid(
                path, f"a range is in {item.target_topic}[{item.target_partition}], which it never scanned"
            )
        if item.target_start < bounds.start_offset or item.target_end >= bounds.end_offset:
            raise _invalid(
                path,
                f"range {item.target_start}..{item.target_end} of "
                f"{item.target_topic}[{item.target_partition}] lies outside the scanned offsets "
                f"{bounds.start_offset}..{bounds.end_offset}",
            )
        if (
            previous is not None
            and previous.target == item.target
            and item.target_start <= previous.target_end
        ):
            raise _invalid(path, f"ranges overlap in {item.target_topic}[{item.target_partition}]")
        previous = item
    return mapping


def _range(source_topic: str, source_partition: int, target_topic: str, entry: _RangeEntry) -> OffsetRange:
    return OffsetRange(
        source_topic,
        source_partition,
        target_topic,
        entry.target_partition,
        entry.source_range.start,
        entry.source_range.end,
        entry.target_range.start,
        entry.target_range.end,
    )


def _read_json(path: str, text: str) -> OffsetMapping:
    data = parse_json(text, lambda problem: _invalid(path, f"not JSON (truncated?): {problem}"))
    document: _Document = _validate(_Document, data, path)
    ranges: list[OffsetRange] = []
    for entry in document.topics:
        if entry.source_cluster != document.source_cluster:
            raise _invalid(path, f"topic {entry.topic!r} names source cluster {entry.source_cluster!r}")
        ranges.extend(_range(entry.topic, row.partition, entry.target_topic, row) for row in entry.mappings)
    return _from_parts(document, ranges, path)


def _rows_to_ranges(path: str, rows: Iterable[Mapping[str, Any]]) -> list[OffsetRange]:
    ranges = []
    for number, row in enumerate(rows, start=1):
        try:
            values = {column: row[column] for column in RANGE_COLUMNS}
            for column in RANGE_COLUMNS:
                if column.endswith("topic"):
                    if not isinstance(values[column], str) or not values[column]:
                        raise ValueError(f"{column} must be a topic name")
                    continue
                if isinstance(values[column], bool) or not isinstance(values[column], int | str):
                    raise ValueError(f"{column} must be an integer, not {values[column]!r}")
                value = int(values[column])  # CSV cells are text; ValueError for 5000 digits too
                limit = KAFKA_INT32_MAX if column.endswith("partition") else KAFKA_INT64_MAX
                if not 0 <= value <= limit:
                    raise ValueError(f"{column} {value} is outside 0..{limit}")
                values[column] = value
            ranges.append(OffsetRange(**values))
        except (KeyError, TypeError, ValueError) as exc:
            raise _invalid(path, f"range row {number}: {exc}") from None
    return ranges


def _read_csv(path: str, text: str) -> OffsetMapping:
    first, _, rest = text.partition("\n")
    if not first.startswith("# "):
        raise _invalid(path, "the first line of a CSV mapping must be '# ' and its header as JSON")
    header_data = parse_json(
        first[2:], lambda problem: _invalid(path, f"the header line is not JSON: {problem}")
    )
    header: _Header = _validate(_Header, header_data, path)
    # newline="": the csv module reads \r\n, \r and line ends inside quoted cells itself.
    reader = csv.DictReader(io.StringIO(rest, newline=""))
    try:
        if tuple(reader.fieldnames or ()) != RANGE_COLUMNS:
            raise _invalid(path, f"expected the columns {','.join(RANGE_COLUMNS)}")
        ranges = _rows_to_ranges(path, reader)
    except csv.Error as exc:  # a line end inside an unquoted cell, a cell over the csv module's limit
        raise _invalid(path, f"not CSV at line {reader.line_num + 1}: {exc}") from None
    return _from_parts(header, ranges, path)


def _read_parquet(path: str, raw: bytes) -> OffsetMapping:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(raw))
        names = table.column_names
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        # ArrowException covers every Arrow error a damaged file raises (ArrowInvalid,
        # ArrowNotImplementedError for a flipped type byte, ...); a damaged column name or string
        # column fails only when it is turned into a Python string.
        raise _invalid(path, f"not a readable Parquet file (truncated?): {exc}") from None
    metadata = (table.schema.metadata or {}).get(PARQUET_METADATA_KEY)
    if metadata is None:
        raise _invalid(path, "the Parquet file has no kafka-backup-offset-mapping metadata")
    header_data = parse_json(
        metadata,
        lambda problem: _invalid(path, f"the Parquet file's mapping metadata is not JSON: {problem}"),
    )
    header: _Header = _validate(_Header, header_data, path)
    for column in RANGE_COLUMNS:
        # Only these columns are turned into Python values, and only when they hold text or integers.
        kind = table.schema.field(column).type if names.count(column) == 1 else None
        text = column.endswith("topic")
        if kind is None or not (pa.types.is_string(kind) if text else pa.types.is_integer(kind)):
            raise _invalid(path, f"expected one column {column} of {'text' if text else 'integers'}")
    try:
        rows = table.select(list(RANGE_COLUMNS)).to_pylist()
    except (pa.ArrowException, UnicodeDecodeError) as exc:
        raise _invalid(path, f"not a readable Parquet file (truncated?): {exc}") from None
    return _from_parts(header, _rows_to_ranges(path, rows), path)


def read_mapping(path: str | Path, *, source_cluster: str | None = None) -> OffsetMapping:
    """Read a mapping file written by :func:`write_mapping` (JSON, CSV or Parquet, told apart by content).

    Raises ``NotFoundError`` for a missing file, ``BackupIntegrityError``
    for one that cannot be read (a folder, no permission), is damaged,
    truncated or of another format version, and ``PreconditionError`` when
    ``source_cluster`` is given and the file is for another one.
    """
    name = str(path)
    file = Path(path)
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        raise NotFoundError(f"offset mapping file {name} not found") from None
    except (OSError, ValueError) as exc:  # a folder, no permission, a NUL in the name
        raise BackupIntegrityError(f"offset mapping file {name} cannot be read: {exc}") from None
    return parse_mapping(raw, name, source_cluster=source_cluster)


def parse_mapping(raw: bytes, name: str, *, source_cluster: str | None = None) -> OffsetMapping:
    """:func:`read_mapping` of a file's bytes, ``name`` naming it in errors."""
    if raw.startswith(b"PAR1"):
        mapping = _read_parquet(name, raw)
    else:
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid(name, "neither UTF-8 text (JSON, CSV) nor Parquet") from None
        mapping = _read_csv(name, text) if text.startswith("#") else _read_json(name, text)
    if source_cluster is not None:
        mapping.check_source_cluster(source_cluster, where=name)
    return mapping
