"""The snapshot of consumer groups' committed offsets on the backed-up topics.

Taken before the run reads the end offsets it copies up to (see
docs/format.md, "Consistency"): a committed offset never exceeds the end
offset that existed when it was committed, so every offset in the snapshot
is covered by the data of the increment that holds it.
"""

from __future__ import annotations

from collections.abc import Collection
from concurrent.futures import Future
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KafkaOperationError
from kbackup.core.kafka import kafka_error_of, translate_kafka_error
from kbackup.core.logs import get_logger
from kbackup.format.manifest import ConsumerGroupsSnapshot, GroupOffset, GroupSnapshot, utc_now_iso

log = get_logger("backup.groups")

#: Offset requests in flight at once (one per group: the admin API takes a single group per request).
_CONCURRENT_GROUP_REQUESTS = 32
#: A group deleted between listing and reading its offsets is simply not in the snapshot.
_GONE_GROUP_CODES = {KafkaError.GROUP_ID_NOT_FOUND}


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
    try:
        listing = admin.list_consumer_groups(request_timeout=timeout).result(timeout + 5)
    except KafkaException as exc:
        raise translate_kafka_error(exc, action="list consumer groups", connection=connection) from None
    if listing.errors:
        # A broker that did not answer would leave its groups out: an incomplete snapshot
        # would silently move fewer groups across, so the run stops instead.
        first = listing.errors[0]
        raise KafkaOperationError(
            f"listing consumer groups on {','.join(connection.bootstrap_servers)} was incomplete: {first}",
            retryable=True,
        )
    states = {group.group_id: kafka_state_name(group.state) for group in listing.valid}
    group_ids = sorted(states)
    snapshots: list[GroupSnapshot] = []
    for start in range(0, len(group_ids), _CONCURRENT_GROUP_REQUESTS):
        batch = group_ids[start : start + _CONCURRENT_GROUP_REQUESTS]
        futures: dict[str, Future[Any]] = {}
        for group_id in batch:
            futures.update(
                admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group_id)], request_timeout=timeout
                )
            )
        for group_id in batch:
            try:
                result = futures[group_id].result(timeout + 5)
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
