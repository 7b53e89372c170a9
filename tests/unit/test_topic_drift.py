"""restore.existing_topics: how an existing target topic differs from the backup's (the pure
comparison), and what the restore plan does about it in each mode (validate, apply, fail)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kbackup.core.errors import PreconditionError
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.manifest import TopicEntry
from kbackup.restore.plan import RestorePlan, TargetState, build_plan
from kbackup.restore.plan_text import plan_lines
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.summary import RestoreSummary
from kbackup.restore.topic_drift import TopicDifference, topic_differences
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage

NOW = 1_800_000_000_000
BACKUP_CONFIGS = {
    "cleanup.policy": "compact",
    "max.message.bytes": "2000000",
    "message.format.version": "2.8",  # removed in Kafka 4: never copied, never compared
}


def entry(partitions: int = 3, configs: dict[str, str] | None = None) -> TopicEntry:
    return TopicEntry(
        name="orders", partitions=partitions, configs=dict(BACKUP_CONFIGS) if configs is None else configs
    )


def by_name(differences: list[TopicDifference]) -> dict[str, TopicDifference]:
    return {difference.name: difference for difference in differences}


# ---------------------------------------------------------------------------
# The comparison.


def test_a_topic_like_the_backups_has_no_difference() -> None:
    target = {"cleanup.policy": "compact", "max.message.bytes": "2000000", "message.format.version": "3.0"}
    assert topic_differences(entry(), target, 3) == []


def test_a_differing_or_missing_config_can_be_set_a_target_only_one_is_left() -> None:
    differences = by_name(
        topic_differences(entry(), {"cleanup.policy": "delete", "retention.ms": "60000"}, 3)
    )
    assert set(differences) == {"cleanup.policy", "max.message.bytes", "retention.ms"}
    policy = differences["cleanup.policy"]
    assert (policy.backup_value, policy.target_value, policy.fixable) == ("compact", "delete", True)
    assert policy.describe() == "cleanup.policy: backup compact, target delete"
    missing = differences["max.message.bytes"]
    assert (missing.backup_value, missing.target_value, missing.fixable) == ("2000000", None, True)
    # The backup has no value for it (the source used its broker default): apply cannot know what to set.
    extra = differences["retention.ms"]
    assert (extra.backup_value, extra.target_value, extra.fixable) == (None, "60000", False)
    assert "set on the target topic only" in extra.note


def test_excluded_and_never_copied_configs_are_compared_on_neither_side() -> None:
    target = {"cleanup.policy": "delete", "message.downconversion.enable": "true"}
    differences = topic_differences(entry(), target, 3, excluded=["cleanup.policy", "max.message.bytes"])
    assert differences == []
    # copy_topic_configs: false: the restore gives a topic no configs, so only partitions are compared.
    assert [d.name for d in topic_differences(entry(), {"cleanup.policy": "delete"}, 2, copy=False)] == [
        "partitions"
    ]


def test_fewer_partitions_can_be_raised_more_cannot_be_lowered() -> None:
    fewer = topic_differences(entry(), dict(BACKUP_CONFIGS), 2)
    assert [(d.name, d.backup_value, d.target_value, d.fixable) for d in fewer] == [
        ("partitions", "3", "2", True)
    ]
    assert "apply adds partitions 2..2" in fewer[0].note
    assert "another partition than before" in fewer[0].note
    more = topic_differences(entry(), dict(BACKUP_CONFIGS), 5)
    assert [(d.name, d.backup_value, d.target_value, d.fixable) for d in more] == [
        ("partitions", "3", "5", False)
    ]
    assert "cannot remove partitions" in more[0].note
    # The count the restore would create the topic with (restore.target_partitions) is what is wanted.
    assert topic_differences(entry(), dict(BACKUP_CONFIGS), 5, wanted_partitions=5) == []


def test_the_timestamp_type_is_left_to_its_own_policy() -> None:
    backup = entry(configs={"message.timestamp.type": "LogAppendTime"})
    [difference] = topic_differences(
        backup, {"message.timestamp.type": "CreateTime"}, 3, timestamp_type_left_to="restore.log_append_time"
    )
    assert (difference.fixable, difference.left_to) == (False, "restore.log_append_time")
    assert "restore.log_append_time decides" in difference.note
    # Without a policy in charge (the metadata restore), it is a config like the others.
    [plain] = topic_differences(backup, {"message.timestamp.type": "CreateTime"}, 3)
    assert (plain.fixable, plain.left_to) == (True, None)


def test_min_insync_replicas_above_the_topics_replicas_is_not_applied() -> None:
    backup = entry(configs={"min.insync.replicas": "2"})
    [difference] = topic_differences(backup, {}, 3, replicas=1)
    # As for a created topic (the restore drops it there): not set, and no reason for fail to stop.
    assert (difference.fixable, difference.left_to) == (False, "the target topic's replication factor")
    assert "no write with acks=all could succeed" in difference.note
    assert topic_differences(backup, {}, 3, replicas=3)[0].fixable


# ---------------------------------------------------------------------------
# The plan, in each mode.


@pytest.fixture
def backup(tmp_path: Path) -> Backup:
    storage = LocalStorage(tmp_path / "store")
    builder = BackupBuilder(storage, "nightly", source_cluster="prod", scratch_dir=tmp_path)
    builder.topic("orders", 3, dict(BACKUP_CONFIGS))
    for p in range(3):
        builder.partition(
            "orders",
            p,
            [BackupRecord(offset=i, key=b"k%d" % i, value=b"v", timestamp=NOW - 1000 + i) for i in range(5)],
        )
    builder.commit()
    return BackupCatalog(storage).load("nightly")


def existing(partitions: int, configs: dict[str, str] | None, **more: Any) -> TargetState:
    """A target where topic orders exists with ``partitions`` and ``configs`` set on it (None: not
    readable)."""
    return TargetState(
        description="127.0.0.1:9093 (PLAINTEXT)",
        cluster_id="target-id",
        broker_count=1,
        topics={"orders": partitions},
        cleanup_policies={"orders": (configs or {}).get("cleanup.policy", "delete")},
        topic_configs={} if configs is None else {"orders": configs},
        replication_factors={"orders": 1},
        **more,
    )


def plan_for(backup: Backup, state: TargetState, **settings: Any) -> RestorePlan:
    return build_plan(
        backup, RestoreSettings.model_validate(settings), state, storage_url="/store", now_ms=NOW
    )


def drift_warnings(plan: RestorePlan) -> list[str]:
    return [warning for warning in plan.warnings if "differs from the backup" in warning]


def test_validate_warns_each_difference_and_restores_into_the_topic_as_it_is(backup: Backup) -> None:
    plan = plan_for(backup, existing(4, {"cleanup.policy": "delete"}))
    assert plan.existing_topics == "validate"
    orders = plan.topic("orders")
    assert (orders.create, orders.target_partitions, orders.cleanup_policy) == (False, 4, "delete")
    assert (orders.config_changes, orders.partitions_added) == ({}, 0)
    assert [d.name for d in orders.differences] == ["cleanup.policy", "max.message.bytes", "partitions"]
    warnings = drift_warnings(plan)
    assert len(warnings) == 3
    assert (
        "target topic orders differs from the backup, cleanup.policy: backup compact, target delete: "
        "restored into as it is (restore.existing_topics: validate; apply would change it)"
    ) in warnings
    assert any("partitions: backup 3, target 4" in w and "cannot remove partitions" in w for w in warnings)
    text = "\n".join(plan_lines(plan))
    assert "orders -> orders: exists with 4 partition(s);" in text
    assert (
        "differs from the backup (restore.existing_topics: validate): cleanup.policy: backup compact" in text
    )
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["existing_topics"] == "validate"
    assert data["topics"][0]["differences"][0] == {
        "name": "cleanup.policy",
        "backup": "compact",
        "target": "delete",
        "fixable": True,
        "note": "",
        "left_to": None,
    }


def test_apply_plans_the_backups_configs_and_the_missing_partitions(backup: Backup) -> None:
    plan = plan_for(backup, existing(2, {"cleanup.policy": "delete"}), existing_topics="apply")
    orders = plan.topic("orders")
    assert orders.config_changes == {"cleanup.policy": "compact", "max.message.bytes": "2000000"}
    # The restore writes with the backup's count (identity routing) and the backup's cleanup policy.
    assert (orders.partitions_added, orders.target_partitions, orders.routing) == (1, 3, "identity")
    assert orders.compacted
    assert [w for w in drift_warnings(plan)] == [
        "target topic orders differs from the backup, partitions: backup 3, target 2: "
        "restore.existing_topics: " + orders.differences[-1].note
    ]
    text = "\n".join(plan_lines(plan))
    assert (
        "exists with 2 partition(s), 1 added before the first record, configs "
        "{'cleanup.policy': 'compact', 'max.message.bytes': '2000000'} set before the first record"
    ) in text
    data = plan.to_dict()["topics"][0]
    assert (data["config_changes"], data["partitions_added"]) == (orders.config_changes, 1)


def test_apply_leaves_more_partitions_and_target_only_configs_and_says_so(backup: Backup) -> None:
    configs = dict(BACKUP_CONFIGS, **{"retention.ms": "60000"})
    plan = plan_for(backup, existing(5, configs), existing_topics="apply")
    orders = plan.topic("orders")
    assert (orders.config_changes, orders.partitions_added, orders.target_partitions) == ({}, 0, 5)
    warnings = drift_warnings(plan)
    assert len(warnings) == 2
    assert any("partitions: backup 3, target 5: Kafka cannot remove partitions" in w for w in warnings)
    assert any("retention.ms: backup not set (the source's default), target 60000" in w for w in warnings)


def test_fail_names_every_topic_and_difference_in_one_line(backup: Backup) -> None:
    with pytest.raises(PreconditionError) as refused:
        plan_for(backup, existing(2, {"cleanup.policy": "delete"}), existing_topics="fail")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(
        "restore.existing_topics is fail and 1 existing target topic(s) differ from the backup: orders ("
        "cleanup.policy: backup compact, target delete, max.message.bytes: backup 2000000, target not set, "
        "partitions: backup 3, target 2)"
    )
    assert refused.value.exit_code == 10
    assert refused.value.hint is not None
    assert "restore.existing_topics: apply" in refused.value.hint
    # A topic like the backup's passes.
    plan = plan_for(backup, existing(3, dict(BACKUP_CONFIGS)), existing_topics="fail")
    assert plan.topic("orders").differences == []


@pytest.mark.parametrize(
    ("backup_configs", "target_configs", "left_to", "said"),
    [
        (
            {"message.timestamp.type": "LogAppendTime"},
            {"message.timestamp.type": "CreateTime"},
            "restore.log_append_time",
            "restore.log_append_time decides",
        ),
        ({"min.insync.replicas": "2"}, {}, "the target topic's replication factor", "no write with acks=all"),
    ],
)
def test_fail_does_not_stop_for_what_the_restore_would_not_copy_either(
    tmp_path: Path, backup_configs: dict[str, str], target_configs: dict[str, str], left_to: str, said: str
) -> None:
    """A restore creates a LogAppendTime topic as CreateTime (keep-original) and drops a
    min.insync.replicas its replicas cannot meet: its next run finds that topic existing, and must
    not refuse its own work."""
    storage = LocalStorage(tmp_path / "store")
    builder = BackupBuilder(storage, "own", source_cluster="prod", scratch_dir=tmp_path)
    builder.topic("orders", 1, backup_configs)
    builder.partition("orders", 0, [BackupRecord(offset=0, key=b"k", value=b"v", timestamp=NOW)])
    builder.commit()
    own = BackupCatalog(storage).load("own")
    state = existing(1, target_configs, timestamp_types={"orders": "CreateTime"})
    plan = plan_for(own, state, existing_topics="fail")
    [difference] = plan.topic("orders").differences
    assert difference.left_to == left_to
    assert any(said in w for w in drift_warnings(plan))
    assert plan_for(own, state, existing_topics="apply").topic("orders").config_changes == {}


def test_unreadable_configs_are_said_and_partitions_still_compared(backup: Backup) -> None:
    plan = plan_for(backup, existing(3, None), existing_topics="fail")
    assert any("configs of target topic orders could not be read" in w for w in plan.warnings)
    with pytest.raises(PreconditionError, match="partitions: backup 3, target 2"):
        plan_for(backup, existing(2, None), existing_topics="fail")


def test_too_few_partitions_under_validate_points_at_apply(backup: Backup) -> None:
    with pytest.raises(PreconditionError) as refused:
        plan_for(backup, existing(2, dict(BACKUP_CONFIGS)))
    assert refused.value.hint is not None
    assert "restore.existing_topics: apply adds them" in refused.value.hint


def test_the_summary_says_what_apply_changed() -> None:
    summary = RestoreSummary(
        restore_id="r",
        backup_id="nightly",
        mode="exactly-once",
        target="127.0.0.1:9093 (PLAINTEXT)",
        topics=[],
        created_topics=[],
        transactions=1,
        seconds=1.0,
        resumed=False,
        already_landed=0,
        timestamps_not_kept=0,
        existing_topics_changed=["orders: cleanup.policy=compact, partitions 2 -> 3"],
    )
    assert (
        "  changed to the backup's (restore.existing_topics: apply): orders: cleanup.policy=compact, "
        "partitions 2 -> 3"
    ) in summary.lines()
    assert summary.to_dict()["existing_topics_changed"] == summary.existing_topics_changed
