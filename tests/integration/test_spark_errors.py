"""How ``engine: spark`` fails (docs/scaling.md, "Errors"):

- a kafka-backup error in a task (here a damaged segment) is the task's answer, not a crash: the
  task succeeds as far as Spark knows (so no attempt of it is run again), and the command exits
  with the error's own code and line, as on the local engine;
- a job Spark gives up on (a task whose Python worker dies on every attempt) exits 17 with one
  line, commits nothing of the step that failed, and the same command run again continues.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import BackupIntegrityError, SparkJobError
from kbackup.core.spark import TASK_ATTEMPTS
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.backup_io import read_backup
from tests.support.config_files import config_file
from tests.support.damaged_backups import DAMAGE, copy_of, restore_args
from tests.support.kafka_io import Record, batch, consume_all, create_topic, produce, target_topics
from tests.support.restore_checks import REPO, progress_end

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ERROR = "kafka-backup: error: "


def jobs_since(spark: Any, known: set[int]) -> list[Any]:
    """The Spark jobs of the shared session that started after ``known`` was taken, oldest first."""
    tracker = spark.sparkContext.statusTracker()
    return [tracker.getJobInfo(job) for job in sorted(set(tracker.getJobIdsForGroup()) - known)]


def job_ids(spark: Any) -> set[int]:
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup())


def test_a_damaged_segment_met_in_a_spark_task_exits_8_with_one_line_and_no_retry(
    spark: Any,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    problem, damaged_object = DAMAGE["flipped-byte"]
    # Same size, one byte flipped: only reading the segment (the check job's task) finds it.
    store = copy_of("flipped-byte", tmp_path)
    progress_before, jobs_before = progress_end(target_cluster), job_ids(spark)
    capsys.readouterr()
    code = run([*restore_args(store, target_cluster, unique_name), "--engine", "spark"])
    err = capsys.readouterr().err
    assert code == BackupIntegrityError.exit_code, err
    errors = [line for line in err.splitlines() if line.startswith(ERROR)]
    assert len(errors) == 1, err
    assert problem in errors[0], err
    assert damaged_object in errors[0], err
    assert not any(word in err for word in ("Traceback", "Py4J", "org.apache.spark", "SparkJobError")), err
    # One job ran, the checks (the error came from its task): the task answered, Spark counted it
    # done, so no attempt failed and none was run again. The records job never started.
    jobs = jobs_since(spark, jobs_before)
    assert [job.status for job in jobs] == ["SUCCEEDED"], jobs
    tracker = spark.sparkContext.statusTracker()
    stages = [tracker.getStageInfo(stage) for stage in jobs[0].stageIds]
    assert [(s.numTasks, s.numCompletedTasks, s.numFailedTasks, s.currentAttemptId) for s in stages] == [
        (1, 1, 0, 0)
    ], stages
    # Nothing was written to the target.
    assert unique_name not in target_topics(target_cluster)
    assert progress_end(target_cluster) == progress_before


def _strip(record: Record) -> tuple[Any, ...]:
    return (record.partition, record.offset, record.key, record.value)


def test_a_job_spark_gives_up_exits_17_commits_nothing_and_the_same_command_continues(
    spark: Any,
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_topic(source_cluster, unique_name, partitions=2)
    produce(source_cluster, unique_name, batch(0, 100, 2))
    store = tmp_path / "store"
    config = config_file(
        tmp_path / "backup.yaml",
        backup_id="b",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [unique_name]},
        },
        storage={"url": str(store)},
    )
    # The first increment, on the local engine.
    assert run(["backup", "-c", str(config)]) == 0, capsys.readouterr().err
    produce(source_cluster, unique_name, batch(100, 100, 2))

    # The second on Spark, as an operator runs it: its own session on local[2] with the engine's
    # task attempts (local[2,4]); every Python worker dies after its first batch from the source,
    # so the task fails on every attempt and Spark gives the job up.
    failed = subprocess.run(
        [sys.executable, "-m", "kbackup", "backup", "-c", str(config), "--engine", "spark"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={
            **os.environ,
            "KBACKUP_NO_PROGRESS": "1",
            "PYSPARK_PYTHON": sys.executable,
            "KBACKUP_CRASH_AT": "backup:batch-read",
        },
        check=False,
    )
    assert failed.returncode == SparkJobError.exit_code, failed.stderr[-3000:]
    errors = [line for line in failed.stderr.splitlines() if line.startswith(ERROR)]
    assert len(errors) == 1, failed.stderr[-3000:]
    assert "the Spark job of backup b failed" in errors[0], errors
    # Spark's own word: every attempt of the engine's local master failed, and why.
    assert f"failed {TASK_ATTEMPTS} times" in errors[0], errors
    assert "Python worker exited unexpectedly" in errors[0], errors
    assert "Traceback" not in failed.stderr, failed.stderr[-3000:]
    # Nothing of the failed increment was committed: the backup is still its first increment.
    backup = BackupCatalog(open_storage(str(store))).load("b")
    assert len(backup.manifests) == 1
    assert sum(entry.record_count for entry in backup.manifests[0].partitions) == 100

    # The same command again, without the fault (in this process, on the shared session).
    capsys.readouterr()
    assert run(["backup", "-c", str(config), "--engine", "spark"]) == 0, capsys.readouterr().err
    backup = BackupCatalog(open_storage(str(store))).load("b")
    assert len(backup.manifests) == 2
    first, second = backup.manifests
    ends = {(e.topic, e.partition): e.end_offset for e in first.partitions}
    assert {(e.topic, e.partition): e.start_offset for e in second.partitions} == ends
    assert [_strip(r) for r in read_backup(store, "b")] == [
        _strip(r) for r in consume_all(source_cluster, unique_name, [0, 1])
    ]
    assert run(["validate", "--deep", "-c", str(config)]) == 0, capsys.readouterr().err
