"""Reading the segments of a restore ahead of the producer, on a background thread.

A thread downloads, checksums and decodes the next segment's batches while the main thread
produces (both release the GIL), with a bounded queue between them, so memory is bounded by a
few batches whatever the backup's size.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from kbackup.core.errors import BackupIntegrityError
from kbackup.format.encryption import BackupKeys
from kbackup.format.layout import object_key
from kbackup.format.segments import open_segment
from kbackup.restore.integrity import SegmentWork
from kbackup.storage import Storage

#: At most this many records per Parquet batch handed to the producer loop ...
READ_BATCH_RECORDS = 8_192
#: ... and about this many bytes (uncompressed), so large records make small batches.
READ_BATCH_BYTES = 4 * 1024 * 1024
#: Batches decoded ahead of the producer loop.
PREFETCH_BATCHES = 2

_DONE = object()


class SegmentEnd:
    """Marks that every batch of a segment was handed over."""

    def __init__(self, work: SegmentWork) -> None:
        self.work = work


class PrefetchingReader:
    """Reads the segments of a restore in order on a background thread, a few batches ahead."""

    def __init__(
        self,
        storage: Storage,
        backup_id: str,
        work: list[SegmentWork],
        *,
        batch_records: int,
        scratch_dir: Path | None,
        depth: int = PREFETCH_BATCHES,
        keys: BackupKeys | None = None,
    ) -> None:
        self._storage = storage
        self._keys = keys
        self._backup_id = backup_id
        self._work = work
        self._batch_records = batch_records
        self._scratch_dir = scratch_dir
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="restore-reader", daemon=True)

    def _put(self, item: Any) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            for work in self._work:
                if not self._read_segment(work) or not self._put(SegmentEnd(work)):
                    return
            self._put(_DONE)
        except BaseException as exc:  # handed to the main thread, which raises it
            self._put(exc)

    def _read_segment(self, work: SegmentWork) -> bool:
        """Hand over a segment's batches (after its size and SHA-256 are checked); False if stopped."""
        key = object_key(self._backup_id, work.segment.key)
        with open_segment(
            self._storage, self._backup_id, work.segment, scratch_dir=self._scratch_dir, keys=self._keys
        ) as parquet:
            rows = self._batch_rows(parquet)
            # One row group at a time: ParquetFile.iter_batches buffers the whole file (a segment can
            # be hundreds of MB), while a row group is bounded by the writer (~8 MiB of records).
            for index in range(parquet.metadata.num_row_groups):
                try:
                    group = parquet.read_row_group(index)
                except (pa.ArrowException, OSError) as exc:
                    raise BackupIntegrityError(f"segment {key} cannot be decoded: {exc}") from None
                for batch in group.to_batches(max_chunksize=rows):
                    if not self._put((work, batch)):
                        return False
                del group
        return True

    def _batch_rows(self, parquet: pq.ParquetFile) -> int:
        """Rows per batch: READ_BATCH_BYTES worth of the segment's widest row group, within the record cap."""
        metadata = parquet.metadata
        widest = 1.0
        for index in range(metadata.num_row_groups):
            group = metadata.row_group(index)
            if group.num_rows:
                widest = max(widest, group.total_byte_size / group.num_rows)
        return max(1, min(self._batch_records, int(READ_BATCH_BYTES / widest)))

    def __iter__(self) -> Iterator[tuple[SegmentWork, pa.RecordBatch] | SegmentEnd]:
        self._thread.start()
        while True:
            item = self._queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
