"""A backup on several worker processes (``--workers 2``), as a user runs it (``python -m kbackup
backup``), from the shared source cluster into folder storage.

Two workers back up exactly what one process does (keyed records with headers, a compacted topic,
a transactional one with an aborted transaction: the same offsets, keys, values, headers and
timestamps), the backup validates deep and restores to the source's records; a worker SIGKILLed at
a crash point fails the run naming its slices and a rerun completes with every record once; SIGINT
to the parent stops every worker, commits nothing of the unfinished increment, and a rerun
completes; an encrypted backup on two workers into S3 restores, and no run prints the S3 secret.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kbackup.core.faults import ENVIRONMENT_VARIABLE as CRASH_AT
from kbackup.core.faults import ONCE_VARIABLE
from kbackup.format.segments import ENCRYPTED_FOOTER_MAGIC
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import read_backup
from tests.support.backup_topics import PARTITIONS, REPO, fill_topics, run_cli, source_records
from tests.support.config_files import config_file
from tests.support.encryption_keys import new_key, spec
from tests.support.kafka_io import consume_all
from tests.support.restore_checks import assert_restored_exactly
from tests.support.storage_backends import storage_backend

#: Records per topic: enough for several batches in each slice, few for the time budget.
RECORDS = 3_000


def _backup(
    store: Path, source: LocalKafkaCluster, prefix: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "-v", "backup", "-b", source.bootstrap_servers, "--include", f"{prefix}-.*", "-p", str(store),
        "--backup-id", "b", "--json", *args, env=env,
    )  # fmt: skip


def test_two_workers_back_up_exactly_what_one_process_does_and_it_restores(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topics = fill_topics(source_cluster, unique_name, RECORDS)
    one = _backup(tmp_path / "one", source_cluster, unique_name, "--workers", "1")
    assert one.returncode == 0, one.stderr
    two = _backup(tmp_path / "two", source_cluster, unique_name, "--workers", "2")
    assert two.returncode == 0, two.stderr
    assert "on 2 worker process(es)" in two.stderr
    expected = source_records(source_cluster, topics)
    by_workers = read_backup(tmp_path / "two", "b")
    assert by_workers == read_backup(tmp_path / "one", "b")
    assert by_workers == expected
    summary = json.loads(two.stdout)
    assert summary["records"] == json.loads(one.stdout)["records"] == len(expected)
    assert summary["partitions"] == 3 * PARTITIONS
    deep = run_cli("validate", "-p", str(tmp_path / "two"), "--backup-id", "b", "--deep")
    assert deep.returncode == 0, deep.stdout + deep.stderr
    restored = run_cli(
        "restore", "-p", str(tmp_path / "two"), "--backup-id", "b", "-b", target_cluster.bootstrap_servers
    )
    assert restored.returncode == 0, restored.stderr
    on_target = [r for topic in topics for r in consume_all(target_cluster, topic, range(PARTITIONS))]
    assert_restored_exactly(expected, on_target, source_cluster=summary["source_cluster_id"])


def test_a_worker_killed_mid_backup_fails_the_run_naming_its_slices_and_a_rerun_completes(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topics = fill_topics(source_cluster, unique_name, RECORDS)
    (tmp_path / "once").mkdir()
    # The first worker to read its 1,000th record dies (the environment reaches spawned workers;
    # the once folder keeps the other alive).
    killed = _backup(
        tmp_path / "store", source_cluster, unique_name, "--workers", "2",
        **{CRASH_AT: "backup:records-read@1000", ONCE_VARIABLE: str(tmp_path / "once")},
    )  # fmt: skip
    assert killed.returncode == 19, killed.stderr
    error = json.loads(killed.stdout)["error"]
    assert error["kind"] == "worker-died", killed.stdout
    assert f"the backup worker running slices {unique_name}-" in error["message"]
    assert any((tmp_path / "once").iterdir()), "the crash point did not fire"
    final = _backup(tmp_path / "store", source_cluster, unique_name, "--workers", "2")
    assert final.returncode == 0, final.stderr
    assert read_backup(tmp_path / "store", "b") == source_records(source_cluster, topics)


def _copying(parent: int, broker_port: int) -> list[psutil.Process]:
    """The parent's workers once at least two are connected to the source (their consumers copy)."""
    try:
        workers = psutil.Process(parent).children()
        connected = [
            w for w in workers if any(c.raddr and c.raddr.port == broker_port for c in w.net_connections())
        ]
    except psutil.NoSuchProcess:  # a process that just ended: looked at again
        return []
    return workers if len(connected) >= 2 else []


def test_sigint_to_the_parent_stops_every_worker_commits_nothing_and_a_rerun_completes(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topics = fill_topics(source_cluster, unique_name, RECORDS)
    command = [
        sys.executable, "-m", "kbackup", "backup", "-b", source_cluster.bootstrap_servers,
        "--include", f"{unique_name}-.*", "-p", str(tmp_path / "store"), "--backup-id", "b",
        "--json", "--workers", "2", "--max-bytes-per-second", "5000",
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
    )  # fmt: skip
    try:
        port = int(source_cluster.bootstrap_servers.rsplit(":", 1)[1])
        deadline = time.monotonic() + 120
        while not (workers := _copying(process.pid, port)):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no two workers copying in 120s"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        out, err = process.communicate(timeout=120)
        stopped_in = time.monotonic() - signalled
        gone = psutil.wait_procs(workers, timeout=5)[1]
    finally:
        if process.poll() is None:
            process.kill()
    assert not gone, f"workers still running: {gone}"
    # Told, the workers stop at their next poll (the copy at this rate would take about 40 s more).
    assert stopped_in < 15, f"the run took {stopped_in:.1f}s to stop"
    assert process.returncode == 130, err
    assert json.loads(out)["interrupted"] is True
    assert not (tmp_path / "store" / "b" / "manifests").exists() or not any(
        (tmp_path / "store" / "b" / "manifests").iterdir()
    )
    final = _backup(tmp_path / "store", source_cluster, unique_name, "--workers", "2")
    assert final.returncode == 0, final.stderr
    assert read_backup(tmp_path / "store", "b") == source_records(source_cluster, topics)


def test_an_encrypted_backup_on_two_workers_into_s3_restores_and_prints_no_secret(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """The workers upload to moto's S3 with the config file's credentials and the parent's opened
    key: what they store is sealed, the backup restores, and no run prints the S3 secret."""
    topics = fill_topics(source_cluster, unique_name, 300)
    key = spec(new_key(tmp_path))
    location = storage_backend("s3", request, tmp_path, unique_name)
    config = config_file(tmp_path / "s3.yaml", storage=location.section)
    backed_up = run_cli(
        "-v", "backup", "-c", str(config), "-b", source_cluster.bootstrap_servers, "--include",
        f"{unique_name}-.*", "--backup-id", "b", "--json", "--workers", "2", "--encryption-key", key,
    )  # fmt: skip
    assert backed_up.returncode == 0, backed_up.stderr
    assert "on 2 worker process(es)" in backed_up.stderr
    stored = location.objects()
    segments = [data for name, data in stored.items() if name.endswith(".parquet")]
    assert segments, sorted(stored)
    assert all(data.endswith(ENCRYPTED_FOOTER_MAGIC) for data in segments), "a segment was stored unsealed"
    restored = run_cli(
        "restore", "-c", str(config), "--backup-id", "b", "-b", target_cluster.bootstrap_servers,
        "--encryption-key", key,
    )  # fmt: skip
    assert restored.returncode == 0, restored.stderr
    expected = source_records(source_cluster, topics)
    on_target = [r for topic in topics for r in consume_all(target_cluster, topic, range(PARTITIONS))]
    assert_restored_exactly(
        expected, on_target, source_cluster=json.loads(backed_up.stdout)["source_cluster_id"]
    )
    printed = backed_up.stdout + backed_up.stderr + restored.stdout + restored.stderr
    assert location.secrets
    assert not any(secret in printed for secret in location.secrets)
