"""Executing a restore plan: check the selection, create topics, produce, commit progress.

The hot path reads each Parquet batch column by column (``to_pylist`` per
column, never per row), builds each record's header list once, and hands it
to librdkafka. A background thread downloads, checksums and decodes the next
segment's batches while the main thread produces (both release the GIL), with a
bounded queue between them, so memory is bounded by a few batches whatever the
backup's size.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kbackup.core.errors import (
    BackupIntegrityError,
    InterruptedByUser,
    KafkaOperationError,
    KBackupError,
    PreconditionError,
    VerificationError,
)
from kbackup.core.faults import crash_point
from kbackup.core.gc_tuning import few_collections
from kbackup.core.kafka import (
    Admin,
    KafkaClients,
    KafkaError,
    KafkaException,
    Producer,
    kafka_error_of,
    translate_kafka_error,
)
from kbackup.core.logs import get_logger
from kbackup.core.progress import Progress
from kbackup.core.types import TopicPartitionKey
from kbackup.format.layout import object_key
from kbackup.format.origin import (
    OFFSET_HEADER,
    ORIGIN_HEADER_PREFIX,
    TIMESTAMP_HEADER,
    partition_headers,
)
from kbackup.format.restore_progress import (
    PROGRESS_PARTITION,
    PartitionProgress,
    encode_progress,
    progress_key,
)
from kbackup.format.segments import open_segment
from kbackup.restore.integrity import SegmentWork, remaining_segments, verify_work
from kbackup.restore.partitioner import partition_for_key, partition_for_null_key
from kbackup.restore.plan import PartitionPlan, RestorePlan
from kbackup.restore.progress_store import read_progress
from kbackup.restore.resume import find_landed
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.target import create_topics
from kbackup.storage import Storage

log = get_logger("restore")


#: Producer settings for throughput; ``restore.producer_properties`` and the target's
#: ``properties`` override them. Memory is bounded by the queue limits.
PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 200_000,
    "queue.buffering.max.kbytes": 65_536,
    "message.max.bytes": 16 * 1024 * 1024,
    "max.in.flight.requests.per.connection": 5,
    # Only failures produce delivery reports: no Python call per delivered record.
    "delivery.report.only.error": True,
}
#: At most this many records per Parquet batch handed to the producer loop ...
READ_BATCH_RECORDS = 8_192
#: ... and about this many bytes (uncompressed), so large records make small batches.
READ_BATCH_BYTES = 4 * 1024 * 1024
#: How often the producer loop serves librdkafka's callbacks (only failures report back).
POLL_INTERVAL_SECS = 0.25
#: Batches decoded ahead of the producer loop.
PREFETCH_BATCHES = 2
#: init_transactions errors after which ``exactly_once: auto`` falls back to the idempotent mode.
_NO_TRANSACTIONS = {
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
    "UNSUPPORTED_VERSION",
    "UNSUPPORTED_FOR_MESSAGE_FORMAT",
    "_NOT_IMPLEMENTED",
    "_UNSUPPORTED_FEATURE",
    "_TIMED_OUT",
    "COORDINATOR_NOT_AVAILABLE",
}


@dataclass
class TopicTotals:
    source_topic: str
    target_topic: str
    #: Records produced (and, in the exactly-once mode, committed) by this run.
    records: int = 0
    #: Key and value bytes of those records.
    bytes: int = 0
    #: Restored by earlier runs of the same restore (exactly-once progress), if known.
    earlier: int | None = 0
    #: Selected records this run had to restore, if known.
    expected: int | None = 0


@dataclass
class RestoreSummary:
    restore_id: str
    backup_id: str
    mode: str
    target: str
    topics: list[TopicTotals]
    created_topics: list[str]
    transactions: int
    seconds: float
    #: The restore continued where an earlier run stopped.
    resumed: bool
    #: Records found already on the target and not produced again (idempotent resume).
    already_landed: int
    #: Records whose timestamp was <= 0, produced with the restore time instead.
    timestamps_not_kept: int
    warnings: list[str] = field(default_factory=list)
    verified: bool = False

    @property
    def records(self) -> int:
        return sum(topic.records for topic in self.topics)

    @property
    def bytes(self) -> int:
        return sum(topic.bytes for topic in self.topics)

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "restore_id": self.restore_id,
            "backup_id": self.backup_id,
            "mode": self.mode,
            "target": self.target,
            "records": self.records,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "records_per_second": round(self.records_per_second, 1),
            "transactions": self.transactions,
            "resumed": self.resumed,
            "already_landed": self.already_landed,
            "timestamps_not_kept": self.timestamps_not_kept,
            "verified": self.verified,
            "created_topics": self.created_topics,
            "topics": [
                {
                    "source_topic": t.source_topic,
                    "target_topic": t.target_topic,
                    "records": t.records,
                    "bytes": t.bytes,
                    "restored_by_earlier_runs": t.earlier,
                    "expected": t.expected,
                }
                for t in self.topics
            ],
            "warnings": self.warnings,
        }

    def lines(self) -> list[str]:
        lines = [
            f"restored {self.records:,} record(s) ({self.bytes / 1e6:,.1f} MB of keys and values) "
            f"in {self.seconds:,.1f}s, {self.records_per_second:,.0f} records/s, mode {self.mode}"
            + (f", {self.transactions} transaction(s)" if self.mode == "exactly-once" else ""),
        ]
        if self.resumed:
            lines.append(
                "  continued an earlier run of the same restore"
                + (
                    f" ({self.already_landed:,} record(s) found already on the target)"
                    if self.already_landed
                    else ""
                )
            )
        for topic in self.topics:
            earlier = f", {topic.earlier:,} by earlier runs" if topic.earlier else ""
            lines.append(
                f"  {topic.source_topic} -> {topic.target_topic}: {topic.records:,} record(s){earlier}"
            )
        if self.created_topics:
            lines.append(f"  created topics: {', '.join(self.created_topics)}")
        if self.timestamps_not_kept:
            lines.append(
                f"  {self.timestamps_not_kept:,} record(s) had no timestamp (<= 0) and got the restore time"
            )
        for warning in self.warnings:
            lines.append(f"  warning: {warning}")
        return lines


@dataclass
class PartitionState:
    """Where the restore of one source partition stands during a run."""

    plan: PartitionPlan
    next_offset: int
    restored_records: int
    complete: bool = False
    #: Idempotent resume: per target partition, the highest source offset already there.
    landed: dict[int, int] = field(default_factory=dict)
    base_headers: list[tuple[str, bytes | None]] = field(default_factory=list)

    def progress(self) -> PartitionProgress:
        return PartitionProgress(
            source_topic=self.plan.source_topic,
            source_partition=self.plan.source_partition,
            target_topic=self.plan.target_topic,
            next_offset=self.next_offset,
            restored_records=self.restored_records,
            complete=self.complete,
        )


@dataclass
class ResumePoint:
    """Where each source partition starts in this run, and what an earlier run did."""

    states: dict[TopicPartitionKey, PartitionState]
    resumed: bool
    #: Records restored by earlier runs (exactly-once progress), per source topic.
    earlier: dict[str, int]
    #: Dry runs: progress records held by an open transaction.
    undecided: int = 0
    warnings: list[str] = field(default_factory=list)


def resume_point(
    plan: RestorePlan,
    clients: KafkaClients,
    settings: RestoreSettings,
    *,
    progress_topic_exists: bool,
    dry_run: bool = False,
) -> ResumePoint:
    """Read where earlier runs of this restore got to (progress topic, or target origin headers)."""
    states = {
        (p.source_topic, p.source_partition): PartitionState(
            plan=p,
            next_offset=p.offset_start,
            restored_records=0,
            base_headers=partition_headers(plan.source_cluster, p.source_topic, p.source_partition),
        )
        for p in plan.partitions
    }
    earlier: dict[str, int] = {}
    resumed = False
    undecided = 0
    stale: set[str] = set()
    if plan.mode == "exactly-once":
        if progress_topic_exists:
            read = read_progress(
                clients,
                plan.progress_topic,
                plan.restore_id,
                timeout=settings.timeout_secs,
                wait_for_open_transactions=not dry_run,
            )
            undecided = read.undecided
            entries = {key: entry for key, entry in read.entries.items() if key in states}
            stale = _topics_lost_since(plan, clients, entries)
            for key, entry in entries.items():
                state = states[key]
                if state.plan.target_topic in stale:
                    continue
                resumed = True
                state.next_offset = max(state.next_offset, entry.next_offset)
                state.restored_records = entry.restored_records
                state.complete = entry.complete and entry.next_offset >= state.plan.offset_end
                earlier[key[0]] = earlier.get(key[0], 0) + entry.restored_records
    elif plan.origin_headers:
        landed = find_landed(
            clients,
            plan.partitions,
            plan.source_cluster,
            timeout=settings.timeout_secs,
            missing_topics=frozenset(t.target_topic for t in plan.topics if t.create),
        )
        for key, state in states.items():
            found = landed.last_offsets(key)
            if not found:
                continue
            resumed = True
            state.landed = dict(found)
            fed = state.plan.target_partitions_fed()
            if all(q in found for q in fed):
                state.next_offset = max(state.next_offset, min(found[q] for q in fed) + 1)
    warnings = [
        f"target topic {topic} holds fewer records than earlier runs of this restore committed to it "
        "(deleted, or deleted and created again): it is restored from the start"
        for topic in sorted(stale)
    ]
    return ResumePoint(
        states=states, resumed=resumed, earlier=earlier, undecided=undecided, warnings=warnings
    )


def _topics_lost_since(
    plan: RestorePlan, clients: KafkaClients, entries: dict[TopicPartitionKey, PartitionProgress]
) -> set[str]:
    """Target topics whose records the progress counts are gone: the topic was deleted since.

    Every committed record takes a target offset and end offsets never go back, so a
    topic whose end offsets add up to fewer than the records committed into it is not
    the topic the progress speaks of.
    """
    committed: dict[str, int] = {}
    for entry in entries.values():
        committed[entry.target_topic] = committed.get(entry.target_topic, 0) + entry.restored_records
    counts = {topic.target_topic: topic.target_partitions for topic in plan.topics}
    creating = {topic.target_topic for topic in plan.topics if topic.create}
    lost: set[str] = set()
    kept = {topic: records for topic, records in committed.items() if records and topic in counts}
    lost.update(topic for topic in kept if topic in creating)
    # Records in open transactions count too: every one of them took an offset.
    ends = Admin(clients).list_offsets(
        [(topic, q) for topic in kept if topic not in creating for q in range(counts[topic])],
        "latest",
        read_committed=False,
    )
    for topic, records in kept.items():
        if topic not in creating and sum(end for (name, _), end in ends.items() if name == topic) < records:
            lost.add(topic)
    return lost


# ---------------------------------------------------------------------------
# Reading ahead.

_DONE = object()


class _SegmentEnd:
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
    ) -> None:
        self._storage = storage
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
                if not self._read_segment(work) or not self._put(_SegmentEnd(work)):
                    return
            self._put(_DONE)
        except BaseException as exc:  # handed to the main thread, which raises it
            self._put(exc)

    def _read_segment(self, work: SegmentWork) -> bool:
        """Hand over a segment's batches (after its size and SHA-256 are checked); False if stopped."""
        key = object_key(self._backup_id, work.segment.key)
        with open_segment(
            self._storage, self._backup_id, work.segment, scratch_dir=self._scratch_dir
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

    def __iter__(self) -> Iterator[tuple[SegmentWork, pa.RecordBatch] | _SegmentEnd]:
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


# ---------------------------------------------------------------------------
# The run.


class _StopRequest:
    """SIGINT/SIGTERM during a run: finish the current batch, commit, and exit 130."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.requested = True

    def __enter__(self) -> _StopRequest:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


class Restorer:
    """Runs one restore plan against the target."""

    def __init__(
        self,
        plan: RestorePlan,
        storage: Storage,
        clients: KafkaClients,
        settings: RestoreSettings,
        *,
        progress: Progress | None = None,
        scratch_dir: Path | None = None,
    ) -> None:
        self.plan = plan
        self.storage = storage
        self.clients = clients
        self.settings = settings
        self.progress = progress
        self.scratch_dir = scratch_dir
        self.mode = plan.mode
        self.warnings = list(plan.warnings)
        self.producer: Producer | None = None
        self.transactions = 0
        self._delivery_errors: list[str] = []
        self._dirty: dict[TopicPartitionKey, PartitionState] = {}
        self._tx_records = 0
        self._tx_started = 0.0
        self._timestamps_not_kept = 0
        self._already_landed = 0
        self._landed_by_topic: dict[str, int] = {}

    # -- producers -------------------------------------------------------

    def _producer_properties(self) -> dict[str, Any]:
        props: dict[str, Any] = dict(PRODUCER_TUNING)
        for key in self.clients.connection.properties:
            props.pop(key, None)  # the connection's own properties win over our tuning
        props.update(self.settings.producer_properties)
        props["on_delivery"] = self._on_delivery
        return props

    def _on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if error is not None and len(self._delivery_errors) < 5:
            where = f"{message.topic()}/{message.partition()}" if message is not None else "?"
            self._delivery_errors.append(f"{where}: {error.name()}: {error.str()}")

    def _start_transactional(self) -> Producer | None:
        """The transactional producer, fenced in; None when ``auto`` must fall back to idempotent."""
        producer = self.clients.producer(
            **self._producer_properties(),
            **{"transactional.id": self.plan.transactional_id, "transaction.timeout.ms": 60_000},
        )
        try:
            producer.init_transactions(self.settings.timeout_secs)
        except KafkaException as exc:
            error = kafka_error_of(exc)
            name = error.name() if error is not None else str(exc)
            if self.settings.exactly_once == "auto" and name in _NO_TRANSACTIONS:
                note = f"the target refused to start a transaction ({name})"
                self.warnings.append(f"exactly-once mode is not possible ({note}): restoring idempotently")
                self.mode = "idempotent"
                return None
            raise translate_kafka_error(
                exc, action="start the restore's transactions", connection=self.clients.connection
            ) from None
        return producer

    # -- the run ---------------------------------------------------------

    def run(self) -> RestoreSummary:
        started = time.monotonic()
        plan = self.plan
        if self.mode == "exactly-once":
            # First: fence any earlier run of this restore and abort its open transaction, so the
            # progress read next is final.
            self.producer = self._start_transactional()
            if self.producer is None:
                plan.mode = self.mode = "idempotent"
            self._phase("transactions started", started)
        point = resume_point(
            plan, self.clients, self.settings, progress_topic_exists=not plan.create_progress_topic
        )
        self.warnings.extend(point.warnings)
        self._phase("earlier runs' progress read", started)
        work: list[SegmentWork] = []
        for state in point.states.values():
            work.extend(remaining_segments(state.plan, state.next_offset))
        # Nothing is written before the broker accepted every topic to create and every segment
        # still to read is checked.
        with_progress_topic = self.mode == "exactly-once" and plan.create_progress_topic
        create_topics(self.clients, plan, progress_topic=with_progress_topic, validate_only=True)
        counts = self._verify(work)
        self._phase(f"{len(work)} segment(s) checked", started)
        created = create_topics(self.clients, plan, progress_topic=with_progress_topic)
        self._phase("topics created", started)
        if self.producer is None:
            # A record that fails for good must stop the run rather than leave a gap that a later
            # record hides from the resume scan: librdkafka raises a fatal error instead. Its
            # guarantee does not cover message timeouts, so records never time out; a stalled
            # target is detected by restore.timeout_secs instead.
            props = {"message.timeout.ms": 0, **self._producer_properties(), "enable.gapless.guarantee": True}
            self.producer = self.clients.producer(**props)
        totals = {
            t.source_topic: TopicTotals(
                t.source_topic, t.target_topic, earlier=point.earlier.get(t.source_topic, 0)
            )
            for t in plan.topics
        }
        for topic_totals in totals.values():
            topic_totals.expected = 0
        for item in work:
            topic_totals = totals[item.partition.source_topic]
            count = counts.get(item.segment.key)
            if count is None or topic_totals.expected is None:
                topic_totals.expected = None
            else:
                topic_totals.expected += count
        if self.mode == "idempotent":
            for topic_totals in totals.values():
                topic_totals.earlier = None if point.resumed else 0

        with _StopRequest() as stop, self.progress or Progress(enabled=False) as bars:
            tasks = {
                name: bars.task(f"restore {t.source_topic} -> {t.target_topic}", total=t.expected)
                for name, t in totals.items()
            }
            with few_collections():
                self._produce_all(point, work, totals, tasks, stop)
        self._phase("records produced and committed", started)
        if self.mode == "exactly-once" and any(t.records for t in totals.values()):
            self._wait_until_visible([t.target_topic for t in plan.topics if totals[t.source_topic].records])
            self._phase("commit markers written", started)
        seconds = time.monotonic() - started
        summary = RestoreSummary(
            restore_id=plan.restore_id,
            backup_id=plan.backup_id,
            mode=self.mode,
            target=plan.target,
            topics=list(totals.values()),
            created_topics=created,
            transactions=self.transactions,
            seconds=seconds,
            resumed=point.resumed,
            already_landed=self._already_landed,
            timestamps_not_kept=self._timestamps_not_kept,
            warnings=self.warnings,
        )
        self._check_counts(summary)
        return summary

    @staticmethod
    def _phase(what: str, started: float) -> None:
        log.info("%s after %.2fs", what, time.monotonic() - started)

    def _wait_until_visible(self, topics: list[str]) -> None:
        """Return only once read_committed consumers see every committed record.

        A commit returns when the coordinator has decided it; the markers that make
        the records readable reach each partition a moment later. Waiting for every
        partition's last stable offset to reach its end lets the next step (the
        mapping stage, a check) read the restored topics at once.
        """
        partitions = [
            (topic, q)
            for topic in topics
            for q in range(next(t.target_partitions for t in self.plan.topics if t.target_topic == topic))
        ]
        admin = Admin(self.clients)
        deadline = time.monotonic() + self.settings.timeout_secs
        try:
            ends = admin.list_offsets(partitions, "latest", read_committed=False)
            pending = sorted(partitions)
            while pending:
                stable = admin.list_offsets(pending, "latest", read_committed=True)
                pending = [key for key in pending if stable[key] < ends[key]]
                if pending and time.monotonic() > deadline:
                    topic, partition = pending[0]
                    self.warnings.append(
                        f"{topic}/{partition}: committed records were not yet "
                        f"readable with read_committed after {self.settings.timeout_secs:g}s"
                    )
                    return
                if pending:
                    time.sleep(0.05)
        except KBackupError as exc:
            log.warning("could not check that the restored records are readable: %s", exc)

    def _verify(self, work: list[SegmentWork]) -> dict[str, int]:
        bar_total = len(work)
        with self.progress or Progress(enabled=False) as bars:
            task = bars.task("check backup segments", total=bar_total)
            return verify_work(
                self.storage,
                self.plan.backup_id,
                work,
                checksums=self.settings.verify_checksums,
                scratch_dir=self.scratch_dir,
                on_segment=lambda _item: task.advance(),
            )

    def _check_counts(self, summary: RestoreSummary) -> None:
        for topic in summary.topics:
            if topic.expected is None:
                continue
            done = topic.records + (self._landed_by_topic.get(topic.source_topic, 0))
            if done != topic.expected:
                raise VerificationError(
                    f"topic {topic.source_topic}: {done} record(s) restored, the backup selection holds "
                    f"{topic.expected}",
                    hint="run the same command again; report this if it repeats",
                )
        summary.verified = all(topic.expected is not None for topic in summary.topics)

    def _produce_all(
        self,
        point: ResumePoint,
        work: list[SegmentWork],
        totals: dict[str, TopicTotals],
        tasks: dict[str, Any],
        stop: _StopRequest,
    ) -> None:
        assert self.producer is not None
        producer = self.producer
        transactional = self.mode == "exactly-once"
        last_work_of: dict[TopicPartitionKey, SegmentWork] = {}
        for item in work:
            last_work_of[(item.partition.source_topic, item.partition.source_partition)] = item
        if transactional:
            producer.begin_transaction()
            self._tx_started = time.monotonic()
            # Partitions with nothing (left) to restore are recorded as complete in the first commit.
            for key, state in point.states.items():
                if key not in last_work_of and not state.complete:
                    state.next_offset = max(state.next_offset, state.plan.offset_end)
                    state.complete = True
                    self._dirty[key] = state
        batch_records = READ_BATCH_RECORDS
        if transactional:
            batch_records = max(64, min(READ_BATCH_RECORDS, self.settings.transaction_max_records))
        last_poll = time.monotonic()
        reader = PrefetchingReader(
            self.storage, self.plan.backup_id, work, batch_records=batch_records, scratch_dir=self.scratch_dir
        )
        try:
            for entry in reader:
                if isinstance(entry, _SegmentEnd):
                    key = (entry.work.partition.source_topic, entry.work.partition.source_partition)
                    if last_work_of.get(key) is entry.work:
                        state = point.states[key]
                        state.next_offset = max(state.next_offset, state.plan.offset_end)
                        state.complete = True
                        self._dirty[key] = state
                    continue
                segment_work, batch = entry
                partition = segment_work.partition
                key = (partition.source_topic, partition.source_partition)
                state = point.states[key]
                produced, produced_bytes = self._restore_batch(state, batch)
                topic_totals = totals[partition.source_topic]
                topic_totals.records += produced
                topic_totals.bytes += produced_bytes
                tasks[partition.source_topic].advance(produced)
                self._dirty[key] = state
                self._tx_records += produced
                now = time.monotonic()
                if now - last_poll >= POLL_INTERVAL_SECS:
                    # poll() hands the GIL over, which can cost a thread switch: not on every batch.
                    producer.poll(0)
                    last_poll = now
                    self._raise_delivery_errors()
                if transactional and (
                    self._tx_records >= self.settings.transaction_max_records
                    or (time.monotonic() - self._tx_started) * 1000 >= self.settings.transaction_max_ms
                ):
                    self._commit(begin_next=True)
                if stop.requested:
                    self._finish(transactional)
                    raise InterruptedByUser(
                        "restore stopped by a signal after committing what it had produced",
                        hint="run the same command again to continue",
                    )
            self._finish(transactional)
        except KBackupError:
            self._abandon(transactional)
            raise
        except KafkaException as exc:
            self._abandon(transactional)
            raise self._translate(exc, "produce records") from None
        finally:
            reader.close()
        for name, landed in self._landed_by_topic.items():
            log.info("%s: %d record(s) were already on the target", name, landed)

    def _restore_batch(self, state: PartitionState, batch: pa.RecordBatch) -> tuple[int, int]:
        """Produce the selected records of one batch; (records produced, key+value bytes)."""
        plan = state.plan
        offsets_column = batch.column(3)
        batch_last = offsets_column[-1].as_py()
        mask = plan.record_filter.mask(offsets_column, batch.column(4), state.next_offset)
        if mask is not None:
            batch = batch.filter(mask)
        state.next_offset = max(state.next_offset, min(batch_last + 1, plan.offset_end))
        if batch.num_rows == 0:
            return 0, 0
        offsets: list[int] = batch.column(3).to_pylist()
        timestamps: list[int] = batch.column(4).to_pylist()
        keys: list[bytes | None] = batch.column(6).to_pylist()
        values: list[bytes | None] = batch.column(7).to_pylist()
        own = self._own_headers(batch.column(8))
        targets = self._targets(plan, keys, offsets)
        if state.landed:
            keep = [
                i
                for i, (offset, target) in enumerate(zip(offsets, targets, strict=True))
                if offset > state.landed.get(target, -1)
            ]
            if len(keep) < len(offsets):
                skipped = len(offsets) - len(keep)
                self._already_landed += skipped
                self._landed_by_topic[plan.source_topic] = (
                    self._landed_by_topic.get(plan.source_topic, 0) + skipped
                )
                offsets = [offsets[i] for i in keep]
                timestamps = [timestamps[i] for i in keep]
                keys = [keys[i] for i in keep]
                values = [values[i] for i in keep]
                targets = [targets[i] for i in keep]
                if own is not None:
                    own = [own[i] for i in keep]
                batch = batch.take(pa.array(keep, pa.int64()))
            if not offsets:
                return 0, 0
        produced = self._produce_records(state, offsets, timestamps, keys, values, own, targets)
        state.restored_records += produced
        size = 0
        for column in (batch.column(6), batch.column(7)):
            lengths = pc.sum(pc.binary_length(column)).as_py()
            size += int(lengths or 0)
        return produced, size

    def _targets(self, plan: PartitionPlan, keys: list[bytes | None], offsets: list[int]) -> list[int]:
        if plan.target_partition is not None:
            return [plan.target_partition] * len(keys)
        count, source = plan.target_partitions, plan.source_partition
        return [
            partition_for_key(key, count)
            if key is not None
            else partition_for_null_key(source, offset, count)
            for key, offset in zip(keys, offsets, strict=True)
        ]

    def _own_headers(self, column: pa.Array) -> list[list[tuple[str, bytes | None]]] | None:
        """Each record's own headers (minus x-kafka-backup-* when stamping origin); None if none has any."""
        flat = column.flatten()
        if len(flat) == 0:
            return None
        names: list[str] = flat.field("key").to_pylist()
        values: list[bytes | None] = flat.field("value").to_pylist()
        lengths: list[int] = pc.list_value_length(column).to_pylist()
        strip = self.plan.origin_headers
        result: list[list[tuple[str, bytes | None]]] = []
        position = 0
        for length in lengths:
            end = position + length
            pairs = list(zip(names[position:end], values[position:end], strict=True))
            position = end
            if strip:
                pairs = [pair for pair in pairs if not pair[0].startswith(ORIGIN_HEADER_PREFIX)]
            result.append(pairs)
        return result

    def _produce_records(
        self,
        state: PartitionState,
        offsets: list[int],
        timestamps: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        own: list[list[tuple[str, bytes | None]]] | None,
        targets: list[int],
    ) -> int:
        assert self.producer is not None
        topic = state.plan.target_topic
        base = state.base_headers
        stamp = self.plan.origin_headers
        # librdkafka takes header values of None, which its type stub does not say.
        send: Any = self.producer.produce
        if stamp and own is None and min(timestamps) > 0:
            return self._produce_plain(send, topic, base, offsets, timestamps, keys, values, targets)
        own_iter: Iterator[list[tuple[str, bytes | None]]] = (
            iter(own) if own is not None else itertools.repeat([])
        )
        count = 0
        for offset, timestamp, key, value, target, headers in zip(
            offsets, timestamps, keys, values, targets, own_iter, strict=False
        ):
            if stamp:
                record_headers: list[tuple[str, bytes | None]] | None = [
                    *headers,
                    *base,
                    (OFFSET_HEADER, b"%d" % offset),
                    (TIMESTAMP_HEADER, b"%d" % timestamp),
                ]
            else:
                record_headers = headers or None
            if timestamp <= 0:
                # librdkafka reads 0 as "now": a record without a timestamp gets the restore time.
                self._timestamps_not_kept += 1
                timestamp = 0
            try:
                send(topic, value, key, partition=target, timestamp=timestamp, headers=record_headers)
            except BufferError:
                self._wait_until_sent(send, topic, value, key, target, timestamp, record_headers)
            count += 1
        return count

    def _produce_plain(
        self,
        send: Any,
        topic: str,
        base: list[tuple[str, bytes | None]],
        offsets: list[int],
        timestamps: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        targets: list[int],
    ) -> int:
        """The common case, kept lean: no own headers, origin headers on, every timestamp usable."""
        cluster, source_topic, source_partition = base
        for offset, timestamp, key, value, target in zip(
            offsets, timestamps, keys, values, targets, strict=True
        ):
            headers = [
                cluster,
                source_topic,
                source_partition,
                (OFFSET_HEADER, b"%d" % offset),
                (TIMESTAMP_HEADER, b"%d" % timestamp),
            ]
            try:
                send(topic, value, key, partition=target, timestamp=timestamp, headers=headers)
            except BufferError:
                self._wait_until_sent(send, topic, value, key, target, timestamp, headers)
        return len(offsets)

    def _wait_until_sent(self, send: Callable[..., None], topic: str, *record: Any) -> None:
        """The producer's queue is full: serve deliveries until this record fits."""
        assert self.producer is not None
        value, key, partition, timestamp, headers = record
        deadline = time.monotonic() + self.settings.timeout_secs
        while True:
            self.producer.poll(0.05)
            self._raise_delivery_errors()
            if time.monotonic() > deadline:
                raise KafkaOperationError(
                    f"{self.plan.target} accepted no record for {self.settings.timeout_secs:g}s "
                    "(the producer's queue stayed full)",
                    hint="check the target cluster; running the same command again continues",
                    retryable=True,
                )
            try:
                send(topic, value, key, partition=partition, timestamp=timestamp, headers=headers)
                return
            except BufferError:
                continue

    def _raise_delivery_errors(self) -> None:
        if self._delivery_errors:
            raise KafkaOperationError(
                f"records could not be delivered to {self.plan.target}: {'; '.join(self._delivery_errors)}",
                hint="running the same command again continues where the restore stopped",
                retryable=True,
            )

    def _commit(self, *, begin_next: bool) -> None:
        """Produce the advanced partitions' progress into the transaction, and commit it."""
        assert self.producer is not None
        producer = self.producer
        for state in self._dirty.values():
            producer.produce(
                self.plan.progress_topic,
                encode_progress(
                    self.plan.restore_id, self.plan.backup_id, self.plan.source_cluster, state.progress()
                ),
                progress_key(self.plan.restore_id, state.plan.source_topic, state.plan.source_partition),
                partition=PROGRESS_PARTITION,
            )
        deadline = time.monotonic() + self.settings.timeout_secs
        while True:
            try:
                producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                break
            except KafkaException as exc:
                error = kafka_error_of(exc)
                if error is not None and error.retriable() and time.monotonic() < deadline:
                    continue
                raise
        self.transactions += 1
        crash_point("restore:after-transaction")
        self._raise_delivery_errors()
        self._dirty.clear()
        self._tx_records = 0
        if begin_next:
            producer.begin_transaction()
            self._tx_started = time.monotonic()

    def _finish(self, transactional: bool) -> None:
        assert self.producer is not None
        if transactional:
            if self._dirty or self._tx_records:
                self._commit(begin_next=False)
            else:
                self.producer.abort_transaction(self.settings.timeout_secs)  # an empty transaction
            return
        remaining = self.producer.flush(self.settings.timeout_secs)
        self._raise_delivery_errors()
        if remaining:
            raise KafkaOperationError(
                f"{remaining} record(s) were not acknowledged by {self.plan.target} within "
                f"{self.settings.timeout_secs:g}s",
                hint="running the same command again continues where the restore stopped",
                retryable=True,
            )

    def _abandon(self, transactional: bool) -> None:
        """After a failure: abort the open transaction (its records are never visible)."""
        if self.producer is None:
            return
        if transactional:
            with contextlib.suppress(Exception):
                self.producer.abort_transaction(10)
        else:
            with contextlib.suppress(Exception):
                self.producer.flush(10)

    def _translate(self, exc: KafkaException, action: str) -> KBackupError:
        error = kafka_error_of(exc)
        if error is not None and error.name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"):
            return PreconditionError(
                f"another run of the same restore (transactional.id {self.plan.transactional_id}) took over "
                f"on {self.plan.target}; this one stopped without committing its open transaction",
                hint="let the other run finish, or stop it and run the command again",
            )
        translated = translate_kafka_error(exc, action=action, connection=self.clients.connection)
        translated.retryable = True
        translated.hint = (
            translated.hint or "running the same command again continues where the restore stopped"
        )
        return translated
