"""Looking at the target cluster before a restore, and creating the topics it needs.

Everything here goes through :class:`kbackup.core.kafka.clients.KafkaClients`, so an
unreachable target is a ``KafkaUnreachableError`` naming its servers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource
from confluent_kafka.cimpl import NewTopic

from kbackup.core.errors import KafkaOperationError, KafkaUnreachableError, PreconditionError
from kbackup.core.kafka.clients import KafkaClients, kafka_error_of, translate_kafka_error
from kbackup.core.logs import get_logger
from kbackup.restore.plan import RestorePlan, TargetState

log = get_logger("restore.target")

TRANSACTION_STATE_TOPIC = "__transaction_state"


def _describe_configs(admin: AdminClient, resource: ConfigResource, timeout: float) -> dict[str, Any] | None:
    try:
        future = admin.describe_configs([resource], request_timeout=timeout)[resource]
        entries: dict[str, Any] = future.result(timeout)
        return entries
    except Exception as exc:  # an ACL may forbid it: then the plan says what it could not check
        log.info("describing the configs of %s failed: %s", resource, exc)
        return None


def _int_config(configs: dict[str, Any], name: str) -> int | None:
    entry = configs.get(name)
    value = getattr(entry, "value", None)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def inspect_target(clients: KafkaClients, topics: Iterable[str]) -> TargetState:
    """Metadata of the target, the timestamp type of the given existing topics, transaction support."""
    connection = clients.connection
    admin = clients.admin()
    timeout = connection.connect_timeout_secs
    metadata = clients.list_topics(admin)
    if not metadata.brokers:
        raise KafkaUnreachableError(
            f"no broker of {','.join(connection.bootstrap_servers)} is available (metadata lists none)",
            hint="check that the target cluster is up",
        )
    counts = {name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None}
    timestamp_types: dict[str, str] = {}
    retention: dict[str, int] = {}
    for name in sorted(set(topics)):
        if name in counts:
            configs = _describe_configs(admin, ConfigResource(ConfigResource.Type.TOPIC, name), timeout)
            if configs is None:
                continue
            if "message.timestamp.type" in configs:
                timestamp_types[name] = str(configs["message.timestamp.type"].value)
            policy = str(getattr(configs.get("cleanup.policy"), "value", "delete"))
            value = _int_config(configs, "retention.ms")
            if "delete" in policy and value is not None:
                retention[name] = value
    broker_id = str(min(metadata.brokers))
    broker = _describe_configs(admin, ConfigResource(ConfigResource.Type.BROKER, broker_id), timeout)
    default_type = "CreateTime"
    default_retention = 7 * 24 * 3600 * 1000
    possible, note = True, None
    if broker is not None:
        for key, unit in (
            ("log.retention.ms", 1),
            ("log.retention.minutes", 60_000),
            ("log.retention.hours", 3_600_000),
        ):
            value = _int_config(broker, key)
            if value is not None:
                default_retention = value * unit if value >= 0 else -1
                break
        if "log.message.timestamp.type" in broker:
            default_type = str(broker["log.message.timestamp.type"].value)
        factor = broker.get("transaction.state.log.replication.factor")
        needed = int(factor.value) if factor is not None and str(factor.value).isdigit() else 1
        if TRANSACTION_STATE_TOPIC not in metadata.topics and needed > len(metadata.brokers):
            possible = False
            note = (
                f"the target's transaction.state.log.replication.factor is {needed} but it has "
                f"{len(metadata.brokers)} broker(s), so its transaction coordinator cannot start"
            )
    return TargetState(
        description=connection.describe(),
        cluster_id=metadata.cluster_id,
        broker_count=len(metadata.brokers),
        topics=counts,
        timestamp_types=timestamp_types,
        default_timestamp_type=default_type,
        retention_ms=retention,
        default_retention_ms=default_retention,
        transactions_possible=possible,
        transactions_note=note,
    )


def _new_topics(plan: RestorePlan, progress_topic: bool) -> list[NewTopic]:
    replicas = plan.replication_factor or -1  # -1: the broker's default.replication.factor
    topics = [
        NewTopic(topic.target_topic, topic.target_partitions, replicas, config=dict(topic.configs))
        for topic in plan.topics
        if topic.create
    ]
    if progress_topic:
        topics.append(
            NewTopic(
                plan.progress_topic,
                1,
                replicas,
                config={"cleanup.policy": "compact", "min.compaction.lag.ms": "0"},
            )
        )
    return topics


def create_topics(
    clients: KafkaClients, plan: RestorePlan, *, progress_topic: bool, validate_only: bool = False
) -> list[str]:
    """Create the plan's missing topics (or only ask the broker to validate them); their names.

    A topic that appeared meanwhile is fine if it has the planned partition count.
    """
    new = _new_topics(plan, progress_topic)
    if not new:
        return []
    connection = clients.connection
    admin = clients.admin()
    timeout = connection.connect_timeout_secs
    created: list[str] = []
    try:
        futures = admin.create_topics(new, request_timeout=timeout, validate_only=validate_only)
    except KafkaException as exc:
        raise translate_kafka_error(exc, action="create topics", connection=connection) from None
    for name, future in futures.items():
        try:
            future.result(timeout * 2)
            created.append(name)
        except KafkaException as exc:
            error = kafka_error_of(exc)
            if error is not None and error.name() == "TOPIC_ALREADY_EXISTS":
                if not validate_only:
                    _check_existing(admin, name, plan, timeout)
                continue
            if error is not None and error.name() in ("INVALID_CONFIG", "POLICY_VIOLATION"):
                raise PreconditionError(
                    f"the target refuses to create topic {name!r}: {error.str()}",
                    hint="list the offending config in restore.exclude_topic_configs, or set "
                    "restore.copy_topic_configs: false",
                ) from None
            raise translate_kafka_error(exc, action=f"create topic {name}", connection=connection) from None
    return created


def _check_existing(admin: AdminClient, name: str, plan: RestorePlan, timeout: float) -> None:
    wanted = next((t.target_partitions for t in plan.topics if t.target_topic == name), None)
    if wanted is None:
        return
    metadata = admin.list_topics(topic=name, timeout=timeout)
    found = len(metadata.topics[name].partitions)
    if found != wanted:
        raise KafkaOperationError(
            f"topic {name} was created by someone else while the restore started, with {found} "
            f"partition(s) instead of {wanted}",
            hint="run the restore again: it plans against the topic as it now is",
            retryable=True,
        )
