"""Stops, failures and crashes: nothing partial becomes visible, and the next run completes the backup."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kbackup.backup import copier as copier_module
from kbackup.backup import run_backup
from kbackup.backup.inspect import validate_backup
from kbackup.core.errors import KafkaUnreachableError, StorageError
from kbackup.core.progress import Progress
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster, local_clusters
from kbackup.storage import LocalStorage, open_storage
from tests.support.backup_io import backup_job, read_backup, take_backup
from tests.support.cli_process import start_cli, wait_for
from tests.support.config_files import write_backup_config
from tests.support.kafka_io import Record, commit_group, consume_all, create_topic, end_offsets, produce


def records(start: int, count: int, partitions: int = 1) -> list[Record]:
    return [
        Record(key=f"k{i}".encode(), value=f"value-{i}".encode(), partition=i % partitions)
        for i in range(start, start + count)
    ]


class _StopTask:
    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def advance(self, amount: float = 1, *, data_bytes: int = 0) -> None:
        self.stop.set()

    def update(self, **_: Any) -> None:
        pass

    def close(self) -> None:
        pass


class StopAfterFirstBatch(Progress):
    """Asks the run to stop as soon as it reports its first records (as SIGINT would)."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__(enabled=False)
        self.stop = stop

    def task(self, description: str, total: float | None = None, *, unit: str = "items") -> Any:
        return _StopTask(self.stop)


def test_stop_during_a_snapshot_run_commits_what_was_copied(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    create_topic(source_cluster, unique_name, partitions=2)
    produce(source_cluster, unique_name, records(0, 400, partitions=2))
    group = f"{unique_name}-far"

    commit_group(source_cluster, group, {(unique_name, 0): 150, (unique_name, 1): 150})
    # Ten records per consume call, so the stop arrives long before the end offsets.
    monkeypatch.setattr(copier_module, "CONSUME_BATCH", 10)
    stop = threading.Event()
    job = backup_job(source_cluster, tmp_path, "stopped", [unique_name])
    summary = run_backup(job, stop=stop, progress=StopAfterFirstBatch(stop))

    assert summary.stopped_early
    assert len(summary.increments) == 1
    assert summary.increments[0].partial
    backup = BackupCatalog(open_storage(str(tmp_path))).load("stopped")
    first = backup.manifests[0]
    copied = read_backup(tmp_path, "stopped")
    assert 0 < len(copied) < 400
    # Each partition's range ends where the copy got to; everything below it is there.
    cluster_records = consume_all(source_cluster, unique_name, [0, 1])
    for entry in first.partitions:
        expected = [
            r
            for r in cluster_records
            if r.partition == entry.partition and r.consumed_offset < entry.end_offset
        ]
        assert [r for r in copied if r.partition == entry.partition] == expected
    assert sum(entry.end_offset for entry in first.partitions) < 400
    # The group's offsets are beyond what was copied: the partial increment carries no snapshot.
    assert first.consumer_groups is None

    monkeypatch.setattr(copier_module, "CONSUME_BATCH", 10_000)
    second = take_backup(source_cluster, tmp_path, "stopped", [unique_name])
    assert not second.stopped_early
    assert read_backup(tmp_path, "stopped") == cluster_records
    snapshot = BackupCatalog(open_storage(str(tmp_path))).load("stopped").consumer_groups
    assert snapshot is not None
    assert any(g.group_id == group for g in snapshot.groups)
    assert validate_backup(open_storage(str(tmp_path)), "stopped", deep=True).errors == []


class FailingStorage(LocalStorage):
    """A folder whose third segment upload fails, as a full disk or a lost network would."""

    def __init__(self, root: Path, fail_at: int) -> None:
        super().__init__(root)
        self.uploads = 0
        self.fail_at = fail_at

    def move_file(self, key: str, path: Path) -> None:
        self.uploads += 1
        if self.uploads == self.fail_at:
            raise StorageError(f"writing {key} failed: No space left on device")
        super().move_file(key, path)


def test_failed_upload_leaves_no_manifest_and_the_next_run_completes(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, records(0, 1000))
    job = backup_job(source_cluster, tmp_path, "crash", [unique_name], segment_max_records=100)
    with pytest.raises(StorageError, match="No space left"):
        run_backup(job, storage=FailingStorage(tmp_path, fail_at=3))

    storage = open_storage(str(tmp_path))
    assert not BackupCatalog(storage).exists("crash")
    orphans = list(storage.list("crash/data/"))
    assert len(orphans) == 2  # the two segments uploaded before the failure, listed by no manifest

    take_backup(source_cluster, tmp_path, "crash", [unique_name], segment_max_records=100)
    assert read_backup(tmp_path, "crash") == consume_all(source_cluster, unique_name)
    report = validate_backup(storage, "crash", deep=True)
    assert report.errors == []
    assert len(report.warnings) == 1
    assert "2 object(s)" in report.warnings[0]


def covered_up_to(store: Path, topic: str) -> dict[int, int]:
    catalog = BackupCatalog(open_storage(str(store)))
    if not catalog.exists("follow"):
        return {}
    return {p: item.end_offset for (t, p), item in catalog.load("follow").coverage().items() if t == topic}


def test_follow_mode_commits_periodically_and_stops_cleanly_on_sigterm(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    create_topic(source_cluster, unique_name, partitions=2)
    produce(source_cluster, unique_name, records(0, 50, partitions=2))
    store = tmp_path / "store"
    config = write_backup_config(
        tmp_path / "follow.yaml", source_cluster, unique_name, store, checkpoint_interval_secs=1
    )
    process = start_cli("backup", "-c", str(config), "--follow", "--json")
    try:
        wait_for(
            lambda: covered_up_to(store, unique_name) == {0: 25, 1: 25},
            "the first increment",
            process=process,
        )
        for start in (50, 100, 150):
            produce(source_cluster, unique_name, records(start, 50, partitions=2))
            ends = end_offsets(source_cluster, unique_name, [0, 1])
            wait_for(
                lambda ends=ends: covered_up_to(store, unique_name) == ends,
                f"offsets {ends}",
                process=process,
            )
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    summary = json.loads(stdout)
    assert summary["mode"] == "follow"
    assert summary["interrupted"] is False
    backup = BackupCatalog(open_storage(str(store))).load("follow")
    assert len(backup.manifests) >= 4
    assert all(m.consumer_groups is not None for m in backup.manifests)
    assert read_backup(store, "follow") == consume_all(source_cluster, unique_name, [0, 1])
    assert validate_backup(open_storage(str(store)), "follow", deep=True).errors == []


def test_sigterm_commits_records_read_since_the_last_checkpoint(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:

    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, records(0, 20))
    store = tmp_path / "store"
    config = write_backup_config(
        tmp_path / "follow.yaml", source_cluster, unique_name, store, checkpoint_interval_secs=3600
    )
    process = start_cli("backup", "-c", str(config), "--follow", "--json")
    try:
        wait_for(lambda: covered_up_to(store, unique_name) == {0: 20}, "the first increment", process=process)
        produce(source_cluster, unique_name, records(20, 30))
        commit_group(source_cluster, f"{unique_name}-g", {(unique_name, 0): 45})
        time.sleep(3)  # the consumer reads new records within milliseconds; no checkpoint is due for an hour
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    backup = BackupCatalog(open_storage(str(store))).load("follow")
    assert len(backup.manifests) == 2
    last = backup.manifests[1]
    assert [(p.start_offset, p.end_offset, p.record_count) for p in last.partitions] == [(20, 50, 30)]
    # A snapshot taken at the stop, covered by what was copied.
    assert last.consumer_groups is not None
    group = next(g for g in last.consumer_groups.groups if g.group_id == f"{unique_name}-g")
    assert group.offsets[0].offset == 45
    assert read_backup(store, "follow") == consume_all(source_cluster, unique_name)
    assert json.loads(stdout)["records"] == 50


def test_killed_run_leaves_only_invisible_objects_and_the_next_run_completes(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, records(0, 20))
    store = tmp_path / "store"
    config = write_backup_config(
        tmp_path / "follow.yaml",
        source_cluster,
        unique_name,
        store,
        checkpoint_interval_secs=3600,
        segment_max_interval_ms=200,
    )
    process = start_cli("backup", "-c", str(config), "--follow")
    storage = open_storage(str(store))
    try:
        wait_for(lambda: covered_up_to(store, unique_name) == {0: 20}, "the first increment", process=process)
        listed = {s.key for m in BackupCatalog(storage).load("follow").manifests for s in m.segments}
        produce(source_cluster, unique_name, records(20, 30))
        # The open segment is closed and uploaded after 200 ms; no manifest lists it yet.
        wait_for(
            lambda: any(o.key.removeprefix("follow/") not in listed for o in storage.list("follow/data/")),
            "an uploaded segment of the open increment",
            process=process,
        )
        process.kill()  # SIGKILL: no chance to commit
        process.wait(30)
    finally:
        if process.poll() is None:
            process.kill()
    backup = BackupCatalog(storage).load("follow")
    assert len(backup.manifests) == 1
    assert len(read_backup(store, "follow")) == 20  # readers see only what a manifest lists
    report = validate_backup(storage, "follow")
    assert report.errors == []
    assert any("in no manifest" in w for w in report.warnings)

    summary = take_backup(source_cluster, store, "follow", [unique_name])
    assert summary.records == 30
    assert read_backup(store, "follow") == consume_all(source_cluster, unique_name)


class RunOnFirstBatch(Progress):
    """Calls ``action`` once, when the run reports its first records."""

    def __init__(self, action: Any) -> None:
        super().__init__(enabled=False)
        self.action = action

    def task(self, description: str, total: float | None = None, *, unit: str = "items") -> Any:
        owner = self

        class Task:
            def advance(self, amount: float = 1, *, data_bytes: int = 0) -> None:
                if owner.action is not None:
                    action, owner.action = owner.action, None
                    action()

            def update(self, **_: Any) -> None:
                pass

            def close(self) -> None:
                pass

        return Task()


def test_source_lost_mid_run_commits_what_was_copied(
    unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cluster of its own: killing the shared source cluster would disturb the tests after this one.
    with local_clusters(["lost"], tmp_path / "kafka") as (cluster,):
        create_topic(cluster, unique_name)
        for start in range(0, 300, 10):  # thirty record batches in the log
            produce(cluster, unique_name, records(start, 10))
        expected = consume_all(cluster, unique_name)
        monkeypatch.setattr(copier_module, "CONSUME_BATCH", 10)
        # Small fetches and a tiny prefetch queue, so most records are still on the broker when it dies.
        tiny_fetches = {
            "max.partition.fetch.bytes": "100",
            "fetch.max.bytes": "1000",
            "message.max.bytes": "1000",
            "queued.min.messages": "1",
        }
        job = backup_job(
            cluster, tmp_path / "store", "lost", [unique_name], connection={"properties": tiny_fetches},
            stall_timeout_secs=3,
        )  # fmt: skip
        with pytest.raises(KafkaUnreachableError, match=cluster.bootstrap_servers):
            run_backup(job, progress=RunOnFirstBatch(cluster.kill))
        backup = BackupCatalog(open_storage(str(tmp_path / "store"))).load("lost")
        [entry] = backup.latest.partitions
        assert 0 < entry.end_offset < 300
        assert read_backup(tmp_path / "store", "lost") == [
            r for r in expected if (r.offset or 0) < entry.end_offset
        ]

        # The broker comes back (same data, just restarted: its group coordinator is still loading).
        cluster.start()
        monkeypatch.setattr(copier_module, "CONSUME_BATCH", 10_000)
        take_backup(cluster, tmp_path / "store", "lost", [unique_name])
        assert read_backup(tmp_path / "store", "lost") == expected


def test_sigint_during_a_snapshot_run_exits_130_after_committing(
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from kbackup.cli import common
    from kbackup.cli.main import run

    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, records(0, 300))
    monkeypatch.setattr(copier_module, "CONSUME_BATCH", 10)
    # The CLI's progress display sends the process a real SIGINT when the first records arrive.
    monkeypatch.setattr(
        common, "Progress", lambda: RunOnFirstBatch(lambda: os.kill(os.getpid(), signal.SIGINT))
    )
    args = ["backup", "-b", source_cluster.bootstrap_servers, "--include", unique_name]
    args += ["--path", str(tmp_path), "--backup-id", "sig"]
    assert run(args) == 130
    err = capsys.readouterr().err
    assert "interrupted before it reached its end offsets; increment 0 holds what was copied" in err
    assert "running the same command again" in err
    first = BackupCatalog(open_storage(str(tmp_path))).load("sig").latest
    assert 0 < first.partitions[0].end_offset < 300

    monkeypatch.setattr(common, "Progress", lambda: RunOnFirstBatch(None))
    monkeypatch.setattr(copier_module, "CONSUME_BATCH", 10_000)
    assert run([*args, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["interrupted"] is False
    assert summary["records"] == 300 - first.partitions[0].record_count
    assert read_backup(tmp_path, "sig") == consume_all(source_cluster, unique_name)


class StopAfterFirstAdvance(Progress):
    """Real bars (rich), and a stop asked for as soon as the run reports its first records."""

    def __init__(self, stop: threading.Event) -> None:
        super().__init__(enabled=True)
        self.stop = stop

    def task(self, description: str, total: float | None = None, *, unit: str = "items") -> Any:
        bar = super().task(description, total, unit=unit)
        advance = bar.advance

        def advance_then_stop(amount: float = 1, *, data_bytes: int = 0) -> None:
            advance(amount, data_bytes=data_bytes)
            self.stop.set()

        bar.advance = advance_then_stop  # type: ignore[method-assign]
        return bar


def test_a_stopped_backup_leaves_its_bar_where_the_copy_got_to(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C used to fill the bar to 100 %: it stays at the records read, stopped, with a rate in
    records and bytes."""
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, records(0, 400))
    monkeypatch.setattr(copier_module, "CONSUME_BATCH", 10)
    stop = threading.Event()
    progress = StopAfterFirstAdvance(stop)
    with progress:
        summary = run_backup(
            backup_job(source_cluster, tmp_path, "stopped", [unique_name]), stop=stop, progress=progress
        )
        [bar] = progress.bars.tasks
        assert summary.stopped_early
        assert bar.total == 400
        assert 0 < bar.completed < 400
        assert bar.completed == summary.records
        assert bar.fields["unit"] == "records"
        assert bar.fields["data_bytes"] > 0
        assert bar.stop_time is not None  # closed: its clock and rate no longer move
