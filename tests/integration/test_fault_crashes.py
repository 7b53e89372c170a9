"""Backup, exactly-once restore and three-phase restore SIGKILLed at >= 10 random points, then run again.

Kill points mix named crash points (``KBACKUP_CRASH_AT``, at a random
occurrence: the n-th uploaded segment, the n-th transaction), random times
after the start, and, for restore, random counts of records landed on the
target. The seed is printed; ``KBACKUP_FAULT_SEED`` replays a run.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.integration.test_restore_crash import (
    SOURCE_PARTITIONS,
    build_backup,
    check_exactly_once,
    landed,
)
from tests.integration.test_three_phase import check_final_state as check_three_phase_state
from tests.integration.test_three_phase import fill_and_back_up
from tests.integration.test_three_phase import write_config as write_three_phase_config
from tests.support.backup_io import read_backup
from tests.support.kafka_io import Record, consume_all, create_topic, produce
from tests.support.kill_loop import KillPoint, fault_seed, run_and_kill
from tests.support.restore_checks import REPO, restore_command

pytestmark = pytest.mark.slow

KILLS_WANTED = 10
MAX_RUNS = 18
PARTITIONS = 3
CHUNK = 3_000  # records produced before each backup run, so every run has work to be killed in
SEGMENT_RECORDS = 250


def chunk(start: int) -> list[Record]:
    return [
        Record(key=b"k%d" % i, value=b"value-%d-" % i + b"v" * 150, partition=i % PARTITIONS)
        for i in range(start, start + CHUNK)
    ]


def segments_in(store: Path) -> int:
    return sum(1 for _ in store.rglob("*.parquet")) if store.exists() else 0


def backup_kill_point(chooser: random.Random, store: Path) -> KillPoint:
    """One random kill point for a backup run that has CHUNK new records to copy."""
    kind = chooser.choice(["time", "segment", "batch", "before-manifest", "after-manifest"])
    if kind == "time":  # counted from the run's first stored segment
        before = segments_in(store)
        return KillPoint(
            after_seconds=round(chooser.uniform(0.0, 2.0), 2), progress=lambda: segments_in(store) > before
        )
    if kind == "segment":  # each run closes about CHUNK / SEGMENT_RECORDS segments
        return KillPoint(crash_at=f"backup:segment-uploaded@{chooser.randint(1, CHUNK // SEGMENT_RECORDS)}")
    if kind == "batch":
        return KillPoint(crash_at=f"backup:batch-read@{chooser.randint(1, 4)}")
    return KillPoint(crash_at=f"backup:{kind}")


def test_backup_killed_at_random_points_ends_equal_to_the_source(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    seed, chooser = fault_seed()
    topic = unique_name
    store = tmp_path / "store"
    create_topic(source_cluster, topic, partitions=PARTITIONS)
    config = tmp_path / "backup.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "backup_id": "crashy",
                "source": {
                    "bootstrap_servers": [source_cluster.bootstrap_servers],
                    "topics": {"include": [topic]},
                },
                "storage": {"url": str(store)},
                "backup": {"segment_max_records": SEGMENT_RECORDS, "scratch_dir": str(tmp_path / "scratch")},
            }
        )
    )  # fmt: skip
    command = [sys.executable, "-m", "kbackup", "backup", "-c", str(config)]
    outcomes: list[str] = []
    produced = 0
    while outcomes.count("killed") < KILLS_WANTED and len(outcomes) < MAX_RUNS:
        produce(source_cluster, topic, chunk(produced))
        produced += CHUNK
        point = backup_kill_point(chooser, store)
        outcome = run_and_kill(command, point, cwd=REPO)
        assert outcome.killed or outcome.returncode == 0, f"seed {seed}, {point}: {outcome.stderr}"
        outcomes.append("killed" if outcome.killed else "finished")
        print(f"run {len(outcomes)}: {point} -> {outcomes[-1]}")
    assert outcomes.count("killed") >= KILLS_WANTED, f"seed {seed}: too few runs were killed: {outcomes}"

    final = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert final.returncode == 0, f"seed {seed}: {final.stderr}"
    source = consume_all(source_cluster, topic, list(range(PARTITIONS)), timeout=120)
    assert len(source) == produced
    backed_up = read_backup(store, "crashy")
    # Record for record: a missing record or one copied twice makes the lists differ.
    assert backed_up == source, (
        f"seed {seed}: {len(backed_up)} records in the backup, {len(source)} in the topic"
    )
    deep = subprocess.run(
        [sys.executable, "-m", "kbackup", "validate", "-c", str(config), "--deep", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert deep.returncode == 0, f"seed {seed}: {deep.stdout} {deep.stderr}"
    report = json.loads(deep.stdout)
    assert report["errors"] == []
    assert report["records"] == produced


def test_exactly_once_restore_killed_at_random_points_holds_each_record_once_in_order(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    seed, chooser = fault_seed()
    topic = unique_name
    expected = build_backup(tmp_path / "store", tmp_path, topic)
    config = tmp_path / "restore.yaml"
    config.write_text("restore:\n  transaction_max_records: 2000\n  transaction_max_ms: 300\n")
    command = restore_command(
        "restore", "-c", str(config), "-p", str(tmp_path / "store"), "--backup-id", "crash",
        "-b", target_cluster.bootstrap_servers, "--exactly-once",
    )  # fmt: skip
    probe = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": "crash-probe",
            "isolation.level": "read_uncommitted",
        }
    )

    def restore_kill_point() -> KillPoint:
        kind = chooser.choice(["time", "transaction", "landed"])
        if kind == "time":
            # Counted from the run's first records landing; short (the restore lands tens of
            # thousands of records a second), to leave enough of the 75,000 for the other kills.
            before = landed(probe, topic, SOURCE_PARTITIONS)
            return KillPoint(
                after_seconds=round(chooser.uniform(0.0, 0.15), 2),
                progress=lambda: landed(probe, topic, SOURCE_PARTITIONS) > before,
            )
        if kind == "transaction":
            return KillPoint(crash_at=f"restore:after-transaction@{chooser.randint(1, 2)}")
        # Somewhere inside the next transactions, uncommitted records included.
        threshold = landed(probe, topic, SOURCE_PARTITIONS) + chooser.randint(500, 3_000)
        return KillPoint(
            condition=lambda: landed(probe, topic, SOURCE_PARTITIONS) >= threshold,
            label=f"{threshold} records landed",
        )

    outcomes: list[str] = []
    try:
        while outcomes.count("killed") < KILLS_WANTED and len(outcomes) < MAX_RUNS:
            point = restore_kill_point()
            outcome = run_and_kill(command, point, cwd=REPO)
            assert outcome.killed or outcome.returncode == 0, f"seed {seed}, {point}: {outcome.stderr}"
            outcomes.append("killed" if outcome.killed else "finished")
            print(f"run {len(outcomes)}: {point} -> {outcomes[-1]}")
            if not outcome.killed:
                break  # finished: nothing left to kill
    finally:
        probe.close()
    assert outcomes.count("killed") >= KILLS_WANTED, f"seed {seed}: too few runs were killed: {outcomes}"

    final = subprocess.run(
        [*command, "--json"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert final.returncode == 0, f"seed {seed}: {final.stderr}"
    check_exactly_once(target_cluster, topic, SOURCE_PARTITIONS, expected, seed)


#: The three-phase restore's crash points in the order a run meets them (its mapping is built only
#: when needed, and this restore does not need it), and whether a re-run meets the point again after
#: a kill there (the first group's commit is not, once only one group is left to move).
THREE_PHASE_POINTS = [
    ("three-phase:after-restore", True),
    ("three-phase:after-mapping", True),
    ("three-phase:after-plan", True),
    ("reset:after-first-group", False),
    ("three-phase:verified", True),
]


def three_phase_kill_points(chooser: random.Random) -> list[KillPoint]:
    """At least KILLS_WANTED kill points drawn at random (seeded) across every phase, in an order every
    run reaches: a few inside the restore phase (300 records in a handful of transactions), then a
    random walk forward through the later phases' points, staying or moving on at each draw."""
    points = [
        KillPoint(crash_at=f"restore:after-transaction@{chooser.randint(1, 2) if first else 1}")
        for first in [True] + [False] * chooser.randint(1, 3)
    ]
    index = 0
    while len(points) < KILLS_WANTED or index < len(THREE_PHASE_POINTS) - 1:
        crash_at, met_again = THREE_PHASE_POINTS[index]
        points.append(KillPoint(crash_at=crash_at))
        moves = chooser.random() < 0.5 or not met_again or len(points) >= KILLS_WANTED
        if moves and index < len(THREE_PHASE_POINTS) - 1:
            index += chooser.randint(1, min(2, len(THREE_PHASE_POINTS) - 1 - index))
    return points


def test_three_phase_restore_killed_at_random_points_ends_exact(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    seed, chooser = fault_seed()
    topic = f"{unique_name}-orders"
    store = tmp_path / "store"
    fill_and_back_up(source_cluster, topic, store)
    config = write_three_phase_config(tmp_path / "restore.yaml", target_cluster, store, topic, "when-needed")
    command = [sys.executable, "-m", "kbackup", "three-phase-restore", "-c", str(config), "--json"]
    points = three_phase_kill_points(chooser)
    outcomes: list[str] = []
    for point in points:
        outcome = run_and_kill(command, point, cwd=REPO)
        assert outcome.killed, f"seed {seed}, {point}: exit {outcome.returncode} {outcome.stderr[-2000:]}"
        outcomes.append("killed")
        print(f"run {len(outcomes)}: {point} -> killed")
    assert len(outcomes) >= KILLS_WANTED

    final = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert final.returncode == 0, f"seed {seed}: {final.stderr[-3000:]}"
    assert json.loads(final.stdout)["phases"]["reset"]["records_reread"] == 0
    check_three_phase_state(target_cluster, topic, tmp_path / "state")
