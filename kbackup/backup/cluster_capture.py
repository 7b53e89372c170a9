"""Each increment's capture of the source cluster's metadata: ACLs, SCRAM users, dynamic broker configs.

What a whole-cluster recovery needs besides records and group offsets (docs/backup.md). A kind
the backup's principal may not read does not fail the backup: the file says so (``not_authorized``)
and the run warns of it (exit code 0: the records and the groups, what every backup holds, are
complete; a principal without rights on the cluster is common, and its backups must not turn red).
A cluster without an authorizer has no ACL to copy (``no_authorizer``), which is no problem.
Client quotas are not captured: confluent-kafka has no request that reads them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kbackup.core.errors import KafkaOperationError, KafkaUnreachableError, KBackupError, StorageError
from kbackup.core.kafka import Admin, DynamicConfig
from kbackup.core.logs import get_logger
from kbackup.core.times import utc_now_iso
from kbackup.format.cluster_metadata import (
    AclBinding,
    AclsSection,
    BrokerConfig,
    BrokerConfigs,
    BrokerConfigsSection,
    ClusterMetadata,
    ScramCredentialInfo,
    ScramUser,
    ScramUsersSection,
    Status,
    cluster_metadata_key,
    encode_cluster_metadata,
    reference,
)
from kbackup.format.encryption import BackupKeys
from kbackup.format.layout import object_key
from kbackup.format.manifest import ClusterMetadataRef
from kbackup.storage import Storage

log = get_logger("backup")

#: Kafka's answers to a principal that may not do what it asked.
_REFUSED = {"CLUSTER_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED"}
#: The kinds of metadata, as the file and the problems name them.
KIND_NAMES = {"acls": "ACLs", "scram_users": "SCRAM users", "broker_configs": "dynamic broker configs"}


@dataclass
class _Attempts:
    """Classifies each request's failure; once the cluster stopped answering, asks no more."""

    unreachable: KBackupError | None = None

    def run(self, request: Callable[[], object]) -> tuple[Status, str | None]:
        """``request()``'s outcome: captured, or why not (and the error's words)."""
        if self.unreachable is not None:
            return "failed", self.unreachable.message
        try:
            request()
        except KafkaUnreachableError as error:
            self.unreachable = error
            return "failed", error.message
        except KafkaOperationError as error:
            return ("not_authorized" if error.code_name in _REFUSED else "failed"), error.message
        except KBackupError as error:
            return "failed", error.message
        return "captured", None


@dataclass
class _BrokerConfigReader:
    admin: Admin
    default: dict[str, DynamicConfig] = field(default_factory=dict)
    per_broker: dict[int, dict[str, DynamicConfig]] = field(default_factory=dict)
    #: The authorizer the brokers run ("" none; None: not known, the configs were not read).
    authorizer: str | None = None

    def __call__(self) -> None:
        authorizers = set()
        silent: dict[int, KafkaUnreachableError] = {}
        brokers = self.admin.metadata(action="list the brokers").brokers
        for broker_id in brokers:
            try:
                configs = self.admin.dynamic_broker_configs(broker_id)
            except KafkaUnreachableError as error:
                # A broker's own configs are asked of that broker alone: one that died and is not
                # yet fenced is still listed, and its silence says nothing of the others.
                silent[broker_id] = error
                continue
            self.per_broker[broker_id] = configs.broker
            self.default.update(configs.cluster_default)
            authorizers.add(configs.authorizer)
        if silent and len(silent) == len(brokers):
            raise next(iter(silent.values()))  # the whole cluster is gone: ask it nothing more
        self.authorizer = "".join(sorted(authorizers))
        if silent:
            raise KBackupError(
                f"broker(s) {', '.join(map(str, silent))} of {self.admin.servers} did not answer: "
                f"their dynamic configs are not in this increment (those of "
                f"{', '.join(map(str, self.per_broker))} are); the next increment reads them again"
            )

    def section(self, status: Status, error: str | None) -> BrokerConfigsSection:
        return BrokerConfigsSection(
            status=status,
            error=error,
            cluster_default=_configs(self.default),
            brokers=[
                BrokerConfigs(broker_id=broker_id, configs=_configs(configs))
                for broker_id, configs in sorted(self.per_broker.items())
            ],
        )


def _configs(configs: dict[str, DynamicConfig]) -> list[BrokerConfig]:
    return [
        BrokerConfig(name=name, value=item.value, sensitive=item.sensitive)
        for name, item in sorted(configs.items())
    ]


def capture_cluster_metadata(admin: Admin, *, backup_id: str, increment: int, run_id: str) -> ClusterMetadata:
    """Read what the source says of its ACLs, SCRAM users and dynamic broker configs."""
    taken_at = utc_now_iso()
    attempts = _Attempts()
    configs = _BrokerConfigReader(admin)
    config_status, config_error = attempts.run(configs)
    # What the principal may do on the cluster, asked once, before the two requests that need
    # Describe on it: librdkafka answers a refused DescribeAcls with an empty list (its error is
    # dropped), and a refused DescribeUserScramCredentials aborts the process (confluent-kafka
    # 2.16.1: "munmap_chunk(): invalid pointer"). Neither is sent without the right.
    operations: frozenset[str] = frozenset()

    def read_operations() -> None:
        nonlocal operations
        operations = admin.cluster_operations()

    _, operations_error = attempts.run(read_operations)
    acls: list[AclBinding] = []

    def read_acls() -> None:
        _may_describe(admin, operations, operations_error, "the ACLs")
        acls.extend(AclBinding(**entry.__dict__) for entry in admin.describe_acls())

    acl_status, acl_error = attempts.run(read_acls)
    if acl_status == "captured" and configs.authorizer == "":
        acl_status = "no_authorizer"
    users: list[ScramUser] = []

    def read_users() -> None:
        _may_describe(admin, operations, operations_error, "the SCRAM users")
        for user, credentials in admin.scram_users().items():
            infos = [
                ScramCredentialInfo(mechanism=item.mechanism, iterations=item.iterations)
                for item in credentials
            ]
            users.append(ScramUser(user=user, credentials=infos))

    user_status, user_error = attempts.run(read_users)
    return ClusterMetadata(
        backup_id=backup_id,
        increment=increment,
        run_id=run_id,
        taken_at=taken_at,
        acls=AclsSection(status=acl_status, error=acl_error, bindings=acls),
        scram_users=ScramUsersSection(status=user_status, error=user_error, users=users),
        broker_configs=configs.section(config_status, config_error),
    )


def _may_describe(admin: Admin, operations: frozenset[str], operations_error: str | None, what: str) -> None:
    """Raise unless the principal may describe the cluster; when asking what it may do failed,
    that failure (not a refusal)."""
    if operations_error is not None:
        raise KBackupError(operations_error)
    if "DESCRIBE" not in operations:
        raise KafkaOperationError(
            f"describe {what} on {admin.servers}: the principal may not describe the cluster "
            "(no Describe on the cluster resource)",
            code_name="CLUSTER_AUTHORIZATION_FAILED",
        )


def unread_kinds(metadata: ClusterMetadata) -> list[str]:
    """A line for each kind the increment could not capture, naming why."""
    lines = []
    for kind, section in metadata.sections().items():
        if section.status in ("not_authorized", "failed"):
            why = (
                "the backup's principal may not read them" if section.status == "not_authorized" else "failed"
            )
            lines.append(f"{KIND_NAMES[kind]} not captured ({why}): {section.error}")
    return lines


def write_cluster_metadata(
    storage: Storage, metadata: ClusterMetadata, keys: BackupKeys | None
) -> ClusterMetadataRef:
    """Store the file create-if-absent (before the manifest that will name it); its reference.

    Its name carries the run id and a token of its own: a run that commits an increment again
    after a failure (what it copied before the source went away) writes a second file, never over
    the first.
    """
    data = encode_cluster_metadata(metadata, keys)
    relative = cluster_metadata_key(metadata.increment, metadata.run_id, uuid.uuid4().hex[:8])
    if not storage.put_bytes_if_absent(object_key(metadata.backup_id, relative), data):
        raise StorageError(f"cluster metadata {metadata.backup_id}/{relative} exists already")
    return reference(metadata, relative, data)


@dataclass
class MetadataCapture:
    """The committer's part in the cluster metadata: read it at each checkpoint, tell whether it
    changed since the latest committed increment, store it with the increment that commits."""

    admin: Admin
    storage: Storage
    keys: BackupKeys | None
    #: The run's warnings: a kind the increments could not read, said once per run.
    warnings: list[str]
    #: ``content_sha256`` of the latest committed increment's file (None: it has none).
    committed_content: str | None

    def read(self, backup_id: str, increment: int, run_id: str) -> ClusterMetadata:
        """Never raises for the cluster: what it could not read is in the file."""
        return capture_cluster_metadata(self.admin, backup_id=backup_id, increment=increment, run_id=run_id)

    def is_news(self, metadata: ClusterMetadata) -> bool:
        return metadata.content_sha256() != self.committed_content

    def store(self, metadata: ClusterMetadata) -> ClusterMetadataRef:
        for line in unread_kinds(metadata):
            if line not in self.warnings:
                log.warning("%s", line)
                self.warnings.append(line)
        ref = write_cluster_metadata(self.storage, metadata, self.keys)
        self.committed_content = ref.content_sha256
        return ref
