"""The local engine's worker processes (kbackup.restore.worker_engine) without Kafka: the default
number, and the pool with fake units (tests/support/worker_fakes.py): results in order, batches
merged in the parent, a stop that reaches every worker, a dead worker named."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from kbackup.core import logs
from kbackup.core.errors import InterruptedByUser, KBackupError, WorkerDiedError
from kbackup.core.secrets import register_secret
from kbackup.core.workers import WorkerPool, auto_workers
from kbackup.format.catalog import BackupCatalog
from kbackup.restore.plan import RestorePlan, TargetState, build_plan
from kbackup.restore.service import DryRunReport
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.unit_fence import may_follow_a_run_in_units
from kbackup.restore.units import unit_plan
from kbackup.restore.worker_engine import AUTO_MIN_RECORDS, choose_workers, workers_of
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage
from tests.support import worker_fakes


def test_auto_is_one_process_for_a_small_restore() -> None:
    assert auto_workers(AUTO_MIN_RECORDS - 1, units=12, cores=16, min_records=AUTO_MIN_RECORDS) == 1


def test_auto_is_one_worker_per_core_up_to_the_units() -> None:
    # One worker per two cores: one process already keeps more than a core busy.
    assert auto_workers(AUTO_MIN_RECORDS, units=12, cores=16, min_records=AUTO_MIN_RECORDS) == 8
    assert auto_workers(AUTO_MIN_RECORDS, units=12, cores=32, min_records=AUTO_MIN_RECORDS) == 12
    assert auto_workers(10 * AUTO_MIN_RECORDS, units=12, cores=4, min_records=AUTO_MIN_RECORDS) == 2
    assert auto_workers(10 * AUTO_MIN_RECORDS, units=12, cores=3, min_records=AUTO_MIN_RECORDS) == 1
    assert auto_workers(10 * AUTO_MIN_RECORDS, units=12, cores=2, min_records=AUTO_MIN_RECORDS) == 1
    assert auto_workers(10 * AUTO_MIN_RECORDS, units=12, cores=None, min_records=AUTO_MIN_RECORDS) == 1


def _pool(
    workers: int,
    *,
    stop: threading.Event | None = None,
    on_done: Callable[[], None] | None = None,
    stop_when_producing: tuple[str, ...] = (),
) -> tuple[WorkerPool[str], Counter[str]]:
    batches: Counter[str] = Counter()

    def produced(source: str, target: str, records: int, size: int) -> None:
        batches[f"{source}->{target} records"] += records
        batches[f"{source}->{target} bytes"] += size
        # The stop comes once the named units run (the workers' start-up takes its time on busy cores).
        if (
            stop is not None
            and stop_when_producing
            and all(batches[f"t->{item} records"] for item in stop_when_producing)
        ):
            stop.set()

    return WorkerPool("restore", workers, str, stop, on_report=produced, on_done=on_done), batches


def test_results_in_order_and_every_batch_reaches_the_parent() -> None:
    done: list[None] = []
    pool, batches = _pool(2, on_done=lambda: done.append(None))
    assert pool.run(["a", "b", "c"], worker_fakes.count_batches) == ["A", "B", "C"]
    assert batches == {"t->t-copy records": 90, "t->t-copy bytes": 900}
    assert len(done) == 3


def test_a_stop_reaches_every_worker_and_the_units_not_started_stay_undone() -> None:
    stop = threading.Event()
    pool, batches = _pool(2, stop=stop, stop_when_producing=("a", "b"))
    with pytest.raises(InterruptedByUser):
        pool.run(["a", "b", "c", "d"], worker_fakes.produce_until_stopped)
    # Both running units saw the stop and said so before they ended.
    assert batches["stopped->stopped records"] == 2


def test_a_dead_worker_is_named_and_the_others_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(worker_fakes.RUNNING_MARKER, str(tmp_path / "a-runs"))
    pool, batches = _pool(2)
    with pytest.raises(WorkerDiedError, match=r"running b died \(exit code -9\)"):
        pool.run(["a", "b"], worker_fakes.die_on_b)
    assert batches["stopped->stopped records"] == 1


def test_a_bug_in_a_worker_is_one_line_naming_its_unit() -> None:
    pool, _ = _pool(1)
    with pytest.raises(KBackupError, match="failed on b: ValueError: boom"):
        pool.run(["a", "b", "c"], worker_fakes.fail_on_b)


def test_a_worker_logs_as_the_parent_does_and_redacts_its_secrets(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the CLI had configured JSON logs (configured for real, they would take this process's
    # logger from the tests that read it).
    monkeypatch.setattr(logs, "_configured", (0, False, "json"))
    register_secret("hunter2-of-the-parent")
    pool, _ = _pool(1)
    assert pool.run(["hunter2-of-the-parent"], worker_fakes.log_a_secret) == ["hunter2-of-the-parent"]
    line = json.loads(capfd.readouterr().err.strip().splitlines()[-1])
    assert line["message"] == "the password is ***"


def test_an_entered_pool_runs_every_job_on_the_same_processes() -> None:
    with WorkerPool[str]("restore", 2, str) as pool:
        checks = pool.run(["a", "b", "c"], worker_fakes.pid_of)
        records = pool.run(["a", "b", "c"], worker_fakes.pid_of)
    assert len(set(checks) | set(records)) <= 2


def test_the_workers_choice_says_why() -> None:
    """What ``--dry-run`` prints and puts in its JSON: the count, and the setting or facts behind it."""
    auto = choose_workers("auto", units=3, records=1_200_000, cores=4)
    assert (
        auto.text()
        == "workers: 2 (auto: 4 core(s), one worker per 2, 3 source partition(s), 1,200,000 records)"
    )
    assert auto.to_dict() == {
        "count": 2,
        "setting": "auto",
        "cores": 4,
        "source_partitions": 3,
        "records": 1_200_000,
        "reason": "auto: 4 core(s), one worker per 2, 3 source partition(s), 1,200,000 records",
    }
    small = choose_workers("auto", units=3, records=AUTO_MIN_RECORDS - 1, cores=16)
    assert small.text() == "workers: 1 (auto: under 100,000 records)"
    assert (
        choose_workers(4, units=12, records=10, cores=2).text()
        == "workers: 4 (restore.workers or --workers 4)"
    )
    assert (
        choose_workers(4, units=3, records=10, cores=2).text()
        == "workers: 3 (restore.workers or --workers 4; no more than the 3 source partition(s))"
    )


def _plan_of_three_partitions(tmp_path: Path, *, existing: dict[str, int]) -> RestorePlan:
    tmp_path.mkdir(parents=True, exist_ok=True)
    storage = LocalStorage(tmp_path / "store")
    builder = BackupBuilder(storage, "b1", source_cluster="prod", scratch_dir=tmp_path)
    builder.topic("orders", 3)
    for partition in range(3):
        builder.partition(
            "orders",
            partition,
            [BackupRecord(offset=i, key=None, value=b"v", headers=(), timestamp=1) for i in range(5)],
        )
    builder.commit()
    state = TargetState(description="t", cluster_id="c", broker_count=1, topics=existing)
    backup = BackupCatalog(storage).load("b1")
    return build_plan(backup, RestoreSettings(), state, storage_url="s", now_ms=1)


@pytest.mark.parametrize("on_spark", [False, True], ids=["local", "spark"])
def test_the_dry_run_says_the_workers(tmp_path: Path, on_spark: bool) -> None:
    plan = _plan_of_three_partitions(tmp_path, existing={})
    workers = None if on_spark else workers_of("auto", plan)
    report = DryRunReport(plan, False, 15, 15, 3, True, 0, [], workers=workers)
    if on_spark:
        assert (
            "  workers: none (engine: spark restores each source partition in a Spark task)" in report.lines()
        )
        assert report.to_dict()["workers"] is None
    else:
        assert "  workers: 1 (auto: under 100,000 records)" in report.lines()
        assert report.to_dict()["workers"]["count"] == 1


def test_a_run_in_one_process_fences_the_units_only_where_an_earlier_run_may_have_written(
    tmp_path: Path,
) -> None:
    """An earlier run on workers creates every topic before its first record: a plan that creates
    them all follows none that wrote; one into an existing topic fences each unit's id."""
    fresh = _plan_of_three_partitions(tmp_path / "a", existing={})
    assert not may_follow_a_run_in_units(fresh)
    rerun = _plan_of_three_partitions(tmp_path / "b", existing={"orders": 3})
    assert may_follow_a_run_in_units(rerun)
    base = f"kafka-backup-restore-{rerun.restore_id}"
    assert rerun.unit_transactional_ids() == [f"{base}-orders-{p}" for p in range(3)]
    assert not may_follow_a_run_in_units(unit_plan(rerun, rerun.partitions[0], topics_created=True))
