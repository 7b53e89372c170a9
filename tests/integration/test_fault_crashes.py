"""Backup, exactly-once restore and three-phase restore SIGKILLed at 10 random points each, then run again;
the restore's runs alternate between one process and two workers (a worker killed).

Every kill is a crash point the product fires (``KBACKUP_CRASH_AT``) at a random occurrence the
run is sure to reach: the n-th uploaded segment, the batch holding the n-th record read or
produced, the n-th transaction, a manifest written or about to be. So every run the test means to
kill is killed, on any machine and under any load (a kill timed in seconds lost that race in 9 of
18 backups on a loaded machine), and the tests assert that each one was. The seed is printed;
``KBACKUP_FAULT_SEED`` replays a run.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from kbackup.core.errors import WorkerDiedError
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import read_backup
from tests.support.config_files import config_file, write_three_phase_config
from tests.support.crash_restores import SOURCE_PARTITIONS, build_backup, check_exactly_once, landed
from tests.support.kafka_io import Record, consume_all, create_topic, produce
from tests.support.kill_loop import counted_kill, fault_seed, must_kill
from tests.support.restore_checks import REPO, restore_command
from tests.support.three_phase_runs import check_final_state as check_three_phase_state
from tests.support.three_phase_runs import fill_and_back_up

pytestmark = pytest.mark.slow

KILLS_WANTED = 10
PARTITIONS = 3
CHUNK = 3_000  # records produced before each backup run, so every run has work to be killed in
SEGMENT_RECORDS = 250
#: The exactly-once restore's transactions: at most this many records, and so are its read batches.
TRANSACTION_RECORDS = 1_000


def chunk(start: int) -> list[Record]:
    return [
        Record(key=b"k%d" % i, value=b"value-%d-" % i + b"v" * 150, partition=i % PARTITIONS)
        for i in range(start, start + CHUNK)
    ]


def backup_kill_point(chooser: random.Random) -> str:
    """A random kill point for a backup run with at least CHUNK new records, CHUNK // PARTITIONS in
    each partition: every kind happens in every run (each partition closes at least
    CHUNK // PARTITIONS // SEGMENT_RECORDS full segments; each run writes at least one manifest)."""
    kind = chooser.choice(["records", "segment", "before-manifest", "after-manifest"])
    if kind == "records":  # after the consumed batch that holds the run's n-th record
        return f"backup:records-read@{chooser.randint(1, CHUNK)}"
    if kind == "segment":
        return f"backup:segment-uploaded@{chooser.randint(1, CHUNK // SEGMENT_RECORDS)}"
    return f"backup:{kind}"


def test_backup_killed_at_random_points_ends_equal_to_the_source(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    seed, chooser = fault_seed()
    topic = unique_name
    store = tmp_path / "store"
    create_topic(source_cluster, topic, partitions=PARTITIONS)
    config = config_file(
        tmp_path / "backup.yaml",
        backup_id="crashy",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [topic]},
        },
        storage={"url": str(store)},
        backup={"segment_max_records": SEGMENT_RECORDS, "scratch_dir": str(tmp_path / "scratch")},
    )
    command = [sys.executable, "-m", "kbackup", "backup", "-c", str(config)]
    produced = 0
    for run in range(1, KILLS_WANTED + 1):
        produce(source_cluster, topic, chunk(produced))
        produced += CHUNK
        must_kill(command, backup_kill_point(chooser), seed=seed, run=run, cwd=REPO)

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
    config.write_text(
        f"restore:\n  transaction_max_records: {TRANSACTION_RECORDS}\n  transaction_max_ms: 300\n"
    )
    command = restore_command(
        "restore", "-c", str(config), "-p", str(tmp_path / "store"), "--backup-id", "crash",
        "-b", target_cluster.bootstrap_servers, "--exactly-once",
    )  # fmt: skip
    total = sum(len(records) for records in expected.values())
    # How far one kill can move "records left" beyond its own count: the rest of its read batch
    # (at most one transaction's records), the open transaction it leaves aborted, and markers;
    # twice that, as a run on two workers has two of each when the first of them is killed.
    cost = 2 * (2 * TRANSACTION_RECORDS + 50)
    probe = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": "crash-probe",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        for run in range(1, KILLS_WANTED + 1):
            # At most the records this run has left: what the target holds counts aborted ones too.
            left = total - landed(probe, topic, SOURCE_PARTITIONS)
            kills_to_come = KILLS_WANTED - run
            # Runs on one process and on two workers, so that each resumes what the other left. On
            # two workers the point fires in the first worker to reach it, which fails the run
            # (exit 19); one of the two copies at least half of what the run has left, and neither
            # more than the point's count when the first dies.
            workers = (1, 2)[run - 1] if run <= 2 else chooser.choice([1, 2])
            if chooser.random() < 0.4 and left - cost - 4 * TRANSACTION_RECORDS >= kills_to_come * (cost + 1):
                point = "restore:after-transaction@1"  # commits at most two read batches a process
            else:  # somewhere inside the next transactions, uncommitted records included
                point = counted_kill(
                    chooser, "restore:records-produced", left=left, kills_to_come=kills_to_come,
                    per_kill_cost=cost + 1, most=3 * TRANSACTION_RECORDS, workers=workers,
                )  # fmt: skip
            must_kill(
                [*command, "--workers", str(workers)], point, seed=seed, run=run, cwd=REPO,
                note=f" on {workers} process(es) ({left} records left at most)",
                killed_exit=-signal.SIGKILL if workers == 1 else WorkerDiedError.exit_code,
            )  # fmt: skip
    finally:
        probe.close()

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


def three_phase_kill_points(chooser: random.Random) -> list[str]:
    """At least KILLS_WANTED kill points drawn at random (seeded) across every phase, in an order every
    run reaches: a few inside the restore phase (300 records in a handful of transactions), then a
    random walk forward through the later phases' points, staying or moving on at each draw."""
    points = [
        f"restore:after-transaction@{chooser.randint(1, 2) if first else 1}"
        for first in [True] + [False] * chooser.randint(1, 3)
    ]
    index = 0
    while len(points) < KILLS_WANTED or index < len(THREE_PHASE_POINTS) - 1:
        crash_at, met_again = THREE_PHASE_POINTS[index]
        points.append(crash_at)
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
    assert len(points) >= KILLS_WANTED
    for run, point in enumerate(points, start=1):
        must_kill(command, point, seed=seed, run=run, cwd=REPO)

    final = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert final.returncode == 0, f"seed {seed}: {final.stderr[-3000:]}"
    assert json.loads(final.stdout)["phases"]["reset"]["records_reread"] == 0
    check_three_phase_state(target_cluster, topic, tmp_path / "state")
