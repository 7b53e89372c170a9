"""Backup, restore and the drill with ``engine: spark`` on the suite's local[2] session: the same format
as the local engine, record for record, with large partitions cut into slices copied by separate tasks."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kbackup.backup import run_backup
from kbackup.cli.main import run
from kbackup.core.config import EncryptionSettings, StorageSettings
from kbackup.core.spark import SparkEngine
from kbackup.format.catalog import BackupCatalog
from kbackup.offsets.translate import RestoredRecord
from kbackup.restore import service
from kbackup.restore.settings import RestoreSettings
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from kbackup.storage.keys import new_key_text
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import backup_job, read_backup
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, commit_group, consume_all, create_topic, group_position, produce
from tests.support.oracles import reference_position
from tests.support.restore_checks import assert_restored_exactly, transactional_ids
from tests.support.spark_topics import kept_fields, seed_sliced_topic

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.mark.parametrize("store", ["folder", "s3"])
def test_a_spark_backup_equals_a_local_one_record_for_record(
    spark: Any,
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    store: str,
) -> None:
    seed_sliced_topic(source_cluster, unique_name, records=1500, on_partition_0=1200)
    if store == "s3":
        server = request.getfixturevalue("s3_server")
        raw: dict[str, Any] = server.storage_settings(TEST_BUCKET, f"engine/{unique_name}")
    else:
        # Encrypted on the folder: each task writes with the keys the driver opened.
        raw = {"url": str(tmp_path / "spark"), "encryption": {"key_file": str(key_file(tmp_path))}}
    spark_store = StorageSettings.model_validate(raw)
    local_store = tmp_path / "local"
    run_backup(backup_job(source_cluster, local_store, "b", [unique_name]))
    # 400 offsets a task: partition 0 (1,200 records) is cut into three slices, in three tasks.
    summary = run_backup(
        backup_job(
            source_cluster, spark_store, "b", [unique_name], spark_task_records=400, segment_max_records=250
        ),
        engine=SparkEngine(master="local[2]"),
    )
    assert summary.records == 1500
    assert (BackupCatalog(open_storage(spark_store)).load("b").keys is not None) == (store == "folder")
    local_records = [kept_fields(r) for r in read_backup(local_store, "b")]
    spark_records = [kept_fields(r) for r in read_backup(spark_store, "b")]
    assert spark_records == local_records
    backup = BackupCatalog(open_storage(spark_store)).load("b")
    entry = next(e for e in backup.manifests[0].partitions if e.partition == 0)
    assert (entry.start_offset, entry.end_offset, entry.record_count) == (0, 1200, 1200)
    # Three slices of partition 0, each written by its own task attempt (its own run id).
    runs = {
        segment.key.rsplit("-", 1)[-1] for segment in backup.manifests[0].segments if segment.partition == 0
    }
    assert len(runs) == 3
    # validate --deep cannot tell it from a local backup.
    config = config_file(tmp_path / "storage.yaml", storage=raw)
    assert run(["validate", "--deep", "--backup-id", "b", "-c", str(config)]) == 0


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "idempotent-repartitioned"])
def test_a_spark_restore_lands_each_record_once_in_order_with_the_local_engines_headers(
    spark: Any,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    exactly_once: bool,
) -> None:
    seed_sliced_topic(source_cluster, unique_name, records=1500, on_partition_0=1200)
    store = tmp_path / "store"
    # The exactly-once variant restores an encrypted backup: each task reads with the driver's keys.
    store_settings = StorageSettings(
        url=str(store),
        encryption=EncryptionSettings(key_file=str(key_file(tmp_path))) if exactly_once else None,
    )
    run_backup(
        backup_job(source_cluster, store_settings, "b", [unique_name], spark_task_records=400),
        engine=SparkEngine(master="local[2]"),
    )
    settings: dict[str, Any] = {
        "exactly_once": exactly_once,
        "topic_mapping": {unique_name: f"{unique_name}-r"},
    }
    if not exactly_once:
        settings["repartition"] = True
        settings["target_partitions"] = {unique_name: 2}
    job = service.prepare(
        backup_id="b",
        storage=store_settings,
        target=target_cluster.connection(),
        settings=RestoreSettings.model_validate(settings),
    )
    summary = service.run(job, engine=SparkEngine(master="local[2]"))
    assert summary.records == 1500
    assert summary.verified
    assert summary.mode == ("exactly-once" if exactly_once else "idempotent")
    source = consume_all(source_cluster, unique_name, [0, 1, 2])
    restored = consume_all(target_cluster, f"{unique_name}-r", [0, 1] if not exactly_once else [0, 1, 2])
    assert_restored_exactly(
        [replace(r, topic=unique_name) for r in source],
        restored,
        source_cluster=summary_source(store_settings),
        target_partition_of=None if exactly_once else partition_by_key(restored),
    )
    if exactly_once:
        ids = transactional_ids(target_cluster) or set()
        # One transactional id per source partition: the restore id and the unit.
        # This topic's ids only: other tests' restores of backup "b" into this cluster share the
        # restore id, and a one-process rerun fences its units' ids too.
        ours = f"{job.plan.transactional_id}-{unique_name}-"
        assert {i for i in ids if i.startswith(ours)} == {
            f"{job.plan.transactional_id}-{unique_name}-{p}" for p in range(3)
        }
    # Run again: everything is there already, nothing is produced twice.
    again = service.run(
        service.prepare(
            backup_id="b",
            storage=store_settings,
            target=target_cluster.connection(),
            settings=RestoreSettings.model_validate(settings),
        ),
        engine=SparkEngine(master="local[2]"),
    )
    assert again.records == 0
    assert again.resumed
    assert (
        len(consume_all(target_cluster, f"{unique_name}-r", [0, 1] if not exactly_once else [0, 1, 2]))
        == 1500
    )


def summary_source(store: StorageSettings) -> str:
    return BackupCatalog(open_storage(store)).load("b").source_cluster


def key_file(folder: Path) -> Path:
    path = folder / "backup.key"
    path.write_text(new_key_text())
    return path


def partition_by_key(restored: list[Record]) -> Any:
    """Repartitioned by key: every record of a key in one target partition (checked here), and
    each source record expected where its key's records are."""
    where: dict[bytes | None, set[int | None]] = {}
    for copy in restored:
        where.setdefault(copy.key, set()).add(copy.partition)
    assert all(len(partitions) == 1 for partitions in where.values()), where
    assert len({p for partitions in where.values() for p in partitions}) == 2
    return lambda record: next(iter(where[record.key]))


def test_a_drill_with_the_spark_engine_moves_every_group_where_the_reference_puts_it(
    spark: Any,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The drill's verdict is not trusted: each group's committed position on the target is judged
    against the reference position (tests.support.oracles) of what the target holds, each restored
    record known by the value this test produced (not by the origin headers the drill reads)."""
    topic = f"{unique_name}-orders"
    create_topic(source_cluster, topic, partitions=2)
    produce(
        source_cluster, topic, [Record(key=b"k%d" % i, value=b"v%d" % i, partition=i % 2) for i in range(400)]
    )
    group = f"{unique_name}-app"
    # Partition 0 inside its records, partition 1 at its end (everything processed).
    committed = {(topic, 0): 57, (topic, 1): 200}
    commit_group(source_cluster, group, committed)
    config = config_file(
        tmp_path / "drill.yaml",
        backup_id="drill",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [topic]},
        },
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage={"url": str(tmp_path / "store")},
        backup={"spark_task_records": 100},
        offset_reset={"groups": [group]},
    )
    report = tmp_path / "report.json"
    code = run(["drill", "-c", str(config), "--engine", "spark", "--report", str(report)])
    assert code == 0, capsys.readouterr().err
    document = json.loads(report.read_text())
    assert document["passed"] is True
    assert any(note.startswith("engine: spark on local[") for note in document["notes"])
    assert document["groups"][f"drill.{group}"]["partitions"] == 2
    # Where each record this test produced is on the source: (partition, offset), by its unique value.
    origin: dict[bytes | None, tuple[int, int]] = {}
    for record in consume_all(source_cluster, topic, [0, 1]):
        assert record.partition is not None
        origin[record.value] = (record.partition, record.consumed_offset)
    assert len(origin) == 400
    drill_topic = f"drill.{topic}"
    restored = consume_all(target_cluster, drill_topic, [0, 1])
    # Every produced record is on the target once, in the partition it came from.
    assert sorted(origin[r.value] for r in restored) == sorted(origin.values())
    for p in (0, 1):
        records = [
            RestoredRecord(r.consumed_offset, topic, *origin[r.value]) for r in restored if r.partition == p
        ]
        assert {record.source_partition for record in records} == {p}
        expected = reference_position(records, {(topic, p): committed[(topic, p)]})
        assert group_position(target_cluster, f"drill.{group}", drill_topic, p) == expected, p
