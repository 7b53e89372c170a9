"""Admin requests kafka-backup makes, on top of :class:`kbackup.core.kafka.clients.KafkaClients`.

Each function waits for its futures and turns Kafka errors into project
errors that keep Kafka's error code and name the group or topic involved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KBackupError, NotFoundError
from kbackup.core.kafka.clients import translate_kafka_error
from kbackup.core.retry import call_with_retries
from kbackup.core.types import TopicPartitionKey

Result = TypeVar("Result")

#: Group requests in flight at once (Kafka's group APIs take a single group per request);
#: also the backup's group snapshot.
CONCURRENT_GROUP_REQUESTS = 50

#: Group states in which a group has members that would overwrite or reject new offsets.
ACTIVE_GROUP_STATES = {
    "STABLE",
    "PREPARING_REBALANCING",
    "COMPLETING_REBALANCING",
    "ASSIGNING",
    "RECONCILING",
}


@dataclass(frozen=True)
class PartitionRange:
    log_start: int
    log_end: int


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    #: EMPTY, STABLE, DEAD (no such group), ...
    state: str
    #: "client-id@host" of each member.
    members: tuple[str, ...]

    @property
    def is_active(self) -> bool:
        return bool(self.members) or self.state in ACTIVE_GROUP_STATES


class Admin:
    """The admin requests of one cluster, with errors that name what was asked for."""

    def __init__(self, client: AdminClient, connection: KafkaConnection, *, retry_secs: float = 30.0) -> None:
        self.client = client
        self.connection = connection
        self.timeout = connection.connect_timeout_secs
        self.retry_secs = retry_secs

    def _wait(self, issue: Callable[[], Future[Result]], action: str) -> Result:
        """Send a request and wait for it; retry retriable Kafka errors (a coordinator still
        loading, a leader moving) with backoff for up to ``retry_secs``."""

        def once() -> Result:
            try:
                return issue().result(timeout=max(self.timeout, 30.0))
            except KafkaException as exc:
                raise translate_kafka_error(exc, action=action, connection=self.connection) from None
            except TimeoutError:
                raise translate_kafka_error(
                    TimeoutError(f"no answer within {self.timeout:g}s"),
                    action=action,
                    connection=self.connection,
                ) from None

        return call_with_retries(once, within_secs=self.retry_secs, first_delay_secs=0.1, max_delay_secs=2.0)

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Partition count of each topic; NotFoundError naming the topics that do not exist."""
        wanted = sorted(set(topics))
        try:
            metadata = self.client.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise translate_kafka_error(exc, action="list topics", connection=self.connection) from None
        missing = [topic for topic in wanted if topic not in metadata.topics]
        if missing:
            raise NotFoundError(
                f"topic(s) {', '.join(missing)} do not exist on "
                f"{','.join(self.connection.bootstrap_servers)}",
                hint="restore the topics first, or fix the topic mapping",
            )
        return {topic: len(metadata.topics[topic].partitions) for topic in wanted}

    def partition_ranges(
        self, partitions: Iterable[TopicPartitionKey]
    ) -> dict[TopicPartitionKey, PartitionRange]:
        """Log start and (last stable) end offset of each partition."""
        keys = sorted(set(partitions))
        if not keys:
            return {}
        starts = self._list_offsets({key: OffsetSpec.earliest() for key in keys})  # type: ignore[no-untyped-call]
        ends = self._list_offsets({key: OffsetSpec.latest() for key in keys})  # type: ignore[no-untyped-call]
        return {key: PartitionRange(log_start=starts[key], log_end=ends[key]) for key in keys}

    def offsets_for_times(self, requests: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """The earliest offset whose timestamp is >= the given ms, per partition (-1: none, i.e. the end)."""
        return self._list_offsets({key: OffsetSpec.for_timestamp(ts) for key, ts in requests.items()})

    def _list_offsets(self, specs: Mapping[TopicPartitionKey, Any]) -> dict[TopicPartitionKey, int]:
        if not specs:
            return {}
        result = {}
        for (topic, partition), spec in specs.items():
            tp = TopicPartition(topic, partition)
            info = self._wait(
                lambda tp=tp, spec=spec: self.client.list_offsets(  # type: ignore[misc]
                    {tp: spec}, isolation_level=IsolationLevel.READ_COMMITTED
                )[tp],
                f"list offsets of {topic}/{partition}",
            )
            result[(topic, partition)] = int(info.offset)
        return result

    def _wait_each(
        self, keys: Iterable[str], issue: Callable[[str], Future[Result]], action: Callable[[str], str]
    ) -> dict[str, Result]:
        """One request per key, up to CONCURRENT_GROUP_REQUESTS in flight (Kafka's group APIs answer one
        group per request, and waiting for each in turn made planning for 1,000 groups slow).
        A request that fails is sent again alone, with ``_wait``'s retries and error."""
        ordered = sorted(set(keys))
        results: dict[str, Result] = {}
        for begin in range(0, len(ordered), CONCURRENT_GROUP_REQUESTS):
            pending: dict[str, Future[Result] | None] = {}
            for key in ordered[begin : begin + CONCURRENT_GROUP_REQUESTS]:
                try:
                    pending[key] = issue(key)
                except KafkaException:
                    pending[key] = None
            for key, future in pending.items():
                try:
                    if future is not None:
                        results[key] = future.result(timeout=max(self.timeout, 30.0))
                        continue
                except (KafkaException, TimeoutError):
                    pass
                results[key] = self._wait(lambda key=key: issue(key), action(key))  # type: ignore[misc]
        return results

    def committed_offsets(self, group_id: str) -> dict[TopicPartitionKey, int]:
        """Every committed offset of a group (empty if the group has none or does not exist)."""
        return self.committed_offsets_of([group_id])[group_id]

    def committed_offsets_of(self, group_ids: Iterable[str]) -> dict[str, dict[TopicPartitionKey, int]]:
        """Every committed offset of each group (empty if a group has none or does not exist)."""
        answers = self._wait_each(
            group_ids,
            lambda group_id: self.client.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group_id)]
            )[group_id],
            lambda group_id: f"list the committed offsets of group {group_id}",
        )
        return {group_id: self._offsets_of(group_id, answer) for group_id, answer in answers.items()}

    def _offsets_of(self, group_id: str, answer: Any) -> dict[TopicPartitionKey, int]:
        offsets: dict[TopicPartitionKey, int] = {}
        for tp in answer.topic_partitions or []:
            if tp.error is not None:
                raise translate_kafka_error(
                    KafkaException(tp.error),
                    action=f"read group {group_id}'s offset on {tp.topic}/{tp.partition}",
                    connection=self.connection,
                )
            if tp.offset >= 0:
                offsets[(tp.topic, tp.partition)] = int(tp.offset)
        return offsets

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        answers = self._wait_each(
            group_ids,
            lambda group_id: self.client.describe_consumer_groups([group_id])[group_id],
            lambda group_id: f"describe consumer group {group_id}",
        )
        result = {}
        for group_id, description in answers.items():
            members = tuple(f"{member.client_id}@{member.host}" for member in description.members or [])
            state = getattr(description.state, "name", str(description.state))
            result[group_id] = GroupDescription(group_id=group_id, state=state, members=members)
        return result

    def list_group_ids(self) -> list[str]:
        answer = self._wait(self.client.list_consumer_groups, "list consumer groups")
        return sorted(listing.group_id for listing in answer.valid)

    def alter_offsets(self, group_id: str, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Commit ``offsets`` for an empty group (the broker refuses while members are active)."""
        request = ConsumerGroupTopicPartitions(
            group_id,
            [TopicPartition(topic, partition, offset) for (topic, partition), offset in offsets.items()],
        )
        answer = self._wait(
            lambda: self.client.alter_consumer_group_offsets([request])[group_id],
            f"commit new offsets for group {group_id}",
        )
        for tp in answer.topic_partitions or []:
            if tp.error is not None:
                raise translate_kafka_error(
                    KafkaException(tp.error),
                    action=f"commit group {group_id}'s offset on {tp.topic}/{tp.partition}",
                    connection=self.connection,
                )

    def delete_group(self, group_id: str) -> None:
        try:
            self._wait(
                lambda: self.client.delete_consumer_groups([group_id])[group_id],
                f"delete consumer group {group_id}",
            )
        except KBackupError as exc:
            if "GROUP_ID_NOT_FOUND" not in exc.message:
                raise


def open_admin(connection: KafkaConnection) -> Admin:
    from kbackup.core.kafka.clients import KafkaClients

    return Admin(KafkaClients(connection).admin(), connection)
