"""Topic selection, start/end offsets of an increment, and the checks that refuse a wrong continuation."""

from __future__ import annotations

import logging

import pytest

from kbackup.backup.commit import uncovered_group_offsets
from kbackup.backup.plan import (
    check_missing_topics,
    check_same_source,
    check_topic_identity,
    plan_partitions,
    resolve_source_cluster_id,
    select_topics,
)
from kbackup.backup.runner import TopicRules
from kbackup.backup.settings import BackupSettings, SourceSettings, TopicSelection
from kbackup.core.errors import KafkaOperationError, NotFoundError, PreconditionError
from kbackup.core.kafka import ClusterMetadata, TopicMetadata, kafka_state_name
from kbackup.format.catalog import Backup, PartitionCoverage
from kbackup.format.manifest import (
    ConsumerGroupsSnapshot,
    GroupOffset,
    GroupSnapshot,
    Manifest,
    SourceInfo,
    TopicEntry,
)

TOPICS = [
    "orders",
    "orders-dlq",
    "payments.eu",
    "payments.us",
    "__consumer_offsets",
    "__transaction_state",
    "x",
]


def test_patterns_match_whole_names() -> None:
    choice = select_topics(TOPICS, TopicSelection(include=["orders", r"payments\..*"]))
    assert choice.selected == ["orders", "payments.eu", "payments.us"]  # not orders-dlq: full match
    assert choice.missing == []


def test_exclude_wins_and_internal_topics_need_opting_in() -> None:
    everything = select_topics(TOPICS, TopicSelection(include=[".*"], exclude=[r".*\.us", "x"]))
    assert everything.selected == ["orders", "orders-dlq", "payments.eu"]
    internal = select_topics(TOPICS, TopicSelection(include=["__consumer_offsets"]), include_internal=True)
    assert internal.selected == ["__consumer_offsets"]
    assert select_topics(TOPICS, TopicSelection(include=["__.*"])).selected == []


def test_a_named_topic_that_is_missing_is_reported_a_pattern_only_warned() -> None:
    choice = select_topics(TOPICS, TopicSelection(include=["orders", "refunds", "audit-.*"]))
    assert choice.missing == ["refunds"]
    assert choice.unmatched_patterns == ["audit-.*"]
    with pytest.raises(NotFoundError, match="refunds do not exist on k:9092") as caught:
        check_missing_topics(choice, on_missing="fail", servers="k:9092")
    assert caught.value.hint is not None
    assert "on_missing_topic: warn" in caught.value.hint


def test_missing_topic_can_be_skipped_with_a_warning(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    choice = select_topics(TOPICS, TopicSelection(include=["orders", "refunds"]))
    monkeypatch.setattr(logging.getLogger("kbackup"), "propagate", True)
    with caplog.at_level(logging.WARNING, logger="kbackup"):
        check_missing_topics(choice, on_missing="warn", servers="k:9092")
    assert "refunds do not exist on k:9092: skipped" in caplog.text


def coverage(end: int) -> PartitionCoverage:
    return PartitionCoverage(
        topic="t", partition=0, start_offset=0, end_offset=end, log_start_offset=0, record_count=end
    )


def test_first_increment_starts_at_the_log_start() -> None:
    [plan] = plan_partitions({("t", 0): (40, 100)}, {})
    assert (plan.start_offset, plan.fetch_offset, plan.end_offset, plan.log_start_offset) == (40, 40, 100, 40)


def test_continuation_starts_where_the_backup_ends_and_new_partitions_at_their_log_start() -> None:
    plans = plan_partitions({("t", 0): (0, 150), ("t", 1): (5, 9)}, {("t", 0): coverage(100)})
    assert [(p.partition, p.start_offset, p.end_offset) for p in plans] == [(0, 100, 150), (1, 5, 9)]


def test_records_deleted_between_runs_leave_the_range_contiguous() -> None:
    """Retention deleted offsets 100-119 before the second run: the range still starts at 100."""
    [plan] = plan_partitions({("t", 0): (120, 150)}, {("t", 0): coverage(100)})
    assert (plan.start_offset, plan.fetch_offset, plan.log_start_offset) == (100, 120, 120)


def test_a_log_that_went_backwards_is_refused() -> None:
    with pytest.raises(
        PreconditionError, match="t/0 ends at offset 30 on the source, but the backup already holds"
    ):
        plan_partitions({("t", 0): (0, 30)}, {("t", 0): coverage(100)})


def manifest(
    cluster_id: str = "east", kafka_id: str | None = "K1", topic_id: str | None = "id-1"
) -> Manifest:
    return Manifest(
        backup_id="b",
        increment=0,
        run_id="r0",
        tool_version="0",
        started_at="s",
        finished_at="f",
        source=SourceInfo(cluster_id=cluster_id, kafka_cluster_id=kafka_id),
        topics=[TopicEntry(name="t", partitions=1, topic_id=topic_id)],
    )


def test_same_source_is_required_to_continue() -> None:
    backup = Backup("b", [manifest()])
    check_same_source(backup, "east", "K1")
    check_same_source(None, "anything", None)
    with pytest.raises(PreconditionError, match="holds source cluster 'east', this run reads 'west'"):
        check_same_source(backup, "west", "K1")
    with pytest.raises(
        PreconditionError, match="taken from Kafka cluster K1, but 'east' now answers as Kafka cluster K2"
    ):
        check_same_source(backup, "east", "K2")


def test_recreated_topic_is_refused() -> None:
    backup = Backup("b", [manifest()])
    check_topic_identity(backup, {"t": "id-1", "new": "id-9"})
    check_topic_identity(Backup("b", [manifest(topic_id=None)]), {"t": "id-2"})
    with pytest.raises(PreconditionError, match="topic t was deleted and re-created"):
        check_topic_identity(backup, {"t": "id-2"})


def test_source_cluster_id_defaults_to_the_kafka_cluster_id() -> None:
    assert resolve_source_cluster_id("prod", "K1", "s") == "prod"
    assert resolve_source_cluster_id(None, "K1", "s") == "K1"
    with pytest.raises(PreconditionError, match="reported no cluster id"):
        resolve_source_cluster_id(None, None, "s")


def test_uncovered_group_offsets_names_each_offset_beyond_the_data() -> None:
    snapshot = ConsumerGroupsSnapshot(
        taken_at="t",
        groups=[
            GroupSnapshot(
                group_id="g",
                offsets=[
                    GroupOffset(topic="t", partition=0, offset=10),
                    GroupOffset(topic="t", partition=1, offset=11),
                    GroupOffset(topic="t", partition=2, offset=1),
                ],
            )
        ],
    )
    problems = uncovered_group_offsets(snapshot, {("t", 0): 10, ("t", 1): 10})
    assert problems == [
        "group g at t/1 offset 11 (backup holds up to 10)",
        "group g at t/2 offset 1 (backup holds nothing)",
    ]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("STABLE", "Stable"), ("PREPARING_REBALANCING", "PreparingRebalance"), ("EMPTY", "Empty"), (None, None)],
)
def test_group_states_are_named_as_kafka_names_them(name: str | None, expected: str | None) -> None:
    assert kafka_state_name(name) == expected


def _run_selecting(include: list[str]) -> TopicRules:
    source = SourceSettings.model_validate(
        {"bootstrap_servers": "localhost:1", "topics": {"include": include}}
    )
    return TopicRules.of(source, BackupSettings())


def test_a_selected_topic_whose_metadata_stays_in_error_fails_the_first_look() -> None:
    metadata = ClusterMetadata(
        cluster_id="c",
        topics={"orders": TopicMetadata(name="orders", partitions=1, replication_factor=1)},
        unavailable={"payments": "LEADER_NOT_AVAILABLE"},
    )
    with pytest.raises(KafkaOperationError, match="payments") as caught:
        _run_selecting(["orders", "payments"]).topics_to_copy(metadata, "localhost:1", first=True)
    assert caught.value.retryable
    # A later look of a follow run only warns, and an unselected broken topic never matters.
    assert _run_selecting(["orders", "payments"]).topics_to_copy(metadata, "localhost:1", first=False) == [
        "orders"
    ]
    assert _run_selecting(["orders"]).topics_to_copy(metadata, "localhost:1", first=True) == ["orders"]
