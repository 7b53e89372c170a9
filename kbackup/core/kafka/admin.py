"""Every admin request kafka-backup makes, on top of :class:`kbackup.core.kafka.clients.KafkaClients`.

One class for all of them, so that offsets, configs, metadata and consumer-group requests are
made in one way: each waits for its futures with a timeout, retries what Kafka says may work
later (a coordinator loading, a leader moving) with backoff for up to ``retry_secs``, and turns
every failure into a project error that keeps Kafka's error code and names the topic, partition
or group asked about. Results are plain values (dataclasses, dicts), never client objects.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KafkaOperationError, KBackupError, NotFoundError
from kbackup.core.kafka.clients import KafkaClients, kafka_error_of, translate_kafka_error
from kbackup.core.retry import call_with_retries
from kbackup.core.types import TopicPartitionKey

Result = TypeVar("Result")
Key = TypeVar("Key")

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
#: Answers of a broker that just started (or moved a group coordinator), for a few seconds.
COORDINATOR_BUSY_CODES = {
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
}
#: Answers that mean the topic or partition does not exist (yet).
NO_SUCH_PARTITION_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
}


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    partitions: int
    replication_factor: int


@dataclass(frozen=True)
class ClusterMetadata:
    """What one metadata request said about a cluster."""

    cluster_id: str | None
    #: Topics the cluster listed without an error.
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    #: Topics the cluster listed with an error (no leader yet, ...), and the error.
    unavailable: dict[str, str] = field(default_factory=dict)
    brokers: tuple[int, ...] = ()

    def partition_counts(self) -> dict[str, int]:
        return {name: topic.partitions for name, topic in self.topics.items()}


@dataclass(frozen=True)
class PartitionRange:
    log_start: int
    log_end: int


@dataclass(frozen=True)
class ConfigValue:
    value: str | None
    #: Set on the topic itself (not a broker or cluster default).
    set_on_topic: bool
    sensitive: bool


@dataclass(frozen=True)
class AclEntry:
    """One ACL binding, every part as Kafka names it (``TOPIC``, ``PREFIXED``, ``User:app``, ...)."""

    resource_type: str
    resource_name: str
    pattern_type: str
    principal: str
    host: str
    operation: str
    permission: str


@dataclass(frozen=True)
class ScramCredential:
    #: ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``.
    mechanism: str
    iterations: int


@dataclass(frozen=True)
class DynamicConfig:
    """A broker config set at run time (not in server.properties); ``value`` None when sensitive."""

    value: str | None
    sensitive: bool


@dataclass(frozen=True)
class DynamicBrokerConfigs:
    """What one broker's config description says was set at run time, by scope."""

    #: Set on this broker alone (``DYNAMIC_BROKER_CONFIG``).
    broker: dict[str, DynamicConfig]
    #: Set as the default of every broker (``DYNAMIC_DEFAULT_BROKER_CONFIG``); seen through this broker.
    cluster_default: dict[str, DynamicConfig]
    #: The broker's ``authorizer.class.name`` ("" when it runs none).
    authorizer: str


@dataclass(frozen=True)
class TopicSpec:
    """A topic to create."""

    name: str
    partitions: int
    #: -1: the broker's ``default.replication.factor``.
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TopicRefused:
    """Why the broker did not create a topic."""

    #: Kafka's error name: TOPIC_ALREADY_EXISTS, INVALID_CONFIG, POLICY_VIOLATION, ...
    code_name: str | None
    #: The broker's own words.
    reason: str
    #: The failure as a project error, to raise when the caller has nothing better to say.
    error: KBackupError


@dataclass(frozen=True)
class CommittedOffset:
    topic: str
    partition: int
    offset: int
    metadata: str | None = None
    leader_epoch: int | None = None


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    #: EMPTY, STABLE, DEAD (no such group), ...
    state: str
    #: "client-id@host" of each member.
    members: tuple[str, ...]
    #: Topics assigned to its members (what the group consumes now).
    topics: frozenset[str] = frozenset()

    @property
    def is_active(self) -> bool:
        return bool(self.members) or self.state in ACTIVE_GROUP_STATES


def kafka_state_name(state: Any) -> str | None:
    """A group state as Kafka names it: ``PREPARING_REBALANCING`` becomes ``PreparingRebalance``."""
    if state is None:
        return None
    name = str(getattr(state, "name", state))
    words = {"REBALANCING": "REBALANCE"}
    return "".join(words.get(part, part).capitalize() for part in name.split("_"))


#: Errors of a request sent to a partition leader that has changed: its metadata is fetched again
#: before the request is retried (see ``Admin._retried``).
LEADER_CHANGE_CODE_NAMES = frozenset(
    {
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "NOT_LEADER_FOR_PARTITION",
        "LEADER_NOT_AVAILABLE",
        # librdkafka's "No leaders found" (retried only with that text: clients._no_leader_yet).
        "_NOENT",
    }
)


#: Seconds librdkafka may take over a request to a group's coordinator: its longest admin timeout,
#: so that it never times one out while the client lives. librdkafka (2.16 and before) aborts the
#: whole process when such a request times out inside the library while the coordinator is down
#: and the library later finds the coordinator (assertion `eonce->refcnt > 0`,
#: confluentinc/librdkafka#4605, fixed by 731d335 in no release yet). We wait our own timeout on
#: the future instead (:meth:`Admin._answer`); tests/integration/test_fault_nodes_reset.py
#: (``test_a_process_reading_groups_across_their_coordinators_loss_lives_on``) reproduces the abort.
COORDINATOR_REQUEST_TIMEOUT_SECS = 3600.0


class Admin:
    """The admin requests of one cluster, with errors that name what was asked for."""

    def __init__(
        self, clients: KafkaClients, *, request_timeout: float | None = None, retry_secs: float = 30.0
    ) -> None:
        self.clients = clients
        self.connection: KafkaConnection = clients.connection
        self.client: AdminClient = clients.admin()
        #: Seconds one request may take (the connection's connect timeout unless given).
        self.timeout = (
            request_timeout if request_timeout is not None else self.connection.connect_timeout_secs
        )
        self.retry_secs = retry_secs

    @property
    def servers(self) -> str:
        return ",".join(self.connection.bootstrap_servers)

    # -- waiting ----------------------------------------------------------------------------------

    def _answer(self, future: Future[Result]) -> Result:
        """Wait for one answer, telling the observer: a cluster that went away shows as a long wait."""
        observer = self.clients.observer
        if observer is not None:
            observer.cluster_waiting()
        try:
            answer = future.result(timeout=max(self.timeout, 30.0))
        finally:
            self.clients.serve_callbacks(self.client)  # the errors met while waiting, counted first
        if observer is not None:
            observer.cluster_answered()
        return answer

    def _result(self, future: Future[Result], action: str) -> Result:
        try:
            return self._answer(future)
        except KafkaException as exc:
            raise translate_kafka_error(exc, action=action, connection=self.connection) from None
        except TimeoutError:
            raise self._unanswered(action) from None

    def _unanswered(self, action: str) -> KBackupError:
        """A request not answered in time: a broker that went away mid-request (a node restarted)
        leaves it so, and the same request again goes to the brokers the cluster lists then."""
        error = translate_kafka_error(
            TimeoutError(f"no answer within {self.timeout:g}s"), action=action, connection=self.connection
        )
        error.retryable = True
        return error

    def _retried(
        self,
        attempt: Callable[[], Result],
        until: Callable[[Result], bool] | None = None,
        *,
        leaders_of: Sequence[str] = (),
    ) -> Result:
        """``attempt`` tried again while its error is retryable. ``leaders_of``: the topics whose
        partition leaders the request goes to; their metadata is fetched again before a retry of a
        leader-change error (librdkafka's admin client keeps sending ListOffsets and DeleteRecords
        with the leader epoch it cached, and the leader answers FENCED_LEADER_EPOCH until the cache
        expires, five minutes later: seen after a node's restart moved leadership back to it)."""

        def report(error: KBackupError, _delay: float) -> None:
            kind = (
                error.code_name if isinstance(error, KafkaOperationError) and error.code_name else error.kind
            )
            if self.clients.observer is not None:
                self.clients.observer.cluster_error(kind)
            if leaders_of and kind in LEADER_CHANGE_CODE_NAMES:
                self._refresh_metadata(leaders_of)

        return call_with_retries(
            attempt,
            within_secs=self.retry_secs,
            delay_secs=0.1,
            max_delay_secs=2.0,
            until=until,
            on_retry=report,
        )

    def _refresh_metadata(self, topics: Sequence[str]) -> None:
        """Ask for the topics' metadata: the answer replaces what the client cached (leaders and
        their epochs). A failure here is left to the retried request to report."""
        for topic in topics:
            try:
                self.client.list_topics(topic=topic, timeout=self.timeout)
            except KafkaException:
                return

    def _wait(
        self,
        issue: Callable[[], Future[Result]],
        action: str,
        until: Callable[[Result], bool] | None = None,
        *,
        leaders_of: Sequence[str] = (),
    ) -> Result:
        """Send a request and wait for it, again while Kafka says retrying may help (or while
        ``until`` does not accept the answer); ``leaders_of`` as :meth:`_retried` says."""

        def once() -> Result:
            try:
                future = issue()
            except KafkaException as exc:
                raise translate_kafka_error(exc, action=action, connection=self.connection) from None
            return self._result(future, action)

        return self._retried(once, until, leaders_of=leaders_of)

    def _each(
        self, keys: Iterable[str], issue: Callable[[str], Future[Result]], action: Callable[[str], str]
    ) -> dict[str, Result | KBackupError]:
        """One request per key, up to CONCURRENT_GROUP_REQUESTS in flight (Kafka's group APIs answer
        one group per request, and waiting for each in turn made planning for 1,000 groups slow).
        A request that fails is sent again alone with ``_wait``'s retries; what still fails is
        returned as the error for that key."""
        ordered = sorted(set(keys))
        results: dict[str, Result | KBackupError] = {}
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
                        results[key] = self._answer(future)
                        continue
                except (KafkaException, TimeoutError):
                    pass
                try:
                    results[key] = self._wait(lambda key=key: issue(key), action(key))  # type: ignore[misc]
                except KBackupError as error:
                    results[key] = error
        return results

    @staticmethod
    def _raise_first(results: Mapping[str, Result | KBackupError]) -> dict[str, Result]:
        for value in results.values():
            if isinstance(value, KBackupError):
                raise value
        return dict(results)  # type: ignore[arg-type]

    # -- metadata ---------------------------------------------------------------------------------

    def metadata(self, *, action: str = "read cluster metadata") -> ClusterMetadata:
        """One metadata request; ``KafkaUnreachableError`` naming the servers if no broker answers,
        an authentication error when the credentials were refused."""
        answer = self.clients.list_topics(self.client, action=action)
        topics = {}
        unavailable = {}
        for name, topic in answer.topics.items():
            if topic.error is not None:
                unavailable[name] = str(topic.error)
                continue
            replicas = [len(partition.replicas) for partition in topic.partitions.values()]
            topics[name] = TopicMetadata(
                name=name, partitions=len(topic.partitions), replication_factor=max(replicas, default=0)
            )
        return ClusterMetadata(
            cluster_id=answer.cluster_id,
            topics=topics,
            unavailable=unavailable,
            brokers=tuple(sorted(answer.brokers)),
        )

    def cluster_id(self) -> str | None:
        return self.metadata().cluster_id

    def partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        """Partition count of each topic; NotFoundError naming the topics that do not exist."""
        wanted = sorted(set(topics))
        counts = self.metadata(action="list topics").partition_counts()
        missing = [topic for topic in wanted if topic not in counts]
        if missing:
            raise NotFoundError(
                f"topic(s) {', '.join(missing)} do not exist on {self.servers}",
                hint="restore the topics first, or fix the topic mapping",
            )
        return {topic: counts[topic] for topic in wanted}

    # -- offsets ----------------------------------------------------------------------------------

    def list_offsets(
        self,
        partitions: Iterable[TopicPartitionKey],
        which: Literal["earliest", "latest"] | int,
        *,
        read_committed: bool = True,
        missing_ok: bool = False,
    ) -> dict[TopicPartitionKey, int]:
        """The earliest or latest offset of each partition, or (``which`` an int, ms) the first offset
        whose timestamp is at or after it (-1: none, i.e. the end), in one request.

        ``latest`` under ``read_committed`` is the last stable offset: every record below it is
        committed or aborted. With ``missing_ok`` a partition that does not exist is left out of
        the answer instead of failing the request.
        """
        keys = sorted(set(partitions))
        if not keys:
            return {}
        spec: Any = OffsetSpec  # its factory methods are untyped
        chosen = (
            spec.earliest()
            if which == "earliest"
            else spec.latest()
            if which == "latest"
            else spec.for_timestamp(which)
        )
        isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        what = which if isinstance(which, str) else f"timestamp {which}"
        action = f"list the {what} offsets of {len(keys)} partition(s)"

        def request(wanted: list[TopicPartitionKey]) -> dict[TopicPartition, Future[Any]]:
            return self.client.list_offsets(
                {TopicPartition(topic, partition): chosen for topic, partition in wanted},
                isolation_level=isolation,
                request_timeout=self.timeout,
            )

        try:
            futures = request(keys)
        except KafkaException as exc:
            raise translate_kafka_error(exc, action=action, connection=self.connection) from None
        result: dict[TopicPartitionKey, int] = {}
        for tp, future in futures.items():
            key = (tp.topic, tp.partition)
            where = f"list the {what} offset of {key[0]}/{key[1]}"
            try:
                result[key] = int(self._answer(future).offset)
                continue
            except KafkaException as exc:
                error = kafka_error_of(exc)
                if missing_ok and error is not None and error.code() in NO_SUCH_PARTITION_CODES:
                    continue
                first: KBackupError = translate_kafka_error(exc, action=where, connection=self.connection)
            except TimeoutError:
                first = self._unanswered(where)
            if not first.retryable:
                raise first
            if isinstance(first, KafkaOperationError) and first.code_name in LEADER_CHANGE_CODE_NAMES:
                self._refresh_metadata([key[0]])
            result[key] = self._wait(
                lambda key=key: request([key])[TopicPartition(*key)],  # type: ignore[misc]
                where,
                leaders_of=[key[0]],
            ).offset
        return result

    def partition_ranges(
        self, partitions: Iterable[TopicPartitionKey], *, read_committed: bool = True
    ) -> dict[TopicPartitionKey, PartitionRange]:
        """Log start and end offset (the last stable one under ``read_committed``) of each partition."""
        keys = sorted(set(partitions))
        ends = self.list_offsets(keys, "latest", read_committed=read_committed)
        starts = self.list_offsets(keys, "earliest", read_committed=read_committed)
        return {key: PartitionRange(log_start=starts[key], log_end=ends[key]) for key in keys}

    def offsets_for_times(self, requests: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """The earliest offset whose timestamp is >= the given ms, per partition (-1: none, i.e. the end)."""
        result: dict[TopicPartitionKey, int] = {}
        for timestamp in sorted(set(requests.values())):
            keys = [key for key, wanted in requests.items() if wanted == timestamp]
            result.update(self.list_offsets(keys, timestamp))
        return result

    # -- topics -----------------------------------------------------------------------------------

    def _configs(
        self, resources: list[ConfigResource], what: Callable[[ConfigResource], str]
    ) -> dict[str, dict[str, ConfigValue]]:
        if not resources:
            return {}
        answers: dict[ConfigResource, Any] = self._answers(
            lambda: self.client.describe_configs(resources, request_timeout=self.timeout),
            "describe configs",
            lambda resource: f"describe the configs of {what(resource)}",
        )
        result: dict[str, dict[str, ConfigValue]] = {}
        for resource, entries in answers.items():
            result[resource.name] = {
                name: ConfigValue(
                    value=entry.value,
                    set_on_topic=_source_of(entry) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value,
                    sensitive=bool(entry.is_sensitive),
                )
                for name, entry in sorted(entries.items())
            }
        return result

    def _wait_request(self, issue: Callable[[], Result], action: str) -> Result:
        """A request whose answer is a mapping of futures: sending it may fail, each future too."""
        try:
            return issue()
        except KafkaException as exc:
            raise translate_kafka_error(exc, action=action, connection=self.connection) from None

    def _answers(
        self,
        issue: Callable[[], Mapping[Key, Future[Result]]],
        action: str,
        action_of: Callable[[Key], str],
        *,
        leaders_of: Sequence[str] = (),
    ) -> dict[Key, Result]:
        """A request whose answer is a mapping of futures, each waited for, and the whole request
        sent again while an answer's error is retryable: a node stopped mid-request (a rolling
        restart) leaves it unanswered, and the same request again goes to a broker that is up."""

        def once() -> dict[Key, Result]:
            futures = self._wait_request(issue, action)
            return {key: self._result(future, action_of(key)) for key, future in futures.items()}

        return self._retried(once, leaders_of=leaders_of)

    def topic_configs(self, names: Iterable[str]) -> dict[str, dict[str, ConfigValue]]:
        """Every config of each topic, with where its value comes from."""
        return self._configs(
            [ConfigResource(ConfigResource.Type.TOPIC, name) for name in sorted(set(names))],
            lambda resource: f"topic {resource.name}",
        )

    def broker_configs(self, broker_id: int) -> dict[str, ConfigValue]:
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
        return self._configs([resource], lambda _resource: f"broker {broker_id}")[str(broker_id)]

    def dynamic_broker_configs(self, broker_id: int) -> DynamicBrokerConfigs:
        """The configs set at run time on ``broker_id`` and as every broker's default.

        confluent-kafka cannot name the cluster-default resource (a broker named ""), so the
        defaults are read through a broker's description: each entry's synonyms list every source
        that sets it, the default among them even where the broker overrides it.
        """
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
        action = f"describe the configs of broker {broker_id}"
        entries = self._wait(
            lambda: self.client.describe_configs([resource], request_timeout=self.timeout)[resource], action
        )
        scopes: dict[int, dict[str, DynamicConfig]] = {
            ConfigSource.DYNAMIC_BROKER_CONFIG.value: {},
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value: {},
        }
        for entry in entries.values():
            for synonym in [entry, *(entry.synonyms or {}).values()]:
                scope = scopes.get(_source_of(synonym))
                if scope is not None:
                    sensitive = bool(entry.is_sensitive)
                    scope[synonym.name] = DynamicConfig(None if sensitive else synonym.value, sensitive)
        authorizer = entries.get("authorizer.class.name")
        return DynamicBrokerConfigs(
            broker=dict(sorted(scopes[ConfigSource.DYNAMIC_BROKER_CONFIG.value].items())),
            cluster_default=dict(sorted(scopes[ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value].items())),
            authorizer=(authorizer.value or "") if authorizer is not None else "",
        )

    # -- security ---------------------------------------------------------------------------------

    def cluster_operations(self) -> frozenset[str]:
        """What this connection's principal may do on the cluster resource (``DESCRIBE``, ...).

        Asked before listing ACLs: librdkafka drops the error of a DescribeAcls answer, so a
        principal refused (CLUSTER_AUTHORIZATION_FAILED) and a cluster without an authorizer
        (SECURITY_DISABLED) both read as an empty list of ACLs. A cluster without an authorizer
        answers every operation.
        """
        answer = self._wait(
            lambda: self.client.describe_cluster(
                include_authorized_operations=True, request_timeout=self.timeout
            ),
            "describe the cluster",
        )
        return frozenset(operation.name for operation in answer.authorized_operations or [])

    def describe_acls(self) -> list[AclEntry]:
        """Every ACL binding of the cluster (see :meth:`cluster_operations` for what an empty
        answer may mean)."""
        anything: Any = None  # the filter's stubs say str, but None is its "any name/principal/host"
        match_all = AclBindingFilter(
            ResourceType.ANY,
            anything,
            ResourcePatternType.ANY,
            anything,
            anything,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
        bindings = self._wait(
            lambda: self.client.describe_acls(match_all, request_timeout=self.timeout), "describe the ACLs"
        )
        entries = [
            AclEntry(
                # librdkafka names Kafka's CLUSTER resource type BROKER (both are 4 on the wire).
                resource_type=_CLUSTER_IN_LIBRDKAFKA.get(binding.restype.name, binding.restype.name),
                resource_name=binding.name,
                pattern_type=binding.resource_pattern_type.name,
                principal=binding.principal,
                host=binding.host,
                operation=binding.operation.name,
                permission=binding.permission_type.name,
            )
            for binding in bindings
        ]
        return sorted(entries, key=_acl_order)

    def scram_users(self) -> dict[str, list[ScramCredential]]:
        """Every SCRAM user with the mechanisms and iterations of its credentials (Kafka never
        hands out the salted password itself)."""

        def every_user() -> Future[dict[str, Any]]:
            # Asked for every user, the client answers with one future (for named users, one each).
            answer: Any = self.client.describe_user_scram_credentials(request_timeout=self.timeout)
            return answer  # type: ignore[no-any-return]

        answer = self._wait(every_user, "describe the SCRAM users")
        users: dict[str, list[ScramCredential]] = {}
        for user, description in sorted(answer.items()):
            credentials = [
                ScramCredential(info.mechanism.name.replace("_", "-"), int(info.iterations))
                for info in description.scram_credential_infos
            ]
            users[user] = sorted(credentials, key=lambda item: item.mechanism)
        return users

    def create_acls(self, entries: Iterable[AclEntry]) -> dict[AclEntry, KBackupError | None]:
        """Create ACL bindings in one request: None for each one the cluster holds now (creating a
        binding that exists changes nothing), else why it was refused (the authorizer's words)."""
        return self._acl_request(entries, _binding_of, "create")

    def delete_acls(self, entries: Iterable[AclEntry]) -> dict[AclEntry, KBackupError | None]:
        """Delete exactly these bindings (each as a filter matching only itself): None for each one
        deleted or already gone, else why not."""
        return self._acl_request(entries, _filter_of, "delete")

    def _acl_request(
        self,
        entries: Iterable[AclEntry],
        as_request: Callable[[AclEntry], Any],
        verb: Literal["create", "delete"],
    ) -> dict[AclEntry, KBackupError | None]:
        wanted = {as_request(entry): entry for entry in entries}
        if not wanted:
            return {}
        send = self.client.create_acls if verb == "create" else self.client.delete_acls
        futures = self._wait_request(lambda: send(list(wanted), request_timeout=self.timeout), f"{verb} ACLs")
        outcome: dict[AclEntry, KBackupError | None] = {}
        for request, future in futures.items():
            entry = wanted[request]
            try:
                self._result(future, f"{verb} the ACL {describe_acl(entry)}")
                outcome[entry] = None
            except KBackupError as error:
                outcome[entry] = error
        return outcome

    def upsert_scram_credential(self, user: str, mechanism: str, iterations: int, password: str) -> None:
        """Create or replace ``user``'s credential of ``mechanism`` (``SCRAM-SHA-256``/``-512``);
        the broker salts and hashes ``password``, which is never logged or named in an error."""
        upsertion = UserScramCredentialUpsertion(
            user,
            ScramCredentialInfo(ScramMechanism[mechanism.replace("-", "_")], iterations),
            password.encode(),
        )
        action = f"create the {mechanism} credential of SCRAM user {user}"
        self._wait(
            lambda: self.client.alter_user_scram_credentials([upsertion], request_timeout=self.timeout)[user],
            action,
        )

    def set_broker_configs(self, broker_id: int, configs: Mapping[str, str]) -> None:
        """Set ``configs`` on one broker at run time (DYNAMIC_BROKER_CONFIG), others kept.

        The cluster-wide default (DYNAMIC_DEFAULT_BROKER_CONFIG) cannot be set this way:
        confluent-kafka refuses the default resource (a broker named "").
        """
        entries = [
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in sorted(configs.items())
        ]
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id), incremental_configs=entries)
        action = f"set {', '.join(sorted(configs))} on broker {broker_id}"
        self._wait(
            lambda: self.client.incremental_alter_configs([resource], request_timeout=self.timeout)[resource],
            action,
        )

    def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """Set ``configs`` on ``topic``, leaving its other configs as they are (incremental alter)."""
        entries = [
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in sorted(configs.items())
        ]
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
        settings = ", ".join(f"{name}={value}" for name, value in sorted(configs.items()))
        action = f"set {settings} on topic {topic}"
        self._wait(
            lambda: self.client.incremental_alter_configs([resource], request_timeout=self.timeout)[resource],
            action,
        )

    def topic_ids(self, names: Iterable[str]) -> dict[str, str | None]:
        wanted = sorted(set(names))
        if not wanted:
            return {}
        answers: dict[str, Any] = self._answers(
            lambda: self.client.describe_topics(TopicCollection(wanted), request_timeout=self.timeout),
            "describe topics",
            lambda name: f"describe topic {name}",
        )
        ids = {name: getattr(answer, "topic_id", None) for name, answer in answers.items()}
        return {name: str(topic_id) if topic_id is not None else None for name, topic_id in ids.items()}

    def create_topics(
        self, topics: Iterable[TopicSpec], *, validate_only: bool = False
    ) -> dict[str, TopicRefused | None]:
        """Create topics (or have the broker only validate them): None for each one created, else
        what the broker answered for it (``code_name`` TOPIC_ALREADY_EXISTS, INVALID_CONFIG, ...)."""
        specs = list(topics)
        if not specs:
            return {}
        futures = self._wait_request(
            lambda: self.client.create_topics(
                [NewTopic(s.name, s.partitions, s.replication_factor, config=dict(s.configs)) for s in specs],
                request_timeout=self.timeout,
                validate_only=validate_only,
            ),
            "create topics",
        )
        outcome: dict[str, TopicRefused | None] = {}
        for name, future in futures.items():
            try:
                future.result(self.timeout * 2)
                outcome[name] = None
            except KafkaException as exc:
                error = kafka_error_of(exc)
                outcome[name] = TopicRefused(
                    code_name=error.name() if error is not None else None,
                    reason=error.str() if error is not None else str(exc),
                    error=translate_kafka_error(
                        exc, action=f"create topic {name}", connection=self.connection
                    ),
                )
        return outcome

    def delete_records(self, before: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """Delete every record of each partition below the given offset (DeleteRecords); each
        partition's log start offset after. Sent again on a transient error: deleting below an
        offset twice deletes nothing more."""
        wanted = sorted(before.items())
        if not wanted:
            return {}
        action = "delete records (DeleteRecords) of " + ", ".join(f"{t}/{p}" for (t, p), _ in wanted[:5])
        answers: dict[TopicPartition, Any] = self._answers(
            lambda: self.client.delete_records(
                [TopicPartition(topic, partition, offset) for (topic, partition), offset in wanted],
                request_timeout=self.timeout,
                operation_timeout=self.timeout,
            ),
            action,
            lambda tp: f"delete the records of {tp.topic}/{tp.partition} below offset {tp.offset}",
            leaders_of=sorted({topic for (topic, _), _ in wanted}),
        )
        return {(tp.topic, tp.partition): int(answer.low_watermark) for tp, answer in answers.items()}

    def delete_topics(self, names: Iterable[str], *, within_secs: float) -> None:
        """Delete topics and wait until no broker lists them (the brokers delete asynchronously,
        and a topic of the same name cannot be created before). A topic already gone is fine."""
        wanted = sorted(set(names))
        if not wanted:
            return
        futures = self._wait_request(
            lambda: self.client.delete_topics(
                wanted, request_timeout=self.timeout, operation_timeout=self.timeout
            ),
            "delete topics " + ", ".join(wanted),
        )
        for name, future in futures.items():
            try:
                self._result(future, f"delete topic {name}")
            except KafkaOperationError as exc:
                if exc.code_name != "UNKNOWN_TOPIC_OR_PART":
                    raise

        def still_listed() -> list[str]:
            metadata = self.metadata()
            return [name for name in wanted if name in metadata.topics or name in metadata.unavailable]

        left = call_with_retries(
            still_listed,
            within_secs=within_secs,
            delay_secs=0.1,
            max_delay_secs=1.0,
            until=lambda left: not left,
        )
        if left:
            raise KafkaOperationError(
                f"topic(s) {', '.join(left)} on {self.servers} still listed {within_secs:g}s after "
                "being deleted",
                hint="run the same command again: it continues once the brokers finished deleting",
                retryable=True,
            )

    def create_partitions(self, topic: str, total: int) -> bool:
        """Add partitions to ``topic`` until it has ``total``: True when some were added, False when
        it has ``total`` or more already (Kafka cannot remove partitions; INVALID_PARTITIONS then)."""
        action = f"add partitions to topic {topic} (up to {total})"
        try:
            self._wait(
                lambda: self.client.create_partitions(
                    [NewPartitions(topic, total)], request_timeout=self.timeout
                )[topic],
                action,
            )
        except KafkaOperationError as exc:
            if exc.code_name != "INVALID_PARTITIONS" or self.partition_counts([topic])[topic] < total:
                raise
            return False
        return True

    # -- consumer groups --------------------------------------------------------------------------

    def list_groups(self) -> dict[str, str | None]:
        """Every consumer group of the cluster and its state. A listing that a broker did not answer
        is an error (an incomplete list would silently leave groups behind), after waiting out
        coordinators that are still loading (a broker that just started)."""
        listing = self._wait(
            lambda: self.client.list_consumer_groups(request_timeout=self.timeout),
            "list consumer groups",
            until=lambda listing: not listing.errors or not _coordinators_busy(listing.errors),
        )
        if listing.errors:
            raise KafkaOperationError(
                f"listing consumer groups on {self.servers} was incomplete: {listing.errors[0]}",
                retryable=True,
            )
        return {group.group_id: kafka_state_name(group.state) for group in listing.valid}

    def list_group_ids(self) -> list[str]:
        return sorted(self.list_groups())

    def group_offsets(self, group_ids: Iterable[str]) -> dict[str, list[CommittedOffset]]:
        """Every committed offset of each group; a group deleted meanwhile is left out.

        Asked with ``require_stable``. Without it, Kafka 4's group coordinator answers from the
        state its high watermark covers, and a coordinator that has just taken over (its node's
        watermark a fetch behind the old leader's) answered a group committed a moment before the
        failover as having no offsets at all: 2 of 18 kills of a three-node cluster, none of 16
        with it (docs/reliability.md). With it, the coordinator answers once its state is
        replicated, and a partition whose offsets an open transaction committed says so
        (UNSTABLE_OFFSET_COMMIT); such a group is read again until the transaction ends."""

        def issue(group_id: str) -> Future[Any]:
            request = [ConsumerGroupTopicPartitions(group_id)]
            return self.client.list_consumer_group_offsets(
                request, require_stable=True, request_timeout=COORDINATOR_REQUEST_TIMEOUT_SECS
            )[group_id]

        def action(group_id: str) -> str:
            return f"list the committed offsets of group {group_id}"

        answers = self._each(group_ids, issue, action)
        result: dict[str, list[CommittedOffset]] = {}
        for group_id, answer in answers.items():
            if not isinstance(answer, KBackupError) and _awaiting_transactions(answer):
                answer = self._wait(
                    lambda group_id=group_id: issue(group_id),  # type: ignore[misc]
                    action(group_id),
                    until=lambda again: not _awaiting_transactions(again),
                )
            if isinstance(answer, KBackupError):
                if getattr(answer, "code_name", None) == "GROUP_ID_NOT_FOUND":
                    continue
                raise answer
            result[group_id] = self._offsets_of(group_id, answer)
        return result

    def _offsets_of(self, group_id: str, answer: Any) -> list[CommittedOffset]:
        waiting = _awaiting_transactions(answer)
        if waiting:
            tp = waiting[0]
            raise KafkaOperationError(
                f"group {group_id} has offsets on {tp.topic}/{tp.partition} committed in a "
                f"transaction still open after {self.retry_secs:g}s",
                code=tp.error.code(),
                code_name=tp.error.name(),
                hint="its transactional producer has not committed or aborted yet (a producer "
                "that died is aborted after its transaction.timeout.ms); run the command again",
                retryable=True,
            )
        offsets = []
        for tp in answer.topic_partitions or []:
            if tp.error is not None:
                raise translate_kafka_error(
                    KafkaException(tp.error),
                    action=f"read group {group_id}'s offset on {tp.topic}/{tp.partition}",
                    connection=self.connection,
                )
            if tp.offset >= 0:
                offsets.append(
                    CommittedOffset(tp.topic, tp.partition, int(tp.offset), tp.metadata, tp.leader_epoch)
                )
        return offsets

    def committed_offsets(self, group_id: str) -> dict[TopicPartitionKey, int]:
        """Every committed offset of a group (empty if the group has none or does not exist)."""
        return self.committed_offsets_of([group_id])[group_id]

    def committed_offsets_of(self, group_ids: Iterable[str]) -> dict[str, dict[TopicPartitionKey, int]]:
        """Every committed offset of each group (empty if a group has none or does not exist)."""
        wanted = sorted(set(group_ids))
        found = self.group_offsets(wanted)
        return {
            group_id: {(item.topic, item.partition): item.offset for item in found.get(group_id, [])}
            for group_id in wanted
        }

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, GroupDescription]:
        answers = self._raise_first(
            self._each(
                group_ids,
                lambda group_id: self.client.describe_consumer_groups(
                    [group_id], request_timeout=COORDINATOR_REQUEST_TIMEOUT_SECS
                )[group_id],
                lambda group_id: f"describe consumer group {group_id}",
            )
        )
        result = {}
        for group_id, description in answers.items():
            members = tuple(f"{member.client_id}@{member.host}" for member in description.members or [])
            state = getattr(description.state, "name", str(description.state))
            topics = frozenset(
                tp.topic
                for member in description.members or []
                if member.assignment is not None
                for tp in member.assignment.topic_partitions or []
            )
            result[group_id] = GroupDescription(
                group_id=group_id, state=state, members=members, topics=topics
            )
        return result

    def alter_offsets(self, group_id: str, offsets: Mapping[TopicPartitionKey, int]) -> None:
        """Commit ``offsets`` for an empty group (the broker refuses while members are active)."""
        request = ConsumerGroupTopicPartitions(
            group_id,
            [TopicPartition(topic, partition, offset) for (topic, partition), offset in offsets.items()],
        )
        action = f"commit new offsets for group {group_id}"

        def once() -> None:
            answer = self._wait(
                lambda: self.client.alter_consumer_group_offsets(
                    [request], request_timeout=COORDINATOR_REQUEST_TIMEOUT_SECS
                )[group_id],
                action,
            )
            for tp in answer.topic_partitions or []:
                # Per partition too, a broker that just started answers COORDINATOR_LOAD_IN_PROGRESS
                # (retryable): the whole commit is sent again within the admin's retry budget.
                if tp.error is not None:
                    raise translate_kafka_error(
                        KafkaException(tp.error),
                        action=f"commit group {group_id}'s offset on {tp.topic}/{tp.partition}",
                        connection=self.connection,
                    )

        self._retried(once)

    def delete_group(self, group_id: str) -> None:
        try:
            self._wait(
                lambda: self.client.delete_consumer_groups(
                    [group_id], request_timeout=COORDINATOR_REQUEST_TIMEOUT_SECS
                )[group_id],
                f"delete consumer group {group_id}",
            )
        except KBackupError as exc:
            if "GROUP_ID_NOT_FOUND" not in exc.message:
                raise

    # -- where things live (the sandbox's node finders, fault tests) -----------------------------

    def partition_replicas(self, topic: str) -> dict[int, PartitionReplicas]:
        """Each partition of ``topic``: its leader, replicas and in-sync replicas, by node id, as the
        broker that answers knows them now (a DescribeTopics request, not librdkafka's cache)."""
        action = f"describe topic {topic}"
        wanted = TopicCollection([topic])
        answer = self._wait(
            lambda: self.client.describe_topics(wanted, request_timeout=self.timeout)[topic], action
        )
        return {
            partition.id: PartitionReplicas(
                leader=partition.leader.id if partition.leader is not None else None,
                replicas=tuple(node.id for node in partition.replicas),
                in_sync=tuple(sorted(node.id for node in partition.isr)),
            )
            for partition in answer.partitions
        }

    def group_coordinator(self, group_id: str) -> int:
        """The node id of the broker coordinating ``group_id`` (FindCoordinator, through
        DescribeConsumerGroups; a group that does not exist has a coordinator too)."""
        description = self._wait(
            lambda: self.client.describe_consumer_groups(
                [group_id], request_timeout=COORDINATOR_REQUEST_TIMEOUT_SECS
            )[group_id],
            f"describe consumer group {group_id}",
        )
        return int(description.coordinator.id)


#: librdkafka's name of the resource type that Kafka calls CLUSTER.
_CLUSTER_IN_LIBRDKAFKA = {"BROKER": "CLUSTER"}


def describe_acl(entry: AclEntry) -> str:
    """One binding in one line, the way Kafka's tools print it."""
    return (
        f"{entry.permission} {entry.principal} {entry.operation} from {entry.host} on "
        f"{entry.resource_type}:{entry.pattern_type}:{entry.resource_name}"
    )


def _resource_type(name: str) -> Any:
    return ResourceType[{"CLUSTER": "BROKER"}.get(name, name)]


def _acl_parts(entry: AclEntry) -> tuple[Any, ...]:
    """A binding's parts in the order confluent-kafka's AclBinding and AclBindingFilter take them."""
    return (
        _resource_type(entry.resource_type),
        entry.resource_name,
        ResourcePatternType[entry.pattern_type],
        entry.principal,
        entry.host,
        AclOperation[entry.operation],
        AclPermissionType[entry.permission],
    )


def _binding_of(entry: AclEntry) -> Any:
    return AclBinding(*_acl_parts(entry))


def _filter_of(entry: AclEntry) -> Any:
    """A filter that matches exactly ``entry``."""
    return AclBindingFilter(*_acl_parts(entry))


def _acl_order(entry: AclEntry) -> tuple[str, ...]:
    return (
        entry.resource_type,
        entry.pattern_type,
        entry.resource_name,
        entry.principal,
        entry.host,
        entry.operation,
        entry.permission,
    )


def _coordinators_busy(errors: Iterable[Any]) -> bool:
    """Every error is a coordinator still loading or moving: asking again soon will do."""
    return all(
        error is not None and error.code() in COORDINATOR_BUSY_CODES for error in map(kafka_error_of, errors)
    )


def _awaiting_transactions(answer: Any) -> list[Any]:
    """The partitions of a group's offsets answer whose offset an open transaction decides (asked
    with ``require_stable``, Kafka answers UNSTABLE_OFFSET_COMMIT until it commits or aborts)."""
    return [
        tp
        for tp in answer.topic_partitions or []
        if tp.error is not None and tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT
    ]


def _source_of(entry: Any) -> int:
    source = entry.source
    return int(source.value) if hasattr(source, "value") else int(source)


def open_admin(
    connection: KafkaConnection, *, client_id: str | None = None, request_timeout: float | None = None
) -> Admin:
    clients = KafkaClients(connection) if client_id is None else KafkaClients(connection, client_id=client_id)
    return Admin(clients, request_timeout=request_timeout)


def wait_until_answering(
    connection: KafkaConnection, *, timeout_secs: float, alive: Callable[[], bool]
) -> bool:
    """Ask for metadata until a broker answers (True), ``alive()`` turns false or the time is up
    (False). For a cluster being started: its first requests fail until it listens."""
    client = KafkaClients(connection).admin()

    def answers() -> bool:
        try:
            return alive() and bool(client.list_topics(timeout=2).brokers)
        except KafkaException:
            return False

    return call_with_retries(
        answers,
        within_secs=timeout_secs,
        delay_secs=0.2,
        until=lambda answered: answered or not alive(),
    )


@dataclass(frozen=True)
class PartitionReplicas:
    """Where one partition lives, by node id."""

    #: None while the partition has no leader (every replica in its ISR is down).
    leader: int | None
    replicas: tuple[int, ...]
    in_sync: tuple[int, ...]
