"""The cluster-metadata file of an increment: ACLs, SCRAM users and dynamic broker configs.

docs/format.md, "Cluster metadata", is the contract. One file per increment, written before the
manifest that names it (with its size and SHA-256), create-if-absent, and never rewritten. An
encrypted backup's file is sealed like its manifests, under a key of its own per increment.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import Field

from kbackup.format.encryption import BackupKeys
from kbackup.format.increment_files import IncrementDocument, IncrementFileKind
from kbackup.format.manifest import ClusterMetadataRef, Manifest, ManifestModel, MetadataKindSummary
from kbackup.storage import Storage

CLUSTER_METADATA_FORMAT = "kafka-backup-cluster-metadata"
#: Readers refuse a cluster-metadata file of a higher version.
CLUSTER_METADATA_VERSION = 1
METADATA_FOLDER = "metadata"

#: What became of one kind of metadata: read in full, a cluster without an authorizer (no ACL
#: exists; every principal may do everything), the backup's principal may not read it, or the
#: cluster did not answer (the error says why).
Status = Literal["captured", "no_authorizer", "not_authorized", "failed"]


class AclBinding(ManifestModel):
    #: TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, ... as Kafka names it.
    resource_type: str
    resource_name: str
    #: LITERAL or PREFIXED.
    pattern_type: str
    #: ``User:app``, ``User:*``, ...
    principal: str
    host: str
    #: READ, WRITE, DESCRIBE, ALL, ...
    operation: str
    #: ALLOW or DENY.
    permission: str


class AclsSection(ManifestModel):
    status: Status
    error: str | None = None
    bindings: list[AclBinding] = Field(default_factory=list)


class ScramCredentialInfo(ManifestModel):
    #: SCRAM-SHA-256 or SCRAM-SHA-512.
    mechanism: str
    iterations: int


class ScramUser(ManifestModel):
    user: str
    credentials: list[ScramCredentialInfo] = Field(default_factory=list)


class ScramUsersSection(ManifestModel):
    status: Status
    error: str | None = None
    users: list[ScramUser] = Field(default_factory=list)


class BrokerConfig(ManifestModel):
    name: str
    #: None when Kafka marks the config sensitive: its value is never stored.
    value: str | None
    sensitive: bool = False


class BrokerConfigs(ManifestModel):
    broker_id: int
    configs: list[BrokerConfig] = Field(default_factory=list)


class BrokerConfigsSection(ManifestModel):
    status: Status
    error: str | None = None
    #: Set as every broker's default (DYNAMIC_DEFAULT_BROKER_CONFIG).
    cluster_default: list[BrokerConfig] = Field(default_factory=list)
    #: Set on one broker (DYNAMIC_BROKER_CONFIG), per broker; every broker is listed.
    brokers: list[BrokerConfigs] = Field(default_factory=list)


class ClusterMetadata(IncrementDocument):
    format: str = CLUSTER_METADATA_FORMAT
    format_version: int = CLUSTER_METADATA_VERSION
    backup_id: str
    increment: int
    run_id: str
    #: When the first of its requests was sent.
    taken_at: str
    acls: AclsSection
    scram_users: ScramUsersSection
    broker_configs: BrokerConfigsSection

    def sections(self) -> dict[str, AclsSection | ScramUsersSection | BrokerConfigsSection]:
        """Each kind by the name the manifest and the summary give it."""
        return {"acls": self.acls, "scram_users": self.scram_users, "broker_configs": self.broker_configs}

    def content_sha256(self) -> str:
        """What it says of the cluster, hashed: each kind's status and items, not its error's words
        (they name servers and times), nor when or by which run it was read."""
        content = {
            kind: section.model_dump(mode="json", exclude={"error"})
            for kind, section in self.sections().items()
        }
        return hashlib.sha256(_canonical(content)).hexdigest()

    def summary(self) -> dict[str, MetadataKindSummary]:
        """Each kind's status and how many items it holds, as the manifest repeats them."""
        configs = self.broker_configs
        counts = {
            "acls": len(self.acls.bindings),
            "scram_users": len(self.scram_users.users),
            "broker_configs": len(configs.cluster_default)
            + sum(len(broker.configs) for broker in configs.brokers),
        }
        return {
            kind: MetadataKindSummary(status=section.status, count=counts[kind])
            for kind, section in self.sections().items()
        }


def cluster_metadata_key(increment: int, run_id: str, token: str) -> str:
    """Relative to the backup's folder, like a segment's key; the run id and the writer's own
    token keep any two files apart."""
    return f"{METADATA_FOLDER}/{increment:08d}-{run_id}-{token}.json"


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


KIND = IncrementFileKind(
    what="cluster metadata",
    format=CLUSTER_METADATA_FORMAT,
    version=CLUSTER_METADATA_VERSION,
    purpose="cluster-metadata",
)


def encode_cluster_metadata(metadata: ClusterMetadata, keys: BackupKeys | None) -> bytes:
    """The file's bytes: the document, or for an encrypted backup its identity and the whole
    document sealed with that identity as authenticated data."""
    return KIND.encode(metadata, keys)


def reference(metadata: ClusterMetadata, key: str, data: bytes) -> ClusterMetadataRef:
    """What the manifest says of the file it names: where, its size and checksum, and its counts."""
    return ClusterMetadataRef(
        key=key,
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        content_sha256=metadata.content_sha256(),
        **metadata.summary(),
    )


def parse_cluster_metadata(
    data: bytes,
    ref: ClusterMetadataRef,
    *,
    backup_id: str,
    increment: int,
    run_id: str,
    keys: BackupKeys | None,
) -> ClusterMetadata:
    """The file a manifest names, checked against the manifest (size, SHA-256, identity); every
    problem is one BackupIntegrityError naming the object."""
    return KIND.parse(
        ClusterMetadata, data, ref, backup_id=backup_id, increment=increment, run_id=run_id, keys=keys
    )


def read_cluster_metadata(
    storage: Storage, manifest: Manifest, keys: BackupKeys | None
) -> ClusterMetadata | None:
    """The cluster-metadata file ``manifest`` names, checked (None: the increment has none); ``keys``
    are an encrypted backup's (``Backup.keys``)."""
    return KIND.read(ClusterMetadata, storage, manifest, manifest.cluster_metadata, keys)
