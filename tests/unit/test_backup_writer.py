"""The bulk segment path (record batches in, bounded segments out) and the writer thread."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kbackup.backup.writer_thread import WriterThread
from kbackup.core.errors import StorageError
from kbackup.format.schema import RECORD_SCHEMA
from kbackup.format.segments import (
    PartitionSegmentWriter,
    SegmentLimits,
    check_segment_contents,
    iter_segment_batches,
    open_segment,
)
from kbackup.storage import LocalStorage


def batch(offsets: list[int], with_headers: bool = False) -> pa.RecordBatch:
    rows = len(offsets)
    headers = [[("h", b"\x00"), ("h", None)] if with_headers and i % 2 else [] for i in range(rows)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(["src"] * rows, pa.string()),
            pa.array(["t"] * rows, pa.string()),
            pa.array([0] * rows, pa.int32()),
            pa.array(offsets, pa.int64()),
            pa.array([1_000 + o for o in offsets], pa.int64()),
            pa.array([0] * rows, pa.int8()),
            pa.array([None if o % 3 == 0 else b"k" for o in offsets], pa.binary()),
            pa.array([b"v%d" % o for o in offsets], pa.binary()),
            pa.array(headers, RECORD_SCHEMA.field("headers").type),
        ],
        schema=RECORD_SCHEMA,
    )


def writer(storage: LocalStorage, tmp_path: Path, **limits: Any) -> PartitionSegmentWriter:
    return PartitionSegmentWriter(
        storage, backup_id="b", run_id="r", source_cluster="src", topic="t", partition=0,
        limits=SegmentLimits(**limits), scratch_dir=tmp_path,
    )  # fmt: skip


def test_batches_split_at_the_record_limit_and_read_back(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    out = writer(storage, tmp_path, max_records=100)
    out.write_batch(batch(list(range(0, 150)), with_headers=True))
    out.write_batch(batch(list(range(200, 330, 2))))
    segments = out.finish()
    assert [s.record_count for s in segments] == [100, 100, 15]
    assert [(s.first_offset, s.last_offset) for s in segments] == [(0, 99), (100, 298), (300, 328)]
    assert next((s.min_timestamp, s.max_timestamp) for s in segments) == (1_000, 1_099)
    offsets = [
        o
        for s in segments
        for b in iter_segment_batches(storage, "b", s)
        for o in b.column("offset").to_pylist()
    ]
    assert offsets == list(range(150)) + list(range(200, 330, 2))
    assert all(check_segment_contents(storage, "b", s, "src") == [] for s in segments)


def test_a_table_of_batches_is_one_row_group(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    out = writer(storage, tmp_path, max_records=1000)
    out.write_batch(
        pa.Table.from_batches([batch([1, 2, 3]), batch([5]), batch([8, 9])], schema=RECORD_SCHEMA)
    )
    [segment] = out.finish()
    assert (segment.first_offset, segment.last_offset, segment.record_count) == (1, 9, 6)
    with open_segment(storage, "b", segment) as parquet:
        assert parquet.metadata.num_row_groups == 1
    with pytest.raises(ValueError, match="do not increase strictly"):
        out.write_batch(pa.Table.from_batches([batch([20, 21]), batch([21])], schema=RECORD_SCHEMA))


def test_bulk_path_rejects_offsets_that_do_not_increase(tmp_path: Path) -> None:
    out = writer(LocalStorage(tmp_path / "store"), tmp_path)
    out.write_batch(batch([5, 6, 7]))
    with pytest.raises(ValueError, match="offset 7 after 7"):
        out.write_batch(batch([7, 8]))
    with pytest.raises(ValueError, match="do not increase strictly"):
        out.write_batch(batch([10, 12, 11]))


def test_roll_closes_the_open_segment(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "store")
    out = writer(storage, tmp_path)
    out.write_batch(batch([1, 2]))
    assert out.open_since is not None
    out.roll()
    assert out.open_since is None
    out.roll()  # nothing open: nothing uploaded
    out.write_batch(batch([3]))
    assert [s.first_offset for s in out.finish()] == [1, 3]


def test_writer_thread_runs_jobs_in_order() -> None:
    thread = WriterThread(max_queued_jobs=2)
    seen: list[int] = []
    futures = [thread.submit(seen.append, i) for i in range(50)]
    thread.drain()
    assert seen == list(range(50))
    assert all(f.done() for f in futures)
    thread.close()


def test_writer_thread_failure_surfaces_and_stops_later_jobs() -> None:
    thread = WriterThread()
    gate = threading.Event()
    ran: list[str] = []

    def fail() -> None:
        gate.wait(5)
        raise StorageError("upload failed")

    failing = thread.submit(fail)
    later = thread.submit(ran.append, "later")
    gate.set()
    with pytest.raises(StorageError, match="upload failed"):
        thread.result(later)
    assert ran == []
    assert isinstance(failing.exception(), StorageError)
    with pytest.raises(StorageError):
        thread.submit(ran.append, "after")
    thread.close()


def test_writer_thread_close_with_cancel_skips_queued_jobs() -> None:
    thread = WriterThread(max_queued_jobs=10)
    gate = threading.Event()
    ran: list[int] = []
    thread.submit(gate.wait, 5)
    for i in range(5):
        thread.submit(ran.append, i)
    closer = threading.Thread(target=thread.close, kwargs={"cancel": True})
    closer.start()
    while not thread._cancelled:  # close() has marked the queue cancelled before the first job ends
        time.sleep(0.01)
    gate.set()
    closer.join(10)
    assert ran == []
