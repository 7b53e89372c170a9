"""The snapshot of consumer groups' committed offsets on the backed-up topics.

Taken before the run reads the end offsets it copies up to (see
docs/format.md, "Consistency"): a committed offset never exceeds the end
offset that existed when it was committed, so every offset in the snapshot
is covered by the data of the increment that holds it.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from concurrent.futures import Future
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KafkaOperationError
from kbackup.core.kafka.admin import CONCURRENT_GROUP_REQUESTS
from kbackup.core.kafka.clients import kafka_error_of, translate_kafka_error
from kbackup.core.logs import get_logger
from kbackup.format.manifest import ConsumerGroupsSnapshot, GroupOffset, GroupSnapshot, utc_now_iso

log = get_logger("backup.groups")

#: A group deleted between listing and reading its offsets is simply not in the snapshot.
_GONE_GROUP_CODES = {KafkaError.GROUP_ID_NOT_FOUND}
#: A broker that just started (or moved a coordinator) answers these for a few seconds.
_COORDINATOR_BUSY_CODES = {
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
}
_RETRY_PAUSE_SECS = 0.5


def _coordinator_busy(exc: BaseException) -> bool:
    error = kafka_error_of(exc)
    return error is not None and error.code() in _COORDINATOR_BUSY_CODES


def kafka_state_name(state: Any) -> str | None:
    """A group state as Kafka names it: ``PREPARING_REBALANCING`` becomes ``PreparingRebalance``."""
    if state is None:
        return None
    name = str(getattr(state, "name", state))
    words = {"REBALANCING": "REBALANCE"}
    return "".join(words.get(part, part).capitalize() for part in name.split("_"))


def snapshot_consumer_groups(
    admin: AdminClient, topics: Collection[str], *, connection: KafkaConnection, timeout: float
) -> ConsumerGroupsSnapshot:
    """Committed offsets of every consumer group that has one on ``topics``."""
    taken_at = utc_now_iso()
    wanted = set(topics)
    deadline = time.monotonic() + timeout
    listing = _list_groups(admin, connection=connection, timeout=timeout, deadline=deadline)
    states = {group.group_id: kafka_state_name(group.state) for group in listing.valid}
    group_ids = sorted(states)
    snapshots: list[GroupSnapshot] = []
    for start in range(0, len(group_ids), CONCURRENT_GROUP_REQUESTS):
        batch = group_ids[start : start + CONCURRENT_GROUP_REQUESTS]
        futures: dict[str, Future[Any]] = {}
        for group_id in batch:
            futures.update(
                admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group_id)], request_timeout=timeout
                )
            )
        for group_id in batch:
            try:
                result = _group_offsets(
                    admin, group_id, futures[group_id], timeout=timeout, deadline=deadline
                )
            except KafkaException as exc:
                error = kafka_error_of(exc)
                if error is not None and error.code() in _GONE_GROUP_CODES:
                    log.info("consumer group %s disappeared while the snapshot was taken", group_id)
                    continue
                raise translate_kafka_error(
                    exc, action=f"read the committed offsets of group {group_id}", connection=connection
                ) from None
            offsets = [
                GroupOffset(
                    topic=tp.topic,
                    partition=tp.partition,
                    offset=tp.offset,
                    metadata=tp.metadata,
                    leader_epoch=tp.leader_epoch,
                )
                for tp in result.topic_partitions or []
                if tp.topic in wanted and tp.offset >= 0 and tp.error is None
            ]
            if offsets:
                offsets.sort(key=lambda item: (item.topic, item.partition))
                snapshots.append(GroupSnapshot(group_id=group_id, state=states[group_id], offsets=offsets))
    return ConsumerGroupsSnapshot(taken_at=taken_at, groups=snapshots)


def _list_groups(admin: AdminClient, *, connection: KafkaConnection, timeout: float, deadline: float) -> Any:
    while True:
        try:
            listing = admin.list_consumer_groups(request_timeout=timeout).result(timeout + 5)
        except KafkaException as exc:
            if _coordinator_busy(exc) and time.monotonic() < deadline:
                time.sleep(_RETRY_PAUSE_SECS)
                continue
            raise translate_kafka_error(exc, action="list consumer groups", connection=connection) from None
        if not listing.errors:
            return listing
        if all(_coordinator_busy(error) for error in listing.errors) and time.monotonic() < deadline:
            time.sleep(_RETRY_PAUSE_SECS)
            continue
        # A broker that did not answer would leave its groups out: an incomplete snapshot
        # would silently move fewer groups across, so the run stops instead.
        raise KafkaOperationError(
            f"listing consumer groups on {','.join(connection.bootstrap_servers)} was incomplete: "
            f"{listing.errors[0]}",
            retryable=True,
        )


def _group_offsets(
    admin: AdminClient, group_id: str, future: Future[Any], *, timeout: float, deadline: float
) -> Any:
    while True:
        try:
            return future.result(timeout + 5)
        except KafkaException as exc:
            if not _coordinator_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(_RETRY_PAUSE_SECS)
        request = [ConsumerGroupTopicPartitions(group_id)]
        future = admin.list_consumer_group_offsets(request, request_timeout=timeout)[group_id]
