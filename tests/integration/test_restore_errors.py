"""Bad input gets one clear error with its documented exit code, and nothing is written to the target."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kbackup.core.config import StorageSettings
from kbackup.core.errors import (
    BackupIntegrityError,
    KafkaUnreachableError,
    NotFoundError,
    PreconditionError,
    UnverifiedError,
)
from kbackup.format.catalog import BackupCatalog
from kbackup.format.layout import manifest_key, object_key
from kbackup.format.segments import SegmentLimits
from kbackup.restore import service
from kbackup.restore.settings import RestoreSettings
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage
from tests.support.kafka_io import create_topic, end_offsets, target_topics
from tests.support.restore_checks import progress_end, run_restore_cli, transactional_ids

NOW = int(time.time() * 1000)


def build_backup(
    root: Path, topic: str, partitions: int = 2, configs: dict[str, str] | None = None
) -> LocalStorage:
    storage = LocalStorage(root)
    builder = BackupBuilder(
        storage, "nightly", scratch_dir=root.parent, limits=SegmentLimits(max_records=100)
    )
    builder.topic(topic, partitions, configs)
    for p in range(partitions):
        builder.partition(
            topic,
            p,
            [
                BackupRecord(offset=o, key=b"k%d" % o, value=b"v", timestamp=NOW - 1000 + o)
                for o in range(300)
            ],
        )
    builder.commit()
    return storage


def args(root: Path, cluster: LocalKafkaCluster, *extra: str) -> list[str]:
    return ["-p", str(root), "--backup-id", "nightly", "-b", cluster.bootstrap_servers, *extra]


@pytest.mark.parametrize("damage", ["missing", "truncated", "corrupt"])
def test_damaged_later_segment_is_refused_before_the_target_is_touched(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, damage: str
) -> None:
    """Every check that needs no write runs before the transactional producer starts: the refused
    restore leaves the target's topics and its transaction coordinator's state as they were."""
    storage = build_backup(tmp_path / "store", unique_name)
    segments = BackupCatalog(storage).load("nightly").manifests[0].segments
    segment = max(segments, key=lambda s: (s.partition, s.first_offset))  # the last one read
    key = object_key("nightly", segment.key)
    if damage == "missing":
        storage.delete(key)
    else:
        path = storage.local_path(key)
        data = bytearray(path.read_bytes())
        if damage == "truncated":
            del data[-100:]
        else:
            data[100] ^= 0x01
        path.write_bytes(bytes(data))
    transactional_id = service.prepare(
        backup_id="nightly",
        storage=StorageSettings(url=str(tmp_path / "store")),
        target=target_cluster.connection(),
        settings=RestoreSettings(topics=[unique_name]),  # the selection makes the restore id this test's own
    ).plan.transactional_id
    # In this order: reading __transaction_state looks up a consumer group coordinator, which makes
    # the broker create __consumer_offsets.
    ids_before = transactional_ids(target_cluster)
    topics_before = target_topics(target_cluster)
    result = run_restore_cli(*args(tmp_path / "store", target_cluster, "--topic", unique_name))
    assert result.returncode == BackupIntegrityError.exit_code, result.stderr
    assert f"segment {key}" in result.stderr
    assert {"missing": "is missing", "truncated": "bytes in", "corrupt": "fails its SHA-256 check"}[
        damage
    ] in result.stderr
    assert target_topics(target_cluster) == topics_before
    ids_after = transactional_ids(target_cluster)
    assert ids_after == ids_before
    assert transactional_id not in (ids_after or set())


def test_unknown_format_version_is_refused(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    storage = build_backup(tmp_path / "store", unique_name)
    key = manifest_key("nightly", 0)
    raw = json.loads(storage.get_bytes(key))
    raw["format_version"] = 3
    storage.put_bytes(key, json.dumps(raw).encode())
    result = run_restore_cli(*args(tmp_path / "store", target_cluster), "--json")
    assert result.returncode == BackupIntegrityError.exit_code
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "backup-integrity"
    assert "nightly/manifests/00000000.json" in error["message"]
    assert "format version 3" in error["message"]
    assert unique_name not in target_topics(target_cluster)


def test_unknown_topic_in_mapping(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    build_backup(tmp_path / "store", unique_name)
    result = run_restore_cli(*args(tmp_path / "store", target_cluster, "--topic-mapping", "orderz=x"))
    assert result.returncode == NotFoundError.exit_code
    assert "restore.topic_mapping: topic 'orderz' is not in backup 'nightly'" in result.stderr
    assert unique_name not in target_topics(target_cluster)


def test_too_few_target_partitions(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    build_backup(tmp_path / "store", unique_name, partitions=3)
    create_topic(target_cluster, unique_name, 2)
    result = run_restore_cli(*args(tmp_path / "store", target_cluster))
    assert result.returncode == PreconditionError.exit_code
    assert (
        f"target topic '{unique_name}' has 2 partition(s), fewer than the 3 of source topic" in result.stderr
    )
    assert "next step:" in result.stderr
    assert end_offsets(target_cluster, unique_name, [0, 1]) == {0: 0, 1: 0}


def test_unreachable_target_names_its_servers(unique_name: str, tmp_path: Path) -> None:
    build_backup(tmp_path / "store", unique_name)
    servers = f"127.0.0.1:{free_port()}"
    config = tmp_path / "restore.yaml"
    config.write_text(
        f"backup_id: nightly\nstorage: {{url: {tmp_path / 'store'}}}\n"
        f"target:\n  bootstrap_servers: ['{servers}']\n  connect_timeout_secs: 3\n"
    )
    result = run_restore_cli("-c", str(config))
    assert result.returncode == KafkaUnreachableError.exit_code, result.stderr
    assert f"no broker of {servers} answered" in result.stderr


def test_config_the_target_refuses_fails_before_any_topic_is_created(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    root = tmp_path / "store"
    storage = LocalStorage(root)
    builder = BackupBuilder(storage, "nightly", scratch_dir=tmp_path)
    builder.topic(f"{unique_name}-a", 1)
    builder.topic(f"{unique_name}-b", 1, {"cleanup.policy": "no-such-policy"})
    for topic in (f"{unique_name}-a", f"{unique_name}-b"):
        builder.partition(topic, 0, [BackupRecord(offset=0, value=b"v", timestamp=NOW)])
    builder.commit()
    result = run_restore_cli(*args(root, target_cluster))
    assert result.returncode == PreconditionError.exit_code, result.stderr
    assert f"the target refuses to create topic '{unique_name}-b'" in result.stderr
    assert "exclude_topic_configs" in result.stderr
    assert not {f"{unique_name}-a", f"{unique_name}-b"} & target_topics(target_cluster)


def test_dry_run_changes_nothing(target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path) -> None:
    build_backup(tmp_path / "store", unique_name)
    before = progress_end(target_cluster)
    topics_before = target_topics(target_cluster)
    result = run_restore_cli(*args(tmp_path / "store", target_cluster, "--dry-run", "--json"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["dry_run"] is True
    assert report["records_to_write"] == 600
    assert report["plan"]["topics"][0]["create"] is True
    assert report["plan"]["mode"] == "exactly-once"
    assert target_topics(target_cluster) == topics_before
    assert progress_end(target_cluster) == before
    text = run_restore_cli(*args(tmp_path / "store", target_cluster, "--dry-run"))
    assert text.returncode == 0
    assert "dry run: nothing is created or written" in text.stdout
    assert f"topic {unique_name} -> {unique_name}: create with 2 partition(s)" in text.stdout
    assert "would write 600 record(s)" in text.stdout


def test_records_not_readable_with_read_committed_fail_the_restore_until_a_rerun_sees_them(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """Another producer's open transaction on the target topic holds its last stable offset below
    the restored records: a mapping read now would miss them, so the restore fails (exit 13,
    resumable) instead of warning; once that transaction ends, a re-run writes nothing and passes."""
    build_backup(tmp_path / "store", unique_name, partitions=1)
    create_topic(target_cluster, unique_name, 1)
    other = Producer(
        {"bootstrap.servers": target_cluster.bootstrap_servers, "transactional.id": f"{unique_name}-other"}
    )
    other.init_transactions(10)
    other.begin_transaction()
    other.produce(unique_name, value=b"not yet committed", partition=0)
    other.flush(10)
    config = tmp_path / "restore.yaml"
    config.write_text("restore:\n  timeout_secs: 4\n")
    command = ["-c", str(config), *args(tmp_path / "store", target_cluster)]

    result = run_restore_cli(*command)
    assert result.returncode == UnverifiedError.exit_code, result.stderr
    first_line = result.stderr.splitlines()[0]
    assert f"restored records of {unique_name}/0 were committed but not readable with read_committed" in (
        first_line
    )
    assert "run the same command again" in result.stderr
    # The 300 records are written (and committed) behind the open transaction's record.
    probe = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": f"{unique_name}-probe",
            "isolation.level": "read_uncommitted",
        }
    )
    assert probe.get_watermark_offsets(TopicPartition(unique_name, 0), timeout=10)[1] > 300
    probe.close()

    other.commit_transaction(10)
    result = run_restore_cli(*command)
    assert result.returncode == 0, result.stderr
    assert "restored 0 record(s)" in result.stdout
