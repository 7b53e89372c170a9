"""What a backup did not copy in full ends the run with exit 14 and a summary naming it (issue 19,
item 5): a topic a --follow run loses (deleted, or its metadata in error), and committed group
offsets beyond the copied data. Both were only log warnings with exit 0 before."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from kbackup.cli.main import run
from kbackup.core.errors import IncompleteBackupError
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.cli_process import start_cli, wait_for
from tests.support.config_files import write_backup_config
from tests.support.kafka_io import Record, commit_group, create_topic, produce


def test_group_offsets_beyond_the_copied_data_end_the_backup_with_exit_14(
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v")] * 10)
    # Set by hand past the log end: the backup cannot hold what the group claims to have processed.
    commit_group(source_cluster, f"{unique_name}-g", {(unique_name, 0): 50})
    args = ["backup", "-b", source_cluster.bootstrap_servers, "--include", unique_name]
    args += ["--path", str(tmp_path / "store"), "--backup-id", "b"]

    code = run([*args, "--json"])
    captured = capsys.readouterr()
    assert code == IncompleteBackupError.exit_code, captured.err
    summary = json.loads(captured.out)
    [problem] = summary["problems"]
    assert problem.startswith("increment 0: 1 committed group offset(s) are beyond the data it copied")
    assert f"{unique_name}-g" in problem
    # What was copied is committed all the same.
    assert [
        m.increment for m in BackupCatalog(open_storage(str(tmp_path / "store"))).load("b").manifests
    ] == [0]

    commit_group(source_cluster, f"{unique_name}-g", {(unique_name, 0): 60})
    code = run(args)
    captured = capsys.readouterr()
    assert code == IncompleteBackupError.exit_code
    assert any(
        line.startswith("problem: increment 1: 1 committed group offset(s)")
        for line in captured.out.splitlines()
    )
    assert any(
        line.startswith("kafka-backup: error: backup b is not complete: 1 problem(s)")
        for line in captured.err.splitlines()
    )


@pytest.mark.parametrize(
    "records_committed_first",
    [False, True],
    ids=["deleted-then-records", "records-committed-then-deleted"],
)
def test_a_follow_run_that_loses_a_topic_says_so_and_exits_14(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, records_committed_first: bool
) -> None:
    """The deleted topic leaves the chain in an increment of its own even when the checkpoint that
    notices the deletion has no record to copy: with the new records committed first (an increment
    that still lists the topic), the run once skipped that checkpoint as "nothing new", and the
    chain went on listing a topic the source no longer had (seen on a loaded machine, where the
    deletion reached the run one checkpoint late)."""
    kept, lost = f"{unique_name}-kept", f"{unique_name}-lost"
    for topic in (kept, lost):
        create_topic(source_cluster, topic)
        produce(source_cluster, topic, [Record(key=b"k", value=b"v")] * 5)
    store = tmp_path / "store"
    config = write_backup_config(
        tmp_path / "follow.yaml", source_cluster, f"{unique_name}-.*", store, checkpoint_interval_secs=1
    )
    process = start_cli("backup", "-c", str(config), "--follow", "--json")
    try:
        wait_for(lambda: (store / "follow" / "manifests").is_dir(), "the first increment", process=process)
        admin = AdminClient({"bootstrap.servers": source_cluster.bootstrap_servers})
        if records_committed_first:
            produce(source_cluster, kept, [Record(key=b"k", value=b"w")] * 3)

            def increment_with_the_new_records() -> bool:
                latest = BackupCatalog(open_storage(str(store))).load("follow").manifests[-1]
                ends = {p.topic: p.end_offset for p in latest.partitions}
                return ends == {kept: 8, lost: 5}

            wait_for(increment_with_the_new_records, "an increment of the new records", process=process)
            admin.delete_topics([lost])[lost].result(30)
        else:
            admin.delete_topics([lost])[lost].result(30)
            produce(source_cluster, kept, [Record(key=b"k", value=b"w")] * 3)

        def increment_without_the_lost_topic() -> bool:
            latest = BackupCatalog(open_storage(str(store))).load("follow").manifests[-1]
            return latest.increment > 0 and {p.topic for p in latest.partitions} == {kept}

        wait_for(increment_without_the_lost_topic, "an increment without the deleted topic", process=process)
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == IncompleteBackupError.exit_code, stderr
    summary = json.loads(stdout)
    assert len(summary["problems"]) == 1, summary["problems"]
    assert summary["problems"][0].startswith(f"topic {lost} no longer exists on ")
    assert "left out of the backup from increment" in summary["problems"][0]
