"""Backup with ``engine: spark`` on the suite's local[2] session: the same format as the local
engine, record for record, with large partitions cut into slices copied by separate tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kbackup.backup.runner import run_backup
from kbackup.core.config import StorageSettings
from kbackup.core.spark import SparkEngine
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.backup_io import backup_job, read_backup
from tests.support.kafka_io import Record, create_topic, produce

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _seed(cluster: LocalKafkaCluster, topic: str) -> None:
    create_topic(cluster, topic, partitions=3, config={"retention.ms": "-1"})
    produce(
        cluster,
        topic,
        [
            Record(
                key=f"k{i % 17}".encode(),
                value=f"value-{i}".encode() * (1 + i % 5),
                partition=0 if i < 1200 else (1 + i % 2),
                headers=(("h", f"{i}".encode()),),
                timestamp=1_700_000_000_000 + i,
            )
            for i in range(1500)
        ],
    )


def _strip(record: Any) -> tuple[Any, ...]:
    return (
        record.topic,
        record.partition,
        record.offset,
        record.key,
        record.value,
        record.headers,
        record.timestamp,
    )


def test_a_spark_backup_equals_a_local_one_record_for_record(
    spark: Any, source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    _seed(source_cluster, unique_name)
    local_store, spark_store = tmp_path / "local", tmp_path / "spark"
    run_backup(backup_job(source_cluster, local_store, "b", [unique_name]))
    # 400 offsets a task: partition 0 (1,200 records) is cut into three slices, in three tasks.
    summary = run_backup(
        backup_job(
            source_cluster, spark_store, "b", [unique_name], spark_task_records=400, segment_max_records=250
        ),
        engine=SparkEngine(master="local[2]"),
    )
    assert summary.records == 1500
    local_records = [_strip(r) for r in read_backup(local_store, "b")]
    spark_records = [_strip(r) for r in read_backup(spark_store, "b")]
    assert spark_records == local_records
    backup = BackupCatalog(open_storage(StorageSettings(url=str(spark_store)))).load("b")
    entry = next(e for e in backup.manifests[0].partitions if e.partition == 0)
    assert (entry.start_offset, entry.end_offset, entry.record_count) == (0, 1200, 1200)
    # Three slices of partition 0, each written by its own task attempt (its own run id).
    runs = {
        segment.key.rsplit("-", 1)[-1] for segment in backup.manifests[0].segments if segment.partition == 0
    }
    assert len(runs) == 3
