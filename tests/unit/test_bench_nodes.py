"""The restore and backup benchmarks on several node counts: the option, and replication's cost
computed from the runs made side by side (rates paired per round, never across rounds)."""

from __future__ import annotations

import argparse

import pytest

from bench._perf import BackupRunResult, ConsumerPerfResult, cluster_words, node_counts_of
from bench._restore_perf import Measured
from bench.bench_backup import Row, nodes_report
from bench.bench_restore import SIDES, Case, replication_cost


def test_node_counts_are_sorted_unique_and_bounded() -> None:
    assert node_counts_of("3,1,3") == [1, 3]
    assert node_counts_of("1") == [1]
    for bad in ("", "0", "4", "one", "1,x"):
        with pytest.raises(argparse.ArgumentTypeError, match="--nodes"):
            node_counts_of(bad)


def test_cluster_words_name_replication_on_several_nodes() -> None:
    assert "broker" in cluster_words(1)
    assert "replication factor 3, min.insync.replicas=2" in cluster_words(3)


def run(rate: float) -> Measured:
    return Measured(name="x", records=1000, record_size=100, seconds=1000 / rate, peak_rss_bytes=1)


def test_replication_cost_pairs_the_runs_of_each_round() -> None:
    single, three = Case(100, 1000), Case(100, 1000, nodes=3)
    for side in SIDES:
        single.runs[side] = [run(100), run(200), run(400)]
        # Round by round: half, half, half; across rounds the medians would give 200/200 = 1.00.
        three.runs[side] = [run(50), run(100), run(200)]
    text = replication_cost([single, three], [1, 3])
    row = next(line for line in text.splitlines() if line.startswith("| 3 |"))
    assert row.count("0.50 (0.50-0.50)") == len(SIDES), row


def consumer(rate: float) -> ConsumerPerfResult:
    return ConsumerPerfResult(1000, 0.1, 1.0, rate, 1.0, rate)


def backup(rate: float) -> BackupRunResult:
    return BackupRunResult(
        records=1000, seconds=1000 / rate, wall_seconds=1.0, peak_rss_bytes=1, stored_bytes=1
    )


def test_backup_nodes_report_gives_each_sides_rate_on_three_over_one() -> None:
    rows = {
        1: [Row(100, 1000, consumer(400), backup(200), (0.5,))],
        3: [Row(100, 1000, consumer(100), backup(150), (1.5,))],
    }
    args = argparse.Namespace(
        records_100=1000, records_1k=10, factor=1, repeat=1, partitions=1, compression_level=1
    )
    text = nodes_report(rows, args, (0.0, 0.0, 0.0))
    assert "| 3 | 100 B | 1,000 | 0.25 | 0.75 |" in text
    own_rows = [line for line in text.splitlines() if line.startswith("| 100 B | 1,000 |")]
    assert len(own_rows) == 2  # each cluster's own table
