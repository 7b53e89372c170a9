"""``three-phase-restore`` through the CLI: the flags restore has, ``--dry-run`` (issue 18, item 9), and
the runbook's verify step after a repartitioned run (item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from kbackup.cli.main import run
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import take_backup
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, admin, create_topic, produce
from tests.support.kafka_io import group_positions as committed
from tests.support.oracles import reference_position
from tests.support.restored_topics import restored_records
from tests.support.three_phase_runs import GROUPS, fill_and_back_up


def topics_on(cluster: LocalKafkaCluster) -> set[str]:
    return set(admin(cluster).list_topics(timeout=10).topics)


def files_under(folder: Path) -> dict[str, float]:
    return {str(path): path.stat().st_mtime for path in folder.rglob("*") if path.is_file()}


@pytest.fixture
def two_topic_backup(source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path) -> dict[str, str]:
    """A backup of two topics: ``orders`` (2 partitions, 300 records, the groups of GROUPS) and
    ``other`` (1 partition, a group committed only there)."""
    orders, other = f"{unique_name}-orders", f"{unique_name}-other"
    store = tmp_path / "store"
    create_topic(source_cluster, orders, partitions=2)
    produce(source_cluster, orders, [Record(key=b"k%d" % i, value=b"v", partition=i % 2) for i in range(300)])
    create_topic(source_cluster, other)
    produce(source_cluster, other, [Record(key=b"k", value=b"o%d" % i, partition=0) for i in range(10)])
    for group, offsets in {**GROUPS, "other-reader": {}}.items():
        consumer = Consumer(
            {"bootstrap.servers": source_cluster.bootstrap_servers, "group.id": f"{orders}-{group}"}
        )
        on = [TopicPartition(orders, p, o) for p, o in offsets.items()] or [TopicPartition(other, 0, 4)]
        consumer.commit(offsets=on, asynchronous=False)
        consumer.close()
    take_backup(source_cluster, store, "nightly", [orders, other])
    return {"orders": orders, "other": other, "store": str(store)}


def test_three_phase_restore_takes_restores_flags_and_dry_runs_every_phase(
    two_topic_backup: dict[str, str],
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    orders, other, store = two_topic_backup["orders"], two_topic_backup["other"], two_topic_backup["store"]
    restored = f"{orders}-restored"
    work = tmp_path / "work"
    work.mkdir()
    # The file names another backup, another storage and the source as the target: the flags win.
    config = config_file(
        work / "recover.yaml",
        backup_id="not-this-one",
        storage={"url": str(tmp_path / "no-such-store")},
        target={"bootstrap_servers": [source_cluster.bootstrap_servers]},
        restore={"topic_mapping": {orders: restored}},
        offset_reset={"snapshot_dir": str(work / "snapshots")},
        three_phase={
            "state_dir": str(work / "state"),
            "build_mapping": "when-needed",
            "group_prefix": "moved-",
        },
    )
    flags = ["-c", str(config), "--backup-id", "nightly", "--path", store,
             "-b", target_cluster.bootstrap_servers, "--topic", orders]  # fmt: skip
    before = files_under(tmp_path)

    # Before anything exists on the target: the restore's plan, no mapping, the reset after the restore.
    assert run(["three-phase-restore", *flags, "--dry-run"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"into {target_cluster.bootstrap_servers}" in out
    assert f"topic {orders} -> {restored}: create with 2 partition(s)" in out
    assert f"topic {other}" not in out
    assert "would write 300 record(s)" in out
    assert "mapping:\n  not built: no topic is repartitioned" in out
    assert f"reset:\n  planned during the run: {restored} do not exist on the target yet" in out
    assert "  would move 3 group(s) as moved-<group> from the source offsets of the backup taken" in out
    assert run(["three-phase-restore", *flags, "--dry-run", "--json"]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert list(preview["phases"]) == ["restore", "mapping", "reset", "verify"]
    assert preview["phases"]["restore"]["records_to_write"] == 300
    assert files_under(tmp_path) == before, "a dry run writes no file"
    assert restored not in topics_on(target_cluster)

    # Restored by the restore command with the same flags: the dry run now shows the reset's plan.
    assert run(["restore", *flags]) == 0
    capsys.readouterr()
    assert run(["three-phase-restore", *flags, "--dry-run"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "an earlier run of this restore got part of the way: 0 record(s) left to write" in out
    # 3 groups x 2 partitions, none committed on the target yet; the group of the other topic is left.
    assert "3 group(s), 6 partition(s), 6 change(s), 0 record(s) to re-read" in out
    assert f"warning: group(s) {orders}-other-reader committed only on topics that were not restored" in out
    assert "then commit 6 offset(s)" in out
    assert run(["three-phase-restore", *flags, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["phases"]["reset"]["plan"]
    assert {group["group_id"] for group in plan["groups"]} == {f"moved-{orders}-{group}" for group in GROUPS}
    # With build_mapping: always, the scan of the restored topic as it is now.
    always = work / "always.yaml"
    always.write_text(config.read_text().replace("build_mapping: when-needed", "build_mapping: always"))
    assert run(["three-phase-restore", *flags, "-c", str(always), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        f"mapping:\n  would scan {restored} with Spark (three_phase.build_mapping: always; before the "
        "groups move)"
    ) in out
    assert "  2 partition(s) holding 30" in out  # 300 records and the transactions' commit markers
    assert not (work / "state").exists()
    assert not (work / "snapshots").exists()
    assert all(
        offset is None
        for group in GROUPS
        for offset in committed(target_cluster, f"moved-{orders}-{group}", restored, [0, 1]).values()
    )

    # The run with the same flags moves the groups of the restored topic, and no other.
    assert run(["three-phase-restore", *flags, "--json"]) == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    assert summary["phases"]["reset"]["groups"] == 3
    assert other not in topics_on(target_cluster)
    for partition in (0, 1):
        records = restored_records(target_cluster, restored, partition, source_cluster.cluster_id)
        assert len(records) == 150
        for group, offsets in GROUPS.items():
            position = committed(target_cluster, f"moved-{orders}-{group}", restored, [partition])[partition]
            assert position == reference_position(records, {(orders, partition): offsets.get(partition, 0)})

    # Everything done: the dry run says so, and still writes nothing.
    before = files_under(tmp_path)
    assert run(["three-phase-restore", *flags, "--dry-run"]) == 0
    out = capsys.readouterr().out
    for phase in ("restore", "mapping", "reset", "verify"):
        assert f"{phase}:\n  done in an earlier run, skipped" in out
    assert files_under(tmp_path) == before


@pytest.mark.slow
def test_the_verify_step_after_a_repartitioned_three_phase_restore_plans_from_its_mapping(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """The runbook's verify step, ``offset-reset plan -c recover.yaml``, after ``three-phase-restore -c
    recover.yaml`` restored a topic into more partitions: it plans from the mapping the run wrote and
    finds every group where the run put it."""
    topic = f"{unique_name}-orders"
    store = tmp_path / "store"
    fill_and_back_up(source_cluster, topic, store)
    config = config_file(
        tmp_path / "recover.yaml",
        backup_id="nightly",
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage={"url": str(store)},
        restore={
            "topic_mapping": {topic: f"{topic}-restored"},
            "repartition": True,
            "target_partitions": {topic: 3},
        },
        offset_reset={"snapshot_dir": str(tmp_path / "snapshots")},
        three_phase={"state_dir": str(tmp_path / "state"), "build_mapping": "when-needed"},
    )
    preview = subprocess.run(
        [sys.executable, "-m", "kbackup", "three-phase-restore", "-c", str(config), "--dry-run"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert preview.returncode == 0, preview.stderr[-3000:]
    assert (
        f"would scan {topic}-restored with Spark (repartitioned: {topic}-restored; before the groups move)"
    ) in preview.stdout
    assert f"planned during the run: {topic}-restored do not exist on the target yet" in preview.stdout
    assert not (tmp_path / "state").exists()
    restored = subprocess.run(
        [sys.executable, "-m", "kbackup", "three-phase-restore", "-c", str(config)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert restored.returncode == 0, restored.stderr[-3000:]
    assert "built True" in restored.stdout
    after = tmp_path / "after.json"
    verify = subprocess.run(
        [sys.executable, "-m", "kbackup", "offset-reset", "plan", "-c", str(config), "--output", str(after)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stderr[-3000:]
    assert f"{len(GROUPS)} group(s), 9 partition(s), 0 change(s)" in verify.stdout
    rows = [row for group in json.loads(after.read_text())["groups"] for row in group["partitions"]]
    assert {row["method"] for row in rows} == {"mapping"}
    assert all(row["new_offset"] == row["target_committed"] for row in rows)

    # Settings changed since the run (another run key): the plan names the mapping the run wrote.
    document = yaml.safe_load(config.read_text())
    document["offset_reset"]["timeout_secs"] = 600
    changed = config_file(tmp_path / "changed.yaml", **document)
    mapping = next((tmp_path / "state").glob("*-mapping.json"))
    refused = subprocess.run(
        [sys.executable, "-m", "kbackup", "offset-reset", "plan", "-c", str(changed)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert f"set offset_reset.mapping_file: {mapping}" in refused.stderr
