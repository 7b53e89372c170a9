"""``kafka-backup prune`` on backups of a real cluster, on a folder and on moto's S3 (issue 22).

A backup of five increments, one per simulated day of record timestamps, is pruned to its last
two days: what remains validates deeply, restores to exactly the source records of the kept
window, and a group committed inside the removed days is reported as a recovery gap. Rules across
backups remove whole backup ids (never one a running backup holds). Bad input fails with one line
and its exit code, and removes nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from kbackup.backup.inspect import validate_backup
from kbackup.core.config import StorageSettings
from kbackup.core.errors import (
    ConfigError,
    NotFoundError,
    PreconditionError,
    RecoveryGapError,
    StorageError,
    UsageError,
)
from kbackup.format.catalog import BackupCatalog
from kbackup.format.generations import Lease, lease_key
from kbackup.prune import execute as prune_execute
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import Storage, open_storage
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import take_backup
from tests.support.cli_run import RunCli
from tests.support.config_files import config_file
from tests.support.daily_backup import BASE_TIME, DAY_MS, daily_backup
from tests.support.faulty_proxy import FaultyProxy
from tests.support.kafka_io import Record, commit_group, consume_all, create_topic, produce
from tests.support.restored_topics import restored_records


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path, unique_name: str) -> dict[str, Any]:
    """The ``storage:`` section of a fresh location: a folder, or a prefix on moto's S3."""
    if request.param == "folder":
        return {"url": str(tmp_path / "store")}
    s3_server: S3Server = request.getfixturevalue("s3_server")
    return s3_server.storage_settings(TEST_BUCKET, f"prune-{unique_name}")


def storage_of(section: dict[str, Any]) -> Storage:
    return open_storage(StorageSettings.model_validate(section))


def committed_on(cluster: LocalKafkaCluster, group: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    try:
        return int(consumer.committed([TopicPartition(topic, partition)], timeout=10)[0].offset)
    finally:
        consumer.close()


def write_config(tmp_path: Path, section: dict[str, Any], backup_id: str, **extra: Any) -> str:
    path = config_file(
        tmp_path / f"prune-{backup_id}.yaml", **{"backup_id": backup_id, "storage": section, **extra}
    )
    return str(path)


@pytest.mark.parametrize("policy", ["before", "max-total-bytes"])
def test_a_pruned_window_restores_on_its_own(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    store: dict[str, Any],
    policy: str,
    cli: RunCli,
) -> None:
    """``--before`` the middle of day 2, or ``--max-total-bytes`` what days 3 and 4 take: either
    way days 0-2 go, and what remains restores to exactly the source's records from day 3 on."""
    topic = unique_name
    daily_backup(source_cluster, store, topic, "daily")
    # A group that had read only into day 1: the prune leaves it a recovery gap.
    commit_group(source_cluster, f"{unique_name}-g", {(topic, 0): 30, (topic, 1): 99})
    take_backup(source_cluster, StorageSettings.model_validate(store), "daily", [topic])  # its snapshot
    config = write_config(tmp_path, store, "daily")
    cut = "2023-11-17T10:13:20Z"  # BASE_TIME + 2.5 days: days 0, 1 and 2 go
    storage = storage_of(store)
    before = {info.key for info in storage.list("daily/")}
    if policy == "before":
        rule = ["--before", cut]
    else:
        held = [s for m in BackupCatalog(storage).load("daily").manifests for s in m.segments]
        last_two_days = sum(s.size_bytes for s in held if s.min_timestamp >= BASE_TIME + 3 * DAY_MS)
        rule = ["--max-total-bytes", str(last_two_days)]

    code, out, err = cli("prune", "-c", config, *rule, "--json")
    assert code == 0, err
    plan = json.loads(out)
    assert {info.key for info in storage.list("daily/")} == before  # a plan removes nothing
    (item,) = plan["backups"]
    assert item["action"] == "trim"
    assert plan["executed"] is None
    windows = {(w["topic"], w["partition"]): w for w in item["windows"]}
    # Per partition, 3 days of 20 records go; the window starts at day 3's first offset (60).
    assert {
        key: (w["start_before"], w["start_after"], w["records_removed"]) for key, w in windows.items()
    } == {
        (topic, 0): (0, 60, 60),
        (topic, 1): (0, 60, 60),
    }
    gaps = {
        (g["group_id"], g["partition"], g["committed_offset"], g["window_start"]) for g in item["group_gaps"]
    }
    assert gaps == {(f"{unique_name}-g", 0, 30, 60)}  # partition 1's offset 99 is inside the window
    assert item["manifests_removed"] == 3  # increments 0-2 hold nothing kept any more

    code, out, err = cli("prune", "-c", config, *rule, "--execute")
    assert code == 0, err
    assert "recovery gap: group" in out
    catalog = BackupCatalog(storage)
    backup = catalog.load("daily")
    assert [m.increment for m in backup.manifests] == [3, 4, 5]
    coverage = backup.coverage()
    assert {key: (c.start_offset, c.end_offset, c.record_count) for key, c in coverage.items()} == {
        (topic, 0): (60, 100, 40),
        (topic, 1): (60, 100, 40),
    }
    code, out, err = cli("validate", "-c", config, "--deep", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["errors"] == []
    assert not [w for w in report["warnings"] if "in no manifest" in w]  # no garbage left behind

    restored = f"{topic}-restored"
    code, _, err = cli(
        "restore",
        "-c",
        config,
        "-b",
        target_cluster.bootstrap_servers,
        "--topic-mapping",
        f"{topic}={restored}",
    )
    assert code == 0, err
    source_cluster_id = backup.source_cluster
    for partition in (0, 1):
        landed = restored_records(target_cluster, restored, partition, source_cluster_id)
        source = [r for r in consume_all(source_cluster, topic, [partition]) if r.consumed_offset >= 60]
        assert [r.source_offset for r in landed] == [r.consumed_offset for r in source]
    # describe and list show the window after retention.
    code, out, err = cli("describe", "-c", config, "--json")
    assert code == 0, err
    described = json.loads(out)
    assert {(p["topic"], p["partition"], p["start_offset"]) for p in described["partitions"]} == {
        (topic, 0, 60),
        (topic, 1, 60),
    }
    code, out, err = cli("list", "-c", config, "--json")
    assert code == 0, err
    (row,) = json.loads(out)["backups"]
    assert (row["restorable_from_timestamp"], row["retention_generation"]) == (BASE_TIME + 3 * DAY_MS, 1)
    # The same policy again finds nothing more to do.
    code, out, err = cli("prune", "-c", config, *rule, "--json")
    assert code == 0, err
    (again,) = json.loads(out)["backups"]
    assert (again["action"], again["segments_removed"], again["manifests_removed"]) == ("keep", 0, 0)


def test_rules_across_backups_remove_whole_backups_but_never_a_leased_one(
    source_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    topic = unique_name
    create_topic(source_cluster, topic, partitions=1)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v")] * 5)
    section = {"url": str(tmp_path / "store")}
    for backup_id in ("night-1", "night-2", "night-3", "night-4"):
        take_backup(source_cluster, StorageSettings.model_validate(section), backup_id, [topic])
    storage = storage_of(section)
    # night-1 is being written by a (pretend) running backup: its lease is live.
    lease = Lease(backup_id="night-1", run_id="r1", holder="host:1", acquired_at="x", expires_at=4102444800.0)
    storage.put_bytes(lease_key("night-1", "r1"), lease.to_json_bytes())
    path = str(tmp_path / "store")

    code, out, err = cli("prune", "-p", path, "--all", "--keep-last", "2", "--execute", "--json")
    assert code == 0, err
    actions = {item["backup_id"]: item["action"] for item in json.loads(out)["backups"]}
    assert actions == {"night-1": "keep", "night-2": "remove", "night-3": "keep", "night-4": "keep"}
    assert BackupCatalog(storage).backup_ids() == ["night-1", "night-3", "night-4"]
    assert not list(storage.list("night-2/"))

    # keep-last 0 removes every backup that is not leased: refused without --force.
    storage.delete(lease_key("night-1", "r1"))
    code, out, err = cli("prune", "-p", path, "--all", "--keep-last", "0", "--execute")
    assert code == PreconditionError.exit_code
    assert "would remove every backup" in err
    assert BackupCatalog(storage).backup_ids() == ["night-1", "night-3", "night-4"]

    # The refused plan under --json: one document on stdout, the plan and the error in it.
    code, out, err = cli("prune", "-p", path, "--all", "--keep-last", "0", "--json")
    assert code == PreconditionError.exit_code
    refused = json.loads(out)
    assert refused["error"]["exit_code"] == PreconditionError.exit_code
    assert "would remove every backup" in refused["error"]["message"]
    assert {"night-1", "night-3", "night-4"} <= {item["backup_id"] for item in refused["backups"]}
    assert refused["executed"] is None


def test_bad_input_fails_with_one_line_and_removes_nothing(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, cli: RunCli
) -> None:
    topic = unique_name
    create_topic(source_cluster, topic, partitions=1)
    # Stamped in 2023, so that "older than 1s" holds for every record however fast the test runs
    # (stamped now, a run reaching the last case within a second of producing had nothing to remove).
    produce(source_cluster, topic, [Record(key=b"k", value=b"v", timestamp=1_700_000_000_000)] * 5)
    section = {"url": str(tmp_path / "store")}
    take_backup(source_cluster, StorageSettings.model_validate(section), "b", [topic])
    storage = storage_of(section)
    before = sorted(info.key for info in storage.list(""))
    path = str(tmp_path / "store")
    cases = [
        (
            ["--backup-id", "b", "--older-than", "3 fortnights"],
            ConfigError.exit_code,
            "--older-than 3 fortnights",
        ),
        (
            ["--backup-id", "b", "--older-than", "1d", "--before", "2024-01-01"],
            ConfigError.exit_code,
            "give one",
        ),
        (["--backup-id", "b"], UsageError.exit_code, "no retention rule"),
        (["--backup-id", "nope", "--keep-last", "1"], NotFoundError.exit_code, "no backup 'nope'"),
        (["--backup-id", "b", "--max-total-bytes", "12 parsecs"], ConfigError.exit_code, "not a size"),
        # Every record is older than a day from now (2023 is long gone): everything would go.
        (["--backup-id", "b", "--older-than", "1s", "--execute"], PreconditionError.exit_code, "--force"),
    ]
    for args, expected, words in cases:
        code, _out, err = cli("prune", "-p", path, *args)
        assert code == expected, (args, err)
        lines = err.strip().splitlines()
        assert words in lines[0], (args, err)
        assert len(lines) <= 2, err  # the error, and at most its next step
    assert sorted(info.key for info in storage.list("")) == before


@pytest.mark.slow
def test_a_three_phase_restore_of_a_pruned_backup_reports_the_gap_and_loses_nothing_else(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    """Group g had read partition 0 up to 30 and partition 1 up to 99; the prune keeps offsets 60 and
    up. Without --accept-gap the run stops at its verify phase naming the gap; with it, g resumes at
    the first kept record of partition 0 (30 unprocessed offsets went with the prune, reported) and
    exactly at source offset 99 of partition 1."""
    topic, group = unique_name, f"{unique_name}-g"
    store = {"url": str(tmp_path / "store")}
    daily_backup(source_cluster, store, topic, "daily")
    commit_group(source_cluster, group, {(topic, 0): 30, (topic, 1): 99})
    take_backup(source_cluster, StorageSettings.model_validate(store), "daily", [topic])
    restored = f"{topic}-restored"
    config = write_config(
        tmp_path,
        store,
        "daily",
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        restore={"topic_mapping": {topic: restored}},
        offset_reset={"snapshot_dir": str(tmp_path / "snapshots"), "groups": [group]},
        three_phase={"state_dir": str(tmp_path / "state")},
    )
    code, _, err = cli("prune", "-c", config, "--before", "2023-11-17T10:13:20Z", "--execute")
    assert code == 0, err

    code, _, err = cli("three-phase-restore", "-c", config)
    assert code == RecoveryGapError.exit_code, err
    assert "30 source offset(s) the group had not processed were removed from the backup by a prune" in err
    code, out, err = cli("three-phase-restore", "-c", config, "--accept-gap", "--json")
    assert code == 0, err
    phases = json.loads(out)["phases"]
    (gap,) = phases["verify"]["recovery_gaps"]  # the verify of the rerun (restore and reset resumed)
    assert gap.startswith(f"{group} {restored}/0: 30 source offset(s) the group had not processed")
    source_cluster_id = BackupCatalog(storage_of(store)).load("daily").source_cluster
    for partition, resume_at in ((0, 60), (1, 99)):
        landed = restored_records(target_cluster, restored, partition, source_cluster_id)
        assert [r.source_offset for r in landed] == list(range(60, 100))  # nothing else lost
        expected = next(r.target_offset for r in landed if r.source_offset == resume_at)
        assert committed_on(target_cluster, group, restored, partition) == expected


#: A storage retry's warning on stderr: ``HH:MM:SS WARNING kbackup.storage.s3: ...; trying again in 0.5s``.
RETRY_WARNING = re.compile(r"^\d\d:\d\d:\d\d WARNING kbackup\.storage\.s3: .*; trying again in [0-9.]+s$")


def test_storage_going_down_mid_prune_fails_with_one_line_and_a_rerun_finishes(
    source_cluster: LocalKafkaCluster,
    s3_server: S3Server,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S3 stops answering right after the prune committed its generation, before its first delete:
    the prune ends with exit code 7 and one line naming the store; the backup still validates
    deeply (through the committed generation) and a rerun, the store back, removes the rest."""
    topic = unique_name
    direct = s3_server.storage_settings(TEST_BUCKET, f"down-{unique_name}")
    daily_backup(source_cluster, direct, topic, "daily")
    proxy = FaultyProxy(upstream_port=s3_server.port)
    try:
        config = write_config(
            tmp_path, {**direct, "endpoint_url": proxy.endpoint_url, "retry_timeout_secs": 2}, "daily"
        )
        steps = 0

        def step(name: str) -> None:
            nonlocal steps
            steps += 1
            if name == "prune:step" and steps == 2:  # the generation is committed, no delete sent yet
                proxy.set_mode("reset")

        monkeypatch.setattr(prune_execute, "crash_point", step)
        code, out, err = cli("prune", "-c", config, "--before", "2023-11-17T10:13:20Z", "--execute")
        assert code == StorageError.exit_code, out + err
        # Before giving up the prune may say that it retries, if the first attempt failed within
        # retry_timeout_secs (how fast a reset connection fails depends on the machine's load).
        retries = [line for line in err.strip().splitlines() if RETRY_WARNING.search(line)]
        lines = [line for line in err.strip().splitlines() if not RETRY_WARNING.search(line)]
        assert all(f"s3://{TEST_BUCKET}/down-" in line for line in retries), err
        assert lines[0].startswith("kafka-backup: error: "), err
        assert f"s3://{TEST_BUCKET}/down-" in lines[0], err
        assert len(lines) <= 2, err
        assert proxy.faults_served > 0
        storage = storage_of(direct)
        assert validate_backup(storage, "daily", deep=True).errors == []
        backup = BackupCatalog(storage).load("daily")
        assert {item.start_offset for item in backup.coverage().values()} == {60}  # the new window holds
        proxy.set_mode("forward")
        code, out, err = cli("prune", "-c", config, "--before", "2023-11-17T10:13:20Z", "--execute", "--json")
        assert code == 0, err
        report = validate_backup(storage, "daily", deep=True)
        assert report.errors == []
        assert not [w for w in report.warnings if "in no manifest" in w]
        assert [m.increment for m in BackupCatalog(storage).load("daily").manifests] == [3, 4]
    finally:
        proxy.close()


def test_backup_retention_is_applied_after_the_increment_it_commits(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, cli: RunCli
) -> None:
    """A backup run whose config has ``backup.retention`` commits its increment, then prunes as
    ``prune --execute`` would; an empty ``backup.retention`` is refused before anything is copied."""
    topic = unique_name
    store = {"url": str(tmp_path / "store")}
    daily_backup(source_cluster, store, topic, "daily")
    produce(
        source_cluster, topic, [Record(key=b"new", value=b"v", partition=0, timestamp=BASE_TIME + 6 * DAY_MS)]
    )
    source = {"bootstrap_servers": [source_cluster.bootstrap_servers], "topics": {"include": [topic]}}
    empty = write_config(tmp_path, store, "daily", source=source, backup={"retention": {}})
    code, _, err = cli("backup", "-c", empty)
    assert code == ConfigError.exit_code, err
    assert "backup.retention has no rule" in err
    assert [m.increment for m in BackupCatalog(storage_of(store)).load("daily").manifests] == [0, 1, 2, 3, 4]

    config = write_config(
        tmp_path, store, "daily", source=source, backup={"retention": {"before": "2023-11-17T10:13:20Z"}}
    )
    code, out, err = cli("-v", "backup", "-c", config)
    assert code == 0, err
    assert "committed increment 5 of backup daily" in out
    backup = BackupCatalog(storage_of(store)).load("daily")
    assert [m.increment for m in backup.manifests] == [3, 4, 5]
    assert {key[1]: item.start_offset for key, item in backup.coverage().items()} == {0: 60, 1: 60}
    assert backup.retention is not None
    assert backup.retention.policy["before"] == "2023-11-17T10:13:20Z"
    assert "retention removed" in err
