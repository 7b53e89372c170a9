"""Increments (nothing copied twice), consumer-group snapshots, and their consistency with the data."""

from __future__ import annotations

import threading
from pathlib import Path

from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.backup_io import read_backup, take_backup
from tests.support.cli_process import wait_for
from tests.support.kafka_io import (
    batch,
    commit_group,
    consume_all,
    create_topic,
    end_offsets,
    group_position,
    produce,
)


def test_each_run_adds_an_increment_from_where_the_last_ended(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    partitions = 6
    create_topic(source_cluster, unique_name, partitions=partitions)
    produce(source_cluster, unique_name, batch(0, 90, partitions))
    first = take_backup(source_cluster, tmp_path, "inc", [unique_name])
    assert first.records == 90
    assert first.increments[0].increment == 0

    produce(source_cluster, unique_name, batch(90, 60, 4))  # partitions 4 and 5 get nothing new
    second = take_backup(source_cluster, tmp_path, "inc", [unique_name])
    assert second.records == 60
    # Nothing new: no increment (test_backup_nothing_new.py has the cases).
    third = take_backup(source_cluster, tmp_path, "inc", [unique_name])
    assert (third.records, third.increments, third.nothing_new_since) == (0, [], 1)
    produce(source_cluster, unique_name, batch(150, 6, 6))
    fourth = take_backup(source_cluster, tmp_path, "inc", [unique_name])
    assert fourth.records == 6

    backup = BackupCatalog(open_storage(str(tmp_path))).load("inc")
    assert [m.increment for m in backup.manifests] == [0, 1, 2]
    assert backup.manifests[1].previous_run_id == backup.manifests[0].run_id
    assert backup.manifests[2].previous_run_id == backup.manifests[1].run_id
    ends = end_offsets(source_cluster, unique_name, list(range(partitions)))
    for before, after in zip(backup.manifests, backup.manifests[1:], strict=False):
        previous = {(p.topic, p.partition): p.end_offset for p in before.partitions}
        for entry in after.partitions:
            assert entry.start_offset == previous[(entry.topic, entry.partition)]
    assert {(p.partition, p.end_offset) for p in backup.manifests[2].partitions} == set(ends.items())
    # Every record exactly once, at its offset.
    backed_up = read_backup(tmp_path, "inc")
    assert backed_up == consume_all(source_cluster, unique_name, list(range(partitions)))
    assert len({(r.partition, r.offset) for r in backed_up}) == 156


def test_new_topic_joins_a_continued_backup_from_its_start(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    first_topic, second_topic = f"{unique_name}-a", f"{unique_name}-b"
    create_topic(source_cluster, first_topic)
    produce(source_cluster, first_topic, batch(0, 10, 1))
    take_backup(source_cluster, tmp_path, "grow", [f"{unique_name}-.*"])
    create_topic(source_cluster, second_topic, partitions=2)
    produce(source_cluster, second_topic, batch(0, 10, 2))
    summary = take_backup(source_cluster, tmp_path, "grow", [f"{unique_name}-.*"])
    assert summary.records == 10
    assert read_backup(tmp_path, "grow") == consume_all(source_cluster, first_topic) + consume_all(
        source_cluster, second_topic, [0, 1]
    )


def test_group_snapshot_holds_committed_offsets_on_selected_topics(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    selected, other = f"{unique_name}-in", f"{unique_name}-out"
    create_topic(source_cluster, selected, partitions=2)
    create_topic(source_cluster, other)
    produce(source_cluster, selected, batch(0, 40, 2))
    produce(source_cluster, other, batch(0, 5, 1))
    commit_group(source_cluster, f"{unique_name}-g1", {(selected, 0): 7, (selected, 1): 20, (other, 0): 3})
    commit_group(source_cluster, f"{unique_name}-g2", {(other, 0): 5})  # nothing on the selected topic
    commit_group(source_cluster, f"{unique_name}-g3", {(selected, 1): 0})

    take_backup(source_cluster, tmp_path, "groups", [selected])

    snapshot = BackupCatalog(open_storage(str(tmp_path))).load("groups").consumer_groups
    assert snapshot is not None
    groups = {g.group_id: g for g in snapshot.groups if g.group_id.startswith(unique_name)}
    assert set(groups) == {f"{unique_name}-g1", f"{unique_name}-g3"}
    assert [(o.topic, o.partition, o.offset) for o in groups[f"{unique_name}-g1"].offsets] == [
        (selected, 0, 7),
        (selected, 1, 20),
    ]
    assert [(o.partition, o.offset) for o in groups[f"{unique_name}-g3"].offsets] == [(1, 0)]
    assert groups[f"{unique_name}-g1"].state == "Empty"

    # A later increment carries a fresh snapshot.
    commit_group(source_cluster, f"{unique_name}-g1", {(selected, 0): 19})
    take_backup(source_cluster, tmp_path, "groups", [selected])
    latest = BackupCatalog(open_storage(str(tmp_path))).load("groups").consumer_groups
    assert latest is not None
    g1 = next(g for g in latest.groups if g.group_id == f"{unique_name}-g1")
    assert [(o.partition, o.offset) for o in g1.offsets] == [(0, 19), (1, 20)]


def test_snapshot_offsets_are_covered_while_producers_and_consumers_run(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """A group committing at the very end of the log while the backup runs: every offset in every
    snapshot is at or below the end offset its increment copied (the snapshot is taken first)."""
    partitions = 3
    create_topic(source_cluster, unique_name, partitions=partitions)
    produce(source_cluster, unique_name, batch(0, 30, partitions))
    stop = threading.Event()
    failures: list[BaseException] = []

    def produce_and_commit_at_the_end() -> None:
        try:
            i = 1000
            while not stop.is_set():
                produce(source_cluster, unique_name, batch(i, partitions * 5, partitions))
                i += partitions * 5
                ends = end_offsets(source_cluster, unique_name, list(range(partitions)))
                commit_group(
                    source_cluster, f"{unique_name}-tail", {(unique_name, p): e for p, e in ends.items()}
                )
        except BaseException as exc:
            failures.append(exc)

    worker = threading.Thread(target=produce_and_commit_at_the_end, daemon=True)
    worker.start()
    try:
        # Every backup must find the group: wait for its first commit (a second's sleep was too
        # short on a loaded machine, and the first backups then had no offset of it to check).
        wait_for(
            lambda: (
                failures or group_position(source_cluster, f"{unique_name}-tail", unique_name, 0) is not None
            ),
            "the group's first commit",
        )
        for _ in range(4):
            take_backup(source_cluster, tmp_path, "race", [unique_name])
    finally:
        stop.set()
        worker.join(60)
    assert not failures, failures
    backup = BackupCatalog(open_storage(str(tmp_path))).load("race")
    checked = 0
    for manifest in backup.manifests:
        ends = {(p.topic, p.partition): p.end_offset for p in manifest.partitions}
        assert manifest.consumer_groups is not None
        for group in manifest.consumer_groups.groups:
            if group.group_id != f"{unique_name}-tail":
                continue
            for item in group.offsets:
                assert item.offset <= ends[(item.topic, item.partition)], (manifest.increment, item)
                checked += 1
    assert checked >= partitions * 3
