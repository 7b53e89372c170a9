"""Reading one partition from an offset up to an end, in batches: the one reading loop for everything
that reads records back (the restore's resume scan and progress, the reset's probes, the drill).

A reader owns one consumer (``read_committed`` by default, so transaction markers and aborted
records are skipped by the broker) and reads one partition at a time. Each call of
:meth:`PartitionReader.batches` yields the records of ``[start, end)`` in batches as they arrive;
it ends at ``end``, at the partition's end (an end-of-partition event), or at the deadline. Kafka
errors become project errors naming the partition. Reading on where the last read stopped keeps
the consumer's assignment and what it already fetched (no new round trip).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kbackup.core.errors import KafkaOperationError
from kbackup.core.kafka.clients import KafkaClients, translate_kafka_error

#: Records taken from the consumer's queue per batch (a fetch brings at least one producer batch,
#: often thousands of small records).
BATCH_RECORDS = 2000


class PartitionReader:
    """Reads records of one partition at a time, with one consumer."""

    def __init__(
        self,
        clients: KafkaClients,
        *,
        read_committed: bool = True,
        properties: Mapping[str, Any] | None = None,
    ) -> None:
        self.clients = clients
        self.consumer: Consumer = clients.consumer(
            properties={
                "isolation.level": "read_committed" if read_committed else "read_uncommitted",
                "enable.partition.eof": True,
                # A reader reads records that exist. Having read to a partition's end, librdkafka
                # fetches at the end and the broker holds that fetch up to this long for new records
                # (500 ms by default): the next read's fetch queues behind it (in the drill, each
                # probe after one that reached a partition's end took 0.5 s instead of about 20 ms).
                "fetch.wait.max.ms": 10,
                **(properties or {}),
            }
        )
        #: The next offset of the partition last read: every record below it was seen (or skipped
        #: by the broker: a marker, an aborted or compacted record).
        self.reached = 0
        #: The last read stopped at an end-of-partition event (the last stable offset under
        #: read_committed), not at ``end`` or its deadline.
        self.at_partition_end = False
        self._partition: tuple[str, int] | None = None
        self._known_topics: set[str] = set()

    def __enter__(self) -> PartitionReader:
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.consumer.close()

    def _learn_topic(self, topic: str) -> None:
        """Learn ``topic``'s leaders before the first read there: assigned a partition of a topic it
        has no metadata for, librdkafka waits for its next metadata refresh, 0.5-1 s a topic."""
        if topic in self._known_topics:
            return
        self._known_topics.add(topic)
        connection = self.clients.connection
        try:
            self.consumer.list_topics(topic, timeout=connection.connect_timeout_secs)
        except KafkaException as exc:
            raise translate_kafka_error(
                exc, action=f"read the metadata of {topic}", connection=connection
            ) from None

    def _position_at(self, topic: str, partition: int, start: int) -> None:
        """Read from ``start`` on: without a new assignment when the consumer already reads this
        partition and its next record is at ``start`` (its prefetched records are kept)."""
        if self._partition == (topic, partition):
            here = self.consumer.position([TopicPartition(topic, partition)])[0].offset
            if here == start:
                return
        self._learn_topic(topic)
        self.consumer.assign([TopicPartition(topic, partition, start)])
        self._partition = (topic, partition)

    def batches(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int | None = None,
        *,
        timeout_secs: float,
        stop_at_partition_end: bool = True,
        raise_on_timeout: bool = True,
        batch_records: int = BATCH_RECORDS,
    ) -> Iterator[list[Message]]:
        """The records of ``topic``/``partition`` at offsets ``[start, end)`` (``end`` None: up to the
        partition's end), in batches of at most ``batch_records``, as they arrive.

        Ends at ``end``; at an end-of-partition event, unless ``stop_at_partition_end`` is off (then
        it reads on while records below ``end`` are held by an open transaction); and after
        ``timeout_secs``, raising a retryable ``KafkaOperationError`` unless ``raise_on_timeout`` is
        off. ``reached`` and ``at_partition_end`` then say where it stopped.
        """
        self._position_at(topic, partition, start)
        self.reached = start
        self.at_partition_end = False
        deadline = time.monotonic() + timeout_secs
        while end is None or self.reached < end:
            # consume() waits its whole timeout unless num_messages arrive: waiting for one record
            # returns as soon as a fetch is in, and the rest of it is queued by then, so a second call
            # without waiting takes them.
            messages = self.consumer.consume(num_messages=1, timeout=0.1)
            if messages:
                messages += self.consumer.consume(num_messages=batch_records - 1, timeout=0)
            records: list[Message] = []
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        self.reached = max(self.reached, message.offset() or 0)
                        self.at_partition_end = True
                        continue
                    raise KafkaOperationError(
                        f"reading {topic}/{partition} at offset {self.reached} failed: {error.str()}",
                        code=error.code(),
                        code_name=error.name(),
                        retryable=bool(error.retriable()),
                    )
                offset = message.offset()
                if offset is None:
                    continue  # only events without a position have no offset; none is expected here
                if end is not None and offset >= end:
                    self.reached = end
                    break
                self.at_partition_end = False
                records.append(message)
                self.reached = offset + 1
            if records:
                yield records
            if self.at_partition_end and (stop_at_partition_end or (end is not None and self.reached >= end)):
                return
            if time.monotonic() > deadline:
                if not raise_on_timeout:
                    return
                raise KafkaOperationError(
                    f"reading {topic}/{partition} from offset {start} to "
                    f"{'its end' if end is None else end} took longer than {timeout_secs:g}s "
                    f"(reached {self.reached})",
                    retryable=True,
                )
