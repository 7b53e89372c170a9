"""The restore's producer on the target: fencing, transactions with progress, delivery, shutdown.

In the exactly-once mode records and the progress records that say how far the restore got are
committed in one Kafka transaction, so a re-run continues exactly where the last commit left off.
Without transactions (the idempotent mode) the producer's gapless guarantee makes a record that
fails for good stop the run instead of leaving a hole that a later record hides.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kbackup.core.errors import KafkaOperationError, KBackupError, PreconditionError
from kbackup.core.faults import crash_point
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
from kbackup.format.origin import Header
from kbackup.format.restore_progress import (
    PROGRESS_PARTITION,
    PartitionProgress,
    encode_progress,
    progress_key,
)
from kbackup.restore.batches import BatchRecords
from kbackup.restore.metrics import RestoreMetrics
from kbackup.restore.plan import Mode, RestorePlan
from kbackup.restore.settings import DEFAULT_PRODUCER_COMPRESSION, RestoreSettings

#: Producer settings for throughput, with ``restore.compression``; ``restore.producer_properties``
#: and the target's ``properties`` override them. Memory is bounded by the queue limits.
PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 200_000,
    "queue.buffering.max.kbytes": 65_536,
    "message.max.bytes": 16 * 1024 * 1024,
    "max.in.flight.requests.per.connection": 5,
    # Only failures produce delivery reports: no Python call per delivered record.
    "delivery.report.only.error": True,
}


def producer_tuning(compression: str = DEFAULT_PRODUCER_COMPRESSION) -> dict[str, Any]:
    """The restore producer's throughput settings with ``restore.compression`` (the benchmarks'
    references take them from here)."""
    return {**PRODUCER_TUNING, "compression.type": compression}


#: How often the producer loop serves librdkafka's callbacks (only failures report back).
POLL_INTERVAL_SECS = 0.25
#: While the target does not acknowledge, how often the wait says so (and why, when it can tell).
STALL_REPORT_SECS = 10.0
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

log = get_logger("restore")


class TargetWriter:
    """Produces one restore's records into the target."""

    def __init__(
        self,
        plan: RestorePlan,
        clients: KafkaClients,
        settings: RestoreSettings,
        warnings: list[str],
        *,
        metrics: RestoreMetrics | None = None,
    ) -> None:
        self.plan = plan
        self.metrics = metrics
        self.clients = clients
        self.settings = settings
        #: Where a fall-back to the idempotent mode is said.
        self.warnings = warnings
        #: The mode of this run: the plan's, unless ``exactly_once: auto`` found no transactions.
        self.mode: Mode = plan.mode
        self.producer: Producer | None = None
        self.transactions = 0
        #: Records whose timestamp was <= 0, produced with the restore time instead.
        self.timestamps_not_kept = 0
        self._delivery_errors: list[str] = []
        self._tx_records = 0
        self._tx_started = 0.0
        self._last_poll = 0.0
        #: Per target topic, the partitions this producer has written a record to (see
        #: :meth:`_confirm_first_writes`).
        self._written: dict[str, set[int]] = {}

    @property
    def transactional(self) -> bool:
        return self.mode == "exactly-once"

    def _producer_properties(self) -> dict[str, Any]:
        props = producer_tuning(self.settings.compression)
        for key in self.clients.connection.properties:
            props.pop(key, None)  # the connection's own properties win over our tuning
        props.update(self.settings.producer_properties)
        props["on_delivery"] = self._on_delivery
        return props

    def _on_delivery(self, error: KafkaError | None, message: Any) -> None:
        if error is not None and len(self._delivery_errors) < 5:
            where = f"{message.topic()}/{message.partition()}" if message is not None else "?"
            self._delivery_errors.append(f"{where}: {error.name()}: {error.str()}")

    # -- starting ---------------------------------------------------------------------------------

    def fence(self) -> Mode:
        """In the exactly-once mode: start the transactional producer, which fences any earlier run
        of this restore and aborts its open transaction (so progress read after this is final).
        Returns the mode of this run (``auto`` falls back to idempotent, with a warning)."""
        if not self.transactional:
            return self.mode
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
                return self.mode
            raise translate_kafka_error(
                exc, action="start the restore's transactions", connection=self.clients.connection
            ) from None
        self.producer = producer
        return self.mode

    def open(self) -> None:
        """Ready to produce: the idempotent producer (the transactional one is made by fence)."""
        if self.producer is None:
            # A record that fails for good must stop the run rather than leave a gap that a later
            # record hides from the resume scan: librdkafka raises a fatal error instead. Its
            # guarantee does not cover message timeouts, so records never time out; a stalled
            # target is detected by restore.timeout_secs instead.
            props = {"message.timeout.ms": 0, **self._producer_properties(), "enable.gapless.guarantee": True}
            self.producer = self.clients.producer(**props)
        if self.transactional:
            self.producer.begin_transaction()
            self._tx_started = time.monotonic()
        self._last_poll = time.monotonic()

    # -- producing --------------------------------------------------------------------------------

    def produce(self, topic: str, records: BatchRecords) -> int:
        """Hand the records to the producer (a full queue waits for deliveries); how many."""
        assert self.producer is not None
        columns = _Columns(records.timestamps, records.keys, records.values, records.targets, records.headers)
        first = self._first_writes(topic, records.targets)
        if first:
            self._send(topic, columns.pick(first))
            self._confirm_first_writes(topic, {records.targets[i] for i in first})
            chosen = set(first)
            columns = columns.pick([i for i in range(len(records.targets)) if i not in chosen])
        if columns.targets:
            self._send(topic, columns)
        produced = len(records.offsets)
        self._tx_records += produced
        return produced

    def _first_writes(self, topic: str, targets: list[int]) -> list[int]:
        """The index of the first record to each partition of ``topic`` this producer has not written."""
        written = self._written.setdefault(topic, set())
        new = set(targets) - written
        if not new:
            return []
        first: dict[int, int] = {}
        for index, target in enumerate(targets):
            if target in new and target not in first:
                first[target] = index
                if len(first) == len(new):
                    break
        return sorted(first.values())

    def _confirm_first_writes(self, topic: str, partitions: set[int]) -> None:
        """Wait until the first record to each of ``partitions`` is written, before any other.

        A broker accepts any sequence number as the first of a producer it has no state for on a
        partition. So when the first batch to a partition fails with a retriable error (a topic
        just created whose leader is not ready, a leader moving) and the next batch, already in
        flight, is written, librdkafka takes the next batch's success as proof that the first one
        was written too, and never sends it again: the record is lost and no delivery report says
        so (confluent-kafka-go #921). Seen here: one in ten restores of a new topic on a loaded
        machine lost its first record while the run reported it restored. Once one record of this
        producer is on the partition, the broker checks every later sequence number.
        """
        assert self.producer is not None
        self._flush_all()
        self._written.setdefault(topic, set()).update(partitions)

    def _flush_all(self) -> None:
        """Wait until every record handed over is acknowledged; a failed one stops the run."""
        assert self.producer is not None
        deadline = time.monotonic() + self.settings.timeout_secs
        while remaining := self.producer.flush(min(STALL_REPORT_SECS, max(0.0, deadline - time.monotonic()))):
            self.raise_delivery_errors()
            why = self._why_not_acknowledged()
            if time.monotonic() >= deadline:
                raise KafkaOperationError(
                    f"{remaining} record(s) were not acknowledged by {self.plan.target} within "
                    f"{self.settings.timeout_secs:g}s{why}",
                    hint="running the same command again continues where the restore stopped",
                    retryable=True,
                )
            self._report_wait(f"{remaining} record(s) not acknowledged yet{why}")
        self.raise_delivery_errors()

    def _send(self, topic: str, columns: _Columns) -> None:
        assert self.producer is not None
        # librdkafka takes header values of None, which its type stub does not say.
        send: Any = self.producer.produce
        headers = columns.headers if columns.headers is not None else itertools.repeat(None)
        rows = zip(columns.timestamps, columns.keys, columns.values, columns.targets, headers, strict=False)
        if min(columns.timestamps) > 0:
            for timestamp, key, value, target, record_headers in rows:
                try:
                    send(topic, value, key, partition=target, timestamp=timestamp, headers=record_headers)
                except BufferError:
                    self._wait_until_sent(send, topic, value, key, target, timestamp, record_headers)
        else:
            for timestamp, key, value, target, record_headers in rows:
                if timestamp <= 0:
                    # librdkafka reads 0 as "now": a record without a timestamp gets the restore time.
                    self.timestamps_not_kept += 1
                    timestamp = 0
                try:
                    send(
                        topic,
                        value,
                        key,
                        partition=target,
                        timestamp=timestamp,
                        headers=record_headers or None,
                    )
                except BufferError:
                    self._wait_until_sent(send, topic, value, key, target, timestamp, record_headers or None)

    def _wait_until_sent(self, send: Callable[..., None], topic: str, *record: Any) -> None:
        """The producer's queue is full: serve deliveries until this record fits."""
        assert self.producer is not None
        value, key, partition, timestamp, headers = record
        deadline = time.monotonic() + self.settings.timeout_secs
        next_report = time.monotonic() + STALL_REPORT_SECS
        while True:
            self.producer.poll(0.05)
            self.raise_delivery_errors()
            if time.monotonic() > deadline:
                raise KafkaOperationError(
                    f"{self.plan.target} accepted no record for {self.settings.timeout_secs:g}s "
                    f"(the producer's queue stayed full){self._why_not_acknowledged()}",
                    hint="check the target cluster; running the same command again continues",
                    retryable=True,
                )
            if time.monotonic() > next_report:
                self._report_wait(f"room in the producer's queue{self._why_not_acknowledged()}")
                next_report = time.monotonic() + STALL_REPORT_SECS
            try:
                send(topic, value, key, partition=partition, timestamp=timestamp, headers=headers)
                return
            except BufferError:
                continue

    def serve_deliveries(self) -> None:
        """Every POLL_INTERVAL_SECS: serve librdkafka's callbacks and stop at a failed delivery.
        (poll() hands the GIL over, which can cost a thread switch: not on every batch.)"""
        assert self.producer is not None
        now = time.monotonic()
        if now - self._last_poll >= POLL_INTERVAL_SECS:
            self.producer.poll(0)
            self._last_poll = now
            self.raise_delivery_errors()

    def raise_delivery_errors(self) -> None:
        if self._delivery_errors:
            raise KafkaOperationError(
                f"records could not be delivered to {self.plan.target}: {'; '.join(self._delivery_errors)}",
                hint="running the same command again continues where the restore stopped",
                retryable=True,
            )

    def _report_wait(self, what: str) -> None:
        log.warning(
            "waiting for %s: %s; the restore goes on once it answers, or stops after "
            "restore.timeout_secs (%gs)",
            self.plan.target,
            what,
            self.settings.timeout_secs,
            extra={"backup_id": self.plan.backup_id, "restore_id": self.plan.restore_id},
        )

    def _why_not_acknowledged(self) -> str:
        """The written partitions with fewer in-sync replicas than their min.insync.replicas, where
        every acks=all write is refused with NOT_ENOUGH_REPLICAS, which the producer retries
        without a word; "" when none is short (or the target cannot say now)."""
        try:
            short = _short_of_replicas(Admin(self.clients, retry_secs=0), sorted(self._written))
        except KBackupError:
            return ""
        if not short:
            return ""
        more = f" and {len(short) - 5} more" if len(short) > 5 else ""
        return (
            f" (NOT_ENOUGH_REPLICAS: {'; '.join(short[:5])}{more}: writes wait until enough replicas "
            "are back in sync)"
        )

    # -- committing -------------------------------------------------------------------------------

    def transaction_due(self, *, after_secs: float = 0.0) -> bool:
        """The open transaction is to be committed now (``after_secs``: or would be by then)."""
        return self.transactional and (
            self._tx_records >= self.settings.transaction_max_records
            or (time.monotonic() + after_secs - self._tx_started) * 1000 >= self.settings.transaction_max_ms
        )

    def commit(self, progress: Iterable[PartitionProgress], *, begin_next: bool) -> None:
        """Produce the advanced partitions' progress into the transaction, and commit it."""
        assert self.producer is not None
        producer = self.producer
        plan = self.plan
        for item in progress:
            producer.produce(
                plan.progress_topic,
                encode_progress(plan.restore_id, plan.backup_id, plan.source_cluster, item),
                progress_key(plan.restore_id, item.source_topic, item.source_partition),
                partition=PROGRESS_PARTITION,
            )
            if PROGRESS_PARTITION not in self._written.get(plan.progress_topic, ()):
                self._confirm_first_writes(plan.progress_topic, {PROGRESS_PARTITION})
        deadline = time.monotonic() + self.settings.timeout_secs
        while True:
            try:
                producer.commit_transaction(max(1.0, min(STALL_REPORT_SECS, deadline - time.monotonic())))
                break
            except KafkaException as exc:
                error = kafka_error_of(exc)
                if error is not None and error.retriable() and time.monotonic() < deadline:
                    self._report_wait(
                        f"the transaction not committed yet ({error.name()}){self._why_not_acknowledged()}"
                    )
                    continue
                raise
        self.transactions += 1
        if self.metrics is not None:
            self.metrics.transaction_committed()
        crash_point("restore:after-transaction")
        self.raise_delivery_errors()
        self._tx_records = 0
        if begin_next:
            producer.begin_transaction()
            self._tx_started = time.monotonic()

    def finish(self, progress: list[PartitionProgress]) -> None:
        """Commit the last transaction (with ``progress``), or wait for every record's delivery."""
        assert self.producer is not None
        if self.transactional:
            if progress or self._tx_records:
                self.commit(progress, begin_next=False)
            else:
                self.producer.abort_transaction(self.settings.timeout_secs)  # an empty transaction
            return
        self._flush_all()

    def abandon(self) -> None:
        """After a failure: abort the open transaction (its records are never visible)."""
        if self.producer is None:
            return
        if self.transactional:
            with contextlib.suppress(Exception):
                self.producer.abort_transaction(10)
        else:
            with contextlib.suppress(Exception):
                self.producer.flush(10)

    def translate(self, exc: KafkaException, action: str) -> KBackupError:
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


def _short_of_replicas(admin: Admin, topics: list[str]) -> list[str]:
    """``topic/partition in-sync replicas [..] < min.insync.replicas N`` for each partition short."""
    if not topics:
        return []
    configs = admin.topic_configs(topics)
    short = []
    for topic in topics:
        wanted = int(configs[topic]["min.insync.replicas"].value or 1)
        for partition, replicas in sorted(admin.partition_replicas(topic).items()):
            if len(replicas.in_sync) < wanted:
                short.append(
                    f"{topic}/{partition} has in-sync replicas {list(replicas.in_sync)}, fewer than its "
                    f"min.insync.replicas {wanted}"
                )
    return short


@dataclass
class _Columns:
    """Records to send, column by column."""

    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    targets: list[int]
    headers: list[list[Header]] | None

    def pick(self, indexes: list[int]) -> _Columns:
        return _Columns(
            [self.timestamps[i] for i in indexes],
            [self.keys[i] for i in indexes],
            [self.values[i] for i in indexes],
            [self.targets[i] for i in indexes],
            None if self.headers is None else [self.headers[i] for i in indexes],
        )
