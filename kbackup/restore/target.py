"""Looking at the target cluster before a restore, and creating the topics it needs.

Everything here goes through :class:`kbackup.core.kafka.Admin`, so an unreachable target is a
``KafkaUnreachableError`` naming its servers.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from kbackup.core.errors import KafkaOperationError, KafkaUnreachableError, KBackupError, PreconditionError
from kbackup.core.kafka import Admin, ClusterMetadata, ConfigValue, KafkaClients, TopicSpec
from kbackup.core.logs import get_logger
from kbackup.restore.plan import LOG_APPEND_TIME, RestorePlan, TargetState
from kbackup.restore.settings import PurgeTarget
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


# -- restore.purge_target ----------------------------------------------------------------------------


@dataclass(frozen=True)
class PurgeStep:
    """What ``restore.purge_target`` does to one existing target topic before the first record."""

    topic: str
    how: Literal["records", "topics"]
    #: Each partition's log start and end offset when the purge was planned.
    ranges: dict[int, tuple[int, int]]
    #: ``topics``: the partition count and configs the restore creates it with again.
    partitions_after: int | None = None
    configs_after: dict[str, str] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())

    def describe(self) -> str:
        if self.how == "records":
            ends = ", ".join(f"{partition}:{end}" for partition, (_, end) in sorted(self.ranges.items()))
            return (
                f"topic {self.topic}: delete its records below the end offsets (partition:offset) "
                f"{ends} ({self.records:,} record(s))"
            )
        configs = f", configs {self.configs_after}" if self.configs_after else ""
        return (
            f"topic {self.topic}: delete it ({len(self.ranges)} partition(s), {self.records:,} record(s)) "
            f"and create it again with {self.partitions_after} partition(s){configs}"
        )


@dataclass
class PurgePlan:
    """``restore.purge_target`` of one restore: a step per existing target topic it writes."""

    how: PurgeTarget
    steps: list[PurgeStep]
    #: The restore plan as made against the target before any purge: where a run of this restore
    #: resumes is read from it (a ``topics`` purge plans the run as if the topics were missing).
    original: RestorePlan
    #: An earlier run of this restore already restored into the target: nothing is purged again.
    skipped: bool = False
    #: ``restore.force_purge``: purge even while a consumer group is active on a purged topic.
    force: bool = False

    @property
    def topics(self) -> list[str]:
        return [step.topic for step in self.steps]


def purgeable_topics(targets: Iterable[str], existing: Container[str], *, progress_topic: str) -> list[str]:
    """The target topics a purge empties: those of ``targets`` that exist, never an internal topic
    (``__``) nor the progress topic."""
    return sorted(
        {
            name
            for name in targets
            if name in existing and not name.startswith("__") and name != progress_topic
        }
    )


def as_existing(plan: RestorePlan, topics: Iterable[str]) -> RestorePlan:
    """``plan`` (made for created ``topics``) with ``topics`` existing: where an earlier run of the
    restore, which created them, resumes from."""
    names = set(topics)
    return replace(
        plan, topics=[replace(t, create=False) if t.target_topic in names else t for t in plan.topics]
    )


def plan_purge(
    clients: KafkaClients,
    plan: RestorePlan,
    how: PurgeTarget,
    topics: list[str],
    *,
    resumed: bool,
    force: bool,
) -> PurgePlan:
    """The purge of the existing target ``topics`` of ``plan``, refused while a consumer group is
    active on one of them (unless ``force``); ``resumed``: an earlier run restored into them, so
    nothing is purged."""
    purge = PurgePlan(how=how, steps=[], original=plan, skipped=resumed, force=force)
    if resumed or not topics:
        return purge
    admin = Admin(clients)
    refuse_active_groups(admin, topics, force=force)
    counts = admin.partition_counts(topics)
    spans = admin.partition_ranges([(topic, q) for topic in topics for q in range(counts[topic])])
    assert how != "none"
    purge.steps = [
        PurgeStep(
            topic,
            how,
            {q: (spans[(topic, q)].log_start, spans[(topic, q)].log_end) for q in range(counts[topic])},
        )
        for topic in topics
    ]
    return purge


def without_topics(state: TargetState, topics: Iterable[str]) -> TargetState:
    """``state`` as it will be once ``topics`` are deleted: a ``topics`` purge plans the restore
    against it, so the topics are created as a missing one is."""
    gone = set(topics)

    def kept(values: dict[str, Any]) -> dict[str, Any]:
        return {name: value for name, value in values.items() if name not in gone}

    return replace(
        state,
        topics=kept(state.topics),
        timestamp_types=kept(state.timestamp_types),
        cleanup_policies=kept(state.cleanup_policies),
        retention_ms=kept(state.retention_ms),
        topic_configs=kept(state.topic_configs),
        replication_factors=kept(state.replication_factors),
    )


def recreated_as(purge: PurgePlan, plan: RestorePlan) -> None:
    """A ``topics`` purge: each step says how ``plan`` (made as if the topics were missing) creates
    its topic again."""
    created = {topic.target_topic: topic for topic in plan.topics}
    purge.steps = [
        replace(
            step,
            partitions_after=created[step.topic].target_partitions,
            configs_after=dict(created[step.topic].configs),
        )
        for step in purge.steps
    ]


def refuse_active_groups(admin: Admin, topics: Iterable[str], *, force: bool) -> None:
    """A PreconditionError naming the first consumer group with active members assigned a purged
    topic (the purge would pull records from under it); with ``force`` a warning only."""
    purged = set(topics)
    candidates = [group for group, state in admin.list_groups().items() if state not in ("Empty", "Dead")]
    for group in admin.describe_groups(candidates).values():
        busy = sorted(purged & group.topics) if group.is_active else []
        if not busy:
            continue
        if force:
            log.warning(
                "purging %s while consumer group %s is active on it (restore.force_purge)",
                busy[0],
                group.group_id,
            )
            continue
        raise PreconditionError(
            f"refusing to purge topic {busy[0]}: consumer group {group.group_id} has active members "
            f"on it ({len(group.members)} member(s))",
            hint="stop the group's consumers, or purge anyway with --force-purge (restore.force_purge: true)",
        )


def purge_target_topics(clients: KafkaClients, purge: PurgePlan, *, timeout_secs: float) -> list[str]:
    """Execute the purge: DeleteRecords to each partition's end offset now, or delete the topics
    and wait until they are gone (the restore's topic creation makes them again); a line per topic."""
    admin = Admin(clients)
    refuse_active_groups(admin, purge.topics, force=purge.force)
    done: list[str] = []
    if purge.how == "records":
        partitions = [(step.topic, q) for step in purge.steps for q in step.ranges]
        ends = admin.list_offsets(partitions, "latest", read_committed=False)
        admin.delete_records(ends)
        for step in purge.steps:
            ends_now = ", ".join(f"{q}:{ends[(step.topic, q)]}" for q in sorted(step.ranges))
            done.append(f"{step.topic}: records deleted below the end offsets {ends_now}")
    else:
        admin.delete_topics(purge.topics, within_secs=timeout_secs)
        done.extend(f"{topic}: deleted, created again as the backup's" for topic in purge.topics)
    for line in done:
        log.info("purged %s", line)
    return done
