"""A three-phase restore into more partitions than the source had, in the audit order.

The groups move before the Spark mapping is built, by one binary search per source partition in
each target partition (``merged-search``); the mapping then audits every position. Positions are
checked against the reference formula over the records read back, identified by the values this
test produced (not by the origin headers the product parses), after a kill in the restore and in
the reset (the second run of each finishes what the kill left, as an uninterrupted run would).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kbackup.offsets.translate import RestoredRecord
from kbackup.restore.partitioner import partition_for_key
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import take_backup
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, consume_all, create_topic, produce
from tests.support.oracles import reference_position
from tests.support.three_phase_runs import run_cli

SOURCE_PARTITIONS = 3
TARGET_PARTITIONS = 4
PER_PARTITION = 200
#: Committed source offsets by partition; a partition left out was never committed on (nothing
#: processed there). At the end, at 0, in the middle, and partly uncommitted.
GROUPS = {
    "caught-up": {0: 200, 1: 200, 2: 200},
    "from-start": {0: 0},
    "midway": {0: 50, 1: 120, 2: 199},
    "one-partition": {1: 77},
}
#: The one key of source partition 2's records.
SOLO = b"solo"


def fill_and_back_up(source: LocalKafkaCluster, topic: str, store: Path) -> None:
    """Record i goes to source partition i % 3 at offset i // 3, valued "partition:offset"; keyed
    (23 keys) or, every fourth, without a key (spread round-robin by the restore), except in source
    partition 2, whose records all share one key: they land in one target partition, and the
    others hold no record of it."""
    create_topic(source, topic, partitions=SOURCE_PARTITIONS)
    produce(
        source,
        topic,
        [
            Record(
                key=SOLO if i % SOURCE_PARTITIONS == 2 else None if i % 4 == 0 else f"k{i % 23}".encode(),
                value=f"{i % SOURCE_PARTITIONS}:{i // SOURCE_PARTITIONS}".encode(),
                partition=i % SOURCE_PARTITIONS,
            )
            for i in range(SOURCE_PARTITIONS * PER_PARTITION)
        ],
    )
    for group, offsets in GROUPS.items():
        consumer = Consumer({"bootstrap.servers": source.bootstrap_servers, "group.id": f"{topic}-{group}"})
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        consumer.close()
    take_backup(source, store, "nightly", [topic])


@pytest.mark.slow
@pytest.mark.parametrize(
    "crash_at",
    # An uninterrupted run is the second run of each: what the kill left, finished.
    ["restore:after-transaction", "reset:after-first-group"],
    ids=["killed-in-restore", "killed-in-reset"],
)
def test_groups_of_a_repartitioned_topic_move_before_the_mapping_and_land_exactly(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    crash_at: str,
) -> None:
    topic = f"{unique_name}-orders"
    restored = f"{topic}-restored"
    store = tmp_path / "store"
    fill_and_back_up(source_cluster, topic, store)
    config = config_file(
        tmp_path / "restore.yaml",
        backup_id="nightly",
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage={"url": str(store)},
        # Small transactions: commit markers inside the restored partitions (holes for the search).
        restore={
            "topic_mapping": {topic: restored},
            "repartition": True,
            "target_partitions": {topic: TARGET_PARTITIONS},
            "transaction_max_records": 40,
        },
        offset_reset={"snapshot_dir": str(tmp_path / "snapshots")},
        three_phase={"state_dir": str(tmp_path / "state"), "group_prefix": "moved-"},
    )
    killed = run_cli(config, crash_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    finished = run_cli(config)
    assert finished.returncode == 0, finished.stderr[-3000:]
    summary = json.loads(finished.stdout)
    assert list(summary["phases"]) == ["restore", "reset", "verify", "mapping", "audit"]
    audit = summary["phases"]["audit"]
    assert audit["disagreements"] == []
    assert audit["audited_positions"] == summary["phases"]["verify"]["positions_checked"]
    assert audit["audited_positions"] == len(GROUPS) * TARGET_PARTITIONS
    plan = json.loads(Path(summary["phases"]["reset"]["plan"]).read_text())
    assert {row["method"] for group in plan["groups"] for row in group["partitions"]} == {"merged-search"}

    rereads = 0
    for q in range(TARGET_PARTITIONS):
        copies = consume_all(target_cluster, restored, [q])
        records = []
        for copy in copies:
            assert copy.value is not None
            partition, offset = (int(part) for part in copy.value.split(b":"))
            records.append(RestoredRecord(copy.consumed_offset, topic, partition, offset))
        # Interleaved; source partition 2 only where its one key went.
        solo = partition_for_key(SOLO, TARGET_PARTITIONS)
        assert {r.source_partition for r in records} == ({0, 1, 2} if q == solo else {0, 1})
        for group, offsets in GROUPS.items():
            committed = {(topic, p): c for p, c in offsets.items()}
            expected = reference_position(records, committed)
            consumer = Consumer(
                {"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": f"moved-{topic}-{group}"}
            )
            position = consumer.committed([TopicPartition(restored, q)], timeout=10)[0].offset
            consumer.close()
            assert position == expected, (group, q)
            rereads += sum(
                1
                for r in records
                if r.source_offset < committed.get(r.source, 0) and r.target_offset >= position
            )
    # The audit recounted the records read again (interleaved from other source partitions).
    assert audit["audited_rereads"] == rereads > 0
