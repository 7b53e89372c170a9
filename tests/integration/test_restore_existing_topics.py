"""restore.existing_topics against a real target: topics that already exist and differ from the backup's.

The backup holds two topics of three partitions each, compacted, with ``max.message.bytes`` set.
On the target each already exists with ``cleanup.policy: delete``: one with more partitions (5),
one with fewer (2). ``validate`` warns and restores into them as they are, ``apply`` sets the
backup's configs and adds the missing partitions before the first record, ``fail`` stops with one
line before anything is written. Each test has its own target topics and progress topic.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from kbackup.core.errors import PreconditionError
from kbackup.format.origin import parse_origin
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage
from tests.support.backup_builder import partition_count, topic_configs
from tests.support.cli_run import RunCli
from tests.support.config_files import config_file
from tests.support.kafka_io import consume_all, create_topic, end_offsets, target_topics

BACKUP_CONFIGS = {"cleanup.policy": "compact", "max.message.bytes": "2000000"}
TARGET_CONFIGS = {"cleanup.policy": "delete"}
RECORDS_PER_PARTITION = 4
#: Source topic -> partitions its target topic already has.
EXISTING = {"more": 5, "fewer": 2}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A backup ``nightly`` of topics ``more`` and ``fewer``, 3 partitions each, written directly."""
    folder = tmp_path_factory.mktemp("existing-topics")
    storage = LocalStorage(folder / "store")
    builder = BackupBuilder(storage, "nightly", source_cluster="prod", scratch_dir=folder)
    for topic in EXISTING:
        builder.topic(topic, 3, dict(BACKUP_CONFIGS))
        for p in range(3):
            records = [
                BackupRecord(
                    offset=i,
                    key=b"%s-%d-%d" % (topic.encode(), p, i),
                    value=b"v",
                    timestamp=1_700_000_000_000 + i,
                )
                for i in range(RECORDS_PER_PARTITION)
            ]
            builder.partition(topic, p, records)
    builder.commit()
    return folder / "store"


def existing_targets(target: LocalKafkaCluster, prefix: str) -> dict[str, str]:
    """Each source topic's target topic, created on the target as ``EXISTING`` says (and listed by
    its metadata: a restore that did not see one would plan to create it)."""
    names = {topic: f"{prefix}-{topic}" for topic in EXISTING}
    for topic, name in names.items():
        create_topic(target, name, EXISTING[topic], TARGET_CONFIGS)
    deadline = time.monotonic() + 30
    while not set(names.values()) <= target_topics(target):
        assert time.monotonic() < deadline, "the created topics never showed in the target's metadata"
        time.sleep(0.05)
    return names


def compared_configs(target: LocalKafkaCluster, topic: str) -> dict[str, str]:
    """The topic's values of the configs the backup sets (the sandbox's brokers set others)."""
    return {key: value for key, value in topic_configs(target, topic).items() if key in BACKUP_CONFIGS}


def restore(
    cli: RunCli,
    tmp_path: Path,
    store: Path,
    target: LocalKafkaCluster,
    names: dict[str, str],
    *flags: str,
    **restore: Any,
) -> tuple[int, str, str]:
    """``kafka-backup restore --json`` of the backup into ``names`` with ``restore`` settings."""
    config = config_file(
        tmp_path / "restore.yaml",
        restore={"topic_mapping": names, "progress_topic": f"{names['more']}-progress", **restore},
    )
    backup = ["-p", str(store), "--backup-id", "nightly", "-b", target.bootstrap_servers]
    return cli("restore", "-c", str(config), *backup, "--json", *flags)


def restored_per_partition(target: LocalKafkaCluster, topic: str, partitions: int) -> dict[int, set[int]]:
    """The source partitions whose records each target partition holds."""
    found: dict[int, set[int]] = {}
    for record in consume_all(target, topic, list(range(partitions))):
        origin = parse_origin(record.headers)
        assert origin is not None
        assert record.partition is not None
        found.setdefault(record.partition, set()).add(origin.partition)
    return found


def test_validate_warns_and_restores_into_the_topics_as_they_are(
    target_cluster: LocalKafkaCluster, store: Path, unique_name: str, tmp_path: Path, cli: RunCli
) -> None:
    names = existing_targets(target_cluster, unique_name)
    # Fewer partitions than the source's: only restore.repartition lets records in as the topic is.
    code, out, err = restore(cli, tmp_path, store, target_cluster, names, repartition=["fewer"])
    assert code == 0, err
    summary = json.loads(out)
    assert summary["records"] == 2 * 3 * RECORDS_PER_PARTITION
    warnings = summary["warnings"]
    for name in names.values():
        assert (
            f"target topic {name} differs from the backup, cleanup.policy: backup compact, target delete: "
            "restored into as it is (restore.existing_topics: validate; apply would change it)"
        ) in warnings
    assert any(
        f"{names['more']} differs from the backup, partitions: backup 3, target 5" in w for w in warnings
    )
    assert any(
        f"{names['fewer']} differs from the backup, partitions: backup 3, target 2" in w for w in warnings
    )
    assert summary["existing_topics_changed"] == []
    for topic, name in names.items():
        assert compared_configs(target_cluster, name) == TARGET_CONFIGS
        assert partition_count(target_cluster, name) == EXISTING[topic]


def test_apply_sets_the_backups_configs_and_adds_partitions_first(
    target_cluster: LocalKafkaCluster, store: Path, unique_name: str, tmp_path: Path, cli: RunCli
) -> None:
    names = existing_targets(target_cluster, unique_name)
    # The dry run plans the changes and makes none.
    code, out, err = restore(
        cli, tmp_path, store, target_cluster, names, "--dry-run", existing_topics="apply"
    )
    assert code == 0, err
    planned = {topic["source_topic"]: topic for topic in json.loads(out)["plan"]["topics"]}
    assert (planned["fewer"]["partitions_added"], planned["fewer"]["target_partitions"]) == (1, 3)
    assert planned["more"]["config_changes"] == BACKUP_CONFIGS
    assert partition_count(target_cluster, names["fewer"]) == 2
    assert compared_configs(target_cluster, names["more"]) == TARGET_CONFIGS

    code, out, err = restore(cli, tmp_path, store, target_cluster, names, existing_topics="apply")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["records"] == 2 * 3 * RECORDS_PER_PARTITION
    assert summary["existing_topics_changed"] == [
        f"{names['fewer']}: cleanup.policy=compact, max.message.bytes=2000000, partitions 2 -> 3",
        f"{names['more']}: cleanup.policy=compact, max.message.bytes=2000000",
    ]
    # Five partitions cannot become three: said, and the restore goes on.
    assert any(
        f"{names['more']} differs from the backup, partitions: backup 3, target 5: Kafka cannot remove" in w
        for w in summary["warnings"]
    )
    for name in names.values():
        assert compared_configs(target_cluster, name) == BACKUP_CONFIGS
    assert partition_count(target_cluster, names["fewer"]) == 3
    assert partition_count(target_cluster, names["more"]) == 5
    # Every source partition went to the partition of its number (the one apply added included).
    assert restored_per_partition(target_cluster, names["fewer"], 3) == {0: {0}, 1: {1}, 2: {2}}
    assert restored_per_partition(target_cluster, names["more"], 5) == {0: {0}, 1: {1}, 2: {2}}

    # A second run finds them like the backup's: nothing to change, nothing left to write.
    code, out, err = restore(cli, tmp_path, store, target_cluster, names, existing_topics="apply")
    assert code == 0, err
    again = json.loads(out)
    assert (again["records"], again["existing_topics_changed"]) == (0, [])


def test_fail_stops_with_one_line_before_anything_is_written(
    target_cluster: LocalKafkaCluster, store: Path, unique_name: str, tmp_path: Path, cli: RunCli
) -> None:
    names = existing_targets(target_cluster, unique_name)
    topics_before = target_topics(target_cluster)
    code, _out, err = restore(cli, tmp_path, store, target_cluster, names, existing_topics="fail")
    assert code == PreconditionError.exit_code, err
    first = err.splitlines()[0]
    assert first.startswith(
        "kafka-backup: error: restore.existing_topics is fail and 2 existing target topic(s) differ from the "
        "backup: "
    )
    for topic, name in names.items():
        assert (
            f"{name} (cleanup.policy: backup compact, target delete, max.message.bytes: backup 2000000, "
            f"target not set, partitions: backup 3, target {EXISTING[topic]})"
        ) in first
    assert "restore.existing_topics: apply" in err
    # Nothing written: no topic created (not even the progress topic), no record, no config changed.
    assert target_topics(target_cluster) == topics_before
    for topic, name in names.items():
        assert compared_configs(target_cluster, name) == TARGET_CONFIGS
        assert end_offsets(target_cluster, name, list(range(EXISTING[topic]))) == dict.fromkeys(
            range(EXISTING[topic]), 0
        )
