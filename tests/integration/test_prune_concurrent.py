"""A ``backup --follow`` and prunes of the same backup id running at the same time, on a folder,
moto's S3, fake-gcs-server and Azurite.

Records are produced at a steady rate while the follow backup commits an increment every 4 s
and closes a segment about every second (so a prune mostly finds segments the run stored and has not
committed yet); a prune with a short window (``--older-than 10s``) and a grace period of 0.1 s
runs again and again beside it, until what the test is about has happened: six prunes trimmed
the live backup's window and one kept an orphan-looking segment because the running backup's
lease protected it (at most two minutes). The backup's lease keeps its uncommitted segments from
the orphan sweep, and the generations keep every reader consistent: at the end the backup
validates deeply and holds every source record from its window start to the end, each once, in
order; the backup process ends cleanly and no prune failed. (The storage contract checks the
same pieces one by one on each backend: tests/support/storage_contract.py.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kbackup.backup.inspect import validate_backup
from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.backup_io import read_backup
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, consume_all, create_topic, end_offsets, produce
from tests.support.storage_backends import BACKENDS, storage_backend

ROOT = Path(__file__).parents[2]
#: Prunes that must trim the window while the backup runs, and the longest the test waits for them.
TRIMS_WANTED = 6
LONGEST_SECS = 120.0


def wait_until(predicate: Any, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_follow_backup_and_prunes_at_the_same_time_lose_and_duplicate_nothing(
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    topic, backup_id = unique_name, "live"
    create_topic(source_cluster, topic, partitions=2)
    store = storage_backend(backend, request, tmp_path, f"live-{unique_name}").section
    config = config_file(
        tmp_path / "live.yaml",
        backup_id=backup_id,
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [topic]},
        },
        storage=store,
        backup={"checkpoint_interval_secs": 4, "segment_max_interval_ms": 500},
    )
    produced = 0
    stop_producing = threading.Event()

    def producer() -> None:
        nonlocal produced
        while not stop_producing.is_set():
            produce(
                source_cluster,
                topic,
                [Record(key=b"k%d" % produced, value=b"v" * 200, partition=produced % 2)],
            )
            produced += 1
            time.sleep(0.01)

    producing = threading.Thread(target=producer, daemon=True)
    producing.start()
    backup = subprocess.Popen(
        [sys.executable, "-m", "kbackup", "backup", "-c", str(config), "--follow"],
        cwd=ROOT,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    storage = open_storage(StorageSettings.model_validate(store))
    catalog = BackupCatalog(storage)
    prunes: list[dict[str, Any]] = []
    try:
        wait_until(lambda: catalog.exists(backup_id), "the first increment")
        started = time.monotonic()

        def seen_enough() -> bool:
            trims = sum(any(item["action"] == "trim" for item in p["backups"]) for p in prunes)
            kept = any(item["orphans_kept"] for p in prunes for item in p["backups"])
            return trims >= TRIMS_WANTED and kept

        while not seen_enough():
            assert time.monotonic() - started < LONGEST_SECS, (
                f"in {LONGEST_SECS:.0f}s the prunes did not both trim {TRIMS_WANTED} times and meet the "
                f"lease: {prunes[-3:]}"
            )
            code = run(
                [
                    "prune",
                    "-c",
                    str(config),
                    "--older-than",
                    "10s",
                    "--orphan-grace",
                    "0.1s",
                    "--execute",
                    "--json",
                ]
            )
            captured = capsys.readouterr()
            assert code == 0, captured.err
            prunes.append(json.loads(captured.out))
            time.sleep(1)
        stop_producing.set()
        producing.join(30)
        ends = end_offsets(source_cluster, topic, [0, 1])

        def caught_up() -> bool:
            coverage = BackupCatalog(storage).load(backup_id).coverage()
            return all(
                coverage.get((topic, p)) is not None and coverage[(topic, p)].end_offset >= ends[p]
                for p in ends
            )

        wait_until(caught_up, "the backup to reach the source's end")
    finally:
        stop_producing.set()
        backup.send_signal(signal.SIGTERM)
        _, err = backup.communicate(timeout=120)
    assert backup.returncode == 0, err[-3000:]
    # One last prune alone: what the concurrent ones kept for the live run is now collectable.
    assert (
        run(["prune", "-c", str(config), "--older-than", "10s", "--orphan-grace", "0.1s", "--execute"]) == 0
    )
    capsys.readouterr()

    trimmed = [p for p in prunes if any(item["action"] == "trim" for item in p["backups"])]
    assert len(trimmed) >= TRIMS_WANTED, len(trimmed)  # the window really moved while the backup ran
    assert any(item["orphans_kept"] for p in prunes for item in p["backups"])  # the lease protected something
    report = validate_backup(storage, backup_id, deep=True)
    assert report.errors == []
    assert not [w for w in report.warnings if "in no manifest" in w]
    backup_now = BackupCatalog(storage).load(backup_id)
    held = read_backup(storage, backup_id)
    for partition in (0, 1):
        start = backup_now.coverage()[(topic, partition)].start_offset
        assert start > 0  # records older than the window went
        offsets = [r.offset for r in held if r.partition == partition]
        source = [r.consumed_offset for r in consume_all(source_cluster, topic, [partition])]
        assert offsets == [offset for offset in source if offset >= start]
        assert offsets[-1] == ends[partition] - 1
