"""The rate limits are wired into a real backup and a real restore: a limit below what the run would do
makes it wait (the wait counter of its metrics and its summary above zero) and the run still copies
every record. Only the wiring: how closely a limit holds is measured by ``python -m bench.bench_throttle``,
never asserted on timing here. On Spark each task waits on its own share (the Spark test)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kbackup.backup import run_backup
from kbackup.backup.metrics import BackupMetrics
from kbackup.core.config import StorageSettings
from kbackup.core.spark import SparkEngine
from kbackup.restore import service
from kbackup.restore.metrics import RestoreMetrics
from kbackup.restore.settings import RestoreSettings
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import backup_job
from tests.support.crash_restores import SOURCE_PARTITIONS, build_backup
from tests.support.kafka_io import Record, consume_all, create_topic, produce

RECORDS = 300
VALUE = b"x" * 1000


def backup_waits(
    source: LocalKafkaCluster, topic: str, store: StorageSettings, partitions: int, engine: SparkEngine | None
) -> None:
    """RECORDS records of 1 KB in ``topic`` (``partitions`` partitions) backed up at 200 KB/s, a run
    of about 1.5 s: it waits after its first burst, its metrics count the waits, it copies them all."""
    create_topic(source, topic, partitions)
    produce(
        source, topic, [Record(key=b"k%d" % i, value=VALUE, partition=i % partitions) for i in range(RECORDS)]
    )
    job = backup_job(source, store, "limited", [topic], max_bytes_per_second="200KB")
    metrics = BackupMetrics("limited", mode="snapshot")
    summary = run_backup(job, metrics=metrics, engine=engine)
    assert summary.records == RECORDS
    assert summary.throttled_secs > 0
    labels = {"backup_id": "limited"}
    assert (
        metrics.registry.get_sample_value("kafka_backup_throttled_seconds_total", labels)
        == summary.throttled_secs
    )
    assert metrics.registry.get_sample_value("kafka_backup_rate_limit_bytes_per_second", labels) == 200_000


def test_a_backup_over_its_byte_rate_waits_and_copies_everything(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    backup_waits(source_cluster, unique_name, StorageSettings(url=str(tmp_path / "store")), 1, None)


def test_a_restore_over_its_record_rate_waits_and_restores_everything(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    expected = build_backup(store, tmp_path, unique_name, "limited", 200)
    metrics = RestoreMetrics("limited")
    settings = RestoreSettings.model_validate({"max_records_per_second": 400, "max_bytes_per_second": "10MB"})
    job = service.prepare(
        backup_id="limited",
        storage=StorageSettings(url=str(store)),
        target=target_cluster.connection(),
        settings=settings,
        metrics=metrics,
    )
    # 600 records at 400/s: about 1.5 s, waiting after the first burst.
    summary = service.run(job, metrics=metrics)
    assert summary.records == sum(len(records) for records in expected.values())
    assert summary.throttled_secs > 0
    assert any(
        "throttled by restore.max_bytes_per_second/max_records_per_second" in line for line in summary.lines()
    )
    labels = {"backup_id": "limited"}
    waited = metrics.registry.get_sample_value("kafka_backup_restore_throttled_seconds_total", labels)
    assert waited == summary.throttled_secs
    for unit, limit in (("records", 400), ("bytes", 10_000_000)):
        assert (
            metrics.registry.get_sample_value("kafka_backup_restore_rate_limit", {**labels, "unit": unit})
            == limit
        )
    restored = consume_all(target_cluster, unique_name, list(range(SOURCE_PARTITIONS)))
    assert len(restored) == summary.records


@pytest.mark.spark
def test_spark_tasks_each_wait_on_their_share_of_the_limits(
    spark: Any,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
) -> None:
    topic = unique_name
    engine = SparkEngine(master="local[2]")
    store = StorageSettings(url=str(tmp_path / "store"))
    # Two tasks at once, each at 100 KB/s for its 150 KB: both wait after their first burst.
    backup_waits(source_cluster, topic, store, 2, engine)

    restore_metrics = RestoreMetrics("limited")
    settings = RestoreSettings(topic_mapping={topic: f"{topic}-restored"}, max_records_per_second=200)
    prepared = service.prepare(
        backup_id="limited",
        storage=store,
        target=target_cluster.connection(),
        settings=settings,
        metrics=restore_metrics,
    )
    restored = service.run(prepared, metrics=restore_metrics, engine=engine)
    assert restored.records == RECORDS
    assert restored.throttled_secs > 0
    labels = {"backup_id": "limited"}
    waited = restore_metrics.registry.get_sample_value("kafka_backup_restore_throttled_seconds_total", labels)
    assert waited == pytest.approx(restored.throttled_secs)
