"""The floor of a backup's cost: the topic read through confluent-kafka with the backup's consumer
settings, each record's fields taken out as the backup takes them, and nothing else (no Arrow, no
Parquet, no storage).

    python -m bench._consumer_floor --bootstrap HOST:PORT --topic T [--only 0,2] [--wait-for-go]

Prints one JSON line: ``records``, ``seconds`` (from the assignment to the last partition's end),
``started_at`` and ``ended_at`` (that span's ends in epoch seconds),
``cpu_seconds`` (user + system of every thread of this process over the same span) and
``peak_rss_bytes``. Every partition is read from its first offset to its end, ``read_committed``,
``BATCH`` records per ``consume`` call, and of each record its key, value, offset, timestamp and
headers are fetched (the Python objects the backup's columns are built from). ``--only`` reads
only those partitions, as one of the backup's workers does; ``--wait-for-go`` starts the span
together with other loops (``bench._floor_span.run_together``).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from bench._floor_span import add_split_arguments, cpu_seconds, only_partitions, span_result, wait_for_go
from kbackup.backup.runner import CONSUMER_TUNING

#: Records per consume() call: the backup's reader batch.
BATCH = 10_000


def read(bootstrap: str, topic: str, only: set[int] | None = None, go: bool = False) -> dict[str, Any]:
    consumer = Consumer(
        {
            **CONSUMER_TUNING,
            "bootstrap.servers": bootstrap,
            "group.id": f"floor-{topic}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    listed = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    partitions = [p for p in listed if only is None or p in only]
    if go:
        wait_for_go()
    started, cpu_started, started_at = time.monotonic(), cpu_seconds(), time.time()
    consumer.assign([TopicPartition(topic, partition, 0) for partition in partitions])
    records, ended = 0, set[int]()
    while len(ended) < len(partitions):
        for message in consumer.consume(BATCH, timeout=1.0):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(str(error))
                ended.add(message.partition() or 0)
                continue
            message.key(), message.value(), message.offset(), message.timestamp(), message.headers()
            records += 1
    seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu_started
    result = span_result(records, seconds, cpu, started_at)
    consumer.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    add_split_arguments(parser)
    arguments = parser.parse_args()
    only = only_partitions(arguments.only)
    print(json.dumps(read(arguments.bootstrap, arguments.topic, only, arguments.wait_for_go)))


if __name__ == "__main__":
    main()
