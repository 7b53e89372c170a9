"""Looking at the target cluster before a restore, and creating the topics it needs.

Everything here goes through :class:`kbackup.core.kafka.Admin`, so an unreachable target is a
``KafkaUnreachableError`` naming its servers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kbackup.core.errors import KafkaOperationError, KafkaUnreachableError, KBackupError, PreconditionError
from kbackup.core.kafka import Admin, ClusterMetadata, ConfigValue, KafkaClients, TopicSpec
from kbackup.core.logs import get_logger
from kbackup.restore.plan import LOG_APPEND_TIME, RestorePlan, TargetState
from kbackup.restore.topic_drift import TIMESTAMP_TYPE

log = get_logger("restore.target")

TRANSACTION_STATE_TOPIC = "__transaction_state"


def _configs_or_none(read: Callable[[], dict[str, ConfigValue]], what: str) -> dict[str, ConfigValue] | None:
    try:
        return read()
    except KBackupError as exc:  # an ACL may forbid it: then the plan says what it could not check
        log.info("describing the configs of %s failed: %s", what, exc)
        return None


def _int_config(configs: dict[str, ConfigValue], name: str) -> int | None:
    entry = configs.get(name)
    value = entry.value if entry is not None else None
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        return None


def inspect_target(clients: KafkaClients, topics: Iterable[str]) -> TargetState:
    """Metadata of the target, the configs of the given existing topics (those set on each topic,
    and the timestamp type, cleanup policy and retention in force), transaction support."""
    connection = clients.connection
    admin = Admin(clients)
    metadata = admin.metadata()
    if not metadata.brokers:
        raise KafkaUnreachableError(
            f"no broker of {','.join(connection.bootstrap_servers)} is available (metadata lists none)",
            hint="check that the target cluster is up",
        )
    counts = metadata.partition_counts()
    timestamp_types: dict[str, str] = {}
    cleanup_policies: dict[str, str] = {}
    retention: dict[str, int] = {}
    set_on_topics: dict[str, dict[str, str]] = {}
    for name in sorted(set(topics)):
        if name in counts:
            found = _configs_or_none(lambda name=name: admin.topic_configs([name])[name], f"topic {name}")  # type: ignore[misc]
            if found is None:
                continue
            configs = found
            set_on_topics[name] = {
                key: entry.value
                for key, entry in configs.items()
                # As the backup reads the source's (kbackup.backup.source): what the topic sets itself.
                if entry.set_on_topic and not entry.sensitive and entry.value is not None
            }
            if TIMESTAMP_TYPE in configs:
                timestamp_types[name] = str(configs[TIMESTAMP_TYPE].value)
            cleanup = configs.get("cleanup.policy")
            policy = str(cleanup.value if cleanup is not None else "delete")
            cleanup_policies[name] = policy
            value = _int_config(configs, "retention.ms")
            if "delete" in policy and value is not None:
                retention[name] = value
    broker_id = min(metadata.brokers)
    broker = _configs_or_none(lambda: admin.broker_configs(broker_id), f"broker {broker_id}")
    default_type = "CreateTime"
    default_cleanup = "delete"
    default_retention = 7 * 24 * 3600 * 1000
    possible, note = True, None
    if broker is not None:
        default_retention = _default_retention_ms(broker, default_retention)
        if "log.message.timestamp.type" in broker:
            default_type = str(broker["log.message.timestamp.type"].value)
        if broker.get("log.cleanup.policy") is not None:
            default_cleanup = str(broker["log.cleanup.policy"].value)
        possible, note = _transaction_support(broker, metadata)
    return TargetState(
        description=connection.describe(),
        cluster_id=metadata.cluster_id,
        broker_count=len(metadata.brokers),
        topics=counts,
        timestamp_types=timestamp_types,
        default_timestamp_type=default_type,
        cleanup_policies=cleanup_policies,
        default_cleanup_policy=default_cleanup,
        retention_ms=retention,
        default_retention_ms=default_retention,
        transactions_possible=possible,
        transactions_note=note,
        topic_configs=set_on_topics,
        replication_factors={name: topic.replication_factor for name, topic in metadata.topics.items()},
    )


def _default_retention_ms(broker: dict[str, ConfigValue], default: int) -> int:
    """The brokers' retention of created topics: the first of log.retention.ms/minutes/hours set
    (-1: none)."""
    for key, unit in (
        ("log.retention.ms", 1),
        ("log.retention.minutes", 60_000),
        ("log.retention.hours", 3_600_000),
    ):
        value = _int_config(broker, key)
        if value is not None:
            return value * unit if value >= 0 else -1
    return default


def _transaction_support(
    broker: dict[str, ConfigValue], metadata: ClusterMetadata
) -> tuple[bool, str | None]:
    """Whether the target's transaction coordinator can start, and if not why."""
    factor = _int_config(broker, "transaction.state.log.replication.factor")
    needed = factor if factor is not None and factor >= 0 else 1
    exists = TRANSACTION_STATE_TOPIC in metadata.topics or TRANSACTION_STATE_TOPIC in metadata.unavailable
    if not exists and needed > len(metadata.brokers):
        return False, (
            f"the target's transaction.state.log.replication.factor is {needed} but it has "
            f"{len(metadata.brokers)} broker(s), so its transaction coordinator cannot start"
        )
    return True, None


def _new_topics(plan: RestorePlan, progress_topic: bool) -> list[TopicSpec]:
    replicas = plan.replication_factor or -1  # -1: the broker's default.replication.factor
    topics = [
        TopicSpec(topic.target_topic, topic.target_partitions, replicas, configs=dict(topic.configs))
        for topic in plan.topics
        if topic.create
    ]
    if progress_topic:
        topics.append(
            TopicSpec(
                plan.progress_topic,
                1,
                replicas,
                configs={"cleanup.policy": "compact", "min.compaction.lag.ms": "0"},
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
    admin = Admin(clients)
    created: list[str] = []
    for name, refused in admin.create_topics(new, validate_only=validate_only).items():
        if refused is None:
            created.append(name)
        elif refused.code_name == "TOPIC_ALREADY_EXISTS":
            if not validate_only:
                _check_existing(admin, name, plan)
        elif refused.code_name in ("INVALID_CONFIG", "POLICY_VIOLATION"):
            raise PreconditionError(
                f"the target refuses to create topic {name!r}: {refused.reason}",
                hint="list the offending config in restore.exclude_topic_configs, or set "
                "restore.copy_topic_configs: false",
            )
        else:
            raise refused.error
    return created


def _check_existing(admin: Admin, name: str, plan: RestorePlan) -> None:
    wanted = next((t.target_partitions for t in plan.topics if t.target_topic == name), None)
    if wanted is None:
        return
    found = admin.partition_counts([name])[name]
    if found != wanted:
        raise KafkaOperationError(
            f"topic {name} was created by someone else while the restore started, with {found} "
            f"partition(s) instead of {wanted}",
            hint="run the restore again: it plans against the topic as it now is",
            retryable=True,
        )


def switch_to_log_append_time(clients: KafkaClients, plan: RestorePlan) -> list[str]:
    """Set the planned topics to LogAppendTime, now that their records are restored; their names."""
    topics = [topic.target_topic for topic in plan.topics if topic.switch_to_log_append_time]
    if not topics:
        return []
    admin = Admin(clients)
    for topic in topics:
        admin.set_topic_configs(topic, {TIMESTAMP_TYPE: LOG_APPEND_TIME})
    return topics


def change_existing_topics(clients: KafkaClients, plan: RestorePlan) -> list[str]:
    """``restore.existing_topics: apply``, before the first record: set the backup's configs on the
    existing target topics that differ and add the partitions they lack; what was changed, a line
    per topic. A topic that has the partitions already (a re-run, someone else) is left as it is."""
    admin = Admin(clients)
    changed: list[str] = []
    for topic in plan.topics:
        if topic.create or not (topic.config_changes or topic.partitions_added):
            continue
        done: list[str] = []
        if topic.config_changes:
            admin.set_topic_configs(topic.target_topic, topic.config_changes)
            done.extend(f"{key}={value}" for key, value in sorted(topic.config_changes.items()))
        if topic.partitions_added:
            before = topic.target_partitions - topic.partitions_added
            if admin.create_partitions(topic.target_topic, topic.target_partitions):
                done.append(f"partitions {before} -> {topic.target_partitions}")
        if done:
            changed.append(f"{topic.target_topic}: {', '.join(done)}")
            log.info(
                "existing target topic %s changed to the backup's: %s", topic.target_topic, ", ".join(done)
            )
    return changed
