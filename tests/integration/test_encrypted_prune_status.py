"""``prune`` and ``status`` on an encrypted backup (docs/security.md, docs/prune.md, docs/status.md;
issue 33).

With the key they work as on a plain backup: status gives the recovery point and the lag the test
knows from what it produced and when it backed up (and the same windows and lag as a plain backup of
the same records); prune removes what its policy says, judged from the folder listed by the test and
from the records read back with the key. Without a key both refuse with exit code 18 (an encrypted
backup is never read without its key: docs/format.md, "Readers of version 2", and exit code 18 in
docs/exit-codes.md) and change nothing in the store.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from kbackup.core.config import StorageSettings
from kbackup.core.errors import EncryptionKeyError
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.backup_io import read_backup, take_backup
from tests.support.cli_run import RunCli
from tests.support.config_files import config_file
from tests.support.daily_backup import BASE_TIME, DAY_MS, PER_DAY, daily_backup
from tests.support.encryption_keys import new_key, spec
from tests.support.folders import folder_bytes
from tests.support.kafka_io import Record, consume_all, produce

#: BASE_TIME + 2.5 days: the records of days 0, 1 and 2 (offsets 0..59 of each partition) go.
CUT = "2023-11-17T10:13:20Z"
LATE = 7


def files(root: Path) -> dict[str, bytes]:
    return dict(folder_bytes(root))


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def windows(backup: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (p["topic"], p["partition"], p["first_offset"], p["last_offset"], p["first_time"], p["last_time"],
         p["records"], p["live_end_offset"], p["lag_records"])
        for p in backup["partitions"]
    ]  # fmt: skip


def refused_without_key(cli: RunCli, root: Path, *args: str) -> None:
    """Exit 18, one error line saying the backup is encrypted and no key is configured, nothing
    printed that could pass for a result, and the store unchanged to the byte."""
    before = files(root)
    for as_json in ([], ["--json"]):
        code, out, err = cli(*args, *as_json)
        assert code == EncryptionKeyError.exit_code, (args, code, out, err)
        lines = err.strip().splitlines()
        assert lines[0].startswith("kafka-backup: error: backup daily in "), err
        assert "is encrypted" in lines[0], err
        assert "no key is configured" in lines[0], err
        assert len(lines) <= 2, err
        if as_json:
            assert json.loads(out)["error"]["exit_code"] == EncryptionKeyError.exit_code
        else:
            assert out == "", out
        assert files(root) == before


def test_status_and_prune_of_an_encrypted_backup_with_and_without_the_key(
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    cli: RunCli,
) -> None:
    topic = unique_name
    key = new_key(tmp_path)
    capsys.readouterr()  # keygen's line
    root = tmp_path / "encrypted"
    encrypted = {"url": str(root), "encryption": key.model_dump(exclude_none=True)}
    daily_backup(source_cluster, encrypted, topic, "daily")  # increments 0-4, one per day of records
    produce(
        source_cluster,
        topic,
        [Record(key=b"d5-%d" % i, value=b"v", partition=i % 2, timestamp=BASE_TIME + 5 * DAY_MS + i)
         for i in range(PER_DAY)],
    )  # fmt: skip
    committed_from = time.time()
    take_backup(source_cluster, StorageSettings.model_validate(encrypted), "daily", [topic])  # increment 5
    committed_by = time.time()
    plain = tmp_path / "plain"
    take_backup(source_cluster, plain, "daily", [topic])  # the same records, unencrypted
    produce(source_cluster, topic, [Record(key=b"late", value=b"v", partition=0)] * LATE)
    assert (root / "daily" / "keys").is_dir()  # it is encrypted
    config = config_file(tmp_path / "backup.yaml", backup_id="daily", storage=encrypted)
    with_key = ["--encryption-key", spec(key)]
    servers = ["-b", source_cluster.bootstrap_servers]

    # Without the key: refused, and nothing changes.
    refused_without_key(cli, root, "status", "-p", str(root))
    refused_without_key(
        cli, root, "status", "-p", str(root), "--backup-id", "daily", *servers, "--max-age", "1h"
    )
    for prune_args in (
        ["--backup-id", "daily", "--before", CUT],
        ["--backup-id", "daily", "--before", CUT, "--execute"],
        ["--all", "--keep-last", "1", "--execute"],
        ["--all", "--keep-last", "0", "--execute", "--force"],
    ):
        refused_without_key(cli, root, "prune", "-p", str(root), *prune_args)

    # status with the key: the recovery point the test measured, and the lag it produced.
    asked_from = time.time()
    code, out, err = cli("status", "-p", str(root), *with_key, *servers, "--max-lag", "100", "--json")
    asked_by = time.time()
    assert code == 0, err
    (status,) = json.loads(out)["backups"]
    assert (status["backup_id"], status["increments"], status["last_increment"]) == ("daily", 6, 5)
    assert committed_from <= epoch(status["last_committed_at"]) <= committed_by
    assert asked_from - committed_by <= status["age_seconds"] <= asked_by - committed_from
    assert status["records"] == 6 * PER_DAY
    assert status["lag_records"] == LATE
    assert status["kafka_cluster_id"] == source_cluster.cluster_id
    assert [
        (p["partition"], p["first_offset"], p["last_offset"], p["lag_records"]) for p in status["partitions"]
    ] == [
        (0, 0, 119, LATE),
        (1, 0, 119, 0),
    ]
    code, out, err = cli("status", "-p", str(plain), *servers, "--json")
    assert code == 0, err
    (plain_status,) = json.loads(out)["backups"]
    assert windows(status) == windows(plain_status)  # as on a plain backup of the same records
    code, _out, err = cli("status", "-c", str(config), *servers, "--max-lag", str(LATE - 1))
    assert code == 16, err  # the key from the config; the lag alert works as on a plain backup
    assert f"{LATE} record(s) behind the source, 1 over --max-lag {LATE - 1}" in err

    # prune with the key (from the config): the plan removes nothing, its execution days 0-2.
    storage = open_storage(StorageSettings.model_validate(encrypted))
    manifests = BackupCatalog(storage).load("daily").manifests
    old_segments = {f"daily/{s.key}" for m in manifests[:3] for s in m.segments}
    # Each dropped increment's cluster-metadata file goes with it.
    old_metadata = {f"daily/{m.cluster_metadata.key}" for m in manifests[:3] if m.cluster_metadata}
    assert len(old_metadata) == 3
    assert old_segments
    assert all(s.max_timestamp < BASE_TIME + 3 * DAY_MS for m in manifests[:3] for s in m.segments)
    before = files(root)
    code, out, err = cli("prune", "-c", str(config), "--before", CUT, "--json")
    assert code == 0, err
    assert files(root) == before
    (item,) = json.loads(out)["backups"]
    assert (item["action"], item["segments_removed"], item["manifests_removed"]) == (
        "trim",
        len(old_segments),
        3,
    )
    assert {(w["partition"], w["start_before"], w["start_after"]) for w in item["windows"]} == {
        (0, 0, 60),
        (1, 0, 60),
    }
    code, out, err = cli("prune", "-c", str(config), "--before", CUT, "--execute")
    assert code == 0, err
    after = files(root)
    gone = set(before) - set(after)
    assert gone == old_segments | old_metadata | {f"daily/manifests/{n:08d}.json" for n in range(3)}
    assert set(after) - set(before) == {"daily/retention/00000001.json"}
    assert all(after[name] == before[name] for name in after if name in before)
    assert {name for name in after if name.startswith("daily/keys/")}  # the keyring stays
    # What is left reads back, with the key, as exactly the source's records from day 3 on.
    backup = BackupCatalog(storage).load("daily")
    assert [m.increment for m in backup.manifests] == [3, 4, 5]
    source = [r for r in consume_all(source_cluster, topic, [0, 1]) if 60 <= r.consumed_offset < 120]
    order = lambda r: (r.partition, r.offset)  # noqa: E731
    assert sorted(read_backup(storage, "daily"), key=order) == sorted(source, key=order)
    assert cli("validate", "-c", str(config), "--deep")[0] == 0
    code, out, err = cli("status", "-c", str(config), "--json")
    assert code == 0, err
    assert [(p["first_offset"], p["records"]) for p in json.loads(out)["backups"][0]["partitions"]] == [
        (60, 60),
        (60, 60),
    ]

    # A rule across backups: a newer encrypted backup stays, the older one goes whole (keys too).
    take_backup(source_cluster, StorageSettings.model_validate(encrypted), "newer", [topic])
    before = files(root)
    code, out, err = cli(
        "prune", "-p", str(root), *with_key, "--all", "--keep-last", "1", "--execute", "--json"
    )
    assert code == 0, err
    assert {b["backup_id"]: b["action"] for b in json.loads(out)["backups"]} == {
        "daily": "remove",
        "newer": "keep",
    }
    after = files(root)
    assert set(before) - set(after) == {name for name in before if name.startswith("daily/")}
    assert after == {name: data for name, data in before.items() if name.startswith("newer/")}
    code, out, err = cli("status", "-p", str(root), *with_key, "--json")
    assert code == 0, err
    assert [b["backup_id"] for b in json.loads(out)["backups"]] == ["newer"]
