"""The translations the study computes itself, each giving a target position per (group, target partition).

- header-based: this project's reset planner (``kbackup.reset.planner``) on the
  real restored topics: binary search over origin headers, or, for the
  repartitioned topic, the ranges of the offset mapping that this project's
  Spark job (``kafka-backup show-offset-mapping``) wrote, read as
  ``offset_reset.mapping_file`` is;
- MirrorMaker 2 is not here: the study runs the real one
  (``bench.accuracy.mirror_maker``) and reads the offsets it syncs;
- timestamp-based (seed 002's MirrorGroupOffsetConnector): the timestamp of
  the record at the committed offset, read from the source cluster, then the
  broker's offsets-for-times on the target.

A position of None means "untranslated" (the tool gives no answer).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from confluent_kafka import TopicPartition

from bench.accuracy.data import StudyGroup
from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import KafkaClients, open_admin
from kbackup.format.catalog import Backup
from kbackup.reset.mapping_input import load_mapping_index
from kbackup.reset.planner import PlanRequest, plan_offset_reset
from kbackup.reset.sources import from_backup

#: (group id, target topic, target partition) -> position (None: untranslated).
Positions = dict[tuple[str, str, int], int | None]


def header_based(
    target: KafkaConnection,
    backup: Backup,
    storage_url: str,
    groups: list[StudyGroup],
    *,
    topic_mapping: Mapping[str, str] | None = None,
    mapping_file: Path | None = None,
) -> tuple[Positions, float]:
    """The reset stage's plan for the groups; with ``mapping_file``, planned from that offset mapping.

    ``mapping_file`` is what ``kafka-backup show-offset-mapping --output`` wrote (the project's
    Spark scan of the restored topic), loaded as the reset stage loads ``offset_reset.mapping_file``
    (``kbackup.reset.mapping_input``: the mapping's source cluster and target cluster checked).
    Returns the positions and the planning time in seconds, the mapping's loading included.
    """
    started = time.monotonic()
    mapping = None
    if mapping_file is not None:
        mapping = load_mapping_index(mapping_file, backup.source_cluster, open_admin(target).cluster_id())
    plan = plan_offset_reset(
        PlanRequest(
            target=target,
            source=from_backup(backup, storage_url),
            strategy="header-based",
            groups=[group.group_id for group in groups],
            topic_mapping=dict(topic_mapping or {}),
            mapping=mapping,
        )
    )
    seconds = time.monotonic() - started
    positions: Positions = {}
    for group_plan in plan.groups:
        for row in group_plan.partitions:
            positions[(group_plan.group_id, row.target_topic, row.target_partition)] = row.new_offset
    return positions, seconds


def timestamp_based(
    source: KafkaConnection,
    target: KafkaConnection,
    groups: list[StudyGroup],
    target_partitions_of: Mapping[str, list[int]],
    *,
    topic_mapping: Mapping[str, str] | None = None,
    repartitioned: bool = False,
) -> Positions:
    """Seed 002's connector: record timestamp at C on the source, then offsets-for-times on the target.

    A committed offset with no record at or after it on the source (the group
    is at the head) has no timestamp: untranslated, as the seed describes.
    When several source partitions feed a target partition (repartitioned), the
    earliest of their answers is taken, so nothing is skipped.
    """
    timestamps = _record_timestamps(source, groups)
    admin = open_admin(target)
    positions: Positions = {}
    mapping = dict(topic_mapping or {})
    untranslated: Counter[str] = Counter()
    for group in groups:
        topics = sorted({topic for topic, _ in group.committed})
        for topic in topics:
            target_topic = mapping.get(topic, topic)
            for target_partition in target_partitions_of[target_topic]:
                feeding = [
                    (partition, timestamps[(topic, partition, committed)])
                    for (t, partition), committed in group.committed.items()
                    if t == topic and (repartitioned or partition == target_partition)
                ]
                answers = [
                    admin.offsets_for_times({(target_topic, target_partition): ts})[
                        (target_topic, target_partition)
                    ]
                    for _, ts in feeding
                    if ts is not None
                ]
                found = [offset for offset in answers if offset >= 0]
                if not found:
                    untranslated["no record at C on the source" if not answers else "no target offset"] += 1
                positions[(group.group_id, target_topic, target_partition)] = min(found) if found else None
    if untranslated:
        print(f"timestamp-based, untranslated partitions: {dict(untranslated)}", flush=True)
    return positions


def _record_timestamps(
    source: KafkaConnection, groups: list[StudyGroup]
) -> dict[tuple[str, int, int], int | None]:
    """Timestamp of the first record at or after each committed offset, read from the source cluster."""
    wanted = sorted(
        {(topic, partition, offset) for g in groups for (topic, partition), offset in g.committed.items()}
    )
    ends = open_admin(source).partition_ranges({(t, p) for t, p, _ in wanted})
    consumer = KafkaClients(source, client_id="kafka-backup-accuracy-timestamps").consumer(
        properties={"isolation.level": "read_committed"}
    )
    result: dict[tuple[str, int, int], int | None] = {}
    try:
        for topic, partition, offset in wanted:
            if offset >= ends[(topic, partition)].log_end:
                result[(topic, partition, offset)] = None
                continue
            result[(topic, partition, offset)] = _first_timestamp(
                consumer, topic, partition, offset, ends[(topic, partition)].log_end
            )
    finally:
        consumer.close()
    return result


def _first_timestamp(consumer: object, topic: str, partition: int, offset: int, end: int) -> int | None:
    """Timestamp of the first committed record at or after ``offset``; None if there is none before ``end``.

    The end is judged by the consumer's position, not by partition-EOF events:
    read_committed fetches that hold only aborted records can report EOF early.
    """
    assigned = TopicPartition(topic, partition, offset)
    consumer.assign([assigned])  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)  # type: ignore[attr-defined]
        if message is None or message.error() is not None:
            position = consumer.position([TopicPartition(topic, partition)])[0].offset  # type: ignore[attr-defined]
            if position >= end:
                return None
            continue
        # Messages of an earlier assignment can still be queued: only this partition's, at or after offset.
        found = message.offset()
        if (message.topic(), message.partition()) != (topic, partition) or found is None or found < offset:
            continue
        _, timestamp = message.timestamp()
        return int(timestamp)
    raise RuntimeError(f"no record from {topic}/{partition} at {offset} within 60 s")
