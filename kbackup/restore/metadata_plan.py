"""The metadata-restore plan worked out from the backup's metadata and the target's: pure, no I/O.

Each item of the backup becomes one line of the plan: ``create`` when the target lacks it,
``exists`` when it has it, ``differs``/``alter`` when it has it otherwise, ``skip`` or ``manual``
with the reason. Nothing on the target is deleted unless ``remove_extra_acls`` asks for it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from kbackup.core.errors import ConfigError
from kbackup.format.cluster_metadata import AclBinding, BrokerConfig, BrokerConfigsSection, ScramUser
from kbackup.format.metadata_plan import (
    AclItem,
    BrokerConfigItem,
    MetadataItem,
    ScramUserItem,
    TopicConfigItem,
)
from kbackup.restore.metadata_settings import MetadataRestoreSettings, map_principal, map_user
from kbackup.restore.metadata_target import TargetSecurity
from kbackup.restore.plan import RestoredTopic
from kbackup.restore.topic_drift import PARTITIONS, TIMESTAMP_POLICY, TopicDifference, topic_differences


@dataclass
class BackupMetadata:
    """What the backup holds of each kind, from the newest increment that could read it (None:
    no increment could; ``unread`` then says why)."""

    acls: list[AclBinding] | None = None
    users: list[ScramUser] | None = None
    broker_configs: BrokerConfigsSection | None = None
    #: The increment each kind came from.
    increments: dict[str, int] = field(default_factory=dict)
    #: Why a kind is not there: a line per kind.
    unread: dict[str, str] = field(default_factory=dict)
    #: The source ran no authorizer: it had no ACLs.
    source_without_authorizer: bool = False


@dataclass
class PlanInputs:
    settings: MetadataRestoreSettings
    topic_mapping: dict[str, str]
    #: The target's bootstrap servers, for the commands an operator runs by hand.
    servers: str
    #: Users with a password in the configured source (never the passwords).
    users_with_password: set[str]


def check_principal_map(backup: BackupMetadata, principal_map: dict[str, str]) -> None:
    """Refuse a map that would merge two of the backup's principals into one on the target."""
    principals = {binding.principal for binding in backup.acls or []}
    principals |= {f"User:{user.user}" for user in backup.users or []}
    onto: dict[str, str] = {}
    for principal in sorted(principals):
        target = map_principal(principal, principal_map)
        if target in onto and onto[target] != principal:
            raise ConfigError(
                f"restore_metadata.principal_map maps {onto[target]} and {principal} onto {target}: "
                "their rights would merge",
                hint="map each source principal to a principal of its own",
            )
        onto[target] = principal


def acl_items(backup: list[AclBinding], target: TargetSecurity, inputs: PlanInputs) -> list[MetadataItem]:
    principal_map = inputs.settings.principal_map
    items: list[MetadataItem] = []
    wanted: set[AclBinding] = set()
    for binding in backup:
        principal = map_principal(binding.principal, principal_map)
        name = binding.resource_name
        if binding.resource_type == "TOPIC" and binding.pattern_type == "LITERAL":
            name = inputs.topic_mapping.get(name, name)
        mapped = binding.model_copy(update={"principal": principal, "resource_name": name})
        wanted.add(mapped)
        items.append(
            AclItem(
                action="exists" if mapped in target.acls else "create",
                binding=mapped,
                source_principal=binding.principal if principal != binding.principal else None,
                source_resource=binding.resource_name if name != binding.resource_name else None,
                reason=_renamed_under_prefix(binding, inputs.topic_mapping),
            )
        )
    for extra in sorted(target.acls - wanted, key=_acl_key):
        remove = inputs.settings.remove_extra_acls
        items.append(
            AclItem(
                action="delete" if remove else "skip",
                binding=extra,
                reason="on the target only"
                + ("" if remove else ": kept (restore_metadata.remove_extra_acls deletes it)"),
            )
        )
    return items


def _acl_key(binding: AclBinding) -> tuple[str, ...]:
    return tuple(str(value) for value in binding.model_dump().values())


def _renamed_under_prefix(binding: AclBinding, topic_mapping: dict[str, str]) -> str | None:
    """A prefixed topic ACL keeps its prefix: say which renamed topics it no longer covers."""
    if binding.resource_type != "TOPIC" or binding.pattern_type != "PREFIXED":
        return None
    moved = sorted(
        f"{source} -> {target}"
        for source, target in topic_mapping.items()
        if source.startswith(binding.resource_name) and not target.startswith(binding.resource_name)
    )
    if not moved:
        return None
    return f"the prefix no longer covers renamed topic(s) {', '.join(moved)}: grant those by hand"


def user_items(backup: list[ScramUser], target: TargetSecurity, inputs: PlanInputs) -> list[MetadataItem]:
    source = inputs.settings.password_source()
    items: list[MetadataItem] = []
    for user in backup:
        name = map_user(user.user, inputs.settings.principal_map)
        for credential in user.credentials:
            item = ScramUserItem(
                action="create",
                user=name,
                source_user=user.user if name != user.user else None,
                mechanism=credential.mechanism,
                iterations=credential.iterations,
            )
            existing = target.users.get(name, {}).get(credential.mechanism)
            if existing == credential.iterations:
                item = item.model_copy(update={"action": "exists"})
            elif existing is not None:
                item = item.model_copy(
                    update={
                        "action": "differs",
                        "reason": f"the target's credential has {existing} iterations; its password is kept",
                    }
                )
            elif name in inputs.users_with_password:
                item = item.model_copy(update={"password_from": source})
            else:
                item = item.model_copy(
                    update={
                        "action": "skip",
                        "reason": f"no password for {name} in {source}"
                        if source
                        else "no password source (restore_metadata.scram_passwords_file or _env)",
                    }
                )
            items.append(item)
    return items


_SENSITIVE = "sensitive: no backup stores its value"


def _config_argument(name: str, value: str) -> str:
    # kafka-configs.sh reads a list value in square brackets.
    return f"{name}=[{value}]" if "," in value else f"{name}={value}"


def default_items(section: BrokerConfigsSection, target: TargetSecurity, servers: str) -> list[MetadataItem]:
    """The cluster-wide defaults: confluent-kafka cannot set them, so each that differs is an
    operator's command."""
    items: list[MetadataItem] = []
    for config in section.cluster_default:
        current = target.cluster_default.get(config.name)
        item = BrokerConfigItem(
            action="manual", broker_id=None, name=config.name, value=config.value, target_value=current
        )
        if config.value is None:
            item = item.model_copy(update={"action": "skip", "reason": _SENSITIVE})
        elif current == config.value:
            item = item.model_copy(update={"action": "exists"})
        else:
            argument = shlex.quote(_config_argument(config.name, config.value))
            command = (
                f"kafka-configs.sh --bootstrap-server {shlex.quote(servers)} --entity-type brokers "
                f"--entity-default --alter --add-config {argument}"
            )
            item = item.model_copy(
                update={"reason": f"the Kafka client cannot set cluster-wide defaults; run: {command}"}
            )
        items.append(item)
    return items


def broker_items(section: BrokerConfigsSection, target: TargetSecurity) -> list[MetadataItem]:
    """Configs set on one broker, set on the target's broker of the same id."""
    items: list[MetadataItem] = []
    for broker in section.brokers:
        for config in broker.configs:
            items.append(_broker_item(broker.broker_id, config, target))
    return items


def _broker_item(broker_id: int, config: BrokerConfig, target: TargetSecurity) -> MetadataItem:
    current = target.brokers.get(broker_id, {}).get(config.name)
    item = BrokerConfigItem(
        action="create", broker_id=broker_id, name=config.name, value=config.value, target_value=current
    )
    if broker_id not in target.brokers:
        return item.model_copy(update={"action": "skip", "reason": f"the target has no broker {broker_id}"})
    if config.value is None:
        return item.model_copy(update={"action": "skip", "reason": _SENSITIVE})
    if current == config.value:
        return item.model_copy(update={"action": "exists"})
    return item.model_copy(update={"action": "alter" if current is not None else "create"})


@dataclass
class TopicPolicy:
    """How the data restore would treat topics that exist on the target: the same rules here."""

    existing_topics: str
    copy_topic_configs: bool
    exclude_topic_configs: list[str]
    #: Per source topic, the partition count a restore creates it with (else the backup's).
    target_partitions: dict[str, int]


def topic_items(
    topics: list[RestoredTopic], target: TargetSecurity, policy: TopicPolicy
) -> tuple[list[MetadataItem], list[str]]:
    """Each restored topic's configs against the target's (``restore.existing_topics``): the items,
    and the differences ``fail`` stops for (one phrase each)."""
    items: list[MetadataItem] = []
    stopping: list[str] = []
    for topic in topics:
        name, entry = topic.target_topic, topic.entry
        source = entry.name if entry.name != name else None
        found = target.partitions.get(name)
        if found is None:
            items.append(
                TopicConfigItem(
                    action="skip",
                    topic=name,
                    source_topic=source,
                    name=PARTITIONS,
                    value=str(entry.partitions),
                    reason="not on the target: the data restore creates it with the backup's configs",
                )
            )
            continue
        differences = topic_differences(
            entry,
            target.topic_configs.get(name, {}),
            found,
            copy=policy.copy_topic_configs,
            excluded=policy.exclude_topic_configs,
            wanted_partitions=policy.target_partitions.get(entry.name),
            timestamp_type_left_to=TIMESTAMP_POLICY,
        )
        if not differences:
            items.append(
                TopicConfigItem(
                    action="exists", topic=name, source_topic=source, name=PARTITIONS, value=str(found)
                )
            )
        for difference in differences:
            items.append(_topic_item(name, source, difference, policy.existing_topics))
            if difference.left_to is None and policy.existing_topics == "fail":
                stopping.append(f"{name} {difference.describe()}")
    return items, stopping


def _topic_item(topic: str, source: str | None, difference: TopicDifference, mode: str) -> MetadataItem:
    applies = mode == "apply" and difference.fixable
    reason = difference.note or None
    if not applies:
        reason = f"restore.existing_topics: {mode}" + (f"; {difference.note}" if difference.note else "")
    return TopicConfigItem(
        action="alter" if applies else "differs",
        topic=topic,
        source_topic=source,
        name=difference.name,
        value=difference.backup_value,
        target_value=difference.target_value,
        reason=reason,
    )
