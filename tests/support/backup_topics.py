"""Topics of the kinds a backup must copy exactly (keyed with headers, compacted, transactional
with an aborted transaction), filled on a real cluster, and the backup run as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import Record, consume_all, create_topic, produce

#: Partitions of each topic.
PARTITIONS = 3
REPO = Path(__file__).resolve().parents[2]


def fill_topics(cluster: LocalKafkaCluster, prefix: str, records: int) -> list[str]:
    """Three topics of ``PARTITIONS`` partitions with about ``records`` records each: keyed with
    headers and timestamps; compacted (keys repeat, tombstones among them); transactional, one
    transaction of ten records aborted in the middle of each partition (it leaves holes and markers)."""
    keyed, compacted, transactional = f"{prefix}-keyed", f"{prefix}-compacted", f"{prefix}-tx"
    create_topic(cluster, keyed, PARTITIONS)
    create_topic(cluster, compacted, PARTITIONS, {"cleanup.policy": "compact"})
    create_topic(cluster, transactional, PARTITIONS)
    produce(
        cluster,
        keyed,
        (
            Record(
                f"k{i}".encode(),
                f"value {i}".encode() * 3,
                (("app", f"h{i}".encode()), ("empty", None)),
                timestamp=1_700_000_000_000 + i,
                partition=i % PARTITIONS,
            )
            for i in range(records)
        ),
    )
    produce(
        cluster,
        compacted,
        (
            Record(f"k{i % 50}".encode(), None if i % 7 == 0 else f"v{i}".encode(), partition=i % PARTITIONS)
            for i in range(records)
        ),
    )
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": f"{prefix}-tx"})
    producer.init_transactions(30)
    for half, commit in ((0, True), (1, False), (2, True)):
        producer.begin_transaction()
        count = 10 if not commit else records // 2
        for i in range(count):
            producer.produce(
                transactional, key=f"t{half}-{i}".encode(), value=b"x" * 20, partition=i % PARTITIONS
            )
        if commit:
            producer.commit_transaction(30)
        else:
            # Delivered first: the aborted records are in the log (holes and markers), and an
            # abort sent while they are in flight was refused (INVALID_TXN_STATE, seen in a suite run).
            producer.flush(30)
            producer.abort_transaction(30)
    return [keyed, compacted, transactional]


def source_records(cluster: LocalKafkaCluster, topics: list[str]) -> list[Record]:
    """Every committed record of ``topics``, ordered as ``read_backup`` orders a backup's."""
    records = [r for topic in topics for r in consume_all(cluster, topic, range(PARTITIONS))]
    return sorted(records, key=lambda r: (r.topic or "", r.partition or 0, r.offset or 0))


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``kafka-backup ARGS`` as a subprocess (``env`` added to this process's environment)."""
    return subprocess.run(
        [sys.executable, "-m", "kbackup", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1", **(env or {})},
    )
