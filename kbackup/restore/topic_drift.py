"""How a topic that already exists on the target differs from the topic in the backup.

Pure: no Kafka. The data restore's plan (:mod:`kbackup.restore.plan`) compares every existing
target topic it writes to, and ``restore.existing_topics`` says what to do with the differences
(warn, apply, or stop); the metadata restore's plan compares the topics it leaves in place the
same way. Both compare what a restore would give a topic it creates: the backup's topic configs
(those that were not broker defaults on the source) without :data:`NEVER_COPIED_CONFIGS` and the
configs a user excluded (:func:`copied_configs`), and the backup's partition count.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from kbackup.format.manifest import TopicEntry

#: Topic configs never copied to a created topic: removed in Kafka 4, or naming the source's brokers.
NEVER_COPIED_CONFIGS = frozenset(
    {
        "message.format.version",
        "message.timestamp.difference.max.ms",
        "message.downconversion.enable",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
)
TIMESTAMP_TYPE = "message.timestamp.type"
MIN_INSYNC_REPLICAS = "min.insync.replicas"
#: The name of a difference in partition count (no topic config has this name).
PARTITIONS = "partitions"
#: The setting that decides ``message.timestamp.type`` of the topics a data restore writes to.
TIMESTAMP_POLICY = "restore.log_append_time"


@dataclass(frozen=True)
class TopicDifference:
    """One way an existing target topic differs from the backup's topic."""

    #: A topic config's name, or :data:`PARTITIONS` for the partition count.
    name: str
    #: The backup's value; None: the source topic did not set it (its broker default applied).
    backup_value: str | None
    #: The target topic's value; None: the target topic does not set it.
    target_value: str | None
    #: ``existing_topics: apply`` brings the target to the backup's value.
    fixable: bool
    #: Why apply leaves it, or what applying it means besides the new value.
    note: str = ""
    #: What decides this value instead of the backup, as for a topic the restore creates
    #: (``message.timestamp.type``: restore.log_append_time; a ``min.insync.replicas`` above the
    #: topic's replicas: its replication factor): apply leaves it and ``fail`` does not stop for it.
    left_to: str | None = None

    def describe(self) -> str:
        """``cleanup.policy: backup compact, target delete``; unset values said as such."""
        backup = self.backup_value if self.backup_value is not None else "not set (the source's default)"
        target = self.target_value if self.target_value is not None else "not set"
        return f"{self.name}: backup {backup}, target {target}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "backup": self.backup_value,
            "target": self.target_value,
            "fixable": self.fixable,
            "note": self.note,
            "left_to": self.left_to,
        }


def copied_configs(
    configs: Mapping[str, str], *, copy: bool = True, excluded: Collection[str] = ()
) -> dict[str, str]:
    """The backup's topic configs a restore gives a topic: none when ``copy`` is off, never
    :data:`NEVER_COPIED_CONFIGS` nor ``excluded``."""
    if not copy:
        return {}
    left_out = NEVER_COPIED_CONFIGS | set(excluded)
    return {key: value for key, value in configs.items() if key not in left_out}


def topic_differences(
    entry: TopicEntry,
    target_configs: Mapping[str, str],
    target_partitions: int,
    *,
    copy: bool = True,
    excluded: Collection[str] = (),
    wanted_partitions: int | None = None,
    replicas: int | None = None,
    timestamp_type_left_to: str | None = None,
) -> list[TopicDifference]:
    """How the existing target topic differs from the backup's topic ``entry``, by name.

    ``target_configs``: the configs set on the target topic (not its broker defaults);
    ``target_partitions``: its partition count. ``copy``/``excluded``: which configs are compared
    (see :func:`copied_configs`; a config excluded is compared on neither side).
    ``wanted_partitions``: the count the restore would create the topic with (default: the
    backup's). ``replicas``: the target topic's replicas per partition, above which a
    ``min.insync.replicas`` is not applied. ``timestamp_type_left_to``: the setting that decides
    ``message.timestamp.type`` instead (then reported, never applied).
    """
    differences: list[TopicDifference] = []
    if copy:
        wanted = copied_configs(entry.configs, excluded=excluded)
        compared = copied_configs(target_configs, excluded=excluded)
        for name in sorted(wanted.keys() | compared.keys()):
            backup_value, target_value = wanted.get(name), compared.get(name)
            if backup_value != target_value:
                differences.append(
                    _config_difference(name, backup_value, target_value, replicas, timestamp_type_left_to)
                )
    partitions = _partition_difference(
        entry.partitions if wanted_partitions is None else wanted_partitions, target_partitions
    )
    if partitions is not None:
        differences.append(partitions)
    return differences


def _config_difference(
    name: str, backup_value: str | None, target_value: str | None, replicas: int | None, left_to: str | None
) -> TopicDifference:
    if backup_value is None:
        return TopicDifference(
            name,
            None,
            target_value,
            fixable=False,
            note="set on the target topic only: apply leaves it (the backup has no value for it)",
        )
    if name == TIMESTAMP_TYPE and left_to is not None:
        return TopicDifference(
            name,
            backup_value,
            target_value,
            fixable=False,
            note=f"{left_to} decides the timestamp type of the topics a restore writes to",
            left_to=left_to,
        )
    if (
        name == MIN_INSYNC_REPLICAS
        and replicas is not None
        and backup_value.isdigit()
        and int(backup_value) > replicas
    ):
        return TopicDifference(
            name,
            backup_value,
            target_value,
            fixable=False,
            note=f"the target topic has {replicas} replica(s) per partition, so no write with acks=all "
            "could succeed: apply leaves it",
            left_to="the target topic's replication factor",
        )
    return TopicDifference(name, backup_value, target_value, fixable=True)


def _partition_difference(wanted: int, found: int) -> TopicDifference | None:
    if found == wanted:
        return None
    if found < wanted:
        return TopicDifference(
            PARTITIONS,
            str(wanted),
            str(found),
            fixable=True,
            note=f"apply adds partitions {found}..{wanted - 1}: a key's partition is its hash modulo the "
            "count, so records produced later with the same key may go to another partition than "
            "before",
        )
    return TopicDifference(
        PARTITIONS,
        str(wanted),
        str(found),
        fixable=False,
        note="Kafka cannot remove partitions: apply leaves it, and the restore still works (records keep "
        "their partition numbers, or restore.repartition spreads them by key)",
    )
