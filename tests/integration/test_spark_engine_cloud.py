"""The Spark engine through Google Cloud Storage (fake-gcs-server) and Azure Blob Storage (Azurite):
each task opens the store itself from the settings the driver pickled into it (the Azure account
key a ``SecretStr``), writes or reads through the same storage layer, and the records come back
exactly; the account key is never in what Spark shows or logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kbackup.backup import run_backup
from kbackup.cli.main import run
from kbackup.core.cache import cache_root
from kbackup.core.spark import SparkEngine
from kbackup.format.catalog import BackupCatalog
from kbackup.restore import service
from kbackup.restore.settings import RestoreSettings
from kbackup.sandbox.emulators import AZURITE_ACCOUNT_KEY
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import backup_job, read_backup
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, commit_group, consume_all, create_topic, group_position, produce
from tests.support.oracles import reference_position
from tests.support.restore_checks import REPO, assert_restored_exactly
from tests.support.restored_topics import restored_records
from tests.support.spark_topics import kept_fields, seed_sliced_topic
from tests.support.storage_backends import storage_backend

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.mark.parametrize("backend", ["gcs", "azure"])
def test_a_spark_backup_and_restore_through_the_cloud_bring_every_record_back_exactly(
    spark: Any,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    # 400 records on partition 0: four slices of 100 offsets, four tasks.
    seed_sliced_topic(source_cluster, unique_name, records=600, on_partition_0=400)
    location = storage_backend(backend, request, tmp_path, f"spark-{unique_name}")
    settings = location.settings()
    summary = run_backup(
        backup_job(
            source_cluster, settings, "b", [unique_name], spark_task_records=100, segment_max_records=150
        ),
        engine=SparkEngine(master="local[2]"),
    )
    assert summary.records == 600
    # Four slices of partition 0, each stored by its own task attempt (its own run id).
    backup = BackupCatalog(location.storage()).load("b")
    assert len({s.key.rsplit("-", 1)[-1] for s in backup.manifests[0].segments if s.partition == 0}) == 4
    source = consume_all(source_cluster, unique_name, [0, 1, 2])
    assert sorted(kept_fields(r) for r in read_backup(settings, "b")) == sorted(map(kept_fields, source))
    config = config_file(tmp_path / "storage.yaml", storage=location.section)
    assert run(["validate", "--deep", "--backup-id", "b", "-c", str(config)]) == 0
    # Restored by Spark tasks, each reading its segments from the bucket.
    restore_settings = RestoreSettings.model_validate({"topic_mapping": {unique_name: f"{unique_name}-r"}})
    job = service.prepare(
        backup_id="b", storage=settings, target=target_cluster.connection(), settings=restore_settings
    )
    restored_summary = service.run(job, engine=SparkEngine(master="local[2]"))
    assert (restored_summary.records, restored_summary.verified) == (600, True)
    assert_restored_exactly(
        [replace(r, topic=unique_name) for r in source],
        consume_all(target_cluster, f"{unique_name}-r", [0, 1, 2]),
        source_cluster=backup.source_cluster,
    )


def test_a_spark_drill_on_azure_keeps_the_account_key_out_of_spark(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """``drill --engine spark`` in its own process, the account key from the environment: its backup
    and restore tasks get the key pickled inside them, never in Spark's settings, so it is in neither
    Spark's event log (what its UI shows: settings, job and stage descriptions, task ends) nor
    Spark's own log nor anything the command prints or the report holds; and each group lands where
    the reference puts it."""
    topic = f"{unique_name}-orders"
    create_topic(source_cluster, topic, partitions=2)
    produce(
        source_cluster, topic, [Record(key=b"k%d" % i, value=b"v%d" % i, partition=i % 2) for i in range(200)]
    )
    group = f"{unique_name}-app"
    committed = {(topic, 0): 31, (topic, 1): 100}
    commit_group(source_cluster, group, committed)
    location = storage_backend("azure", request, tmp_path, f"spark-drill-{unique_name}")
    events = tmp_path / "spark-events"
    events.mkdir()
    # Uncompressed (Spark 4 compresses event logs by default), so that the search reads them.
    log_events = {"enabled": "true", "dir": events.as_uri(), "compress": "false"}
    config = config_file(
        tmp_path / "drill.yaml",
        backup_id="drill",
        source={"bootstrap_servers": [source_cluster.bootstrap_servers], "topics": {"include": [topic]}},
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage={
            **location.section,
            "azure": {**location.section["azure"], "account_key": "${KB_TEST_AZURE_KEY}"},
        },
        backup={"spark_task_records": 50},
        offset_reset={"groups": [group]},
        three_phase={"state_dir": str(tmp_path / "state")},
        mapping={"spark_conf": {f"spark.eventLog.{key}": value for key, value in log_events.items()}},
    )
    report = tmp_path / "report.json"
    since = time.time()
    command = ["drill", "-c", str(config), "--engine", "spark", "--report", str(report), "--json"]
    result = subprocess.run(
        [sys.executable, "-m", "kbackup", "-v", *command],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1", "KB_TEST_AZURE_KEY": AZURITE_ACCOUNT_KEY},
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    document = json.loads(report.read_text())
    assert document["passed"] is True
    assert any(note.startswith("engine: spark on local[") for note in document["notes"])
    drill_topic = f"drill.{topic}"
    for p in (0, 1):
        records = restored_records(target_cluster, drill_topic, p, source_cluster.cluster_id)
        expected = reference_position(records, {(topic, p): committed[(topic, p)]})
        assert group_position(target_cluster, f"drill.{group}", drill_topic, p) == expected, p
    # The search covers what Spark wrote: the event log of the run, with its jobs and tasks.
    logged = "\n".join(path.read_text(errors="replace") for path in events.rglob("*") if path.is_file())
    assert '"Event":"SparkListenerTaskEnd"' in logged
    assert "kafka-backup backup drill" in logged
    spark_logs = [p for p in (cache_root() / "spark-logs").glob("*.log") if p.stat().st_mtime >= since]
    assert spark_logs
    written = {
        "output": result.stdout + result.stderr,
        "event log": logged,
        **{str(path): path.read_text(errors="replace") for path in spark_logs},
        **{
            str(path): path.read_text(errors="replace")
            for path in tmp_path.rglob("report*")
            if path.is_file()
        },
    }
    assert [where for where, text in written.items() if AZURITE_ACCOUNT_KEY in text] == []
