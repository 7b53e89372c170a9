"""A restore killed with SIGKILL at random points and run again ends with every record once, in order.

The restore runs as a subprocess (``python -m kbackup restore``), as a user
runs it. It kills itself (``KBACKUP_CRASH_AT=restore:records-produced@N``) at
the batch that takes it to its N-th record, once early (within its first
records) and three times at random counts that each run is sure to reach; then
the same command runs to completion. The target is then read with
read_committed and must hold every selected record exactly once, in source
order, with no gap. The seed is printed; ``KBACKUP_FAULT_SEED`` repeats a run.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from kbackup.format.origin import parse_origin
from kbackup.restore.segment_reader import READ_BATCH_RECORDS
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.crash_restores import SOURCE_PARTITIONS, build_backup, check_exactly_once, landed
from tests.support.kafka_io import consume_all
from tests.support.kill_loop import counted_kill, fault_seed, must_kill
from tests.support.restore_checks import REPO, restore_command

pytestmark = pytest.mark.slow

TRANSACTION_RECORDS = 3_000


@pytest.mark.parametrize(
    ("mode", "target_partitions"),
    [
        ("--exactly-once", SOURCE_PARTITIONS),
        ("--exactly-once", 4),
        ("--idempotent", SOURCE_PARTITIONS),
        ("--idempotent", 5),
    ],
    ids=["exactly-once", "exactly-once-repartitioned", "idempotent", "idempotent-repartitioned"],
)
def test_killed_restore_rerun_has_no_duplicate_and_no_gap(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, mode: str, target_partitions: int
) -> None:
    seed, chooser = fault_seed()
    topic = unique_name
    expected = build_backup(tmp_path / "store", tmp_path, topic)
    total = sum(len(r) for r in expected.values())
    config = tmp_path / "restore.yaml"
    config.write_text(
        f"restore:\n  transaction_max_records: {TRANSACTION_RECORDS}\n  transaction_max_ms: 300\n"
        f"  repartition: {'true' if target_partitions != SOURCE_PARTITIONS else 'false'}\n"
        f"  target_partitions: {{{topic}: {target_partitions}}}\n"
    )
    command = restore_command(
        "restore",
        "-c",
        str(config),
        "-p",
        str(tmp_path / "store"),
        "--backup-id",
        "crash",
        "-b",
        target_cluster.bootstrap_servers,
        mode,
    )
    # How far one kill can move "records left" beyond its own count: the rest of the read batch
    # holding its N-th record (transaction_max_records of them, or READ_BATCH_RECORDS without
    # transactions), and the open transaction it leaves aborted (up to two batches), and markers.
    batch = TRANSACTION_RECORDS if mode == "--exactly-once" else READ_BATCH_RECORDS
    cost = batch + (2 * TRANSACTION_RECORDS if mode == "--exactly-once" else 0) + 50
    probe = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": "crash-probe",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        for run, most in enumerate([100, total, total, total], start=1):  # the first one early
            left = total - landed(probe, topic, target_partitions)
            point = counted_kill(
                chooser, "restore:records-produced", left=left, kills_to_come=4 - run, per_kill_cost=cost,
                most=most,
            )  # fmt: skip
            must_kill(command, point, seed=seed, run=run, note=f" ({left} records left at most)", cwd=REPO)
    finally:
        probe.close()
    final = subprocess.run(
        [*command, "--json"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert final.returncode == 0, final.stderr
    assert '"resumed": true' in final.stdout
    check_exactly_once(target_cluster, topic, target_partitions, expected, seed)
    # A further run of the same command finds nothing left to do.
    again = subprocess.run(
        [*command, "--json"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert again.returncode == 0, again.stderr
    assert '"records": 0,' in again.stdout
    check_exactly_once(target_cluster, topic, target_partitions, expected, seed)


def test_sigterm_commits_what_was_produced_and_exits_130(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = unique_name
    expected = build_backup(tmp_path / "store", tmp_path, topic)
    config = tmp_path / "restore.yaml"
    config.write_text("restore:\n  transaction_max_records: 2000\n")
    command = restore_command(
        "restore", "-c", str(config), "-p", str(tmp_path / "store"), "--backup-id", "crash",
        "-b", target_cluster.bootstrap_servers,
    )  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    probe = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": "crash-probe"})
    try:
        deadline = time.monotonic() + 120
        while landed(probe, topic, SOURCE_PARTITIONS) < 10_000:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=120)
    finally:
        probe.close()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "restore stopped by a signal after committing what it had produced" in err
    # What the stopped run committed is there, in order, without a gap (read_committed).
    committed = consume_all(target_cluster, topic, list(range(SOURCE_PARTITIONS)))
    for partition, records in expected.items():
        offsets = [parse_origin(r.headers).offset for r in committed if r.partition == partition]  # type: ignore[union-attr]
        assert offsets == [r.offset for r in records[: len(offsets)]]
    final = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert final.returncode == 0, final.stderr
    check_exactly_once(target_cluster, topic, SOURCE_PARTITIONS, expected, seed=0)
