"""``engine: spark`` on a real Spark standalone cluster (a master and two one-core workers started
from the pyspark installation on loopback), through the CLI as an operator runs it, with a Python
worker killed mid-task: Spark runs the task again, and the backup and the restores hold each record
once, in order.

A crash point (kbackup.core.faults) kills the Python worker that reaches it (SIGKILL, as the kernel's
OOM killer would); ``KBACKUP_CRASH_ONCE_DIR`` makes it fire in the first worker only, so the next
attempt of the task goes through, and its marker file proves the kill happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbackup.core.config import StorageSettings
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.spark_cluster import LocalSparkCluster, local_spark_cluster
from kbackup.storage import open_storage
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import read_backup
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, consume_all, create_topic, produce
from tests.support.kafka_io import group_positions as committed
from tests.support.oracles import reference_position
from tests.support.restore_checks import assert_restored_exactly
from tests.support.restored_topics import restored_records
from tests.support.three_phase_runs import GROUPS

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RECORDS = 3000


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSparkCluster]:
    with local_spark_cluster(
        workers=2, cores_per_worker=1, memory_per_worker="1g", folder=tmp_path_factory.mktemp("spark-cluster")
    ) as cluster:
        assert cluster.alive_workers() == 2
        yield cluster
    assert all(process.poll() is not None for process in cluster.processes), (
        "the cluster outlived its fixture"
    )


def executors_of_each_run(cluster: LocalSparkCluster) -> list[int]:
    """How many executors each application (one per command run) had, oldest first: each worker
    keeps its executors' folders under ``work/worker-<n>/<application id>/<executor id>``."""
    executors: dict[str, int] = {}
    for app in cluster.folder.glob("work/worker-*/app-*"):
        executors[app.name] = executors.get(app.name, 0) + sum(1 for child in app.iterdir() if child.is_dir())
    return [executors[name] for name in sorted(executors)]


def _seed(cluster: LocalKafkaCluster, topic: str) -> list[Record]:
    """3,000 records over 2 partitions (1,500 each: cut into slices of 500 offsets), and the groups
    of GROUPS committed."""
    from confluent_kafka import Consumer, TopicPartition

    create_topic(cluster, topic, partitions=2, config={"retention.ms": "-1"})
    produce(
        cluster,
        topic,
        [
            Record(
                key=f"k{i % 50}".encode(),
                value=f"v{i}".encode() * 8,
                partition=i % 2,
                headers=(("n", b"%d" % i),),
            )
            for i in range(RECORDS)
        ],
    )
    for group, offsets in GROUPS.items():
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": f"{topic}-{group}"})
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        consumer.close()
    return consume_all(cluster, topic, [0, 1])


def _config(
    path: Path,
    spark_cluster: LocalSparkCluster,
    *,
    source: LocalKafkaCluster,
    target: LocalKafkaCluster,
    topic: str,
    storage: dict[str, Any],
    crash_at: str,
    crash_dir: Path,
    work: Path,
) -> Path:
    spark_conf = {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "768m",
        "spark.cores.max": "2",
        # The executors' Python workers reach the crash point; the first one to reach it dies.
        "spark.executorEnv.KBACKUP_CRASH_AT": crash_at,
        "spark.executorEnv.KBACKUP_CRASH_ONCE_DIR": str(crash_dir),
    }
    document = {
        "backup_id": "nightly",
        "engine": "spark",
        "source": {"bootstrap_servers": [source.bootstrap_servers], "topics": {"include": [topic]}},
        "target": {"bootstrap_servers": [target.bootstrap_servers]},
        "storage": storage,
        "backup": {"spark_task_records": 500, "segment_max_records": 200},
        "restore": {"topic_mapping": {topic: f"{topic}-restored"}, "transaction_max_records": 300},
        "mapping": {"spark_master": spark_cluster.master_url, "spark_conf": spark_conf},
        "offset_reset": {"snapshot_dir": str(work / "snapshots")},
        "three_phase": {"state_dir": str(work / "state")},
    }
    return config_file(path, **document)


def _cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kbackup", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1", "PYSPARK_PYTHON": sys.executable},
        check=False,
    )


def _no_overlapping_segments(storage: StorageSettings) -> None:
    """Every partition's segments in the manifest cover disjoint offset ranges: no second copy."""
    backup = BackupCatalog(open_storage(storage)).load("nightly")
    by_partition: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for segment in backup.manifests[-1].segments:
        by_partition.setdefault((segment.topic, segment.partition), []).append(
            (segment.first_offset, segment.last_offset)
        )
    for ranges in by_partition.values():
        ranges.sort()
        assert all(before[1] < after[0] for before, after in pairwise(ranges)), ranges


def _strip(record: Record) -> tuple[Any, ...]:
    return (record.partition, record.offset, record.key, record.value, record.headers, record.timestamp)


def test_backup_and_three_phase_restore_on_a_standalone_cluster_on_s3_through_killed_workers(
    spark_cluster: LocalSparkCluster,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    s3_server: S3Server,
    unique_name: str,
    tmp_path: Path,
) -> None:
    source = _seed(source_cluster, unique_name)
    storage = s3_server.storage_settings(TEST_BUCKET, f"spark-engine/{unique_name}")
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    config = _config(
        tmp_path / "engine.yaml",
        spark_cluster,
        source=source_cluster,
        target=target_cluster,
        topic=unique_name,
        storage=storage,
        # The 3rd segment a worker stores, and the 2nd transaction a worker commits.
        crash_at="backup:segment-uploaded@3,restore:after-transaction@2",
        crash_dir=crashes,
        work=tmp_path,
    )
    done = _cli("backup", "-c", str(config), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (crashes / "backup_segment-uploaded").exists(), "no worker was killed during the backup"
    assert json.loads(done.stdout)["records"] == RECORDS
    settings = StorageSettings.model_validate(storage)
    assert [_strip(r) for r in read_backup(settings, "nightly")] == [_strip(r) for r in source]
    _no_overlapping_segments(settings)
    # The killed attempt's segments are stored but listed by no manifest: validate accepts the backup.
    assert len([key for key in _objects(s3_server, storage) if key.endswith(".parquet")]) > len(
        BackupCatalog(open_storage(settings)).load("nightly").manifests[-1].segments
    )
    checked = _cli("validate", "--deep", "-c", str(config), "--json")
    assert checked.returncode == 0, checked.stderr[-3000:]

    done = _cli("three-phase-restore", "-c", str(config), "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (crashes / "restore_after-transaction").exists(), "no worker was killed during the restore"
    restored_topic = f"{unique_name}-restored"
    restored = consume_all(target_cluster, restored_topic, [0, 1])
    origin = BackupCatalog(open_storage(settings)).load("nightly").source_cluster
    assert_restored_exactly([replace(r, topic=unique_name) for r in source], restored, source_cluster=origin)
    # Each command's tasks ran on both workers' executors (one each: a core per worker, two cores max).
    assert executors_of_each_run(spark_cluster)[-1] == 2, executors_of_each_run(spark_cluster)
    # Every group where the reference formula puts it, on each restored partition.
    for group, offsets in GROUPS.items():
        positions = committed(target_cluster, f"{unique_name}-{group}", restored_topic, [0, 1])
        for partition in (0, 1):
            records = restored_records(target_cluster, restored_topic, partition, origin)
            expected = reference_position(records, {(unique_name, p): o for p, o in offsets.items()})
            assert positions[partition] == expected, (group, partition, positions)


def _objects(s3_server: S3Server, storage: dict[str, Any]) -> list[str]:
    prefix = storage["url"].split(f"{TEST_BUCKET}/", 1)[1]
    client = s3_server.client()
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=TEST_BUCKET, Prefix=prefix):
        keys.extend(item["Key"] for item in page.get("Contents", []))
    return keys


def test_backup_and_restores_on_a_standalone_cluster_on_a_folder_through_killed_workers(
    spark_cluster: LocalSparkCluster,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
) -> None:
    source = _seed(source_cluster, unique_name)
    store = tmp_path / "store"

    def config(step: str, crash_at: str, **restore: Any) -> tuple[Path, Path]:
        crashes = tmp_path / f"crashes-{step}"
        crashes.mkdir()
        path = _config(
            tmp_path / f"{step}.yaml",
            spark_cluster,
            source=source_cluster,
            target=target_cluster,
            topic=unique_name,
            storage={"url": str(store)},
            crash_at=crash_at,
            crash_dir=crashes,
            work=tmp_path,
        )
        if restore:
            document = yaml.safe_load(path.read_text())
            document["restore"].update(restore)
            config_file(path, **document)
        return path, crashes

    # A worker killed at the consumed batch holding its 300th record: inside its first task of 500
    # (a count of batches is not sure to be reached: one fetch may bring a whole task's records).
    backup_config, crashes = config("backup", "backup:records-read@300")
    done = _cli("backup", "-c", str(backup_config), "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (crashes / "backup_records-read").exists()
    settings = StorageSettings(url=str(store))
    assert [_strip(r) for r in read_backup(settings, "nightly")] == [_strip(r) for r in source]
    _no_overlapping_segments(settings)
    origin = BackupCatalog(open_storage(settings)).load("nightly").source_cluster
    expected = [replace(r, topic=unique_name) for r in source]
    # Exactly once, a worker killed after its 2nd transaction; idempotent, after its 3rd batch of
    # records handed to the producer.
    for mode, crash in (
        ("exactly-once", "restore:after-transaction@2"),
        ("idempotent", "restore:batch-produced@3"),
    ):
        topic = f"{unique_name}-{mode}"
        restore_config, crashes = config(mode, crash, topic_mapping={unique_name: topic})
        done = _cli("restore", "-c", str(restore_config), f"--{mode}", "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)
        assert (summary["verified"], summary["mode"]) == (True, mode)
        assert (crashes / crash.split("@")[0].replace(":", "_")).exists(), mode
        assert_restored_exactly(expected, consume_all(target_cluster, topic, [0, 1]), source_cluster=origin)
