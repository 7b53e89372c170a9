"""``offset_reset.source_offsets: live`` reads the groups' offsets from the backup's origin, never from
another live cluster (issue 18, item 4), through the CLI on two real clusters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kbackup.cli.main import run
from kbackup.core.errors import PreconditionError
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import take_backup
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, admin, create_topic, produce

#: The group's committed offset on the backup's origin, and the one a same-named group has on the
#: wrong cluster: planning from the wrong one would move the group to another record.
ORIGIN_COMMIT = 12
WRONG_COMMIT = 3


def commit(cluster: LocalKafkaCluster, group: str, topic: str, offset: int) -> None:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap_servers, "group.id": group})
    consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    consumer.close()


@pytest.fixture
def restored(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> dict[str, object]:
    """20 records backed up from the source and restored (renamed) onto the target, a group committed at
    ORIGIN_COMMIT on the source; on the target, a topic of the source's name with the same group at
    WRONG_COMMIT (what a cluster that is not the origin but shares names looks like)."""
    topic, group = f"{unique_name}-orders", f"{unique_name}-reader"
    create_topic(source_cluster, topic)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v%d" % i, partition=0) for i in range(20)])
    commit(source_cluster, group, topic, ORIGIN_COMMIT)
    store = tmp_path / "store"
    take_backup(source_cluster, store, "nightly", [topic])
    create_topic(target_cluster, topic)
    produce(target_cluster, topic, [Record(key=b"k", value=b"w%d" % i, partition=0) for i in range(10)])
    commit(target_cluster, group, topic, WRONG_COMMIT)
    document = {
        "backup_id": "nightly",
        "target": {"bootstrap_servers": [target_cluster.bootstrap_servers]},
        "storage": {"url": str(store)},
        "restore": {"topic_mapping": {topic: f"{topic}-restored"}},
        "offset_reset": {"groups": [group], "source_offsets": "live"},
    }
    config = config_file(tmp_path / "restore.yaml", **document)
    assert run(["restore", "-c", str(config)]) == 0
    return {"document": document, "topic": topic, "group": group}


def plan_with(tmp_path: Path, document: dict[str, object], name: str, plan: Path | None = None) -> int:
    config = config_file(tmp_path / name, **document)
    return run(["offset-reset", "plan", "-c", str(config), *(["--output", str(plan)] if plan else [])])


def with_source(
    document: dict[str, object], cluster: LocalKafkaCluster, **offset_reset: object
) -> dict[str, object]:
    reset = document["offset_reset"]
    assert isinstance(reset, dict)
    return {
        **document,
        "source": {"bootstrap_servers": [cluster.bootstrap_servers]},
        "offset_reset": {**reset, **offset_reset},
    }


def test_live_offsets_from_another_cluster_than_the_backups_origin_are_refused(
    restored: dict[str, object],
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    document = restored["document"]
    assert isinstance(document, dict)
    capsys.readouterr()

    # The target named as the live source: refused, naming both clusters, before any plan is written.
    wrong_plan = tmp_path / "wrong-plan.json"
    code = plan_with(tmp_path, with_source(document, target_cluster), "wrong.yaml", wrong_plan)
    error = capsys.readouterr().err
    assert code == PreconditionError.exit_code, error
    assert target_cluster.cluster_id in error
    assert source_cluster.cluster_id in error
    assert "offset_reset.live_source_cluster_id" in error  # the hint says how to confirm another cluster
    assert not wrong_plan.exists()

    # The backup's origin: planned from its committed offset.
    plan = tmp_path / "plan.json"
    assert plan_with(tmp_path, with_source(document, source_cluster), "right.yaml", plan) == 0
    rows = json.loads(plan.read_text())["groups"][0]["partitions"]
    assert [row["source_committed"] for row in rows] == [{"0": ORIGIN_COMMIT}]
    assert [row["new_offset"] for row in rows] == [ORIGIN_COMMIT]

    # Named explicitly, another cluster is read; a name that is not the live cluster's is refused.
    confirmed = with_source(document, target_cluster, live_source_cluster_id=target_cluster.cluster_id)
    assert plan_with(tmp_path, confirmed, "confirmed.yaml", plan) == 0
    rows = json.loads(plan.read_text())["groups"][0]["partitions"]
    assert [row["source_committed"] for row in rows] == [{"0": WRONG_COMMIT}]
    capsys.readouterr()
    misnamed = with_source(document, target_cluster, live_source_cluster_id=source_cluster.cluster_id)
    assert plan_with(tmp_path, misnamed, "misnamed.yaml") == PreconditionError.exit_code
    error = capsys.readouterr().err
    assert target_cluster.cluster_id in error
    assert source_cluster.cluster_id in error


def test_without_a_backup_the_origin_the_restored_records_name_is_the_live_source(
    restored: dict[str, object],
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No backup_id (e.g. the target holds a restore of a restore, and its backup is not at hand): the
    live cluster must be the one the origin headers name, offset_reset.source_cluster."""
    document = restored["document"]
    assert isinstance(document, dict)
    headless = {key: value for key, value in document.items() if key != "backup_id"}
    capsys.readouterr()
    wrong = with_source(headless, target_cluster, source_cluster=source_cluster.cluster_id)
    assert plan_with(tmp_path, wrong, "wrong.yaml") == PreconditionError.exit_code
    error = capsys.readouterr().err
    assert target_cluster.cluster_id in error
    assert source_cluster.cluster_id in error

    right = with_source(headless, source_cluster, source_cluster=source_cluster.cluster_id)
    assert plan_with(tmp_path, right, "right.yaml") == 0


def test_three_phase_restore_refuses_the_wrong_live_source_before_restoring(
    restored: dict[str, object],
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The reset's source offsets are checked before phase 1: nothing is restored, no state is written,
    and the dry run refuses the same way."""
    document = restored["document"]
    topic = restored["topic"]
    assert isinstance(document, dict)
    assert isinstance(topic, str)
    copy = f"{topic}-three-phase"
    wrong = with_source(document, target_cluster)
    wrong["restore"] = {"topic_mapping": {topic: copy}}
    wrong["three_phase"] = {"state_dir": str(tmp_path / "state"), "build_mapping": "when-needed"}
    config = config_file(tmp_path / "three-phase.yaml", **wrong)
    capsys.readouterr()
    for dry_run in (["--dry-run"], []):
        assert run(["three-phase-restore", "-c", str(config), *dry_run]) == PreconditionError.exit_code
        assert "offset_reset.source_offsets: live" in capsys.readouterr().err
    assert copy not in admin(target_cluster).list_topics(timeout=10).topics
    assert not (tmp_path / "state").exists()
