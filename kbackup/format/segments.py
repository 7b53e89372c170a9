"""Segment files: Parquet files of one topic-partition's records, bounded in size.

A writer buffers one row group at a time, streams row groups into a local
temporary file, and when the file reaches its size or record limit closes
it, checksums it and uploads it as a new object. Memory stays bounded by one
row group whatever the topic size. Readers verify size and SHA-256 against
the manifest before trusting a byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kbackup.core.errors import BackupIntegrityError, StorageError
from kbackup.core.faults import crash_point
from kbackup.format.encryption import (
    ENCRYPTED_FORMAT_VERSION,
    OBJECT_METADATA_KEY,
    BackupKeys,
    check_segment_identity,
)
from kbackup.format.layout import object_key, segment_key
from kbackup.format.manifest import SegmentEntry
from kbackup.format.schema import RECORD_SCHEMA
from kbackup.storage import LocalStorage, Storage

Header = tuple[str, bytes | None]
T = TypeVar("T")

#: Columns with Parquet min/max statistics (the fixed-size ones).
_STATISTICS_COLUMNS = ["source_cluster", "topic", "partition", "offset", "timestamp", "timestamp_type"]

#: The last four bytes of a Parquet file whose footer is encrypted (``PAR1`` otherwise).
ENCRYPTED_FOOTER_MAGIC = b"PARE"

#: Per-record bytes beyond key and value (offsets, timestamps, list offsets), for size accounting.
_RECORD_OVERHEAD_BYTES = 48


class JobRunner(Protocol):
    """Runs a function in the background (``concurrent.futures.Executor`` has this shape)."""

    def submit(self, fn: Callable[..., T], /, *args: Any) -> Future[T]: ...


@dataclass(frozen=True)
class _ClosedSegment:
    """What a segment file's manifest entry needs besides its size and checksum."""

    key: str
    first_offset: int
    last_offset: int
    record_count: int
    min_timestamp: int
    max_timestamp: int


@dataclass(frozen=True)
class SegmentLimits:
    """When a segment file is closed, and how it is encoded."""

    max_bytes: int = 128 * 1024 * 1024
    max_records: int = 1_000_000
    compression: str = "zstd"
    compression_level: int | None = 3
    #: Buffered bytes per row group; bounds the writer's memory.
    row_group_bytes: int = 8 * 1024 * 1024


@dataclass
class RecordColumns:
    """Records of one topic-partition in column form, in offset order."""

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    headers: list[list[Header]] = field(default_factory=list)
    payload_bytes: int = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def append(
        self,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] | None,
    ) -> None:
        self.offsets.append(offset)
        self.timestamps.append(timestamp)
        self.timestamp_types.append(timestamp_type)
        self.keys.append(key)
        self.values.append(value)
        header_list = list(headers) if headers else []
        self.headers.append(header_list)
        self.payload_bytes += (
            _RECORD_OVERHEAD_BYTES
            + (len(key) if key else 0)
            + (len(value) if value else 0)
            + sum(len(k) + (len(v) if v else 0) for k, v in header_list)
        )

    def to_record_batch(self, source_cluster: str, topic: str, partition: int) -> pa.RecordBatch:
        rows = len(self.offsets)
        return pa.RecordBatch.from_arrays(
            [
                pa.array([source_cluster] * rows, pa.string()),
                pa.array([topic] * rows, pa.string()),
                pa.array([partition] * rows, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, pa.int64()),
                pa.array(self.timestamp_types, pa.int8()),
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array(self.headers, RECORD_SCHEMA.field("headers").type),
            ],
            schema=RECORD_SCHEMA,
        )


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class PartitionSegmentWriter:
    """Writes one topic-partition's records of one run into segment objects."""

    def __init__(
        self,
        storage: Storage,
        *,
        backup_id: str,
        run_id: str,
        source_cluster: str,
        topic: str,
        partition: int,
        limits: SegmentLimits,
        scratch_dir: Path,
        uploader: JobRunner | None = None,
        on_stored: Callable[[SegmentEntry], None] | None = None,
        keys: BackupKeys | None = None,
    ) -> None:
        self.storage = storage
        #: An encrypted backup's keys: each segment file gets Parquet encryption of its own.
        self.keys = keys
        #: Told about each segment once it is stored (on the uploader's thread), for metrics.
        self.on_stored = on_stored
        #: Where closed segments are checksummed and uploaded: None here, at once; else a
        #: background runner, so encoding the next row groups overlaps the upload.
        self.uploader = uploader
        self._uploads: list[Future[SegmentEntry]] = []
        self.backup_id = backup_id
        self.run_id = run_id
        self.source_cluster = source_cluster
        self.topic = topic
        self.partition = partition
        self.limits = limits
        self.scratch_dir = scratch_dir
        #: Segments uploaded so far, in offset order (with an ``uploader``: complete after ``finish``).
        self.segments: list[SegmentEntry] = []
        self._buffer = RecordColumns()
        self._writer: pq.ParquetWriter | None = None
        self._file: Path | None = None
        self._file_records = 0
        self._file_first_offset: int | None = None
        self._file_last_offset = -1
        self._file_min_ts: int | None = None
        self._file_max_ts: int | None = None
        self._file_opened_at = 0.0
        self._last_offset = -1

    def append(
        self,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] | None,
    ) -> None:
        if offset <= self._last_offset:
            raise ValueError(f"{self.topic}/{self.partition}: offset {offset} after {self._last_offset}")
        self._last_offset = offset
        self._buffer.append(offset, timestamp, timestamp_type, key, value, headers)
        if self._buffer.payload_bytes >= self.limits.row_group_bytes:
            self._flush_row_group()
            if self._segment_full():
                self._close_segment()
        elif self._file_records + len(self._buffer) >= self.limits.max_records:
            self._flush_row_group()
            self._close_segment()

    def _segment_full(self) -> bool:
        if self._file_records >= self.limits.max_records:
            return True
        return self._file is not None and self._file.stat().st_size >= self.limits.max_bytes

    def _flush_row_group(self) -> None:
        buffer = self._buffer
        if not len(buffer):
            return
        self._buffer = RecordColumns()
        batch = buffer.to_record_batch(self.source_cluster, self.topic, self.partition)
        self._write_row_group(
            batch, buffer.offsets[0], buffer.offsets[-1], min(buffer.timestamps), max(buffer.timestamps)
        )

    def _open_file(self, first_offset: int) -> pq.ParquetWriter:
        fd, name = tempfile.mkstemp(
            prefix=f"segment-{self.partition}-", suffix=".parquet", dir=self.scratch_dir
        )
        os.close(fd)
        self._file = Path(name)
        schema, encryption = RECORD_SCHEMA, None
        if self.keys is not None:
            # The object's own name inside the encrypted footer: a copy moved elsewhere says so.
            key = segment_key(self.topic, self.partition, first_offset, self.run_id)
            schema = RECORD_SCHEMA.with_metadata(
                {
                    **(RECORD_SCHEMA.metadata or {}),
                    b"kafka-backup.format_version": str(ENCRYPTED_FORMAT_VERSION).encode(),
                    OBJECT_METADATA_KEY: key.encode(),
                }
            )
            encryption = self.keys.file_encryption_properties()
        self._writer = pq.ParquetWriter(
            name,
            schema,
            encryption_properties=encryption,
            compression=self.limits.compression if self.limits.compression != "none" else None,
            compression_level=self.limits.compression_level if self.limits.compression == "zstd" else None,
            write_page_checksum=True,
            use_dictionary=["source_cluster", "topic"],
            # Min/max of keys, values and headers help no reader and cost a pass over every byte.
            write_statistics=_STATISTICS_COLUMNS,
        )
        self._file_first_offset = first_offset
        self._file_opened_at = time.monotonic()
        return self._writer

    def _write_row_group(
        self, batch: pa.RecordBatch | pa.Table, first_offset: int, last_offset: int, min_ts: int, max_ts: int
    ) -> None:
        writer = self._writer if self._writer is not None else self._open_file(first_offset)
        if isinstance(batch, pa.Table):
            writer.write_table(batch, row_group_size=batch.num_rows)
        else:
            writer.write_batch(batch, row_group_size=batch.num_rows)
        self._file_records += batch.num_rows
        self._file_last_offset = last_offset
        self._file_min_ts = min_ts if self._file_min_ts is None else min(self._file_min_ts, min_ts)
        self._file_max_ts = max_ts if self._file_max_ts is None else max(self._file_max_ts, max_ts)

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Bulk path: records already in ``RECORD_SCHEMA`` form (a batch, or a table of batches),
        written as one row group.

        The caller bounds the batch's size (it is one row group); the batch is
        split where the segment reaches ``max_records``, and the segment is closed
        when it reaches ``max_bytes``. Offsets must increase strictly, also across calls.
        """
        if not batch.schema.equals(RECORD_SCHEMA):
            raise ValueError(f"{self.topic}/{self.partition}: batch does not have the record schema")
        if batch.num_rows == 0:
            return
        self._flush_row_group()
        offsets = batch.column("offset")
        first = offsets[0].as_py()
        if first <= self._last_offset:
            raise ValueError(f"{self.topic}/{self.partition}: offset {first} after {self._last_offset}")
        if (
            batch.num_rows > 1
            and not pc.all(pc.greater(offsets.slice(1), offsets.slice(0, len(offsets) - 1))).as_py()
        ):
            raise ValueError(f"{self.topic}/{self.partition}: offsets in a batch do not increase strictly")
        self._last_offset = offsets[-1].as_py()
        while batch.num_rows:
            room = self.limits.max_records - self._file_records
            if room <= 0:
                self._close_segment()
                continue
            part, batch = batch.slice(0, room), batch.slice(room)
            part_offsets = part.column("offset")
            low, high = pc.min_max(part.column("timestamp")).values()
            self._write_row_group(
                part, part_offsets[0].as_py(), part_offsets[-1].as_py(), low.as_py(), high.as_py()
            )
            if self._segment_full():
                self._close_segment()

    @property
    def open_since(self) -> float | None:
        """``time.monotonic()`` when the open segment file got its first row group (None: none open)."""
        return self._file_opened_at if self._writer is not None else None

    @property
    def buffered_records(self) -> int:
        return len(self._buffer)

    def roll(self) -> None:
        """Close and upload the open segment now (the next record starts a new one)."""
        self._flush_row_group()
        self._close_segment()

    def _close_segment(self) -> None:
        if self._writer is None or self._file is None or self._file_first_offset is None:
            return
        self._writer.close()
        path = self._file
        closed = _ClosedSegment(
            key=segment_key(self.topic, self.partition, self._file_first_offset, self.run_id),
            first_offset=self._file_first_offset,
            last_offset=self._file_last_offset,
            record_count=self._file_records,
            min_timestamp=self._file_min_ts if self._file_min_ts is not None else -1,
            max_timestamp=self._file_max_ts if self._file_max_ts is not None else -1,
        )
        self._writer = None
        self._file = None
        self._file_records = 0
        self._file_first_offset = None
        self._file_min_ts = self._file_max_ts = None
        if self.uploader is None:
            self.segments.append(self._upload(path, closed))
        else:
            self._uploads.append(self.uploader.submit(self._upload, path, closed))

    def _upload(self, path: Path, closed: _ClosedSegment) -> SegmentEntry:
        """Checksum the closed file, store it as a new object, delete the local file."""
        try:
            entry = SegmentEntry(
                key=closed.key,
                topic=self.topic,
                partition=self.partition,
                first_offset=closed.first_offset,
                last_offset=closed.last_offset,
                record_count=closed.record_count,
                size_bytes=path.stat().st_size,
                sha256=file_sha256(path),
                min_timestamp=closed.min_timestamp,
                max_timestamp=closed.max_timestamp,
            )
            self.storage.move_file(object_key(self.backup_id, closed.key), path)
            crash_point("backup:segment-uploaded")
        finally:
            path.unlink(missing_ok=True)
        if self.on_stored is not None:
            self.on_stored(entry)
        return entry

    def _wait_for_uploads(self) -> None:
        uploads, self._uploads = self._uploads, []
        for upload in uploads:
            try:
                self.segments.append(upload.result())
            except CancelledError:
                raise StorageError(
                    f"uploading a segment of {self.topic}/{self.partition} was cancelled after another "
                    "upload failed"
                ) from None

    def finish(self) -> list[SegmentEntry]:
        """Flush and upload what is buffered; return every segment this writer uploaded."""
        self.roll()
        self._wait_for_uploads()
        return self.segments

    def abort(self) -> None:
        """Drop the open segment without uploading it (a crash leaves no partial object either)."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        if self._file is not None:
            self._file.unlink(missing_ok=True)
        self._writer = None
        self._file = None
        self._buffer = RecordColumns()


#: Local segment files whose SHA-256 this process found right, each with the file's identity then:
#: (path, SHA-256) -> (device, inode, size, mtime_ns, ctime_ns). A restore checks every segment
#: before its first record and opens it again to produce: a file of the same identity is the file
#: that was checked (a write or a replacement changes its ctime, which no program sets back), so
#: the second opening reads it without hashing it again. Objects of a remote store are downloaded
#: anew, and checked, each time.
_CHECKED_FILES: dict[tuple[str, str], tuple[int, int, int, int, int]] = {}


def _identity(status: os.stat_result) -> tuple[int, int, int, int, int]:
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


@contextlib.contextmanager
def open_segment(
    storage: Storage,
    backup_id: str,
    entry: SegmentEntry,
    *,
    scratch_dir: Path | None = None,
    verify: bool = True,
    keys: BackupKeys | None = None,
) -> Iterator[pq.ParquetFile]:
    """Open a segment for reading after checking its size and checksum against the manifest
    (and, encrypted, that it decrypts with the backup's keys and names this object). The file is
    opened once: what is checked is what is parsed."""
    key = object_key(backup_id, entry.key)
    with _local_copy(storage, key, scratch_dir) as path, path.open("rb") as handle:
        if verify:
            _check_file(handle, path, key, entry, in_store=isinstance(storage, LocalStorage))
        if keys is not None and not _has_encrypted_footer(handle):
            raise BackupIntegrityError(
                f"segment {key} is not encrypted, in an encrypted backup (replaced?)",
                hint="restore the backup's own objects from a copy",
            )
        handle.seek(0)
        try:
            parquet = (
                pq.ParquetFile(handle)
                if keys is None
                else pq.ParquetFile(handle, decryption_properties=keys.file_decryption_properties())
            )
        except (pa.ArrowException, OSError) as exc:
            raise BackupIntegrityError(f"segment {key} is not a readable Parquet file: {exc}") from None
        except Exception as exc:
            raise BackupIntegrityError(
                f"segment {key} does not decrypt with backup {backup_id}'s key: "
                f"{type(exc).__name__} {exc}".rstrip(),
                hint="the object was replaced by another backup's or changed; restore it from a copy",
            ) from None
        if keys is not None:
            check_segment_identity(parquet.schema_arrow.metadata, entry.key, key)
        if not parquet.schema_arrow.remove_metadata().equals(RECORD_SCHEMA.remove_metadata()):
            raise BackupIntegrityError(f"segment {key} does not have the kafka-backup record schema")
        try:
            yield parquet
        finally:
            parquet.close()


def _check_file(
    handle: io.BufferedReader, path: Path, key: str, entry: SegmentEntry, *, in_store: bool
) -> None:
    """The open segment file's size and SHA-256 against the manifest's; a file of the store this
    process already found right, unchanged since (:data:`_CHECKED_FILES`), is not hashed again."""
    identity = _identity(os.fstat(handle.fileno()))
    size = identity[2]
    if size != entry.size_bytes:
        raise BackupIntegrityError(
            f"segment {key} has {size} bytes, the manifest says {entry.size_bytes} (truncated or replaced)"
        )
    checked = (str(path), entry.sha256)
    if in_store and _CHECKED_FILES.get(checked) == identity:
        return
    if hashlib.file_digest(handle, "sha256").hexdigest() != entry.sha256:
        raise BackupIntegrityError(f"segment {key} fails its SHA-256 check (corrupted or replaced)")
    if in_store:
        _CHECKED_FILES[checked] = identity


def _has_encrypted_footer(handle: io.BufferedReader) -> bool:
    """Parquet Modular Encryption with an encrypted footer ends a file with ``PARE``, not ``PAR1``."""
    handle.seek(0, os.SEEK_END)
    if handle.tell() < 4:
        return False
    handle.seek(-4, os.SEEK_END)
    return handle.read(4) == ENCRYPTED_FOOTER_MAGIC


def iter_segment_batches(
    storage: Storage,
    backup_id: str,
    entry: SegmentEntry,
    *,
    scratch_dir: Path | None = None,
    verify: bool = True,
    batch_size: int = 16_384,
    keys: BackupKeys | None = None,
) -> Iterator[pa.RecordBatch]:
    """The segment's records in offset order, a bounded batch at a time."""
    key = object_key(backup_id, entry.key)
    with open_segment(
        storage, backup_id, entry, scratch_dir=scratch_dir, verify=verify, keys=keys
    ) as parquet:
        try:
            yield from parquet.iter_batches(batch_size=batch_size)
        except (pa.ArrowException, OSError) as exc:
            raise BackupIntegrityError(f"segment {key} cannot be decoded: {exc}") from None


def segment_checksum_problem(storage: Storage, key: str, entry: SegmentEntry) -> str | None:
    """The stored object's SHA-256 against its manifest entry (no key needed: it is over the
    bytes as stored); a line naming the object, or None if it matches."""
    with _local_copy(storage, key, None) as path:
        return _checksum_problem(path, key, entry)


def _checksum_problem(path: Path, key: str, entry: SegmentEntry) -> str | None:
    if file_sha256(path) != entry.sha256:
        return f"segment {key} fails its SHA-256 check (corrupted or replaced)"
    return None


@contextlib.contextmanager
def _local_copy(storage: Storage, key: str, scratch_dir: Path | None) -> Iterator[Path]:
    """The object as a local file: its own path in a folder, else a temporary download."""
    if isinstance(storage, LocalStorage):
        path = storage.local_path(key)
        if not path.exists():
            raise BackupIntegrityError(f"segment {key} is missing from {storage.url}")
        yield path
        return
    fd, name = tempfile.mkstemp(suffix=".parquet", dir=scratch_dir)
    os.close(fd)
    path = Path(name)
    try:
        try:
            storage.download(key, path)
        except StorageError as exc:
            if storage.size(key) is None:
                raise BackupIntegrityError(f"segment {key} is missing from {storage.url}") from None
            raise exc
        yield path
    finally:
        path.unlink(missing_ok=True)


def check_segment_contents(
    storage: Storage,
    backup_id: str,
    entry: SegmentEntry,
    source_cluster: str,
    *,
    scratch_dir: Path | None = None,
    keys: BackupKeys | None = None,
) -> list[str]:
    """Deep check of one segment: every problem found, as text naming the object (empty if sound)."""
    key = object_key(backup_id, entry.key)
    problems: list[str] = []
    rows = 0
    previous = -1
    first: int | None = None
    try:
        for batch in iter_segment_batches(storage, backup_id, entry, scratch_dir=scratch_dir, keys=keys):
            offsets = batch.column("offset").to_pylist()
            if first is None and offsets:
                first = offsets[0]
            for offset in offsets:
                if offset <= previous:
                    problems.append(f"segment {key}: offset {offset} does not increase after {previous}")
                    break
                previous = offset
            rows += batch.num_rows
            for column, expected in (
                ("topic", entry.topic),
                ("partition", entry.partition),
                ("source_cluster", source_cluster),
            ):
                if set(batch.column(column).to_pylist()) - {expected}:
                    problems.append(f"segment {key}: column {column} holds values other than {expected!r}")
    except BackupIntegrityError as exc:
        return [exc.message]
    if rows != entry.record_count:
        problems.append(f"segment {key}: {rows} records, the manifest says {entry.record_count}")
    if rows and (first != entry.first_offset or previous != entry.last_offset):
        problems.append(
            f"segment {key}: offsets {first}..{previous}, "
            f"the manifest says {entry.first_offset}..{entry.last_offset}"
        )
    return problems
