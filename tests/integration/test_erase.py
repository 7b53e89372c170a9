"""``kafka-backup erase`` on backups taken from real Kafka: on moto's S3 (then ``--verify``, a prune, and a
restore of a time window into real Kafka), on an encrypted folder backup (rewritten encrypted, its
erasure record sealed), and refused while a ``backup --follow`` holds the backup."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from kbackup.backup.inspect import validate_backup
from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.core.times import iso_utc
from kbackup.format.catalog import BackupCatalog
from kbackup.format.erasure import erasure_key
from kbackup.format.generations import leases_prefix
from kbackup.format.layout import object_key
from kbackup.format.segments import ENCRYPTED_FOOTER_MAGIC
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import read_backup, take_backup
from tests.support.cli_process import start_cli, wait_for
from tests.support.config_files import config_file
from tests.support.encryption_keys import new_key
from tests.support.erase_backups import keyed_source_records, records_without, user_key
from tests.support.kafka_io import Record, consume_all, create_topic, produce

PARTITIONS = 2
USERS = 10


#: The records' times: the first increment's four hours ago, the second's three (the broker refuses
#: times in the future).
BASE_MS = (int(time.time()) // 3600 - 4) * 3_600_000
HOUR_MS = 3_600_000


def keyed_backup_of(
    source: LocalKafkaCluster, topic: str, settings: StorageSettings, backup_id: str
) -> list[Record]:
    """Two increments of keyed records, their times one hour apart; returns the source's records."""
    create_topic(source, topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    for increment in range(2):
        records = keyed_source_records(PARTITIONS, 20, USERS, start=increment * 40)
        stamp = BASE_MS + increment * HOUR_MS
        produce(source, topic, [Record(**{**vars(r), "timestamp": stamp + i}) for i, r in enumerate(records)])
        take_backup(source, settings, backup_id, [topic], segment_max_records=8)
    return consume_all(source, topic, list(range(PARTITIONS)))


def test_erase_on_s3_then_verify_prune_and_restore_a_time_window(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    s3_server: S3Server,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, backup_id = unique_name, "erased"
    store = s3_server.storage_settings(TEST_BUCKET, f"erase-{unique_name}")
    settings = StorageSettings.model_validate(store)
    storage = open_storage(settings)
    source = keyed_backup_of(source_cluster, topic, settings, backup_id)
    config = config_file(tmp_path / "erase.yaml", backup_id=backup_id, storage=store)
    erased = {user_key(3), user_key(7)}
    keys = ["--key", "user-3", "--key", "hex:" + user_key(7).hex()]
    assert (
        run(["erase", "all", "-c", str(config), *keys, "--request-id", "GDPR-1", "--execute", "--json"]) == 0
    )
    done = json.loads(capsys.readouterr().out)["executed"]
    assert done["records_erased"] == len(source) - len(records_without(source, erased)) > 0
    assert read_backup(storage, backup_id) == records_without(source, erased)
    report = validate_backup(storage, backup_id, deep=True)
    assert (report.errors, report.warnings) == ([], [])
    assert run(["erase", backup_id, "-c", str(config), "--verify", "--key", "user-3", "--json"]) == 0
    (proof,) = json.loads(capsys.readouterr().out)["verified"]
    assert (proof["gone"], proof["listed_by"]) == (True, ["GDPR-1"])
    assert run(["erase", backup_id, "-c", str(config), "--verify", "--key", "user-4"]) == 11
    assert "STILL HELD" in capsys.readouterr().out
    # A prune after the erase: the first increment's time goes, the revised second stays.
    assert (
        run(["prune", "-c", str(config), "--before", iso_utc((BASE_MS + HOUR_MS) / 1000), "--execute"]) == 0
    )
    capsys.readouterr()
    assert validate_backup(storage, backup_id, deep=True).errors == []
    # The erased backup restores its time window: the second hour, without the erased keys.
    restored = f"{topic}-restored"
    window = ["--time-window-start", str(BASE_MS + HOUR_MS), "--time-window-end", str(BASE_MS + 2 * HOUR_MS)]
    args = ["restore", "-c", str(config), "-b", target_cluster.bootstrap_servers, *window]
    assert run([*args, "--topic-mapping", f"{topic}={restored}"]) == 0, capsys.readouterr().err
    landed = consume_all(target_cluster, restored, list(range(PARTITIONS)))
    expected = [r for r in records_without(source, erased) if (r.timestamp or 0) >= BASE_MS + HOUR_MS]
    assert [(r.partition, r.key, r.value) for r in landed] == [
        (r.partition, r.key, r.value) for r in expected
    ]


def test_erase_of_an_encrypted_backup_rewrites_it_encrypted_and_seals_its_record(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic, backup_id = unique_name, "sealed"
    encryption = new_key(tmp_path)
    store = {"url": str(tmp_path / "store"), "encryption": encryption.model_dump(exclude_none=True)}
    settings = StorageSettings.model_validate(store)
    storage = open_storage(settings)
    source = keyed_backup_of(source_cluster, topic, settings, backup_id)
    before = {s.key: s.sha256 for m in BackupCatalog(storage).load(backup_id).manifests for s in m.segments}
    config = config_file(tmp_path / "erase.yaml", backup_id=backup_id, storage=store)
    assert (
        run(["erase", backup_id, "-c", str(config), "--key", "user-5", "--request-id", "R", "--execute"]) == 0
    )
    assert read_backup(storage, backup_id) == records_without(source, {user_key(5)})
    deep = validate_backup(storage, backup_id, deep=True)
    assert deep.errors == []
    assert deep.erasure_records_checked == 1  # the sealed record opened with the key and checked
    backup = BackupCatalog(storage).load(backup_id)
    rewritten = [s for m in backup.manifests for s in m.segments if s.key not in before]
    assert rewritten
    for segment in rewritten:
        data = storage.get_bytes(object_key(backup_id, segment.key))
        assert data.endswith(ENCRYPTED_FOOTER_MAGIC)
    record = json.loads(storage.get_bytes(erasure_key(backup_id, "R")))
    assert set(record) == {"format", "format_version", "backup_id", "request_id", "encryption", "sealed"}
    # Without the key, validate still checks every segment's presence, size and SHA-256.
    plain = open_storage(StorageSettings(url=str(tmp_path / "store")))
    assert validate_backup(plain, backup_id).errors == []
    assert run(["erase", backup_id, "-c", str(config), "--verify", "--key", "user-5"]) == 0


def test_erase_is_refused_while_a_follow_backup_holds_the_backup(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, backup_id = unique_name, "live"
    create_topic(source_cluster, topic, partitions=1)
    produce(source_cluster, topic, [Record(key=b"user-1", value=b"v", partition=0)])
    store = {"url": str(tmp_path / "store")}
    config = config_file(
        tmp_path / "live.yaml",
        backup_id=backup_id,
        source={"bootstrap_servers": [source_cluster.bootstrap_servers], "topics": {"include": [topic]}},
        storage=store,
        backup={"checkpoint_interval_secs": 2},
    )
    storage = open_storage(StorageSettings.model_validate(store))
    follow = start_cli("backup", "-c", str(config), "--follow")
    try:
        wait_for(lambda: BackupCatalog(storage).exists(backup_id), "the first increment", process=follow)
        code = run(
            ["erase", backup_id, "-c", str(config), "--key", "user-1", "--request-id", "F", "--execute"]
        )
        err = capsys.readouterr().err
        assert code == 10, err
        (lease,) = [info.key for info in storage.list(leases_prefix(backup_id))]
        run_id = lease.rsplit("/", 1)[1].removesuffix(".json")
        assert f"is in use by backup run {run_id}" in err
        assert "it was not erased" in err
    finally:
        follow.send_signal(signal.SIGTERM)
        follow.wait(60)
    assert (
        run(["erase", backup_id, "-c", str(config), "--key", "user-1", "--request-id", "F", "--execute"]) == 0
    )
    assert read_backup(storage, backup_id) == []
