"""The mapping job on a real target cluster and Spark, checked against a brute force over the records.

One set of restored topics holds every case (source-side holes, foreign
records, duplicate headers, transactions, real compaction, a rename, a
3 -> 6 repartitioning, empty topics); it is scanned once as a whole, once
with each Kafka partition cut into several Spark tasks, and once through
the CLI, to keep Spark jobs few.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import BackupIntegrityError
from kbackup.core.progress import Progress
from kbackup.format.mapping_file import OffsetMapping, ScannedPartition, read_mapping
from kbackup.mapping import build_offset_mapping
from kbackup.mapping.settings import MappingSettings
from kbackup.offsets.ranges import OffsetRange
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support import mapping_restores
from tests.support.kafka_io import consume_all, end_offsets
from tests.support.mapping_oracle import (
    Restored,
    brute_force_position,
    brute_force_ranges,
    restored_from_records,
)


class RestoredTopics:
    def __init__(self, target: LocalKafkaCluster, name: str) -> None:
        self.source_cluster = f"prod-{name}"
        self.partitions: dict[str, int] = {}
        for make in (
            mapping_restores.holes_and_foreign_records,
            mapping_restores.transactions,
            mapping_restores.compaction,
            mapping_restores.renamed,
            mapping_restores.repartitioned,
        ):
            self.partitions.update(make(target, name, self.source_cluster))
        self.partitions.update(mapping_restores.empty_and_foreign_only(target, name))
        self.records: list[Restored] = []
        self.ends: dict[tuple[str, int], int] = {}
        for topic, count in self.partitions.items():
            partitions = list(range(count))
            self.records += restored_from_records(consume_all(target, topic, partitions), self.source_cluster)
            self.ends.update({(topic, p): end for p, end in end_offsets(target, topic, partitions).items()})

    @property
    def topics(self) -> list[str]:
        return sorted(self.partitions)

    def of(self, topic: str) -> list[Restored]:
        return [r for r in self.records if r.target_topic == topic]


@pytest.fixture(scope="module")
def restored_topics(target_cluster: LocalKafkaCluster) -> RestoredTopics:
    return RestoredTopics(target_cluster, f"map{random.randrange(10**6)}")


def assert_exact(mapping: OffsetMapping, topics: RestoredTopics) -> None:
    assert mapping.ranges == brute_force_ranges(topics.records)
    assert mapping.records == len(topics.records)
    scanned = {(s.topic, s.partition): s.end_offset for s in mapping.scanned if s.topic in topics.partitions}
    assert scanned == topics.ends


def test_mapping_is_exact_for_every_kind_of_hole(
    spark: Any, target_cluster: LocalKafkaCluster, restored_topics: RestoredTopics
) -> None:
    topics = restored_topics
    mapping = build_offset_mapping(
        target_cluster.connection(), source_cluster=topics.source_cluster, topics=topics.topics, spark=spark
    )
    assert_exact(mapping, topics)
    assert mapping.stats is not None
    assert mapping.stats.partitions == sum(topics.partitions.values())

    name = topics.topics[0].rsplit("-", 1)[0]
    ranges: dict[str, list[OffsetRange]] = {r.target_topic: [] for r in mapping.ranges}
    for r in mapping.ranges:
        ranges[r.target_topic].append(r)
    # Source holes 10-11 and 21-24 split partition 0; the foreign record, the other cluster's
    # record and the re-stamped record split it on the target side; partition 1 is one range.
    orders = [(r.source_partition, r.source_start, r.source_end) for r in ranges[f"{name}-orders"]]
    assert (1, 1000, 1049) in orders
    assert sum(1 for r in ranges[f"{name}-orders"] if r.source_partition == 0) >= 6
    # Source offset 17 had a stale origin header before restore's own: mapped with restore's values.
    # Source offset 18 was re-stamped by another cluster's restore after ours: not ours.
    part0 = [r for r in ranges[f"{name}-orders"] if r.source_partition == 0]
    assert any(r.source_start <= 17 <= r.source_end for r in part0)
    assert not any(r.source_start <= 18 <= r.source_end for r in part0)
    # Source offsets 19 (headers out of order) and 20 (a later duplicate offset header) are read
    # header by header; 25 follows a source hole.
    assert (0, 19, 20) in orders
    assert not any(r.source_start <= 999 <= r.source_end for r in part0)
    # Aborted records are not mapped; the marker splits source offsets 0-4 | 5-8 | 9-10.
    payments = [(r.source_start, r.source_end) for r in ranges[f"{name}-payments"]]
    assert payments == [(0, 4), (5, 8), (9, 10)]
    # Compaction left target holes: some survivors are alone in their range.
    assert len(ranges[f"{name}-compacted"]) >= 3
    # The renamed topic maps back to its source topic name.
    assert {r.source_topic for r in ranges[f"{name}-prod-renamed"]} == {f"{name}-src"}
    assert [(r.source_start, r.source_end) for r in ranges[f"{name}-prod-renamed"]] == [(40, 69)]
    # Repartitioning: six target partitions hold records of three source partitions.
    repart = ranges[f"{name}-repart"]
    assert {r.target_partition for r in repart} == set(range(6))
    assert {r.source_partition for r in repart} == {0, 1, 2}
    # Empty and foreign-only partitions: scanned, no ranges.
    assert f"{name}-empty" not in ranges
    assert f"{name}-foreign" not in ranges
    assert ScannedPartition(f"{name}-foreign", 0, 0, 5) in mapping.scanned

    # Positions for the reset stage, against the reference formula, for committed offsets
    # at 0, inside holes, at ends and past them.
    rnd = random.Random(11)
    sources = sorted({(r.source_topic, r.source_partition) for r in topics.records})
    for _ in range(40):
        committed = {
            source: rnd.choice([0, 3, 5, 9, 10, 11, 22, 30, 45, 503, 506, 512, 1020, 2000])
            for source in sources
        }
        for target, position in mapping.target_positions(committed).items():
            expected = brute_force_position(topics.records, target, committed)
            assert (position.offset, position.reprocessed, position.skipped) == expected


def test_mapping_is_the_same_when_partitions_are_split_across_spark_tasks(
    spark: Any,
    target_cluster: LocalKafkaCluster,
    restored_topics: RestoredTopics,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topics = restored_topics
    monkeypatch.setattr("kbackup.core.spark_progress.POLL_SECS", 0.05)
    with Progress(enabled=True) as progress:
        mapping = build_offset_mapping(
            target_cluster.connection(),
            source_cluster=topics.source_cluster,
            topics=topics.topics,
            settings=MappingSettings(max_records_per_partition=7),
            spark=spark,
            progress=progress,
        )
        # The scan showed its Spark tasks as they ran (many here: partitions are split in 7-record slices).
        (bar,) = progress.bars.tasks
    assert bar.description.startswith("Spark scan of ")
    assert bar.total is not None
    assert bar.total > len(topics.topics)
    assert bar.completed == bar.total
    assert_exact(mapping, topics)
    assert mapping.stats is not None
    # Pieces cut at task boundaries were joined back.
    assert mapping.stats.pieces > len(mapping.ranges)


def test_cli_writes_a_file_that_reads_back_and_prints_json_for_all_topics(
    spark: Any,
    target_cluster: LocalKafkaCluster,
    restored_topics: RestoredTopics,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topics = restored_topics
    path = tmp_path / "mapping.parquet"
    argv = [
        "show-offset-mapping",
        "-b",
        target_cluster.bootstrap_servers,
        "--source-cluster",
        topics.source_cluster,
    ]
    topic_args = [arg for topic in topics.topics for arg in ("--topic", topic)]
    assert run([*argv, *topic_args, "--output", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {path}" in out
    mapping = read_mapping(path, source_cluster=topics.source_cluster)
    assert_exact(mapping, topics)

    assert run([*argv, "--all-topics", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["source_cluster"] == topics.source_cluster
    scanned = {(s["topic"], s["partition"]) for s in document["scanned"]}
    assert set(topics.ends) <= scanned
    assert not any(topic.startswith("__") for topic, _ in scanned)
    assert sum(
        m["target_range"]["end"] - m["target_range"]["start"] + 1
        for entry in document["topics"]
        for m in entry["mappings"]
    ) == len(topics.records)


def test_records_with_unreadable_origin_headers_fail_the_mapping(
    spark: Any, target_cluster: LocalKafkaCluster, unique_name: str
) -> None:
    topic = next(iter(mapping_restores.malformed(target_cluster, unique_name, "prod-x")))
    with pytest.raises(
        BackupIntegrityError, match=rf"1 record\(s\) of source cluster 'prod-x' .* {topic}\[0\] offset 3"
    ):
        build_offset_mapping(
            target_cluster.connection(), source_cluster="prod-x", topics=[topic], spark=spark
        )
