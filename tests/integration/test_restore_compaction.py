"""A compacted topic looks incomplete soon after a restore: the summary says how many records the
target's cleaner may remove, and why, so an operator comparing counts is not surprised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kbackup.cli.main import run
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import take_backup
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, consume_all, create_topic, produce

#: Compacted on the source too, but its cleaner never reaches the active segment within a test.
COMPACTED = {"cleanup.policy": "compact"}


def fill_source(source: LocalKafkaCluster, topic: str) -> list[Record]:
    """A compacted topic (2 partitions) with repeated keys and tombstones, and a plain one."""
    create_topic(source, topic, 2, COMPACTED)
    produce(
        source,
        topic,
        [
            Record(
                key=b"k%d" % (i % 17),
                value=None if i % 13 == 0 else b"v%d" % i,
                partition=(i // 5) % 2,
            )
            for i in range(120)
        ],
    )
    create_topic(source, f"{topic}-plain", 1)
    produce(source, f"{topic}-plain", [Record(key=b"same", value=b"v%d" % i) for i in range(10)])
    return consume_all(source, topic, [0, 1])


def removable(records: list[Record]) -> int:
    """By brute force: records with a later one of the same key in their partition, plus keys whose
    last record is a tombstone."""
    last: dict[tuple[int | None, bytes | None], Record] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        last[(record.partition, record.key)] = record
    return len(records) - len(last) + sum(1 for r in last.values() if r.value is None)


def test_restore_summary_says_what_the_cleaner_may_remove(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = f"{unique_name}-customers"
    source = fill_source(source_cluster, topic)
    take_backup(source_cluster, tmp_path / "store", "nightly", [topic, f"{topic}-plain"])
    expected = removable(source)
    assert 0 < expected < len(source)
    args = [
        "restore",
        "-p",
        str(tmp_path / "store"),
        "--backup-id",
        "nightly",
        "-b",
        target_cluster.bootstrap_servers,
    ]

    assert run([*args, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # Only the compacted topic: the plain one repeats its key, but nothing removes those records.
    [facts] = summary["compaction"]
    assert (facts["topic"], facts["records"], facts["may_remove"]) == (topic, len(source), expected)
    assert facts["why"].startswith("cleanup.policy=compact on the target: ")
    assert "tombstone" in facts["why"]

    assert run([*args, "--topic-mapping", f"{topic}={topic}-again", "--topic", topic]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        f"  {topic}-again is compacted: the target's cleaner may remove {expected:,} of the "
        f"{len(source):,} record(s) restored (cleanup.policy=compact on the target: "
    ) in "\n".join(lines)


def test_three_phase_restore_phase_reports_the_compaction(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = f"{unique_name}-customers"
    source = fill_source(source_cluster, topic)
    consumer = Consumer({"bootstrap.servers": source_cluster.bootstrap_servers, "group.id": f"{topic}-crm"})
    consumer.commit(offsets=[TopicPartition(topic, 0, 10)], asynchronous=False)
    consumer.close()
    store = tmp_path / "store"
    take_backup(source_cluster, store, "nightly", [topic])
    config = config_file(
        tmp_path / "dr.yaml",
        backup_id="nightly",
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage={"url": str(store)},
        restore={"topic_mapping": {topic: f"{topic}-restored"}},
        # A fixed offset needs no mapping, so no Spark.
        offset_reset={
            "strategy": "offset",
            "offset": 0,
            "snapshot_dir": str(tmp_path / "snapshots"),
        },
        three_phase={"state_dir": str(tmp_path / "state"), "build_mapping": "when-needed"},
    )
    assert run(["three-phase-restore", "-c", str(config), "--json"]) == 0, capsys.readouterr().err
    restore_phase = json.loads(capsys.readouterr().out)["phases"]["restore"]
    [facts] = restore_phase["compaction"]
    assert (facts["topic"], facts["records"], facts["may_remove"]) == (
        f"{topic}-restored",
        len(source),
        removable(source),
    )
