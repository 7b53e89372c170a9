"""``backup.workers`` and ``--workers``: the default, the flag over the setting, the refusal of 0,
how many processes ``auto`` chooses, and the slice sets the driver hands the workers (the pool
replaced by a recorder: no process starts here)."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest

from kbackup.app import config as config_module
from kbackup.app.overrides import backup_job
from kbackup.backup.copier import entry_of
from kbackup.backup.metrics import BackupMetrics
from kbackup.backup.plan import PartitionPlan
from kbackup.backup.settings import BackupSettings, SourceSettings
from kbackup.backup.units import CopyResult, CopyTask, SlicedCopier
from kbackup.backup.worker_engine import AUTO_MIN_RECORDS, CLIENT_ID, WorkerCopier, workers_for
from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.core.errors import ConfigError
from kbackup.core.throttle import Throttle
from kbackup.format.segments import SegmentLimits
from tests.support.config_files import config_file


def test_the_default_is_auto_and_the_flag_goes_over_the_setting(tmp_path: Path) -> None:
    assert BackupSettings().workers == "auto"
    cfg = config_module.load(config_file(tmp_path / "c.yaml", backup={"workers": 3}))
    assert backup_job(cfg, bootstrap_servers="k:9092", backup_id="b").settings.workers == 3
    assert backup_job(cfg, bootstrap_servers="k:9092", backup_id="b", workers=2).settings.workers == 2


def test_zero_workers_is_refused_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="--workers 0"):
        backup_job(config_module.KBackupConfig(), bootstrap_servers="k:9092", backup_id="b", workers=0)
    assert run(["backup", "-b", "k:9092", "--backup-id", "b", "--workers", "0"]) == ConfigError.exit_code
    assert "--workers 0" in capsys.readouterr().err


def plan(partition: int, start: int, end: int, topic: str = "t") -> PartitionPlan:
    return PartitionPlan(topic, partition, start, 0, start, end)


def test_auto_copies_in_this_process_below_the_threshold_and_else_on_one_worker_per_two_cores_or_slice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert workers_for("auto", [plan(p, 0, 1000) for p in range(6)]) == 1
    big = AUTO_MIN_RECORDS // 3 + 1
    assert workers_for("auto", [plan(p, 0, big) for p in range(3)]) == 3
    # One partition, cut into slices of TASK_RECORDS: a unit each.
    assert workers_for("auto", [plan(0, 0, 7_000_000)]) == 4
    assert workers_for("auto", [plan(p, 0, big) for p in range(12)]) == 8
    assert workers_for(5, [plan(0, 0, 10)]) == 5


class RecordingCopier(WorkerCopier):
    """The driver's steps with the pool replaced: each task answered with one entry per slice."""

    def __init__(self, template: CopyTask, workers: int, throttle: Throttle) -> None:
        super().__init__(template, workers, metrics=BackupMetrics("b", mode="snapshot"), on_progress=print)
        self.throttle = throttle
        self.handed: list[CopyTask] = []

    def parallelism(self) -> int:
        return self.workers

    def run_tasks(self, tasks: list[CopyTask]) -> list[CopyResult]:
        self.handed = tasks
        return [
            CopyResult(entries=[entry_of(s.topic, s.partition, s.start, s.end, 0, []) for s in task.slices])
            for task in tasks
        ]


def template() -> CopyTask:
    return CopyTask(
        backup_id="b",
        source=SourceSettings(bootstrap_servers=["k:9092"]),
        storage=StorageSettings(url="/tmp/nowhere"),
        source_cluster="c",
        limits=SegmentLimits(max_bytes=1 << 20, max_records=1000, compression="zstd"),
        consumer_properties={},
        buffer_memory_bytes=1 << 20,
        max_open_segments=4,
        stall_timeout_secs=10,
        slices=[],
    )


def test_a_small_increment_is_spread_over_every_worker_each_with_a_share_of_the_rate() -> None:
    copier = RecordingCopier(template(), 2, Throttle(bytes_per_second=1000))
    plans = [plan(0, 10, 310), plan(1, 0, 300), plan(2, 5, 5)]
    copier.start_increment(plans)
    assert copier.increment_complete() or copier._done.wait(5)
    assert len(copier.handed) >= 2
    covered = sorted((s.partition, s.start, s.end) for task in copier.handed for s in task.slices)
    # Every offset to copy once, in slices of one partition each; an empty partition in none.
    assert covered[0][:2] == (0, 10)
    assert covered[-1][0] == 1
    for partition, start, end in ((0, 10, 310), (1, 0, 300)):
        mine = [c for c in covered if c[0] == partition]
        assert mine[0][1] == start
        assert mine[-1][2] == end
        assert all(a[2] == b[1] for a, b in itertools.pairwise(mine))
    assert {task.client_id for task in copier.handed} == {CLIENT_ID}
    assert {task.max_bytes_per_second for task in copier.handed} == {500}
    entries, segments = copier.take_increment()
    assert [(e.partition, e.start_offset, e.end_offset) for e in entries] == [
        (0, 10, 310),
        (1, 0, 300),
        (2, 5, 5),
    ]
    assert segments == []


def test_a_follow_run_stopped_between_increments_keeps_every_partition_where_the_last_ended() -> None:
    copier = RecordingCopier(template(), 2, Throttle())
    copier.start_increment([plan(0, 0, 100), plan(1, 0, 50)])
    assert copier._done.wait(5)
    entries, _ = copier.take_increment()
    copier.after_commit(entries)
    idle, segments = copier.take_increment(partial=True)
    assert [(e.partition, e.start_offset, e.end_offset) for e in idle] == [(0, 100, 100), (1, 50, 50)]
    assert segments == []


class HeldCopier(RecordingCopier):
    """The tasks run until the test lets them end."""

    def __init__(self, template: CopyTask) -> None:
        super().__init__(template, 2, Throttle())
        self.release = threading.Event()

    def run_tasks(self, tasks: list[CopyTask]) -> list[CopyResult]:
        self.release.wait(10)
        return super().run_tasks(tasks)


def lag(copier: SlicedCopier, partition: int) -> float | None:
    labels = {"backup_id": "b", "topic": "t", "partition": str(partition)}
    return copier.metrics.registry.get_sample_value("kafka_backup_lag_records", labels)


def test_the_lag_gauges_hold_the_increment_being_copied_on_workers_and_drop_at_its_commit() -> None:
    # The workers' consumers are in other processes: the driver sets the gauges from its plan.
    copier = HeldCopier(template())
    copier.start_increment([plan(0, 10, 310), plan(1, 0, 50), plan(2, 5, 5)])
    try:
        assert [lag(copier, p) for p in (0, 1, 2)] == [300, 50, 0]
        assert copier.metrics.health.records_waiting
        assert copier.poll(0.01) == 0  # still copying: the gauges stay
        assert lag(copier, 0) == 300
    finally:
        copier.release.set()
    assert copier._done.wait(5)
    entries, _ = copier.take_increment()
    copier.after_commit(entries)
    assert [lag(copier, p) for p in (0, 1, 2)] == [0, 0, 0]
    assert not copier.metrics.health.records_waiting
