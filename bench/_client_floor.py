"""The floor of a restore's cost: the same records, headers and producer settings through
confluent-kafka, and nothing else (no Parquet, no checks, no resume state).

    python -m bench._client_floor --bootstrap HOST:PORT --topic T --records N --record-size B
        [--partitions 3] [--only 0,2] [--headers 5|0] [--transaction-ms MS] [--compression CODEC]
        [--wait-for-go]

Prints one JSON line: ``records`` (those this process sent), ``seconds`` (from the first produce to
the last delivery, or the last commit), ``started_at`` and ``ended_at`` (the span's ends in epoch
seconds, so spans of several processes can be joined), ``cpu_seconds`` (user + system of every
thread of this process over the same span) and ``peak_rss_bytes``. Everything a record needs is
built before the clock starts: the values are the benchmark backup's (``letter_payloads``), the
timestamps its own, and with ``--headers 5`` each record's five origin headers as the restore sends
them, so the span holds the client's own work only: one ``produce`` call per record, its copy into
librdkafka, compression, batching and the network, and with ``--transaction-ms`` a commit as often
as the exactly-once restore commits.

The records go to the partitions as the restore sends them: one source partition's batch at a
time (``BATCH`` records), in turn. ``--only`` sends only some of the ``--partitions`` (the same
records of each as a whole run sends), as one of the restore's workers does with the source
partitions it is given; ``--wait-for-go`` then prints ``ready`` once the records are built and
waits for a line on standard input before the clock starts, so several processes start together.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from confluent_kafka import Producer

from bench._floor_span import add_split_arguments, cpu_seconds, only_partitions, span_result, wait_for_go
from bench._restore_perf import letter_payloads
from kbackup.format.origin import stamp_batch
from kbackup.restore.writer import producer_tuning

#: Records handed over per source partition in turn (about one Parquet batch of the restore).
BATCH = 10_000


def _records(
    count: int, record_size: int, partitions: int, headers: bool, only: set[int] | None = None
) -> list[tuple[int, list[bytes], list[int], list[Any] | None]]:
    """The batches to send: (partition, values, timestamps, headers), in the order sent; ``only``:
    those of these partitions."""
    payloads = letter_payloads(record_size)
    now = int(time.time() * 1000)
    per_partition = [count // partitions + (1 if p < count % partitions else 0) for p in range(partitions)]
    batches = []
    for start in range(0, max(per_partition), BATCH):
        for partition in range(partitions):
            end = min(start + BATCH, per_partition[partition])
            if start >= end or (only is not None and partition not in only):
                continue
            offsets = list(range(start, end))
            values = [payloads[(i * partitions + partition) % len(payloads)] for i in offsets]
            timestamps = [now - 60_000 + i // 100 for i in offsets]
            stamped = (
                stamp_batch("bench-source", "bench", partition, offsets, timestamps) if headers else None
            )
            batches.append((partition, values, timestamps, stamped))
    return batches


def produce(arguments: argparse.Namespace) -> dict[str, Any]:
    props: dict[str, Any] = {
        **producer_tuning(*([arguments.compression] if arguments.compression else [])),
        "bootstrap.servers": arguments.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
    }
    only = only_partitions(arguments.only)
    if arguments.transaction_ms:
        # One id per process, as each of the restore's units has its own.
        props["transactional.id"] = f"floor-{arguments.topic}-{arguments.only or 'all'}"
    producer = Producer(props)
    batches = _records(
        arguments.records, arguments.record_size, arguments.partitions, arguments.headers == 5, only
    )
    if arguments.transaction_ms:
        producer.init_transactions(30)
    if arguments.wait_for_go:
        wait_for_go()
    started, cpu_started, started_at = time.monotonic(), cpu_seconds(), time.time()
    if arguments.transaction_ms:
        producer.begin_transaction()
    transaction_started = started
    send, topic = producer.produce, arguments.topic
    for partition, values, timestamps, headers in batches:
        for index, value in enumerate(values):
            while True:
                try:
                    send(
                        topic,
                        value,
                        None,
                        partition=partition,
                        timestamp=timestamps[index],
                        headers=None if headers is None else headers[index],
                    )
                    break
                except BufferError:
                    producer.poll(0.01)
        producer.poll(0)
        if (
            arguments.transaction_ms
            and (time.monotonic() - transaction_started) * 1000 >= arguments.transaction_ms
        ):
            producer.commit_transaction(60)
            producer.begin_transaction()
            transaction_started = time.monotonic()
    if arguments.transaction_ms:
        producer.commit_transaction(60)
    else:
        remaining = producer.flush(60)
        if remaining:
            raise RuntimeError(f"{remaining} records not delivered")
    seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu_started
    sent = sum(len(values) for _, values, _, _ in batches)
    return span_result(sent, seconds, cpu, started_at)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--record-size", type=int, required=True)
    parser.add_argument("--partitions", type=int, default=3)
    add_split_arguments(parser)
    parser.add_argument("--headers", type=int, choices=(0, 5), default=5)
    parser.add_argument("--transaction-ms", type=int, default=0)
    parser.add_argument("--compression", default=None, help="compression.type (default: the restore's)")
    print(json.dumps(produce(parser.parse_args())))


if __name__ == "__main__":
    main()
