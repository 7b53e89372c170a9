"""A backup run (or a --follow checkpoint) with nothing new commits no increment (issue 18, item 12).

A cron every few minutes used to pile up empty increments. What counts as new: records, offsets
that moved without records (an aborted transaction), a group whose committed offsets moved.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from kbackup.cli.main import run
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.cli_process import start_cli, wait_for
from tests.support.config_files import write_backup_config
from tests.support.kafka_io import Record, commit_group, create_topic, end_offsets, produce


def increments(store: Path, backup_id: str) -> list[tuple[int, int]]:
    """(increment, records) of each committed increment."""
    backup = BackupCatalog(open_storage(str(store))).load(backup_id)
    return [(m.increment, sum(p.record_count for p in m.partitions)) for m in backup.manifests]


def abort_a_transaction(cluster: LocalKafkaCluster, topic: str, name: str) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": name})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"k", value=b"aborted", partition=0)
    producer.flush(30)
    producer.abort_transaction(30)


def test_a_rerun_with_nothing_new_commits_no_increment_and_says_so(
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_topic(source_cluster, unique_name, partitions=2)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v", partition=i % 2) for i in range(20)])
    commit_group(source_cluster, f"{unique_name}-g", {(unique_name, 0): 4})
    store = tmp_path / "store"
    args = ["backup", "-b", source_cluster.bootstrap_servers, "--include", unique_name]
    args += ["--path", str(store), "--backup-id", "cron"]

    def backup() -> list[str]:
        code = run(args)
        captured = capsys.readouterr()
        assert code == 0, captured.err
        return captured.out.splitlines()

    assert backup()[0].startswith("committed increment 0 of backup cron: 20 records")
    for _ in range(2):
        out = backup()
        assert out[0] == "nothing new since increment 0 of backup cron: no increment committed"
        assert "0 records" in out[1]
    assert increments(store, "cron") == [(0, 20)]

    # A group that moved is news, without a record: its new position must be in the backup.
    commit_group(source_cluster, f"{unique_name}-g", {(unique_name, 0): 10})
    assert (
        backup()[0]
        == "committed increment 1 of backup cron: 0 records, 0 B in 0 segment(s), 1 consumer group(s)"
    )
    assert backup()[0] == "nothing new since increment 1 of backup cron: no increment committed"

    # Offsets that moved without a record (an aborted transaction and its marker) are news too:
    # the backup covers up to the new end, so a group committed there is translated exactly.
    abort_a_transaction(source_cluster, unique_name, f"{unique_name}-tx")
    assert backup()[0].startswith("committed increment 2 of backup cron: 0 records")
    latest = BackupCatalog(open_storage(str(store))).load("cron").latest
    ends = end_offsets(source_cluster, unique_name, [0, 1])
    assert {(p.partition, p.end_offset) for p in latest.partitions} == set(ends.items())

    produce(source_cluster, unique_name, [Record(key=b"k", value=b"w", partition=1)] * 3)
    assert backup()[0].startswith("committed increment 3 of backup cron: 3 records")
    code = run([*args, "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (summary["increments"], summary["nothing_new_since"]) == ([], 3)
    assert increments(store, "cron") == [(0, 20), (1, 0), (2, 0), (3, 3)]


def test_follow_checkpoints_with_nothing_new_commit_no_increment(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v")] * 10)
    store = tmp_path / "store"
    config = write_backup_config(
        tmp_path / "follow.yaml", source_cluster, unique_name, store, checkpoint_interval_secs=1
    )
    process = start_cli("backup", "-c", str(config), "--follow", "--json")
    try:
        wait_for(lambda: (store / "follow" / "manifests").is_dir(), "the first increment", process=process)
        time.sleep(5)  # about five checkpoints with nothing new
        assert increments(store, "follow") == [(0, 10)]
        produce(source_cluster, unique_name, [Record(key=b"k", value=b"w")] * 4)
        wait_for(
            lambda: len(increments(store, "follow")) == 2, "an increment of the new records", process=process
        )
        time.sleep(3)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert increments(store, "follow") == [(0, 10), (1, 4)]
    summary = json.loads(stdout)
    assert [item["increment"] for item in summary["increments"]] == [0, 1]
    assert summary["nothing_new_since"] == 1
