"""The textfile of a run that does not end well, as docs/observability.md describes it: a run that
fails stays at the phase that failed, and says so in its textfile; a later write of the textfile
that fails (its folder gone after the first write) is a warning, never the run's failure."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kbackup.cli.main import run
from kbackup.core import metrics as metrics_module
from kbackup.core.errors import RecoveryGapError
from kbackup.core.metrics import RunMetrics
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import read_backup, take_backup
from tests.support.config_files import write_three_phase_config
from tests.support.kafka_io import Record, create_topic, produce
from tests.support.metrics_text import parse, series, total


def test_a_failed_run_leaves_its_textfile_at_the_phase_that_failed(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A group committed past what the backup holds: the three-phase restore restores, moves the
    group, and fails its verify phase on the recovery gap (exit 12); its textfile says ``verify``,
    not ``done``, with the phases before it finished."""
    topic = unique_name
    create_topic(source_cluster, topic, partitions=1)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v%d" % i) for i in range(10)])
    consumer = Consumer({"bootstrap.servers": source_cluster.bootstrap_servers, "group.id": f"{topic}-ahead"})
    consumer.commit(offsets=[TopicPartition(topic, 0, 15)], asynchronous=False)  # 5 past the end
    consumer.close()
    store = tmp_path / "store"
    take_backup(source_cluster, store, "nightly", [topic])
    config = write_three_phase_config(tmp_path / "restore.yaml", target_cluster, store, topic, "when-needed")
    textfile = tmp_path / "three-phase.prom"
    code = run(["three-phase-restore", "-c", str(config), "--metrics-textfile", str(textfile)])
    err = capsys.readouterr().err
    assert code == RecoveryGapError.exit_code, err[-3000:]

    found = parse(textfile.read_text())
    phases = {
        dict(labels)["phase"]: value for labels, value in series(found, "kafka_backup_restore_phase").items()
    }
    assert phases == {
        **dict.fromkeys(("metadata", "restore", "mapping", "reset", "audit", "done"), 0),
        "verify": 1,
    }
    durations = {
        dict(labels)["phase"] for labels in series(found, "kafka_backup_restore_phase_duration_seconds")
    }
    assert durations == {"restore", "mapping", "reset"}  # finished; verify did not
    assert total(found, "kafka_backup_restore_records_total", topic=f"{topic}-restored") == 10
    assert series(found, "kafka_backup_recovery_seconds")  # the group was committed before verify failed


def test_a_textfile_write_that_fails_after_the_first_only_warns(
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first write (the check at the start) succeeds; then node-exporter's folder goes away. The
    writes at the increment's commit and at the end fail: the backup still commits, exits 0, and
    warns about each failed write."""
    topic = unique_name
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v", partition=i % 2) for i in range(30)])
    folder = tmp_path / "node"
    folder.mkdir()
    textfile = folder / "kafka-backup-nightly.prom"
    check_textfile = metrics_module.check_textfile
    checked: list[str] = []

    def checked_then_folder_removed(metrics: RunMetrics, path: Path) -> None:
        check_textfile(metrics, path)
        checked.append(path.read_text())
        shutil.rmtree(folder)

    monkeypatch.setattr(metrics_module, "check_textfile", checked_then_folder_removed)
    store = tmp_path / "store"
    args = ["backup", "-b", source_cluster.bootstrap_servers, "--include", topic, "--path", str(store)]
    code = run([*args, "--backup-id", "nightly", "--metrics-textfile", str(textfile)])
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert len(checked) == 1  # the first write was made, and succeeded
    assert len(read_backup(store, "nightly")) == 30
    warnings = [line for line in err.splitlines() if "could not write the metrics textfile" in line]
    # One at the increment's commit, one at the end of the run.
    assert len(warnings) == 2, err[-3000:]
    assert all(
        f"WARNING kbackup.metrics: could not write the metrics textfile {textfile}" in w for w in warnings
    )
    assert not folder.exists()
