"""The metadata-restore plan: what ``restore-metadata plan`` writes for review and ``execute`` applies.

A versioned JSON document with no secret in it: a SCRAM user's item names its mechanism and
iterations and where its password will come from (a file's path or an environment variable's
name), never the password. It records the target cluster's id, so that execute refuses a plan
made for another cluster. docs/restore.md, "Cluster metadata", is the contract.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from kbackup.format.cluster_metadata import AclBinding
from kbackup.format.documents import parse_plan_document, read_plan_bytes
from kbackup.format.reset_plan import PlanModel, TargetInfo

METADATA_PLAN_FORMAT = "kafka-backup-metadata-plan"
METADATA_PLAN_VERSION = 1

#: What execute does with an item. ``create``: it is missing on the target and is made;
#: ``alter``: it differs and is set to the backup's; ``delete``: on the target only, and removing
#: extras was asked for; ``exists``: the target has it as the backup does; ``differs``: it differs
#: and is left as it is (the reason says why); ``skip``: left out (the reason says why);
#: ``manual``: needs an operator (the reason gives the command).
Action = Literal["create", "alter", "delete", "exists", "differs", "skip", "manual"]
#: The actions that change the target.
CHANGES: frozenset[str] = frozenset({"create", "alter", "delete"})
#: The kinds of metadata a restore can bring back, in the order execute applies them: topic and
#: broker configs first (the cluster behaves as before), then the users (they can log in), then
#: the ACLs (they may act).
Kind = Literal["topic_configs", "broker_configs", "scram_users", "acls"]
KINDS: tuple[Kind, ...] = ("topic_configs", "broker_configs", "scram_users", "acls")


class AclItem(PlanModel):
    kind: Literal["acls"] = "acls"
    action: Action
    #: The binding as it will be on the target (principal and topic name mapped).
    binding: AclBinding
    #: The principal in the backup, when ``principal_map`` renamed it.
    source_principal: str | None = None
    #: The topic in the backup, when ``restore.topic_mapping`` renamed it.
    source_resource: str | None = None
    reason: str | None = None


class ScramUserItem(PlanModel):
    kind: Literal["scram_users"] = "scram_users"
    action: Action
    #: The user on the target (``principal_map`` applied to ``User:<name>``).
    user: str
    source_user: str | None = None
    mechanism: str
    iterations: int
    #: Where execute reads the password: ``file <path>`` or ``env <NAME>``; None when there is none.
    password_from: str | None = None
    reason: str | None = None


class BrokerConfigItem(PlanModel):
    kind: Literal["broker_configs"] = "broker_configs"
    action: Action
    #: The broker the config is set on; None: the cluster-wide default of every broker.
    broker_id: int | None
    name: str
    #: The backup's value (None: a sensitive value, never stored).
    value: str | None
    target_value: str | None = None
    reason: str | None = None


class TopicConfigItem(PlanModel):
    kind: Literal["topic_configs"] = "topic_configs"
    action: Action
    topic: str
    source_topic: str | None = None
    #: A topic config's name, or ``partitions`` for its partition count.
    name: str
    value: str | None
    target_value: str | None = None
    reason: str | None = None


MetadataItem = Annotated[
    AclItem | ScramUserItem | BrokerConfigItem | TopicConfigItem, Field(discriminator="kind")
]


class MetadataSource(PlanModel):
    backup_id: str
    storage_url: str
    #: The increment whose file each kind was taken from (the newest that could read it).
    increments: dict[str, int]


class MetadataPlan(PlanModel):
    format: str = METADATA_PLAN_FORMAT
    format_version: int = METADATA_PLAN_VERSION
    created_at: str
    tool_version: str
    source: MetadataSource
    target: TargetInfo
    #: What was asked for (``restore_metadata.kinds``).
    kinds: list[str]
    principal_map: dict[str, str] = Field(default_factory=dict)
    topic_mapping: dict[str, str] = Field(default_factory=dict)
    items: list[MetadataItem] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    def to_json_bytes(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), indent=2) + "\n").encode()

    def changes(self) -> list[MetadataItem]:
        """The items execute applies, in the order it applies them."""
        order = {kind: index for index, kind in enumerate(KINDS)}
        chosen = [item for item in self.items if item.action in CHANGES]
        # Deletions last, after every creation: the target never holds fewer rights than both.
        return sorted(chosen, key=lambda item: (item.action == "delete", order[item.kind]))

    def counts(self) -> dict[str, dict[str, int]]:
        """Per kind, how many items take each action."""
        result: dict[str, dict[str, int]] = {}
        for item in self.items:
            per_kind = result.setdefault(item.kind, {})
            per_kind[item.action] = per_kind.get(item.action, 0) + 1
        return result


_COMMAND = "restore-metadata plan"


def read_metadata_plan(path: str | Path) -> MetadataPlan:
    """Load a plan file; every problem is a ConfigError naming the file."""
    return parse_metadata_plan(read_plan_bytes(path, _COMMAND), str(path))


def parse_metadata_plan(data: bytes, source: str) -> MetadataPlan:
    """:func:`read_metadata_plan` of a file's bytes, ``source`` naming it in errors."""
    return parse_plan_document(
        data,
        source,
        MetadataPlan,
        expected_format=METADATA_PLAN_FORMAT,
        version=METADATA_PLAN_VERSION,
        kind="metadata plan",
        command=_COMMAND,
    )


def describe_item(item: MetadataItem) -> str:
    """One item in a line, as the plan's table and execute's report name it."""
    if isinstance(item, AclItem):
        b = item.binding
        return (
            f"ACL {b.permission} {b.principal} {b.operation} from {b.host} on "
            f"{b.resource_type}:{b.pattern_type}:{b.resource_name}"
        )
    if isinstance(item, ScramUserItem):
        return f"SCRAM user {item.user} ({item.mechanism}, {item.iterations} iterations)"
    if isinstance(item, BrokerConfigItem):
        where = "cluster default" if item.broker_id is None else f"broker {item.broker_id}"
        return f"{where} {item.name}={_shown(item.value)}"
    return f"topic {item.topic} {item.name}={_shown(item.value)}"


def _shown(value: str | None) -> str:
    return "(sensitive)" if value is None else value


def render_metadata_plan(plan: MetadataPlan) -> str:
    """The plan for review: one line per item, then the counts and the warnings."""
    lines = [
        f"metadata plan from backup {plan.source.backup_id} "
        + " ".join(f"{kind}@{increment}" for kind, increment in sorted(plan.source.increments.items()))
        + f", target cluster {plan.target.cluster_id}",
    ]
    for item in plan.items:
        was = ""
        if item.action in ("alter", "differs") and not isinstance(item, (AclItem, ScramUserItem)):
            was = f" (target: {_shown(item.target_value)})"
        reason = f": {item.reason}" if item.reason else ""
        lines.append(f"  {item.action:<8} {describe_item(item)}{was}{reason}")
    for kind, per_action in plan.counts().items():
        shown = ", ".join(f"{count} {action}" for action, count in sorted(per_action.items())) or "nothing"
        lines.append(f"{kind}: {shown}")
    lines.extend(f"warning: {warning}" for warning in plan.warnings)
    return "\n".join(lines)
