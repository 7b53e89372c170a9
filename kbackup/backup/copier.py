"""The consume loop: source partitions into segment files, one increment at a time.

One consumer reads every selected partition by explicit assignment (no group
membership, nothing committed on the source). Messages are collected per
partition and turned into Parquet row groups in bulk; each partition's
buffer gets an equal share of ``backup.buffer_memory_bytes`` and the
consumer's prefetch queue is bounded too, so memory does not grow with the
topic size.

A partition has reached the end of its increment when a record at or past
the end offset arrived, or the consumer reported end-of-partition at or past
it (under ``read_committed`` a log can end in transaction markers or aborted
records, which are never delivered). In snapshot mode a finished partition is
unassigned; in follow mode its later records already belong to the next
increment and go into a new set of segments.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Container, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kbackup.backup.metrics import BackupMetrics
from kbackup.backup.plan import PartitionPlan
from kbackup.backup.records import messages_to_batch
from kbackup.backup.writer_thread import WriterThread
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KafkaOperationError, KafkaUnreachableError
from kbackup.core.faults import crash_point
from kbackup.core.kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
    translate_kafka_error,
)
from kbackup.core.logs import get_logger
from kbackup.core.throttle import Throttle
from kbackup.core.types import TopicPartitionKey
from kbackup.format.encryption import BackupKeys
from kbackup.format.layout import new_run_id
from kbackup.format.manifest import PartitionEntry, SegmentEntry
from kbackup.format.schema import RECORD_SCHEMA
from kbackup.format.segments import PartitionSegmentWriter, SegmentLimits
from kbackup.storage import Storage

log = get_logger("backup.copier")


#: "No end fixed yet": a follow-mode increment before its checkpoint reads the end offsets.
NO_END = sys.maxsize
#: Messages per consume() call: enough that the per-call cost vanishes, few enough that
#: their payloads are still in the CPU cache when they are turned into Arrow columns.
CONSUME_BATCH = 2_000
# Unbound C accessors of confluent-kafka's Message, for map() over a whole batch.
_error: Any = Message.error
_partition: Any = Message.partition
_topic: Any = Message.topic

#: Errors that mean the partition is gone or unreadable: the run cannot complete it.
_PARTITION_GONE_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
}


@dataclass
class Sink:
    """One partition's records of one increment, on their way to a segment writer.

    Messages of the current poll wait in ``pending`` and become an Arrow batch at the end
    of the poll, while they are still in the CPU cache (converting them later, a row
    group at a time, is about twice as slow). The batches make a row group once they
    reach the partition's share of the buffer memory. The writer is used only on the
    writer thread.
    """

    writer: PartitionSegmentWriter
    pending: list[Any] = field(default_factory=list)
    batches: list[pa.RecordBatch] = field(default_factory=list)
    #: Arrow bytes in ``batches``: what this partition holds in memory beyond one poll.
    buffered_bytes: int = 0
    #: When this sink's open segment got its first records (handed to the writer, or seen
    #: buffered by the housekeeping); None after a roll.
    open_since: float | None = None
    #: The timestamp (ms) of the first record this sink got, for the backup lag in seconds.
    first_timestamp_ms: int | None = None


@dataclass
class PartitionCopy:
    """The copy state of one source partition."""

    topic: str
    partition: int
    #: Where the open increment's range of this partition starts.
    start_offset: int
    log_start_offset: int
    #: Every record below this offset has been read (and is in a sink or a segment).
    next_offset: int
    #: The open increment's end offset (exclusive), or NO_END.
    end_offset: int
    sink: Sink | None = None
    #: Segments of the open increment handed to the writer thread to finish (follow mode: the
    #: increment is complete for this partition while the others catch up; later records are
    #: in ``sink``).
    completed: list[Future[list[SegmentEntry]]] = field(default_factory=list)
    #: The open increment's end was reached; ``completed_end`` is that end.
    completed_end: int | None = None
    #: Snapshot mode: unassigned after reaching the end; stray messages are dropped.
    finished: bool = False
    #: The partition no longer exists on the source; removed after the next commit.
    retiring: bool = False
    #: The timestamp (ms) of the oldest record read and not yet committed (None: none).
    oldest_uncommitted_ms: int | None = None
    #: The partition as the consumer names it, to ask for its cached end offset.
    topic_partition: Any = None

    @property
    def key(self) -> TopicPartitionKey:
        return (self.topic, self.partition)

    @property
    def reached_end(self) -> bool:
        return self.completed_end is not None


class Copier:
    """Consumes the assigned partitions into segments; the runner decides when increments end."""

    def __init__(
        self,
        consumer: Consumer,
        storage: Storage,
        *,
        connection: KafkaConnection,
        backup_id: str,
        source_cluster: str,
        limits: SegmentLimits,
        scratch_dir: Path,
        follow: bool,
        buffer_memory_bytes: int,
        max_open_segments: int,
        segment_max_interval_secs: float,
        stall_timeout_secs: float,
        on_progress: Callable[[int, int], None] | None = None,
        metrics: BackupMetrics | None = None,
        keys: BackupKeys | None = None,
        throttle: Throttle | None = None,
    ) -> None:
        self.consumer = consumer
        #: ``backup.max_bytes_per_second`` (None: none): asked after every poll that read records.
        self.throttle = throttle if throttle is not None and throttle.limited else None
        #: Key and value bytes read since the last poll, counted only for the throttle.
        self._throttled_bytes = 0
        #: An encrypted backup's keys (None: segments are written in plaintext).
        self.keys = keys
        #: Counted per batch of records, the lag once a second (docs/observability.md).
        self.metrics = metrics or BackupMetrics(backup_id, mode="follow" if follow else "snapshot")
        self.storage = storage
        self.connection = connection
        self.backup_id = backup_id
        self.source_cluster = source_cluster
        self.limits = limits
        self.scratch_dir = scratch_dir
        self.follow = follow
        self.buffer_memory_bytes = buffer_memory_bytes
        self.max_open_segments = max_open_segments
        self.segment_max_interval_secs = segment_max_interval_secs
        self.stall_timeout_secs = stall_timeout_secs
        #: ``on_progress(records, data_bytes)`` after each poll: records read, and the Arrow bytes
        #: they became (keys, values, headers and origin columns), for the rate a bar shows.
        self.on_progress = on_progress
        self.arrow_bytes = 0
        self._reported_bytes = 0
        self.partitions: dict[TopicPartitionKey, PartitionCopy] = {}
        #: The open increment's run id (in its manifest and its segments' names), and the next
        #: increment's: in follow mode a partition that reached the end starts the next one's segments.
        self.run_id = new_run_id()
        self.next_run_id = new_run_id()
        self.records_read = 0
        self._share = limits.row_group_bytes
        self._open_writers: OrderedDict[TopicPartitionKey, PartitionCopy] = OrderedDict()
        #: Encodes row groups into segment files (Parquet, zstd) beside the consume loop.
        self.io = WriterThread()
        #: Checksums and uploads closed segment files, so encoding never waits for storage.
        self.uploads = WriterThread(max_queued_jobs=2, name="kafka-backup-upload")
        self._last_activity = time.monotonic()
        self._last_housekeeping = time.monotonic()

    # -- increments ------------------------------------------------------------------------------

    def start_increment(self, plans: Iterable[PartitionPlan]) -> None:
        """Fix the end of the open increment for every planned partition; assign new partitions.

        A partition already being copied continues (its plan's start is where the last
        increment ended); a new one is assigned at its fetch offset. A partition that is
        no longer planned (its topic was deleted) ends where it was read up to.
        """
        planned = {plan.key: plan for plan in plans}
        new_assignments = []
        for key, plan in planned.items():
            copy = self.partitions.get(key)
            if copy is None:
                copy = PartitionCopy(
                    topic=plan.topic,
                    partition=plan.partition,
                    start_offset=plan.start_offset,
                    log_start_offset=plan.log_start_offset,
                    next_offset=plan.fetch_offset,
                    end_offset=NO_END,
                    topic_partition=TopicPartition(plan.topic, plan.partition),
                )
                self.partitions[key] = copy
                if plan.end_offset is None or plan.fetch_offset < plan.end_offset or self.follow:
                    new_assignments.append(TopicPartition(plan.topic, plan.partition, plan.fetch_offset))
            elif copy.start_offset != plan.start_offset:
                raise AssertionError(
                    f"{key}: increment starts at {plan.start_offset}, copy at {copy.start_offset}"
                )
            copy.log_start_offset = plan.log_start_offset
            if copy.sink is None and not copy.finished:
                copy.sink = self._new_sink(copy, self.run_id)
            if plan.end_offset is not None:
                # Everything read so far existed before the end was read, so next_offset <= end;
                # should a broker ever say otherwise, the end is what was read.
                self._set_end(copy, max(plan.end_offset, copy.next_offset))
        self._retire_unplanned(planned)
        self._share = max(
            64 * 1024,
            min(self.limits.row_group_bytes, self.buffer_memory_bytes // max(1, len(self.partitions))),
        )
        if new_assignments:
            try:
                self.consumer.incremental_assign(new_assignments)
            except KafkaException as exc:
                raise translate_kafka_error(
                    exc, action="assign partitions", connection=self.connection
                ) from None
        self._last_activity = time.monotonic()
        self.refresh_lag()

    def _retire_unplanned(self, planned: Container[TopicPartitionKey]) -> None:
        """A partition being copied that the increment no longer plans ends where it was read up to."""
        for key, copy in self.partitions.items():
            if key not in planned and not copy.retiring:
                log.warning(
                    "%s/%d no longer exists on the source; its backup ends at offset %d",
                    *key,
                    copy.next_offset,
                    extra={"backup_id": self.backup_id, "topic": key[0], "partition": key[1]},
                )
                copy.retiring = True
                self._set_end(copy, copy.next_offset)

    def _new_sink(self, copy: PartitionCopy, run_id: str) -> Sink:
        writer = PartitionSegmentWriter(
            self.storage,
            backup_id=self.backup_id,
            run_id=run_id,
            source_cluster=self.source_cluster,
            topic=copy.topic,
            partition=copy.partition,
            limits=self.limits,
            scratch_dir=self.scratch_dir,
            uploader=self.uploads,
            on_stored=self._segment_stored,
            keys=self.keys,
        )
        return Sink(writer=writer)

    def _segment_stored(self, segment: SegmentEntry) -> None:
        self.metrics.segment_written(segment.topic, segment.size_bytes)

    def _set_end(self, copy: PartitionCopy, end: int) -> None:
        copy.end_offset = end
        if copy.next_offset >= end:
            self._reach_end(copy)

    def increment_complete(self) -> bool:
        return all(copy.reached_end for copy in self.partitions.values() if not copy.finished)

    def pending_partitions(self) -> list[TopicPartitionKey]:
        return [key for key, copy in self.partitions.items() if not copy.reached_end and not copy.finished]

    def _reach_end(self, copy: PartitionCopy) -> None:
        """The open increment has everything of this partition: upload its segments now."""
        end = copy.end_offset
        # Once per partition and run in snapshot mode; at every checkpoint in follow mode, where
        # a thousand partitions would flood -v.
        log.log(
            logging.DEBUG if self.follow else logging.INFO,
            "%s/%d: copied up to offset %d of the increment (started at %d)",
            copy.topic,
            copy.partition,
            end,
            copy.start_offset,
            extra={
                "backup_id": self.backup_id,
                "topic": copy.topic,
                "partition": copy.partition,
                "end_offset": end,
            },
        )
        sink = copy.sink
        if sink is not None:
            self._flush(copy, sink)
            copy.completed.append(self.io.submit(sink.writer.finish))
            self._open_writers.pop(copy.key, None)
        copy.completed_end = end
        copy.end_offset = NO_END
        copy.sink = self._new_sink(copy, self.next_run_id) if self.follow and not copy.retiring else None

    def take_increment(self, *, partial: bool = False) -> tuple[list[PartitionEntry], list[SegmentEntry]]:
        """The partition entries and segments of the open increment, which the caller commits.

        ``partial``: the run stops before the increment's ends were reached; each partition's
        range ends where it was read up to (everything below that is in the segments).
        """
        entries: list[PartitionEntry] = []
        segments: list[SegmentEntry] = []
        for key in sorted(self.partitions):
            copy = self.partitions[key]
            if copy.finished:
                continue
            if copy.reached_end and not partial:
                end = copy.completed_end
            elif partial:
                if copy.sink is not None:
                    self._flush(copy, copy.sink)
                    copy.completed.append(self.io.submit(copy.sink.writer.finish))
                    self._open_writers.pop(key, None)
                    copy.sink = None
                # A partition that reached its end in snapshot mode keeps that end (the records
                # dropped past it did not move next_offset); otherwise: where reading got to.
                end = max(copy.next_offset, copy.completed_end or 0)
            else:
                raise AssertionError(f"{key} has not reached the end of the increment")
            assert end is not None
            parts = [segment for future in copy.completed for segment in self.io.result(future)]
            entries.append(partition_entry(copy, end, parts))
            segments.extend(parts)
        return entries, segments

    def after_commit(self, entries: list[PartitionEntry]) -> None:
        """The increment is committed: the next one starts at its ends."""
        ends = {(entry.topic, entry.partition): entry.end_offset for entry in entries}
        self.run_id, self.next_run_id = self.next_run_id, new_run_id()
        for key in list(self.partitions):
            copy = self.partitions[key]
            if key in ends:
                copy.start_offset = ends[key]
            copy.completed = []
            copy.completed_end = None
            # What is read past the committed end (the next increment's sink) is all that waits now.
            copy.oldest_uncommitted_ms = copy.sink.first_timestamp_ms if copy.sink is not None else None
            if not self.follow:
                copy.finished = True
            if copy.retiring:
                del self.partitions[key]
                self._unassign([copy])
                self.metrics.forget_partition(copy.topic, copy.partition)
        self.refresh_lag()

    def _unassign(self, copies: list[PartitionCopy]) -> None:
        try:
            self.consumer.incremental_unassign([TopicPartition(c.topic, c.partition) for c in copies])
        except KafkaException as exc:
            log.debug("unassigning %s failed: %s", [c.key for c in copies], exc)

    def abort(self) -> None:
        """Drop every open segment file (nothing partial is uploaded)."""
        self.io.close(cancel=True)
        self.uploads.close(cancel=True)
        for copy in self.partitions.values():
            if copy.sink is not None:
                copy.sink.writer.abort()
                copy.sink = None

    @property
    def throttled_secs(self) -> float:
        """Seconds this copier waited on its rate limit."""
        return self.throttle.waited_secs if self.throttle is not None else 0.0

    def close(self) -> None:
        self.io.close()
        self.uploads.close()

    # -- consuming -------------------------------------------------------------------------------

    def poll(self, timeout: float = 0.5) -> int:
        """Consume one batch of messages; returns how many records were read."""
        consumer = self.consumer
        try:
            # Typed as Any: the per-message accessors are called millions of times, unchecked.
            messages: list[Any] = consumer.consume(num_messages=CONSUME_BATCH, timeout=timeout)
        except KafkaException as exc:
            raise translate_kafka_error(exc, action="consume", connection=self.connection) from None
        now = time.monotonic()
        if not messages:
            self.metrics.health.turned(progressed=False)
            self._check_stall(now)
            self._housekeeping(now)
            return 0
        read = self._take_one_run(messages)
        if read < 0:
            read = self._take_messages(messages)
        if read:
            self._last_activity = now
            self.metrics.source_answered()
            crash_point("backup:batch-read")
            crash_point("backup:records-read", read)
        else:
            self._check_stall(now)
        self.metrics.health.turned(progressed=read > 0)
        self.records_read += read
        if self.on_progress is not None:
            self.on_progress(read, self.arrow_bytes - self._reported_bytes)
            self._reported_bytes = self.arrow_bytes
        if self.throttle is not None and read:
            # After the batch is taken, before the next fetch: the consumer's prefetch is bounded,
            # so waiting here holds the bytes read from the source to the rate.
            self.throttle.acquire(records=read, data_bytes=self._throttled_bytes)
            self._throttled_bytes = 0
        self._housekeeping(now)
        return read

    def _take_one_run(self, messages: list[Any]) -> int:
        """Fast path: a batch that is all records of one partition, inside the increment.

        Often the case (the consumer hands out one partition's fetch at a time); checked and
        taken with C-level ``map``/``count`` calls instead of a Python step per message.
        Returns -1 when the batch needs the record-by-record path.
        """
        count = len(messages)
        # any(): KafkaError's == raises when compared with None, so list.count(None) cannot be used.
        if any(map(_error, messages)):
            return -1
        partition = messages[0].partition()
        topic = messages[0].topic()
        if list(map(_partition, messages)).count(partition) != count:
            return -1
        if list(map(_topic, messages)).count(topic) != count:
            return -1
        copy = self.partitions.get((topic, partition))
        if copy is None or copy.sink is None:
            return -1
        first, last = messages[0].offset(), messages[-1].offset()
        # Offsets increase within a partition; the writer checks that on every row group.
        if first < copy.next_offset or last >= copy.end_offset - 1:
            return -1
        copy.sink.pending.extend(messages)
        copy.next_offset = last + 1
        self._convert(copy, copy.sink)
        return count

    def _take_messages(self, messages: list[Any]) -> int:
        """Record by record: several partitions, errors or end-of-partition events, increment ends."""
        partitions = self.partitions
        touched: dict[TopicPartitionKey, PartitionCopy] = {}
        read = 0
        # Messages arrive in runs of one partition; the lookup is redone only when it changes.
        current_topic: str | None = None
        current_partition = -1
        copy: PartitionCopy | None = None
        pending: list[Any] = []
        last_wanted = -1
        next_offset = 0
        for message in messages:
            if message.error() is not None:
                if copy is not None and current_topic is not None:
                    copy.next_offset = next_offset
                self._on_error(message)
                current_topic = None  # the error may have changed this partition's state
                continue
            topic = message.topic()
            partition = message.partition()
            if partition != current_partition or topic != current_topic or copy is None:
                if copy is not None and current_topic is not None:
                    copy.next_offset = next_offset
                copy = partitions.get((topic, partition))
                if copy is None or copy.sink is None:
                    # Not (or no longer) copied: a partition past its end in snapshot mode.
                    current_topic = None
                    continue
                current_topic, current_partition = topic, partition
                touched[copy.key] = copy
                pending = copy.sink.pending
                last_wanted = copy.end_offset - 1
                next_offset = copy.next_offset
            offset = message.offset()
            read += 1
            if offset >= last_wanted or offset < next_offset:
                copy.next_offset = next_offset
                self._slow_path(copy, message)
                current_topic = None
                continue
            pending.append(message)
            next_offset = offset + 1
        if copy is not None and current_topic is not None:
            copy.next_offset = next_offset
        for copy in touched.values():
            if copy.sink is not None:
                self._convert(copy, copy.sink)
        return read

    def _slow_path(self, copy: PartitionCopy, message: Any) -> None:
        """A record at or past the increment's last offset, or one that goes back in the log."""
        offset = message.offset()
        if offset < copy.next_offset:
            raise KafkaOperationError(
                f"{copy.topic}/{copy.partition}: the source returned offset {offset} after "
                f"{copy.next_offset - 1}: the partition was truncated or re-created during the backup",
                hint="check the source topic; back it up under a new backup id if it was re-created",
            )
        if offset >= copy.end_offset:
            # Past the end: in follow mode it belongs to the next increment.
            self._reach_end(copy)
            if not self.follow or copy.sink is None:
                self._stop_fetching(copy)
                return
        sink = copy.sink
        assert sink is not None
        sink.pending.append(message)
        copy.next_offset = offset + 1
        if copy.next_offset >= copy.end_offset:
            self._reach_end(copy)
            if not self.follow:
                self._stop_fetching(copy)

    def _stop_fetching(self, copy: PartitionCopy) -> None:
        try:
            self.consumer.pause([TopicPartition(copy.topic, copy.partition)])
        except KafkaException as exc:
            log.debug("pausing %s/%d failed: %s", copy.topic, copy.partition, exc)

    def _on_error(self, message: Any) -> None:  # a confluent-kafka Message with an error
        error = message.error()
        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            copy = self.partitions.get((message.topic(), message.partition()))
            if copy is None or copy.sink is None:
                return
            self._last_activity = time.monotonic()
            self.metrics.source_answered()
            # Everything below the end-of-partition offset has been delivered (or was never
            # deliverable: aborted records and transaction markers under read_committed).
            end_of_log = message.offset()
            if end_of_log > copy.next_offset:
                copy.next_offset = end_of_log
            if copy.next_offset >= copy.end_offset:
                self._reach_end(copy)
                if not self.follow:
                    self._stop_fetching(copy)
            return
        if error.fatal() or code in _PARTITION_GONE_CODES:
            where = f"{message.topic()}/{message.partition()}" if message.topic() else "the source"
            raise translate_kafka_error(
                KafkaException(error), action=f"read {where}", connection=self.connection
            )
        # Transport errors and the like: librdkafka retries by itself; the stall check decides
        # when waiting has lasted too long.
        log.info("consumer: %s", error.str())
        self.metrics.source_error(error.name())

    def _check_stall(self, now: float) -> None:
        if now - self._last_activity < self.stall_timeout_secs:
            return
        pending = [key for key in self.pending_partitions() if self.partitions[key].end_offset != NO_END]
        if not pending:
            self._last_activity = now
            return
        shown = ", ".join(f"{t}/{p}" for t, p in pending[:5]) + (" ..." if len(pending) > 5 else "")
        raise KafkaUnreachableError(
            f"no record came from {','.join(self.connection.bootstrap_servers)} for "
            f"{self.stall_timeout_secs:g}s while {len(pending)} partition(s) still had records to copy "
            f"({shown})",
            hint="check that the brokers are up and reachable; "
            "raise backup.stall_timeout_secs for slow clusters",
        )

    def _convert(self, copy: PartitionCopy, sink: Sink) -> None:
        """This poll's messages of the partition become an Arrow batch; a full buffer a row group."""
        if sink.pending:
            if sink.first_timestamp_ms is None:
                sink.first_timestamp_ms = sink.pending[0].timestamp()[1]
                if copy.oldest_uncommitted_ms is None:
                    copy.oldest_uncommitted_ms = sink.first_timestamp_ms
            self.metrics.records_copied(copy.topic, len(sink.pending))
            batch = messages_to_batch(sink.pending, self.source_cluster, copy.topic, copy.partition)
            sink.pending = []
            sink.batches.append(batch)
            sink.buffered_bytes += batch.nbytes
            self.arrow_bytes += batch.nbytes
            if self.throttle is not None:
                self._throttled_bytes += key_value_bytes(batch)
        if sink.buffered_bytes >= self._share:
            self._flush(copy, sink)

    def _flush(self, copy: PartitionCopy, sink: Sink) -> None:
        """Hand everything the partition buffers to the writer thread as one row group."""
        if sink.pending:
            self._convert(copy, sink)
        if not sink.batches:
            return
        row_group = pa.Table.from_batches(sink.batches, schema=RECORD_SCHEMA)
        sink.batches = []
        sink.buffered_bytes = 0
        self.io.submit(sink.writer.write_batch, row_group)
        if sink.open_since is None:
            sink.open_since = time.monotonic()
        key = copy.key
        self._open_writers[key] = copy
        self._open_writers.move_to_end(key)
        while len(self._open_writers) > self.max_open_segments:
            _, oldest = self._open_writers.popitem(last=False)
            if oldest.sink is not None:
                self._roll(oldest.sink)

    def _roll(self, sink: Sink) -> None:
        sink.open_since = None
        self.io.submit(sink.writer.roll)

    def _housekeeping(self, now: float) -> None:
        """Once a second: close segments whose first record waited longer than segment_max_interval_ms.

        A partition's records count from when the loop first saw them buffered, so a quiet
        partition's few records still reach storage (in follow mode) within about that time.
        """
        if now - self._last_housekeeping < 1.0:
            return
        self._last_housekeeping = now
        self.io.check()
        self.uploads.check()
        self.refresh_lag()
        for key, copy in self.partitions.items():
            sink = copy.sink
            if sink is None:
                continue
            if sink.open_since is None:
                if sink.batches:
                    sink.open_since = now
                continue
            if now - sink.open_since >= self.segment_max_interval_secs:
                self._flush(copy, sink)
                self._roll(sink)
                self._open_writers.pop(key, None)

    def refresh_lag(self) -> None:
        """The backup lag of each partition, and whether records wait to be read (for /healthz).

        The live end is the end offset the consumer last heard of in a fetch answer (librdkafka
        keeps it, no request is sent; under read_committed it is the last stable offset), or
        what was read or fixed as an increment's end if that is further; the committed end is
        where the open increment starts.
        """
        waiting = False
        watermarks = self.consumer.get_watermark_offsets
        for copy in self.partitions.values():
            try:
                high = watermarks(copy.topic_partition, cached=True)[1]
            except KafkaException:
                high = -1  # not assigned any more (a retiring partition)
            known_end = copy.end_offset if copy.end_offset != NO_END else -1
            live_end = max(high, known_end, copy.next_offset)
            if not copy.finished and live_end > copy.next_offset:
                waiting = True
            self.metrics.partition_lag(
                copy.topic,
                copy.partition,
                records=max(0, live_end - copy.start_offset),
                oldest_timestamp_ms=copy.oldest_uncommitted_ms,
            )
        self.metrics.health.waiting(waiting)

    def position(self) -> dict[TopicPartitionKey, int]:
        return {key: copy.next_offset for key, copy in self.partitions.items()}


def key_value_bytes(batch: pa.RecordBatch) -> int:
    """Bytes of a batch's keys and values, what the rate limit counts (as the restore's does)."""
    return sum(int(pc.sum(pc.binary_length(batch.column(name))).as_py() or 0) for name in ("key", "value"))


def partition_entry(copy: PartitionCopy, end: int, segments: list[SegmentEntry]) -> PartitionEntry:
    return entry_of(copy.topic, copy.partition, copy.start_offset, end, copy.log_start_offset, segments)


def entry_of(
    topic: str,
    partition: int,
    start_offset: int,
    end_offset: int,
    log_start_offset: int,
    segments: list[SegmentEntry],
) -> PartitionEntry:
    """A partition's entry in a manifest: its range, and what its segments (in offset order) hold."""
    return PartitionEntry(
        topic=topic,
        partition=partition,
        start_offset=start_offset,
        end_offset=end_offset,
        log_start_offset=log_start_offset,
        record_count=sum(segment.record_count for segment in segments),
        first_offset=segments[0].first_offset if segments else None,
        last_offset=segments[-1].last_offset if segments else None,
        min_timestamp=min((s.min_timestamp for s in segments), default=None),
        max_timestamp=max((s.max_timestamp for s in segments), default=None),
    )
