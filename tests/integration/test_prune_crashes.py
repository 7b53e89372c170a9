"""``prune --execute`` killed (SIGKILL) at seeded random points, on a folder and on moto's S3.

A backup of eight daily increments is pruned in six stages, each moving the window one day
further. In every stage the prune is killed twice at a random step among those its plan has
(committing the retention generation, each delete request), then run to its end: twelve kills
per store. After every kill the backup validates deeply and holds exactly the source records of
the window its newest committed generation describes (the old one or the new one, nothing in
between); after every completed stage no object is left that no manifest lists. At the end, a
restore of what remains equals the source's records of the last window.

Replay a failure with ``KBACKUP_PRUNE_SEED=<seed printed in the assertion>``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kbackup.backup.inspect import validate_backup
from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.format.catalog import BackupCatalog
from kbackup.format.layout import object_key
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import Storage, open_storage
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import read_backup, take_backup
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, consume_all, create_topic, produce
from tests.support.restored_topics import restored_records

ROOT = Path(__file__).parents[2]
DAY_MS = 86_400_000
BASE_TIME = 1_700_000_000_000
DAYS = 8
#: Records per day and partition: day d holds offsets 10d .. 10d + 9 of each partition.
PER_PARTITION = 10
KILLS_PER_STAGE = 2


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> dict[str, Any]:
    if request.param == "folder":
        return {"url": str(tmp_path / "store")}
    s3_server: S3Server = request.getfixturevalue("s3_server")
    return s3_server.storage_settings(TEST_BUCKET, f"crash-{unique_name}")


def referenced(storage: Storage, backup_id: str) -> set[str]:
    backup = BackupCatalog(storage).load(backup_id)
    return {object_key(backup_id, s.key) for manifest in backup.manifests for s in manifest.segments}


def prune_command(config: Path, cut: str) -> list[str]:
    return [sys.executable, "-m", "kbackup", "prune", "-c", str(config), "--before", cut, "--execute"]


def planned_steps(config: Path, cut: str, capsys: pytest.CaptureFixture[str], s3: bool) -> int:
    """How many crash points an execution of this plan passes: the generation's commit, then one
    per delete request (one per object on a folder, one per 1,000 on S3)."""
    assert run(["prune", "-c", str(config), "--before", cut, "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)["backups"]
    counts = [
        item[name]
        for name in (
            "segments_removed",
            "manifests_removed",
            "generations_removed",
            "orphans_removed",
            "leases_removed",
            "metadata_files_removed",
        )
    ]
    deletes = sum(1 for count in counts if count) if s3 else sum(counts)
    return deletes + (1 if item["new_generation"] is not None else 0)


@pytest.mark.slow
def test_prune_killed_anywhere_leaves_a_backup_that_validates_and_restores_its_window(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    store: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, backup_id = unique_name, "daily"
    settings = StorageSettings.model_validate(store)
    storage = open_storage(settings)
    create_topic(source_cluster, topic, partitions=2, config={"retention.ms": "-1"})
    for day in range(DAYS):
        stamp = BASE_TIME + day * DAY_MS
        records = [
            Record(key=b"k", value=b"v%d" % i, partition=i % 2, timestamp=stamp + i) for i in range(20)
        ]
        produce(source_cluster, topic, records)
        take_backup(source_cluster, settings, backup_id, [topic])
    source = {p: consume_all(source_cluster, topic, [p]) for p in (0, 1)}
    # A dead run's segment (first offset 3, below the committed end): garbage for the first prune.
    storage.put_bytes(f"{backup_id}/data/{topic}/0/{3:020d}-20230101T000000Z-deadbeef.parquet", b"junk")
    config = config_file(tmp_path / "prune.yaml", backup_id=backup_id, storage=store)
    seed = int(os.environ.get("KBACKUP_PRUNE_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    s3 = store["url"].startswith("s3://")
    kills = 0
    window = 0
    for stage in range(1, DAYS - 1):
        cut = iso(BASE_TIME + stage * DAY_MS)  # days 0 .. stage - 1 go
        new_window = stage * PER_PARTITION
        for _ in range(KILLS_PER_STAGE):
            steps = planned_steps(config, cut, capsys, s3)
            if steps == 0:
                break
            point = rng.randint(1, steps)
            done = subprocess.run(
                prune_command(config, cut),
                cwd=ROOT,
                env={
                    **os.environ,
                    "KBACKUP_NO_PROGRESS": "1",
                    "KBACKUP_CRASH_AT": f"prune:step@{point}",
                },
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            where = f"seed {seed}, stage {stage}, step {point} of {steps}"
            assert done.returncode == -signal.SIGKILL, (where, done.returncode, done.stderr[-2000:])
            kills += 1
            report = validate_backup(storage, backup_id, deep=True)
            assert report.errors == [], (where, report.errors)
            backup = BackupCatalog(storage).load(backup_id)
            starts = {key[1]: item.start_offset for key, item in backup.coverage().items()}
            assert set(starts.values()) <= {window, new_window}, (where, starts)
            held = read_backup(storage, backup_id)
            for partition in (0, 1):
                expected = [
                    r.consumed_offset for r in source[partition] if r.consumed_offset >= starts[partition]
                ]
                assert [r.offset for r in held if r.partition == partition] == expected, where
        assert run(["prune", "-c", str(config), "--before", cut, "--execute", "--json"]) == 0, (
            capsys.readouterr()
        )
        capsys.readouterr()
        window = new_window
        backup = BackupCatalog(storage).load(backup_id)
        assert {key[1]: item.start_offset for key, item in backup.coverage().items()} == {
            0: window,
            1: window,
        }
        # Nothing left that no manifest lists: no segment, no older manifest or generation.
        data = {info.key for info in storage.list(f"{backup_id}/data/")}
        assert data == referenced(storage, backup_id), stage
        increments = [
            int(info.key.rsplit("/", 1)[-1][:8]) for info in storage.list(f"{backup_id}/manifests/")
        ]
        assert min(increments) == backup.manifests[0].increment
        assert len(list(storage.list(f"{backup_id}/retention/"))) == 1
    assert kills >= 10, kills
    restored = f"{topic}-restored"
    args = ["restore", "-c", str(config), "-b", target_cluster.bootstrap_servers]
    assert run([*args, "--topic-mapping", f"{topic}={restored}"]) == 0, capsys.readouterr().err
    for partition in (0, 1):
        landed = restored_records(target_cluster, restored, partition, backup.source_cluster)
        expected = [r.consumed_offset for r in source[partition] if r.consumed_offset >= window]
        assert [r.source_offset for r in landed] == expected
