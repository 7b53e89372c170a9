"""The restore plan: selection, routing, topics to create, warnings, and the errors that name bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kbackup.core.errors import ConfigError, NotFoundError, PreconditionError
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.segments import SegmentLimits
from kbackup.restore.plan import (
    TargetState,
    build_plan,
    refuse_rewritten_timestamps,
    restore_identity,
)
from kbackup.restore.plan_text import plan_lines
from kbackup.restore.settings import RestoreSettings
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage

NOW = 1_800_000_000_000
HOUR = 3_600_000


def records(count: int, *, start: int = 0, step: int = 1, ts: int = NOW - HOUR) -> list[BackupRecord]:
    return [
        BackupRecord(offset=start + i * step, key=b"k%d" % i, value=b"v%d" % i, timestamp=ts + i * 1000)
        for i in range(count)
    ]


@pytest.fixture
def backup(tmp_path: Path) -> Backup:
    storage = LocalStorage(tmp_path / "store")
    builder = BackupBuilder(
        storage, "nightly", source_cluster="prod", scratch_dir=tmp_path, limits=SegmentLimits(max_records=50)
    )
    builder.topic(
        "orders",
        3,
        {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * HOUR), "min.insync.replicas": "2"},
    )
    builder.topic("payments", 2, {"message.format.version": "2.8"})
    for p in range(3):
        builder.partition("orders", p, records(120, step=2))
    for p in range(2):
        builder.partition("payments", p, records(30))
    builder.commit()
    return BackupCatalog(storage).load("nightly")


def target(**overrides: Any) -> TargetState:
    values: dict[str, Any] = {
        "description": "127.0.0.1:9093 (PLAINTEXT)",
        "cluster_id": "target-id",
        "broker_count": 1,
        "topics": {},
    }
    values.update(overrides)
    return TargetState(**values)


def plan_for(backup: Backup, state: TargetState | None = None, **settings: Any):  # type: ignore[no-untyped-def]
    return build_plan(
        backup, RestoreSettings.model_validate(settings), state or target(), storage_url="/store", now_ms=NOW
    )


def test_default_plan_creates_topics_with_source_counts_and_configs(backup: Backup) -> None:
    plan = plan_for(backup)
    assert plan.mode == "exactly-once"
    assert [
        (t.source_topic, t.target_topic, t.create, t.target_partitions, t.routing) for t in plan.topics
    ] == [
        ("orders", "orders", True, 3, "identity"),
        ("payments", "payments", True, 2, "identity"),
    ]
    orders = plan.topic("orders")
    # min.insync.replicas=2 cannot be met by one broker: dropped, with a warning.
    assert orders.configs == {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * HOUR)}
    assert any("min.insync.replicas=2 is not copied" in w for w in plan.warnings)
    # Configs Kafka 4 removed are never copied.
    assert plan.topic("payments").configs == {}
    assert plan.expected_records == 3 * 120 + 2 * 30
    assert {(p.source_topic, p.source_partition, p.target_partition) for p in plan.partitions} == {
        ("orders", 0, 0),
        ("orders", 1, 1),
        ("orders", 2, 2),
        ("payments", 0, 0),
        ("payments", 1, 1),
    }
    assert plan.create_progress_topic
    assert "restore id" in "\n".join(plan_lines(plan))


def test_copy_topic_configs_off_and_excluded_configs(backup: Backup) -> None:
    assert plan_for(backup, copy_topic_configs=False).topic("orders").configs == {}
    plan = plan_for(backup, exclude_topic_configs=["retention.ms"])
    assert "retention.ms" not in plan.topic("orders").configs


def test_topic_mapping_renames_and_unknown_topic_is_named(backup: Backup) -> None:
    plan = plan_for(backup, topic_mapping={"orders": "restored-orders"})
    assert plan.topic("orders").target_topic == "restored-orders"
    assert {p.target_topic for p in plan.partitions if p.source_topic == "orders"} == {"restored-orders"}
    with pytest.raises(
        NotFoundError, match=r"restore.topic_mapping: topic 'nope' is not in backup 'nightly'"
    ):
        plan_for(backup, topic_mapping={"nope": "x"})


def test_two_topics_into_one_target_is_refused(backup: Backup) -> None:
    with pytest.raises(ConfigError, match="would both be restored into 'orders'"):
        plan_for(backup, topic_mapping={"payments": "orders"})


def test_selection_by_pattern_and_partitions(backup: Backup) -> None:
    plan = plan_for(backup, topics=["ord.*"], partitions={"orders": [1]})
    assert [t.source_topic for t in plan.topics] == ["orders"]
    assert [(p.source_topic, p.source_partition) for p in plan.partitions] == [("orders", 1)]
    with pytest.raises(NotFoundError, match=r"'nothing\.\*' matches no topic"):
        plan_for(backup, topics=["nothing.*"])
    with pytest.raises(NotFoundError, match="holds no partition 7 of topic 'orders'"):
        plan_for(backup, partitions={"orders": [7]})


def test_too_few_target_partitions_is_refused_naming_topic_and_counts(backup: Backup) -> None:
    with pytest.raises(PreconditionError) as caught:
        plan_for(backup, target(topics={"orders": 2}))
    message = caught.value.message
    assert "target topic 'orders' has 2 partition(s)" in message
    assert "the 3 of source topic 'orders'" in message
    assert caught.value.hint is not None
    assert "repartition" in caught.value.hint
    with pytest.raises(PreconditionError, match="would be created with 1 partition"):
        plan_for(backup, target_partitions={"orders": 1})


def test_more_target_partitions_keep_identity_with_a_note(backup: Backup) -> None:
    plan = plan_for(backup, target(topics={"orders": 5}), topics=["orders"])
    assert plan.topic("orders").routing == "identity"
    assert not plan.topic("orders").create
    assert any("partitions 3..4 stay empty" in w for w in plan.warnings)


def test_repartition_when_counts_differ(backup: Backup) -> None:
    plan = plan_for(backup, repartition=True, target_partitions={"orders": 6}, topics=["orders"])
    assert plan.topic("orders").routing == "repartition"
    assert all(p.target_partition is None and p.target_partitions == 6 for p in plan.partitions)
    assert plan.partitions[0].target_partitions_fed() == [0, 1, 2, 3, 4, 5]
    shrink = plan_for(backup, target(topics={"orders": 2}), repartition=["orders"], topics=["orders"])
    assert shrink.topic("orders").routing == "repartition"
    same = plan_for(backup, repartition=True, topics=["orders"])
    assert same.topic("orders").routing == "identity"  # equal counts keep the source layout


def test_explicit_partition_map(backup: Backup) -> None:
    plan = plan_for(
        backup, target(topics={"orders": 2}), topics=["orders"], partition_mapping={"orders": {2: 0}}
    )
    assert plan.topic("orders").routing == "mapped"
    assert [(p.source_partition, p.target_partition) for p in plan.partitions] == [(0, 0), (1, 1), (2, 0)]
    with pytest.raises(PreconditionError, match="goes to partition 4 of target topic 'orders'"):
        plan_for(backup, topics=["orders"], partition_mapping={"orders": {0: 4}})


def test_offset_ranges_and_time_window_select_segments_and_mark_partial_counts(backup: Backup) -> None:
    # orders/0 holds offsets 0, 2, ..., 238 in segments of 50 records (offsets 0-98, 100-198, 200-238).
    plan = plan_for(
        backup,
        topics=["orders"],
        partitions={"orders": [0]},
        offset_ranges={"orders": {0: {"start": 100, "end": 200}}},
    )
    (partition,) = plan.partitions
    assert (partition.offset_start, partition.offset_end) == (100, 200)
    assert [s.first_offset for s in partition.segments] == [100]
    assert partition.expected_records == 50
    window = plan_for(
        backup,
        topics=["orders"],
        partitions={"orders": [0]},
        time_window_start=NOW - HOUR + 10_000,
        time_window_end=NOW - HOUR + 60_000,
    )
    (partition,) = window.partitions
    assert [s.first_offset for s in partition.segments] == [0, 100]
    assert partition.expected_records is None  # partial segments: counted by the integrity check
    assert partition.records_upper_bound == 100


def test_log_append_time_topics_are_created_as_create_time_unless_rewrite(backup: Backup) -> None:
    """A topic that would get LogAppendTime (the target's default here) is created as CreateTime, so
    every record keeps its timestamp; switch-after plans the switch; rewrite keeps LogAppendTime."""
    lat_default = target(default_timestamp_type="LogAppendTime")
    kept = plan_for(backup, lat_default, topics=["payments"]).topic("payments")
    assert (kept.timestamp_type, kept.configs, kept.switch_to_log_append_time) == (
        "CreateTime",
        {"message.timestamp.type": "CreateTime"},
        False,
    )
    assert any(
        "payments is created with message.timestamp.type CreateTime instead of LogAppendTime" in w
        for w in plan_for(backup, lat_default, topics=["payments"]).warnings
    )
    switched = plan_for(backup, lat_default, topics=["payments"], log_append_time="switch-after")
    assert switched.topic("payments").timestamp_type == "CreateTime"
    assert switched.topic("payments").switch_to_log_append_time
    assert any("switched to LogAppendTime once its records are restored" in w for w in switched.warnings)
    assert any(line.endswith("; then switched to LogAppendTime") for line in plan_lines(switched))
    rewritten = plan_for(backup, lat_default, topics=["payments"], log_append_time="rewrite")
    assert rewritten.topic("payments").timestamp_type == "LogAppendTime"
    assert "message.timestamp.type" not in rewritten.topic("payments").configs
    assert any(
        "payments uses LogAppendTime (restore.log_append_time: rewrite)" in w for w in rewritten.warnings
    )
    # A CreateTime target gets no note and no switch.
    plain = plan_for(backup, target(), topics=["payments"], log_append_time="switch-after")
    assert not plain.topic("payments").switch_to_log_append_time
    assert not any("LogAppendTime" in w for w in plain.warnings)


def test_existing_log_append_time_topic_is_left_for_the_run_plan_to_refuse(backup: Backup) -> None:
    state = target(topics={"orders": 3}, timestamp_types={"orders": "LogAppendTime"})
    plan = plan_for(backup, state, topics=["orders"])
    assert plan.topic("orders").timestamp_type == "LogAppendTime"
    with pytest.raises(
        PreconditionError, match=r"'orders' exists with message\.timestamp\.type LogAppendTime"
    ):
        refuse_rewritten_timestamps(plan, ["orders"])
    refuse_rewritten_timestamps(plan, [])  # nothing left to write into it: nothing to refuse
    rewrite = plan_for(backup, state, topics=["orders"], log_append_time="rewrite")
    refuse_rewritten_timestamps(rewrite, ["orders"])
    assert any("orders uses LogAppendTime" in w for w in rewrite.warnings)


def test_records_older_than_retention_are_warned(backup: Backup) -> None:
    assert not any("retention.ms" in w for w in plan_for(backup).warnings)
    later = build_plan(backup, RestoreSettings(), target(), storage_url="/s", now_ms=NOW + 30 * 24 * HOUR)
    assert any("orders keeps records for retention.ms" in w for w in later.warnings)


def test_origin_headers_off_warns_that_translation_is_impossible(backup: Backup) -> None:
    plan = plan_for(backup, include_original_offset_header=False)
    assert any("header-based offset translation" in w for w in plan.warnings)
    idempotent = plan_for(backup, include_original_offset_header=False, exactly_once=False)
    assert idempotent.mode == "idempotent"
    assert any("restores every selected record again" in w for w in idempotent.warnings)


def with_offset_headers(backup: Backup, recorded: bool) -> Backup:
    """``backup`` as if its newest increment had been taken with ``backup.include_offset_headers``."""
    latest = backup.latest.model_copy(
        update={"settings": {**backup.latest.settings, "include_offset_headers": recorded}}
    )
    return Backup(backup_id=backup.backup_id, manifests=[*backup.manifests[:-1], latest])


@pytest.mark.parametrize(
    ("recorded", "chosen", "stamped", "reason"),
    [
        (None, None, True, "the backup does not record backup.include_offset_headers"),
        (True, None, True, "backup taken with backup.include_offset_headers: true"),
        (False, None, False, "backup taken with backup.include_offset_headers: false"),
        (False, True, True, "restore.include_original_offset_header: true"),
        (True, False, False, "restore.include_original_offset_header: false"),
    ],
)
def test_origin_headers_follow_the_backup_unless_the_restore_says(
    backup: Backup, recorded: bool | None, chosen: bool | None, stamped: bool, reason: str
) -> None:
    taken = backup if recorded is None else with_offset_headers(backup, recorded)
    plan = plan_for(taken, include_original_offset_header=chosen)
    assert (plan.origin_headers, plan.origin_headers_reason) == (stamped, reason)
    state = "x-kafka-backup-* on every record" if stamped else "off"
    assert f"  origin headers: {state} ({reason})" in plan_lines(plan)
    assert plan.to_dict()["origin_headers"] is stamped
    assert any(f"origin headers are off ({reason})" in w for w in plan.warnings) is not stamped


def test_restore_id_takes_origin_headers_as_resolved(backup: Backup) -> None:
    off = with_offset_headers(backup, False)
    # Unset on a backup that records nothing is the former default, true: the same restore.
    assert restore_identity(backup, RestoreSettings(), "t") == restore_identity(
        backup, RestoreSettings(include_original_offset_header=True), "t"
    )
    # With and without headers are two restores, whichever setting decided.
    assert restore_identity(off, RestoreSettings(), "t") != restore_identity(
        off, RestoreSettings(include_original_offset_header=True), "t"
    )
    assert restore_identity(off, RestoreSettings(), "t") == restore_identity(
        off, RestoreSettings(include_original_offset_header=False), "t"
    )


def test_mode_without_transactions(backup: Backup) -> None:
    state = target(transactions_possible=False, transactions_note="no coordinator")
    auto = plan_for(backup, state)
    assert auto.mode == "idempotent"
    assert any("exactly-once mode is not possible (no coordinator)" in w for w in auto.warnings)
    with pytest.raises(PreconditionError, match=r"restore\.exactly_once is true but no coordinator"):
        plan_for(backup, state, exactly_once=True)


def test_restore_id_is_stable_and_depends_on_what_is_restored_where(backup: Backup) -> None:
    base = restore_identity(backup, RestoreSettings(), "target-id")
    assert base == restore_identity(backup, RestoreSettings(create_topics=False), "target-id")
    assert base != restore_identity(backup, RestoreSettings(), "other-cluster")
    assert base != restore_identity(backup, RestoreSettings(topic_mapping={"orders": "x"}), "target-id")
    assert base != restore_identity(backup, RestoreSettings(time_window_start=5), "target-id")
    assert base != restore_identity(backup, RestoreSettings(topics=["orders"]), "target-id")
    assert plan_for(backup).transactional_id == f"kafka-backup-restore-{plan_for(backup).restore_id}"


def test_plan_to_dict_is_json_ready(backup: Backup) -> None:
    import json

    data = plan_for(backup, topic_mapping={"orders": "o2"}).to_dict()
    assert json.loads(json.dumps(data))["topics"][0]["target_topic"] == "o2"
    assert data["expected_records"] == 420
