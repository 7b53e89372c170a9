"""What the target cluster holds of the metadata a restore brings back, read before planning.

Checked first: the restore's principal may describe and alter the cluster (creating ACLs and SCRAM
credentials needs Alter on it, reading them Describe), and the target runs an authorizer when
ACLs are to be restored. Each refusal is one line naming what is missing, before anything is
changed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kbackup.core.errors import PreconditionError
from kbackup.core.kafka import Admin
from kbackup.format.cluster_metadata import AclBinding


@dataclass
class TargetSecurity:
    cluster_id: str | None
    broker_ids: list[int]
    #: ``authorizer.class.name`` of the brokers ("" none).
    authorizer: str
    acls: set[AclBinding] = field(default_factory=set)
    #: user -> mechanism -> iterations.
    users: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The cluster-wide dynamic defaults, name -> value (None: sensitive).
    cluster_default: dict[str, str | None] = field(default_factory=dict)
    #: Per broker, the configs set on it at run time.
    brokers: dict[int, dict[str, str | None]] = field(default_factory=dict)
    #: Partition count of each existing topic the plan asks about.
    partitions: dict[str, int] = field(default_factory=dict)
    #: Each such topic's configs set on the topic itself.
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)


def _check_rights(admin: Admin, needed: set[str], why: str) -> None:
    operations = admin.cluster_operations()
    missing = sorted(
        operation for operation in needed if operation not in operations and "ALL" not in operations
    )
    if missing:
        raise PreconditionError(
            f"the principal of {admin.servers} may not {' or '.join(op.lower() for op in missing)} the "
            f"cluster, which {why} needs",
            hint="connect as a super user or grant it the operation on the cluster resource "
            "(kafka-acls.sh --cluster)",
        )


def read_target_security(admin: Admin, plan_kinds: Iterable[str], topics: Iterable[str]) -> TargetSecurity:
    """The target's state of each kind in ``plan_kinds`` (the plan's kind names) and of ``topics``."""
    kinds = set(plan_kinds)
    metadata = admin.metadata(action="read the target's metadata")
    broker_ids = sorted(metadata.brokers)
    per_broker = {broker_id: admin.dynamic_broker_configs(broker_id) for broker_id in broker_ids}
    authorizer = "".join(sorted({configs.authorizer for configs in per_broker.values()}))
    state = TargetSecurity(cluster_id=metadata.cluster_id, broker_ids=broker_ids, authorizer=authorizer)
    for broker_id, dynamic in per_broker.items():
        state.brokers[broker_id] = {name: item.value for name, item in dynamic.broker.items()}
        state.cluster_default.update({name: item.value for name, item in dynamic.cluster_default.items()})
    if kinds & {"acls", "scram_users"}:
        if "acls" in kinds and not authorizer:
            raise PreconditionError(
                f"the target {admin.servers} runs no authorizer, so it cannot hold ACLs",
                hint="set authorizer.class.name on its brokers (StandardAuthorizer in KRaft), or leave "
                "acls out of restore_metadata.kinds",
            )
        _check_rights(admin, {"DESCRIBE", "ALTER"}, "restoring ACLs and SCRAM users")
    if "acls" in kinds:
        state.acls = {AclBinding(**entry.__dict__) for entry in admin.describe_acls()}
    if "scram_users" in kinds:
        state.users = {
            user: {item.mechanism: item.iterations for item in credentials}
            for user, credentials in admin.scram_users().items()
        }
    counts = metadata.partition_counts()
    wanted = sorted(set(topics) & set(counts))
    if "topic_configs" in kinds and wanted:
        state.partitions = {topic: counts[topic] for topic in wanted}
        for topic, configs in admin.topic_configs(wanted).items():
            state.topic_configs[topic] = {
                name: str(value.value)
                for name, value in configs.items()
                if value.set_on_topic and value.value is not None
            }
    return state
