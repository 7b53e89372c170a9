"""Spark's Kafka source (resolved from Maven) reads a real topic with its headers."""

from __future__ import annotations

import time

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import Record, create_topic, produce


def test_spark_reads_topic_with_headers(spark, source_cluster: LocalKafkaCluster, unique_name: str) -> None:  # type: ignore[no-untyped-def]
    # The records carry 2023 timestamps: without this, time-based retention (checked every 5 s
    # on the test brokers) can delete a partition's records before Spark reads them.
    create_topic(source_cluster, unique_name, partitions=2, config={"retention.ms": "-1"})
    produce(
        source_cluster,
        unique_name,
        [
            Record(
                key=f"k{i}".encode(),
                value=f"v{i}".encode(),
                headers=(
                    ("x-kafka-backup-offset", str(100 + i).encode()),
                    ("x-kafka-backup-cluster", b"src"),
                ),
                # Recent: records older than the topic's 7-day retention are deleted by the broker.
                timestamp=int(time.time() * 1000) - 60_000 + i,
                partition=i % 2,
            )
            for i in range(10)
        ]
        + [Record(key=b"plain", value=b"no headers", partition=0)],
    )
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", source_cluster.bootstrap_servers)
        .option("subscribe", unique_name)
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    assert dict(frame.dtypes)["headers"] == "array<struct<key:string,value:binary>>"
    rows = sorted(frame.collect(), key=lambda row: (row.partition, row.offset))
    assert len(rows) == 11
    with_headers = [row for row in rows if row.headers]
    assert len(with_headers) == 10
    origin_offsets = sorted(
        int(bytes(h.value).decode())
        for row in with_headers
        for h in row.headers
        if h.key == "x-kafka-backup-offset"
    )
    assert origin_offsets == list(range(100, 110))
    plain = [row for row in rows if not row.headers]
    assert bytes(plain[0].value) == b"no headers"
