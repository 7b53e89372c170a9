"""restore.purge_target against a real target: the target topic holds other records first, and after
the restore it holds exactly the backup's records, each once (the oracle: the backed-up values).

``records`` deletes the other records (DeleteRecords to the end offsets), ``topics`` deletes the
topic and creates it again as the backup's (its partition count, not the target's). A consumer
group with an active member on the topic refuses the purge (exit 10, one line naming both) until
``--force-purge``. A restore killed just after its purge, then killed again after some committed
transactions, then run to the end, holds every record once: the rerun after the second kill did
not purge what the second run had restored.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.synthetic_backup import BackupRecord
from tests.support.backup_builder import partition_count, start_offsets, topic_configs
from tests.support.crash_restores import SOURCE_PARTITIONS, build_backup, check_exactly_once
from tests.support.kafka_io import Record, consume_all, create_topic, end_offsets, produce, target_topics
from tests.support.kill_loop import fault_seed, must_kill
from tests.support.restore_checks import REPO, restore, restore_command, run_restore_cli

PER_PARTITION = 200
OTHER_RECORDS = 60


def prefilled(
    target: LocalKafkaCluster, topic: str, partitions: int, configs: dict[str, str] | None = None
) -> None:
    """The target topic, created with ``partitions`` and holding records that are not the backup's."""
    create_topic(target, topic, partitions, configs)
    deadline = time.monotonic() + 30
    while topic not in target_topics(target):
        assert time.monotonic() < deadline, f"{topic} never showed in the target's metadata"
        time.sleep(0.05)
    produce(target, topic, [Record(key=b"other", value=b"other-%d" % i) for i in range(OTHER_RECORDS)])


def values_of(expected: dict[int, list[BackupRecord]]) -> list[bytes | None]:
    return sorted(record.value for records in expected.values() for record in records)  # type: ignore[type-var]


def held(target: LocalKafkaCluster, topic: str) -> list[bytes | None]:
    """The values the target topic holds, read_committed, from every partition it has."""
    records = consume_all(target, topic, list(range(partition_count(target, topic))), timeout=60)
    return sorted(record.value for record in records)  # type: ignore[type-var]


@pytest.fixture
def backed_up(tmp_path: Path, unique_name: str) -> tuple[str, Path, dict[int, list[BackupRecord]]]:
    """A backup ``purge`` of topic ``unique_name`` (3 partitions), and its records by partition."""
    store = tmp_path / "store"
    return unique_name, store, build_backup(store, tmp_path, unique_name, "purge", PER_PARTITION)


def cli_args(store: Path, target: LocalKafkaCluster, *flags: str) -> list[str]:
    return ["-p", str(store), "--backup-id", "purge", "-b", target.bootstrap_servers, *flags]


def test_purge_records_deletes_what_was_there_and_restores_the_backup_once(
    target_cluster: LocalKafkaCluster, backed_up: tuple[str, Path, dict[int, list[BackupRecord]]]
) -> None:
    topic, store, expected = backed_up
    prefilled(target_cluster, topic, SOURCE_PARTITIONS)
    ends = end_offsets(target_cluster, topic, range(SOURCE_PARTITIONS))
    preview = run_restore_cli(*cli_args(store, target_cluster, "--purge-target", "records", "--dry-run"))
    assert preview.returncode == 0, preview.stderr
    lines = [line for line in preview.stdout.splitlines() if "purge (restore.purge_target: records)" in line]
    offsets = ", ".join(f"{p}:{ends[p]}" for p in range(SOURCE_PARTITIONS))
    assert lines == [
        f"  purge (restore.purge_target: records): topic {topic}: delete its records below the end "
        f"offsets (partition:offset) {offsets} ({OTHER_RECORDS} record(s))"
    ]
    assert held(target_cluster, topic).count(b"other-0") == 1  # the dry run deleted nothing

    summary = restore(target_cluster, store, "purge", purge_target="records")
    assert [line.split(":")[0] for line in summary.purged] == [topic]
    assert summary.purged[0].startswith(f"{topic}: records deleted")
    assert held(target_cluster, topic) == values_of(expected)
    assert start_offsets(target_cluster, topic, range(SOURCE_PARTITIONS)) == ends


def test_purge_topics_recreates_the_topic_as_the_backups(
    target_cluster: LocalKafkaCluster, backed_up: tuple[str, Path, dict[int, list[BackupRecord]]]
) -> None:
    topic, store, expected = backed_up
    # Not the backup's shape: 2 partitions (the backup has 3) and a retention the backup does not set.
    prefilled(target_cluster, topic, 2, {"retention.ms": "3600000"})
    preview = run_restore_cli(*cli_args(store, target_cluster, "--purge-target", "topics", "--dry-run"))
    assert preview.returncode == 0, preview.stderr
    assert (
        f"  purge (restore.purge_target: topics): topic {topic}: delete it (2 partition(s), "
        f"{OTHER_RECORDS} record(s)) and create it again with {SOURCE_PARTITIONS} partition(s)"
    ) in preview.stdout.splitlines()

    summary = restore(target_cluster, store, "purge", purge_target="topics")
    assert summary.purged == [f"{topic}: deleted, created again as the backup's"]
    assert partition_count(target_cluster, topic) == SOURCE_PARTITIONS
    # Created as the restore creates a topic, not with the configs the deleted one had.
    assert topic_configs(target_cluster, topic).get("retention.ms") != "3600000"
    assert held(target_cluster, topic) == values_of(expected)


@contextmanager
def active_member(target: LocalKafkaCluster, group: str, topic: str) -> Iterator[None]:
    """A consumer of ``group`` subscribed to ``topic``, kept in the group (assigned its partitions)
    while the block runs."""
    consumer = Consumer(
        {"bootstrap.servers": target.bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    deadline = time.monotonic() + 60
    try:
        while not consumer.assignment():
            assert time.monotonic() < deadline, "the consumer was never assigned the topic"
            consumer.poll(0.2)
        yield
    finally:
        consumer.close()


def test_an_active_group_refuses_the_purge_until_forced(
    target_cluster: LocalKafkaCluster,
    backed_up: tuple[str, Path, dict[int, list[BackupRecord]]],
) -> None:
    topic, store, expected = backed_up
    prefilled(target_cluster, topic, SOURCE_PARTITIONS)
    group = f"{topic}-readers"
    with active_member(target_cluster, group, topic):
        refused = run_restore_cli(*cli_args(store, target_cluster, "--purge-target", "records"))
        assert refused.returncode == 10, refused.stderr
        errors = [line for line in refused.stderr.splitlines() if "refusing to purge" in line]
        assert len(errors) == 1
        assert f"refusing to purge topic {topic}: consumer group {group} has active members" in errors[0]
        # Refused before anything was written: the other records are still there, nothing restored.
        assert len(held(target_cluster, topic)) == OTHER_RECORDS

        forced = run_restore_cli(
            *cli_args(store, target_cluster, "--purge-target", "records", "--force-purge")
        )
        assert forced.returncode == 0, forced.stderr
    assert held(target_cluster, topic) == values_of(expected)


@pytest.mark.parametrize("how", ["records", "topics"])
def test_a_rerun_after_kills_does_not_purge_what_an_earlier_run_restored(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, how: str
) -> None:
    seed, _chooser = fault_seed()
    topic, store = unique_name, tmp_path / "store"
    expected = build_backup(store, tmp_path, topic, "purge", 1_000)
    prefilled(target_cluster, topic, SOURCE_PARTITIONS)
    config = tmp_path / "restore.yaml"
    config.write_text("restore:\n  transaction_max_records: 200\n  transaction_max_ms: 60000\n")
    command = restore_command(
        "restore",
        "-c",
        str(config),
        *cli_args(store, target_cluster, "--purge-target", how, "--exactly-once"),
    )
    # Killed right after the purge, before its first record: the target holds nothing of the restore.
    must_kill(command, "restore:purged", seed=seed, run=1, cwd=REPO)
    if how == "records":
        assert held(target_cluster, topic) == []
    # Purges again (nothing of its own was there), then is killed after its third commit.
    must_kill(command, "restore:after-transaction@3", seed=seed, run=2, cwd=REPO)
    restored_by_run_2 = len(held(target_cluster, topic))
    assert 0 < restored_by_run_2 < SOURCE_PARTITIONS * 1_000
    starts = start_offsets(target_cluster, topic, range(SOURCE_PARTITIONS))

    final = subprocess.run(
        [*command, "--json"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert final.returncode == 0, final.stderr
    summary = json.loads(final.stdout)
    assert summary["resumed"] is True
    assert summary["purged"] == []
    assert start_offsets(target_cluster, topic, range(SOURCE_PARTITIONS)) == starts
    check_exactly_once(target_cluster, topic, SOURCE_PARTITIONS, expected, seed)
