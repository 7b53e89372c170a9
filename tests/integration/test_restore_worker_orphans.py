"""The orphan window: a restore on two workers whose parent is SIGKILLed while each worker holds an
open transaction, rerun at once with another number of workers (one process, or two workers).

The orphaned workers go on until their current batch is paid for (here a rate limit makes them
wait about nine seconds), then commit what they produced. A rerun started at once reads the
progress before that commit: unless it fences the units' transactional ids first (a rerun on
workers fences each unit's as it starts it; a rerun in one process fences them all, since it writes
under the restore's own id), an orphan's commit lands the records the rerun writes again. The
target must hold every record once, in order per source partition, with its origin headers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.crash_restores import SOURCE_PARTITIONS, build_backup, check_exactly_once, landed
from tests.support.restore_checks import REPO, restore_command
from tests.support.restore_faults import BackgroundRestore
from tests.support.worker_processes import still_running

#: One batch per source partition (a segment holds 10,000): its worker produces it in one go.
PER_PARTITION = 3_000
#: The first run: a transaction holds a whole source partition (more records than it has, longer
#: than the wait), and each worker's half of 600 records a second makes it wait about nine seconds
#: after its batch, its transaction open, before it looks for a stop.
FIRST_RUN = (
    "restore:\n"
    "  transaction_max_records: 100000\n"
    "  transaction_max_ms: 50000\n"
    "  max_records_per_second: 600\n"
)
#: How long the orphans may take to notice, finish their wait and stop.
ORPHANS_END_SECS = 60


@pytest.mark.parametrize("rerun_workers", [1, 2], ids=["rerun-one-process", "rerun-two-workers"])
def test_a_rerun_at_once_after_the_parent_was_killed_fences_the_orphaned_workers(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, rerun_workers: int
) -> None:
    topic, store, config = unique_name, tmp_path / "store", tmp_path / "restore.yaml"
    expected = build_backup(store, tmp_path, topic, per_partition=PER_PARTITION)
    config.write_text(FIRST_RUN)

    def args(workers: int) -> list[str]:
        return [
            "-c", str(config), "-p", str(store), "--backup-id", "crash",
            "-b", target_cluster.bootstrap_servers, "--exactly-once", "--workers", str(workers),
        ]  # fmt: skip

    first = BackgroundRestore.start(tmp_path / "first", *args(2))
    probe = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": "orphans-probe"})
    try:
        # Both workers' first batch on the target, in their open transactions (read_uncommitted ends).
        deadline = time.monotonic() + 120
        while landed(probe, topic, SOURCE_PARTITIONS) < 2 * PER_PARTITION:
            assert first.running(), first.stderr()
            assert time.monotonic() < deadline, "the two workers produced nothing in 120s"
            time.sleep(0.05)
        workers = psutil.Process(first.process.pid).children()
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(30)
        config.write_text("restore:\n  transaction_max_records: 1000\n")  # the rerun at full speed
        rerun = subprocess.run(
            restore_command("restore", *args(rerun_workers), "--json"),
            cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
            env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
        )  # fmt: skip
        orphans = still_running(workers, within_secs=ORPHANS_END_SECS)
    finally:
        probe.close()
        first.stop()
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["verified"] is True
    assert not orphans, f"orphaned workers still running after {ORPHANS_END_SECS}s: {orphans}"
    check_exactly_once(target_cluster, topic, SOURCE_PARTITIONS, expected, seed=0)
