"""What a backup run asks the source cluster's admin API: topics, offsets, configs, groups.

Every request has a timeout, and every failure becomes a project error that
names the servers and keeps Kafka's error code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource, ConfigSource
from confluent_kafka.admin._listoffsets import OffsetSpec

from kbackup.backup.groups import snapshot_consumer_groups
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KBackupError
from kbackup.core.kafka.clients import KafkaClients, translate_kafka_error
from kbackup.core.types import TopicPartitionKey
from kbackup.format.manifest import ConsumerGroupsSnapshot, TopicEntry

#: How long a topic whose metadata carries an error is asked about again before the run fails.
METADATA_RETRY_SECS = 30.0


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    partitions: int
    replication_factor: int


@dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str | None
    topics: dict[str, TopicMetadata]
    #: Topics the cluster listed with an error (e.g. no leader yet): not backed up this time.
    unavailable: dict[str, str] = field(default_factory=dict)


class SourceCluster:
    """The admin side of the source cluster, for one backup run."""

    def __init__(self, clients: KafkaClients, *, request_timeout: float) -> None:
        self.clients = clients
        self.connection: KafkaConnection = clients.connection
        self.request_timeout = request_timeout
        self.admin: AdminClient = clients.admin()

    @property
    def servers(self) -> str:
        return ",".join(self.connection.bootstrap_servers)

    def _error(self, exc: BaseException, action: str) -> KBackupError:
        return translate_kafka_error(exc, action=action, connection=self.connection)

    def _wait(self, future: Future[Any], action: str) -> Any:
        try:
            return future.result(self.request_timeout + 5)
        except KafkaException as exc:
            raise self._error(exc, action) from None
        except TimeoutError:
            raise self._error(TimeoutError(f"no answer within {self.request_timeout:g}s"), action) from None

    def metadata(self, wanted: Callable[[Iterable[str]], list[str]] | None = None) -> ClusterMetadata:
        """Topics and partition counts; ``KafkaUnreachableError`` naming the servers if no broker answers.

        ``wanted`` picks, from topic names, those the caller will copy (None: all of them).
        """
        # A wanted topic whose metadata carries an error (a leader being elected, a topic still
        # being created) must never be dropped from a backup silently: ask again for a while; the
        # runner then fails naming it. Errors of topics nobody wants cost no wait.
        deadline = time.monotonic() + METADATA_RETRY_SECS
        while True:
            metadata = self.clients.list_topics(self.admin)
            failing = [name for name, topic in metadata.topics.items() if topic.error is not None]
            if not failing or (wanted is not None and not wanted(failing)):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        topics = {}
        unavailable = {}
        for name, topic in metadata.topics.items():
            if topic.error is not None:
                unavailable[name] = str(topic.error)
                continue
            replicas = [len(p.replicas) for p in topic.partitions.values()]
            topics[name] = TopicMetadata(
                name=name, partitions=len(topic.partitions), replication_factor=max(replicas, default=0)
            )
        return ClusterMetadata(cluster_id=metadata.cluster_id, topics=topics, unavailable=unavailable)

    def offsets(
        self, partitions: Iterable[TopicPartitionKey], *, read_committed: bool
    ) -> dict[TopicPartitionKey, tuple[int, int]]:
        """``(log start offset, end offset)`` per partition.

        Under ``read_committed`` the end is the last stable offset: every record
        below it is committed or aborted, none is in an open transaction.
        """
        keys = list(partitions)
        if not keys:
            return {}
        isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        specs: Any = OffsetSpec  # its factory methods are untyped
        ends = self._list_offsets(keys, specs.latest(), isolation, "read the end offsets")
        starts = self._list_offsets(keys, specs.earliest(), isolation, "read the log start offsets")
        return {key: (starts[key], ends[key]) for key in keys}

    def _list_offsets(
        self, keys: list[TopicPartitionKey], spec: OffsetSpec, isolation: IsolationLevel, action: str
    ) -> dict[TopicPartitionKey, int]:
        try:
            futures = self.admin.list_offsets(
                {TopicPartition(topic, partition): spec for topic, partition in keys},
                isolation_level=isolation,
                request_timeout=self.request_timeout,
            )
        except KafkaException as exc:
            raise self._error(exc, action) from None
        result = {}
        for tp, future in futures.items():
            info = self._wait(future, f"{action} of {tp.topic}/{tp.partition}")
            result[(tp.topic, tp.partition)] = int(info.offset)
        return result

    def topic_entries(self, metadata: ClusterMetadata, topics: Collection[str]) -> list[TopicEntry]:
        """Partition count, replication factor, topic id and non-default configs of each topic."""
        names = sorted(topics)
        if not names:
            return []
        configs = self._topic_configs(names)
        topic_ids = self._topic_ids(names)
        return [
            TopicEntry(
                name=name,
                partitions=metadata.topics[name].partitions,
                replication_factor=metadata.topics[name].replication_factor,
                topic_id=topic_ids.get(name),
                configs=configs.get(name, {}),
            )
            for name in names
        ]

    def _topic_configs(self, names: list[str]) -> dict[str, dict[str, str]]:
        try:
            futures = self.admin.describe_configs(
                [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names],
                request_timeout=self.request_timeout,
            )
        except KafkaException as exc:
            raise self._error(exc, "describe topic configs") from None
        result: dict[str, dict[str, str]] = {}
        for resource, future in futures.items():
            entries = self._wait(future, f"describe the configs of topic {resource.name}")
            # Only what was set on the topic itself: broker defaults belong to the target's broker.
            result[resource.name] = {
                name: entry.value
                for name, entry in sorted(entries.items())
                if _source_of(entry) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
                and not entry.is_sensitive
                and entry.value is not None
            }
        return result

    def _topic_ids(self, names: list[str]) -> dict[str, str | None]:
        try:
            futures = self.admin.describe_topics(TopicCollection(names), request_timeout=self.request_timeout)
        except KafkaException as exc:
            raise self._error(exc, "describe topics") from None
        result: dict[str, str | None] = {}
        for name, future in futures.items():
            description = self._wait(future, f"describe topic {name}")
            topic_id = getattr(description, "topic_id", None)
            result[name] = str(topic_id) if topic_id is not None else None
        return result

    def consumer_groups(self, topics: Collection[str]) -> ConsumerGroupsSnapshot:
        return snapshot_consumer_groups(
            self.admin, topics, connection=self.connection, timeout=self.request_timeout
        )


def _source_of(entry: Any) -> int:
    source = entry.source
    return int(source.value) if hasattr(source, "value") else int(source)
