"""``list``, ``describe`` and ``validate`` on a real backup, as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.core.errors import NotFoundError
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.cli_run import RunCli
from tests.support.kafka_io import Record, commit_group, create_topic, end_offsets, produce


@pytest.fixture
def two_increment_backup(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, cli: RunCli
) -> tuple[Path, str]:
    # 2023 timestamps: time-based retention must not delete the records.
    create_topic(source_cluster, unique_name, partitions=2, config={"retention.ms": "-1"})
    produce(
        source_cluster,
        unique_name,
        [
            Record(key=b"k", value=b"v" * 10, partition=i % 2, timestamp=1_700_000_000_000 + i)
            for i in range(30)
        ],
    )
    commit_group(source_cluster, f"{unique_name}-g", {(unique_name, 0): 4})
    args = ["backup", "-b", source_cluster.bootstrap_servers, "--include", unique_name]
    args += ["--path", str(tmp_path), "--backup-id", "nightly", "--json"]
    code, out, err = cli(*args)
    assert code == 0, err
    first = json.loads(out)
    assert first["records"] == 30
    assert first["increments"][0]["increment"] == 0
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"w", partition=1)] * 5)
    code, out, err = cli(*args[:-1])
    assert code == 0, err
    assert "committed increment 1 of backup nightly: 5 records" in out
    return tmp_path, unique_name


def test_list_shows_each_backup(two_increment_backup: tuple[Path, str], cli: RunCli) -> None:
    store, topic = two_increment_backup
    code, out, _ = cli("list", "--path", str(store), "--json")
    assert code == 0
    [row] = json.loads(out)["backups"]
    assert row["backup_id"] == "nightly"
    assert row["increments"] == 2
    assert row["records"] == 35
    assert row["topics"] == [topic]
    assert row["bytes"] == sum(
        s.size_bytes
        for m in BackupCatalog(open_storage(str(store))).load("nightly").manifests
        for s in m.segments
    )
    code, out, _ = cli("list", "--path", str(store))
    assert code == 0
    assert "nightly" in out
    assert "35" in out


def test_describe_shows_ranges_and_groups(
    two_increment_backup: tuple[Path, str],
    source_cluster: LocalKafkaCluster,
    cli: RunCli,
) -> None:
    store, topic = two_increment_backup
    code, out, _ = cli("describe", "--path", str(store), "--backup-id", "nightly", "--json")
    assert code == 0
    info = json.loads(out)
    ends = end_offsets(source_cluster, topic, [0, 1])
    partitions = {(p["topic"], p["partition"]): p for p in info["partitions"]}
    assert partitions[(topic, 0)]["end_offset"] == ends[0]
    assert partitions[(topic, 1)]["end_offset"] == ends[1]
    assert partitions[(topic, 1)]["records"] == 20
    assert partitions[(topic, 0)]["min_timestamp"] == 1_700_000_000_000
    assert [i["records"] for i in info["increments"]] == [30, 5]
    groups = {g["group_id"]: g for g in info["consumer_groups"]["groups"]}
    assert groups[f"{topic}-g"]["offsets"][0]["offset"] == 4
    assert info["consumer_groups"]["increment"] == 1

    code, out, _ = cli("describe", "--path", str(store), "--backup-id", "nightly")
    assert code == 0
    assert f"{topic}/1: offsets 0 to {ends[1] - 1}" in out
    assert f"{topic}-g" in out


def test_validate_deep_finds_a_flipped_byte(two_increment_backup: tuple[Path, str], cli: RunCli) -> None:
    store, _ = two_increment_backup
    code, out, err = cli("validate", "--path", str(store), "--backup-id", "nightly", "--deep")
    assert code == 0, err
    assert "OK (2 increment(s), 35 records, 3 segment(s) re-read" in out

    segment = BackupCatalog(open_storage(str(store))).load("nightly").manifests[0].segments[0]
    path = store / "nightly" / segment.key
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    # The manifest alone still agrees with the stored sizes.
    code, _, _ = cli("validate", "--path", str(store), "--backup-id", "nightly")
    assert code == 0
    code, out, _ = cli("validate", "--path", str(store), "--backup-id", "nightly", "--deep", "--json")
    assert code == 8
    report = json.loads(out)
    assert report["ok"] is False
    assert any(segment.key in e and "SHA-256" in e for e in report["errors"])
    code, _, err = cli("validate", "--path", str(store), "--backup-id", "nightly", "--deep")
    assert code == 8
    assert "damaged" in err
    assert segment.key in err


def test_unknown_backup_id_is_not_found(two_increment_backup: tuple[Path, str], cli: RunCli) -> None:
    store, _ = two_increment_backup
    for command in ("describe", "validate"):
        code, _, err = cli(command, "--path", str(store), "--backup-id", "weekly")
        assert code == 9
        assert "no backup 'weekly'" in err


def test_list_of_a_folder_that_does_not_exist_is_not_found(
    two_increment_backup: tuple[Path, str], cli: RunCli
) -> None:
    """A mistyped path used to say 'no backups in ...' and exit 0, as if the backups were gone."""
    store, _ = two_increment_backup
    mistyped = store.parent / f"{store.name}-typo"
    code, out, err = cli("list", "--path", str(mistyped))
    assert code == NotFoundError.exit_code
    assert out == ""
    assert err.splitlines() == [
        f"kafka-backup: error: there is no folder {mistyped}",
        "kafka-backup: next step: check --path (relative to the current folder) or storage.url (relative "
        "to the config file's folder)",
    ]
    # An existing folder without backups is an answer, not an error.
    empty = store / "empty"
    empty.mkdir()
    code, out, _ = cli("list", "--path", str(empty))
    assert (code, out) == (0, f"no backups in {empty}\n")
