"""A restore on several worker processes (``--workers 2``), as a user runs it (``python -m
kbackup restore``), against the shared target cluster.

Every source partition is restored once, in order, with its headers and origin headers, by the
workers together (exactly-once, and idempotent into fewer partitions, where two units feed one
target partition), and a three-phase restore on them moves every group exactly; a worker
SIGKILLed at a crash point fails the run naming its unit and a rerun completes it exactly;
SIGINT to the parent alone stops every worker, as the parent's death does, and a rerun completes.
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
import yaml
from confluent_kafka import Consumer

from kbackup.core.faults import ENVIRONMENT_VARIABLE as CRASH_AT
from kbackup.core.faults import ONCE_VARIABLE
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.synthetic_backup import BackupRecord
from tests.support.config_files import config_file, write_three_phase_config
from tests.support.crash_restores import SOURCE_PARTITIONS, build_backup, check_exactly_once, landed
from tests.support.restore_checks import REPO, restore_command, transactional_ids
from tests.support.three_phase_runs import check_final_state, fill_and_back_up, run_cli
from tests.support.worker_processes import still_running

#: Few records: each worker still runs several transactions.
PER_PARTITION = 4_000


def _backup_and_command(
    tmp_path: Path, target: LocalKafkaCluster, topic: str, restore_section: str, *args: str
) -> tuple[dict[int, list[BackupRecord]], list[str]]:
    """A backup of ``topic`` (its records by source partition) and the restore command on two
    workers with ``restore_section`` as its config's ``restore`` section."""
    expected = build_backup(tmp_path / "store", tmp_path, topic, per_partition=PER_PARTITION)
    config = tmp_path / "restore.yaml"
    config.write_text(f"restore:\n{restore_section}")
    return expected, restore_command(
        "restore", "-c", str(config), "-p", str(tmp_path / "store"), "--backup-id", "crash",
        "-b", target.bootstrap_servers, "--workers", "2", "--json", *args,
    )  # fmt: skip


def _run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1", **env},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "target_partitions"),
    [("--exactly-once", SOURCE_PARTITIONS), ("--idempotent", 2)],
    ids=["exactly-once", "idempotent-repartitioned"],
)
def test_two_workers_restore_every_record_once_in_order_and_a_rerun_writes_nothing(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, mode: str, target_partitions: int
) -> None:
    topic = unique_name
    expected, command = _backup_and_command(
        tmp_path,
        target_cluster,
        topic,
        "  transaction_max_records: 1000\n"
        f"  repartition: {'true' if target_partitions != SOURCE_PARTITIONS else 'false'}\n"
        f"  target_partitions: {{{topic}: {target_partitions}}}\n",
        mode,
    )
    first = _run(command)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["topics"][0]["records"] == SOURCE_PARTITIONS * PER_PARTITION
    assert summary["verified"] is True
    if mode == "--exactly-once":
        # Each unit commits its own transactions (at least one per 1,000 records of each), with a
        # transactional id of its own: the restore id and the unit, as on the Spark engine.
        assert summary["transactions"] >= SOURCE_PARTITIONS * PER_PARTITION // 1000
        base = f"kafka-backup-restore-{summary['restore_id']}"
        # This topic's ids only: other tests' restores of a backup of the same name into this
        # cluster have the same restore id, and a one-process rerun fences its units' ids too.
        ours = f"{base}-{topic}-"
        assert {i for i in transactional_ids(target_cluster) or set() if i.startswith(ours)} == {
            f"{base}-{topic}-{p}" for p in range(SOURCE_PARTITIONS)
        }
    check_exactly_once(target_cluster, topic, target_partitions, expected, seed=0)
    again = _run(command)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["topics"][0]["records"] == 0
    check_exactly_once(target_cluster, topic, target_partitions, expected, seed=0)


def test_a_worker_killed_mid_restore_fails_the_run_naming_its_unit_and_a_rerun_completes(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    expected, command = _backup_and_command(
        tmp_path, target_cluster, unique_name, "  transaction_max_records: 500\n", "--exactly-once"
    )
    # The crash point fires in a worker process (the environment reaches the spawned workers), once
    # across them: the first worker to produce its 1,500th record dies, the other goes on.
    (tmp_path / "once").mkdir()
    killed = _run(
        command, **{CRASH_AT: "restore:records-produced@1500", ONCE_VARIABLE: str(tmp_path / "once")}
    )
    assert killed.returncode == 19, killed.stderr
    error = json.loads(killed.stdout)["error"]
    assert error["kind"] == "worker-died", killed.stdout
    assert f"the restore worker running source partition {unique_name}-" in error["message"]
    assert any((tmp_path / "once").iterdir()), "the crash point did not fire"
    final = _run(command)
    assert final.returncode == 0, final.stderr
    assert json.loads(final.stdout)["resumed"] is True
    check_exactly_once(target_cluster, unique_name, SOURCE_PARTITIONS, expected, seed=0)


@pytest.mark.parametrize("stop", ["sigint", "parent-killed"])
def test_a_stopped_parent_stops_every_worker_and_a_rerun_completes(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, stop: str
) -> None:
    """SIGINT to the parent alone (not its process group): every worker commits and stops, exit
    130. The parent SIGKILLed: its orphaned workers notice, commit and stop by themselves."""
    topic = unique_name
    # Slow enough (1,000 records a second between the workers, 12 s in all) to be stopped mid-way,
    # and for workers that went on to be seen running after the 5 s they are given to stop.
    slow = "  transaction_max_records: 200\n  max_records_per_second: 1000\n"
    expected, command = _backup_and_command(tmp_path, target_cluster, topic, slow, "--exactly-once")
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
    )  # fmt: skip
    probe = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": "workers-probe"})
    try:
        deadline = time.monotonic() + 120
        while landed(probe, topic, SOURCE_PARTITIONS) < 1_000:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the restore produced nothing in 120s"
            time.sleep(0.05)
        workers = psutil.Process(process.pid).children()
        assert len(workers) >= 2, workers
        process.send_signal(signal.SIGINT if stop == "sigint" else signal.SIGKILL)
        # Not communicate(): its pipes stay open while orphaned workers hold them.
        process.wait(timeout=120)
        alive = still_running(workers, within_secs=5)
        out, err = process.communicate(timeout=120)
    finally:
        probe.close()
        if process.poll() is None:
            process.kill()
    assert not alive, f"workers still running: {alive}"
    if stop == "sigint":
        assert process.returncode == 130, err
        assert json.loads(out)["error"]["kind"] == "interrupted"
    (tmp_path / "restore.yaml").write_text(
        "restore:\n  transaction_max_records: 200\n"
    )  # the rest at full speed
    final = _run(command)
    assert final.returncode == 0, final.stderr
    assert json.loads(final.stdout)["resumed"] is True
    check_exactly_once(target_cluster, topic, SOURCE_PARTITIONS, expected, seed=0)


def test_a_three_phase_restore_on_two_workers_moves_every_group_exactly(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-orders"
    store = tmp_path / "store"
    fill_and_back_up(source_cluster, topic, store)
    config = write_three_phase_config(tmp_path / "restore.yaml", target_cluster, store, topic, "when-needed")
    document = yaml.safe_load(config.read_text())
    document["restore"]["workers"] = 2  # 300 records: auto would restore in one process
    config_file(config, **document)
    finished = run_cli(config)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert json.loads(finished.stdout)["phases"]["reset"]["records_reread"] == 0
    check_final_state(target_cluster, topic, tmp_path / "state", "when-needed")
