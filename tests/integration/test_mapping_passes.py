"""The mapping scan's two passes on a real target cluster and Spark, checked against the brute force.

The first pass (a JVM aggregation by offset difference) must be the whole
job for ordinary restores, including source compaction holes and a 3 -> 6
repartitioning; target partitions where one difference holds several runs
must be found and, alone, scanned again by the exact path.
"""

from __future__ import annotations

import random
from itertools import pairwise
from typing import Any

import pytest

from kbackup.mapping import plan_scan
from kbackup.mapping.job import scan_ranges
from kbackup.mapping.spark_kafka import spark_kafka_options
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support import mapping_restores
from tests.support.kafka_io import consume_all
from tests.support.mapping_oracle import Restored, brute_force_ranges, restored_from_records


class Restores:
    def __init__(self, target: LocalKafkaCluster, name: str) -> None:
        self.source_cluster = f"prod-{name}"
        self.first_pass = mapping_restores.repartitioned_without_equal_holes(
            target, name, self.source_cluster
        )
        self.equal_holes = mapping_restores.equal_holes(target, name, self.source_cluster)
        self.records: dict[str, list[Restored]] = {}
        for topic, count in {**self.first_pass, **self.equal_holes}.items():
            consumed = consume_all(target, topic, list(range(count)))
            self.records[topic] = restored_from_records(consumed, self.source_cluster)


@pytest.fixture(scope="module")
def restores(target_cluster: LocalKafkaCluster) -> Restores:
    return Restores(target_cluster, f"pass{random.randrange(10**6)}")


def test_first_pass_alone_maps_source_holes_and_repartitioning_exactly(
    spark: Any, target_cluster: LocalKafkaCluster, restores: Restores
) -> None:
    connection = target_cluster.connection()
    plan = plan_scan(connection, sorted(restores.first_pass))
    result = scan_ranges(spark, spark_kafka_options(connection), plan.partitions, restores.source_cluster)
    (topic,) = restores.first_pass
    expected = brute_force_ranges(restores.records[topic])
    assert result.rescanned_partitions == 0
    assert result.ranges == expected
    # The case has what it claims: six target partitions fed by three source partitions, with
    # ranges cut by source holes inside one source's stretch and by interleaving.
    assert {r.target_partition for r in expected} == set(range(6))
    assert {r.source_partition for r in expected} == {0, 1, 2}
    by_target = {(r.target_partition, r.source_partition) for r in expected}
    assert {(0, 0), (0, 1), (3, 1), (3, 2), (4, 0), (4, 2)} <= by_target
    single = [r for r in expected if r.target_partition in (1, 2, 5)]
    assert any(b.source_start > a.source_end + 1 for a, b in pairwise(single) if a.target == b.target)
    # One row per group per Spark task: one task per partition here, so one per range.
    assert result.pieces == len(expected)
    assert (result.malformed_records, result.unordered_records) == (0, 0)


def test_equal_holes_send_only_their_partition_to_the_exact_path(
    spark: Any, target_cluster: LocalKafkaCluster, restores: Restores
) -> None:
    connection = target_cluster.connection()
    topics = sorted({**restores.first_pass, **restores.equal_holes})
    plan = plan_scan(connection, topics)
    # Partitions cut into several Spark tasks: the groups and the exact path's pieces are joined.
    result = scan_ranges(
        spark,
        spark_kafka_options(connection),
        plan.partitions,
        restores.source_cluster,
        max_records_per_partition=6,
    )
    expected = brute_force_ranges([r for topic in topics for r in restores.records[topic]])
    assert result.ranges == expected
    assert result.rescanned_partitions == 1
    (topic,) = restores.equal_holes
    gappy = [
        (r.source_start, r.source_end, r.target_start, r.target_end)
        for r in expected
        if r.target == (topic, 0)
    ]
    assert gappy == [(0, 4, 0, 4), (7, 13, 7, 13), (16, 19, 16, 19)]
    assert [r for r in expected if r.target == (topic, 1)] == [
        r for r in result.ranges if r.target == (topic, 1)
    ]
    assert result.pieces > len(expected)
