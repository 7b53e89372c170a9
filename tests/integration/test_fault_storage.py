"""The S3 endpoint failing for a while during a backup and during a restore.

moto's server forgets every object when stopped, so the outage is made by a
proxy between kafka-backup and the server (``tests.support.faulty_proxy``):
it resets every connection (endpoint down) or answers ``503 SlowDown``
(throttling), then passes traffic again. A short outage is ridden out by
bounded retries with backoff (``storage.retry_timeout_secs``); one that
outlasts them ends the run with a StorageError (exit 7) that names the
endpoint, no manifest ever lists a missing or partial object, and the same
command run again completes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from kbackup.backup.inspect import validate_backup
from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import Storage, open_storage
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import read_backup
from tests.support.cli_process import wait_for
from tests.support.config_files import config_file
from tests.support.crash_restores import SOURCE_PARTITIONS, build_backup, check_exactly_once, landed
from tests.support.faulty_proxy import FaultyProxy, Mode
from tests.support.kafka_io import Record, consume_all, create_topic, produce
from tests.support.restore_checks import REPO

pytestmark = pytest.mark.slow

#: Longer than botocore's own retries cover for a connection error (at most 6.35 s over 8 attempts).
OUTAGE_SECS = 8.0
#: storage.retry_timeout_secs of the runs that must give up (the default is 120 s).
GIVE_UP_SECS = 5.0
PARTITIONS = 3
RECORDS = 30_000


@pytest.fixture
def proxy(s3_server: S3Server) -> Iterator[FaultyProxy]:
    proxy = FaultyProxy(upstream_port=s3_server.port)
    yield proxy
    proxy.close()


def storage_section(
    s3_server: S3Server, proxy: FaultyProxy, prefix: str, retry_timeout_secs: float | None
) -> dict[str, Any]:
    """Through the proxy; ``retry_timeout_secs`` None keeps the default a user gets."""
    section: dict[str, Any] = {
        **s3_server.storage_settings(TEST_BUCKET, prefix),
        "endpoint_url": proxy.endpoint_url,
    }
    if retry_timeout_secs is not None:
        section["retry_timeout_secs"] = retry_timeout_secs
    return section


def direct_storage(s3_server: S3Server, prefix: str) -> Storage:
    """The same prefix reached without the proxy, for the checks."""
    return open_storage(StorageSettings.model_validate(s3_server.storage_settings(TEST_BUCKET, prefix)))


def start(command: list[str]) -> subprocess.Popen[str]:
    env = {**os.environ, "KBACKUP_NO_PROGRESS": "1"}
    return subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def outage(proxy: FaultyProxy, mode: Mode, seconds: float) -> None:
    proxy.set_mode(mode)
    time.sleep(seconds)
    proxy.set_mode("forward")


def assert_manifests_list_only_whole_objects(storage: Storage, backup_id: str) -> None:
    if BackupCatalog(storage).exists(backup_id):
        report = validate_backup(storage, backup_id, deep=True)
        assert report.errors == [], report.errors


def backup_setup(
    cluster: LocalKafkaCluster,
    s3_server: S3Server,
    proxy: FaultyProxy,
    tmp_path: Path,
    topic: str,
    retry_timeout_secs: float | None,
) -> tuple[list[str], str]:
    create_topic(cluster, topic, partitions=PARTITIONS)
    records = [
        Record(key=b"k%d" % i, value=b"value-%d-" % i + b"v" * 150, partition=i % PARTITIONS)
        for i in range(RECORDS)
    ]
    produce(cluster, topic, records)
    prefix = f"outage-{uuid.uuid4().hex[:8]}"
    config = config_file(
        tmp_path / "backup.yaml",
        backup_id="outage",
        source={"bootstrap_servers": [cluster.bootstrap_servers], "topics": {"include": [topic]}},
        storage=storage_section(s3_server, proxy, prefix, retry_timeout_secs),
        backup={"segment_max_records": 300, "scratch_dir": str(tmp_path / "scratch")},
    )
    return [sys.executable, "-m", "kbackup", "backup", "-c", str(config)], prefix


def first_segment_stored(s3_server: S3Server, prefix: str) -> bool:
    listed = s3_server.client().list_objects_v2(Bucket=TEST_BUCKET, Prefix=f"{prefix}/outage/data/")
    return bool(listed.get("KeyCount"))


@pytest.mark.parametrize("mode", ["reset", "busy"])
def test_backup_rides_out_a_short_storage_outage(
    source_cluster: LocalKafkaCluster,
    s3_server: S3Server,
    proxy: FaultyProxy,
    unique_name: str,
    tmp_path: Path,
    mode: Mode,
) -> None:
    command, prefix = backup_setup(
        source_cluster, s3_server, proxy, tmp_path, unique_name, retry_timeout_secs=None
    )
    process = start(command)
    try:
        wait_for(lambda: first_segment_stored(s3_server, prefix), "the first segment", process=process)
        outage(proxy, mode, OUTAGE_SECS)
        _out, err = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    assert proxy.faults_served > 0, "the backup finished before the outage: nothing was tested"
    assert process.returncode == 0, err
    storage = direct_storage(s3_server, prefix)
    assert read_backup(storage, "outage") == consume_all(source_cluster, unique_name, list(range(PARTITIONS)))
    assert validate_backup(storage, "outage", deep=True).errors == []


def test_backup_fails_clearly_when_storage_stays_down_and_a_rerun_completes(
    source_cluster: LocalKafkaCluster,
    s3_server: S3Server,
    proxy: FaultyProxy,
    unique_name: str,
    tmp_path: Path,
) -> None:
    command, prefix = backup_setup(
        source_cluster, s3_server, proxy, tmp_path, unique_name, retry_timeout_secs=GIVE_UP_SECS
    )
    process = start(command)
    try:
        wait_for(lambda: first_segment_stored(s3_server, prefix), "the first segment", process=process)
        proxy.set_mode("reset")
        down_at = time.monotonic()
        _out, err = process.communicate(timeout=600)
        print(f"the backup gave up {time.monotonic() - down_at:.1f}s after the endpoint went down")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    assert process.returncode == StorageError.exit_code, err
    assert proxy.endpoint_url in err, err
    assert "still failing after" in err, err
    assert "Traceback" not in err
    proxy.set_mode("forward")
    storage = direct_storage(s3_server, prefix)
    assert_manifests_list_only_whole_objects(storage, "outage")

    rerun = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert read_backup(storage, "outage") == consume_all(source_cluster, unique_name, list(range(PARTITIONS)))
    assert validate_backup(storage, "outage", deep=True).errors == []


def test_exactly_once_restore_through_storage_outages(
    target_cluster: LocalKafkaCluster,
    s3_server: S3Server,
    proxy: FaultyProxy,
    unique_name: str,
    tmp_path: Path,
) -> None:
    topic = unique_name
    expected = build_backup(tmp_path / "local", tmp_path, topic)
    prefix = f"restore-outage-{uuid.uuid4().hex[:8]}"
    client = s3_server.client()
    for path in sorted((tmp_path / "local").rglob("*")):
        if path.is_file():
            client.upload_file(str(path), TEST_BUCKET, f"{prefix}/{path.relative_to(tmp_path / 'local')}")

    def command(retry_timeout_secs: float | None) -> list[str]:
        config = config_file(
            tmp_path / f"restore-{retry_timeout_secs}.yaml",
            backup_id="crash",
            target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
            storage=storage_section(s3_server, proxy, prefix, retry_timeout_secs),
            restore={"transaction_max_records": 2000},
        )
        return [sys.executable, "-m", "kbackup", "restore", "-c", str(config), "--exactly-once"]

    probe = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": "probe",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        # 1. The endpoint goes down for good mid-restore: a clear storage error once the retries are spent.
        process = start(command(retry_timeout_secs=GIVE_UP_SECS))
        try:
            wait_for(
                lambda: landed(probe, topic, SOURCE_PARTITIONS) >= 5_000, "5,000 records", process=process
            )
            proxy.set_mode("reset")
            _out, err = process.communicate(timeout=600)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)
        stopped_at = landed(probe, topic, SOURCE_PARTITIONS)
        print(f"first run: exit {process.returncode} after {stopped_at} records landed: {err.strip()}")
        assert process.returncode == StorageError.exit_code, err
        assert proxy.endpoint_url in err
        assert "still failing after" in err, err
        assert stopped_at < sum(len(r) for r in expected.values()), "the restore ended before the outage"

        # 2. The same command again, through a throttling spell at its start and a short outage
        #    mid-way: bounded retries ride them out and the target ends with each record once.
        faults_before = proxy.faults_served
        proxy.set_mode("busy")
        process = start(command(retry_timeout_secs=None))
        try:
            time.sleep(OUTAGE_SECS)
            proxy.set_mode("forward")
            faults_after_throttling = proxy.faults_served
            wait_for(
                lambda: landed(probe, topic, SOURCE_PARTITIONS) >= stopped_at + 10_000, "10,000 more records",
                process=process,
            )  # fmt: skip
            outage(proxy, "reset", OUTAGE_SECS)
            faults_after_outage = proxy.faults_served
            _out, err = process.communicate(timeout=600)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(30)
        # Each fault spell must have met requests, or it tested nothing.
        assert faults_after_throttling > faults_before, "the throttling spell served no fault"
        assert faults_after_outage > faults_after_throttling, "the mid-way outage served no fault"
        assert process.returncode == 0, err
    finally:
        probe.close()
    check_exactly_once(target_cluster, topic, SOURCE_PARTITIONS, expected, seed=0)


def test_a_manifest_write_whose_answer_was_lost_is_not_taken_for_another_runs(
    s3_server: S3Server, proxy: FaultyProxy
) -> None:
    prefix = f"lost-answer-{uuid.uuid4().hex[:8]}"
    settings = StorageSettings.model_validate(storage_section(s3_server, proxy, prefix, None))
    storage = open_storage(settings)
    key = "b1/manifests/00000000.json"
    proxy.set_mode("lose-answer")  # the write is stored, its answer never arrives; the client retries
    assert storage.put_bytes_if_absent(key, b'{"increment": 0, "run": "mine"}')
    assert proxy.faults_served == 1
    assert direct_storage(s3_server, prefix).get_bytes(key) == b'{"increment": 0, "run": "mine"}'
    # Another run's manifest in the same place is still refused.
    assert not storage.put_bytes_if_absent(key, b'{"increment": 0, "run": "theirs"}')
