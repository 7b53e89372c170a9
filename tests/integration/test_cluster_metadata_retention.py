"""``validate`` and ``prune`` on the cluster-metadata files real backup runs write (issue 37).

One plain cluster for the module. Three daily increments, then a run killed after its metadata
file and before its manifest (``KBACKUP_CRASH_AT=backup:before-manifest``): the state of a backup
still running. ``validate --deep`` reads every named file and warns of the dead run's; a prune
that drops the first two increments deletes their files and keeps the dead run's (young, and its
lease live); once the next run commits that increment, the dead run's file can never be named and
the next prune removes it at once, lease or not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kbackup.core.times import iso_of_ms
from kbackup.format.catalog import BackupCatalog
from kbackup.format.layout import object_key
from kbackup.sandbox.kafka import LocalKafkaCluster, local_clusters
from kbackup.storage import LocalStorage
from tests.support.backup_io import take_backup
from tests.support.cli_run import RunCli
from tests.support.daily_backup import BASE_TIME, DAY_MS
from tests.support.kafka_io import Record, create_topic, produce

TOPIC = "orders"
BACKUP_ID = "nightly"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    with local_clusters(["metadata-retention"], tmp_path_factory.mktemp("kafka")) as [started]:
        yield started


def produce_day(cluster: LocalKafkaCluster, day: int) -> None:
    stamp = BASE_TIME + day * DAY_MS
    produce(
        cluster, TOPIC, [Record(key=b"k", value=b"d%d-%d" % (day, i), timestamp=stamp + i) for i in range(3)]
    )


def metadata_files(root: Path) -> set[str]:
    """The files under the backup's metadata/, from the folder itself."""
    return {str(path.relative_to(root)) for path in (root / BACKUP_ID / "metadata").iterdir()}


def named(storage: LocalStorage) -> dict[int, str]:
    """Each increment read now, and the file its manifest names."""
    return {
        manifest.increment: object_key(BACKUP_ID, manifest.cluster_metadata.key)
        for manifest in BackupCatalog(storage).load(BACKUP_ID).manifests
        if manifest.cluster_metadata is not None
    }


def validate(cli: RunCli, root: Path) -> dict[str, Any]:
    code, out, err = cli("validate", "-p", str(root), "--backup-id", BACKUP_ID, "--deep", "--json")
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    return report


def test_validate_and_prune_know_the_files_real_runs_write(
    cluster: LocalKafkaCluster, tmp_path: Path, cli: RunCli
) -> None:
    root = tmp_path / "store"
    storage = LocalStorage(root)
    create_topic(cluster, TOPIC, partitions=1, config={"retention.ms": "-1"})
    for day in range(3):
        produce_day(cluster, day)
        take_backup(cluster, root, BACKUP_ID, [TOPIC])
    committed = named(storage)
    assert sorted(committed) == [0, 1, 2]

    # A run killed after its metadata file, before its manifest: a backup still running.
    produce_day(cluster, 3)
    killed = subprocess.run(
        [sys.executable, "-m", "kbackup", "backup", "-b", cluster.bootstrap_servers, "-p", str(root),
         "--backup-id", BACKUP_ID, "--include", TOPIC],
        env={**os.environ, "KBACKUP_CRASH_AT": "backup:before-manifest", "KBACKUP_NO_PROGRESS": "1"},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr
    [dead] = metadata_files(root) - set(committed.values())
    assert dead.startswith(f"{BACKUP_ID}/metadata/00000003-")

    report = validate(cli, root)
    assert (report["errors"], report["cluster_metadata_checked"]) == ([], 3)
    assert any(dead in line for line in report["warnings"]), report["warnings"]

    # Days 0 and 1 go, and their files with them; the dead run's file stays (young, leased).
    before = iso_of_ms(BASE_TIME + 2 * DAY_MS)
    prune = ["prune", "-p", str(root), "--backup-id", BACKUP_ID, "--before", before, "--execute", "--json"]
    code, out, err = cli(*prune)
    assert code == 0, err
    [item] = json.loads(out)["backups"]
    assert (item["metadata_files_removed"], item["manifests_removed"]) == (2, 2), item
    assert item["orphans_kept"] >= 2, item  # its segment and its metadata file
    assert metadata_files(root) == {committed[2], dead}

    # The next run commits increment 3 with a file of its own: the dead run's can never be named.
    take_backup(cluster, root, BACKUP_ID, [TOPIC])
    after = named(storage)
    assert sorted(after) == [2, 3]
    assert after[3] != dead
    code, out, err = cli("prune", "-p", str(root), "--backup-id", BACKUP_ID, "--orphan-grace", "1h",
                         "--execute", "--json")  # fmt: skip
    assert code == 0, err
    assert metadata_files(root) == set(after.values())
    report = validate(cli, root)
    assert (report["errors"], report["warnings"], report["cluster_metadata_checked"]) == ([], [], 2)
