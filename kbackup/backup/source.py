"""What a backup run asks the source cluster's admin API: topics, offsets, configs, groups.

Every request goes through :class:`kbackup.core.kafka.Admin`: it has a timeout, and every
failure becomes a project error that names the servers and keeps Kafka's error code.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from kbackup.backup.groups import snapshot_consumer_groups
from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import Admin, ClusterMetadata, KafkaClients
from kbackup.core.retry import call_with_retries
from kbackup.core.types import TopicPartitionKey
from kbackup.format.manifest import ConsumerGroupsSnapshot, TopicEntry

#: How long a topic whose metadata carries an error is asked about again before the run fails.
METADATA_RETRY_SECS = 30.0


class SourceCluster:
    """The admin side of the source cluster, for one backup run."""

    def __init__(
        self, clients: KafkaClients, *, request_timeout: float, patience_secs: float | None = None
    ) -> None:
        self.clients = clients
        self.connection: KafkaConnection = clients.connection
        self.admin = Admin(clients, request_timeout=request_timeout, retry_secs=request_timeout)
        #: How long the group snapshot is taken again while it fails in a way retrying may help
        #: (the run's ``stall_timeout_secs``; the request timeout unless given).
        self.patience_secs = request_timeout if patience_secs is None else patience_secs

    @property
    def servers(self) -> str:
        return self.admin.servers

    def metadata(self, wanted: Callable[[Iterable[str]], list[str]] | None = None) -> ClusterMetadata:
        """Topics and partition counts; ``KafkaUnreachableError`` naming the servers if no broker answers.

        ``wanted`` picks, from topic names, those the caller will copy (None: all of them).
        """

        # A wanted topic whose metadata carries an error (a leader being elected, a topic still
        # being created) must never be dropped from a backup silently: ask again for a while; the
        # runner then fails naming it. Errors of topics nobody wants cost no wait.
        def complete(metadata: ClusterMetadata) -> bool:
            failing = list(metadata.unavailable)
            return not failing or (wanted is not None and not wanted(failing))

        # Only the answer is polled: a cluster that does not answer fails within the connection's
        # own timeout, as the first request of every command does.
        return call_with_retries(
            self.admin.metadata,
            within_secs=METADATA_RETRY_SECS,
            delay_secs=0.5,
            retry_errors=False,
            until=complete,
        )

    def offsets(
        self, partitions: Iterable[TopicPartitionKey], *, read_committed: bool
    ) -> dict[TopicPartitionKey, tuple[int, int]]:
        """``(log start offset, end offset)`` per partition.

        Under ``read_committed`` the end is the last stable offset: every record below it is
        committed or aborted, none is in an open transaction.
        """
        ranges = self.admin.partition_ranges(partitions, read_committed=read_committed)
        return {key: (item.log_start, item.log_end) for key, item in ranges.items()}

    def topic_entries(self, metadata: ClusterMetadata, topics: Collection[str]) -> list[TopicEntry]:
        """Partition count, replication factor, topic id and non-default configs of each topic."""
        names = sorted(topics)
        if not names:
            return []
        configs = self.admin.topic_configs(names)
        topic_ids = self.admin.topic_ids(names)
        return [
            TopicEntry(
                name=name,
                partitions=metadata.topics[name].partitions,
                replication_factor=metadata.topics[name].replication_factor,
                topic_id=topic_ids.get(name),
                # Only what was set on the topic itself: broker defaults belong to the target's broker.
                configs={
                    key: entry.value
                    for key, entry in configs.get(name, {}).items()
                    if entry.set_on_topic and not entry.sensitive and entry.value is not None
                },
            )
            for name in names
        ]

    def consumer_groups(self, topics: Collection[str]) -> ConsumerGroupsSnapshot:
        """The group snapshot, taken again after a failure that retrying may help, for up to
        ``patience_secs`` and at least twice: the listing asks every broker the client knows, and
        one stopped (a rolling restart) leaves it unanswered until the request times out, which
        spends the admin's own retry budget, for as long as the node is down."""
        return call_with_retries(
            lambda: snapshot_consumer_groups(self.admin, topics),
            within_secs=self.patience_secs,
            delay_secs=1.0,
            max_delay_secs=5.0,
            min_attempts=2,
            min_attempts_delay_secs=0.5,
        )
