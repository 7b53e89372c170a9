"""A backup of five daily increments of stamped records, for the prune tests."""

from __future__ import annotations

from typing import Any

from kbackup.core.config import StorageSettings
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import take_backup
from tests.support.kafka_io import Record, create_topic, produce

DAY_MS = 86_400_000


#: 2023 timestamps, on a topic with retention off: nothing is deleted by the broker.
BASE_TIME = 1_700_000_000_000


DAYS = 5


PER_DAY = 40


def daily_backup(cluster: LocalKafkaCluster, section: dict[str, Any], topic: str, backup_id: str) -> None:
    """Five increments; increment ``d`` holds the records stamped on day ``d`` (2 partitions)."""
    create_topic(cluster, topic, partitions=2, config={"retention.ms": "-1"})
    for day in range(DAYS):
        produce(
            cluster,
            topic,
            [
                Record(
                    key=b"d%d-%d" % (day, i),
                    value=b"v" * 100,
                    partition=i % 2,
                    timestamp=BASE_TIME + day * DAY_MS + i,
                )
                for i in range(PER_DAY)
            ],
        )
        take_backup(cluster, StorageSettings.model_validate(section), backup_id, [topic])
