"""Restoring a backup's cluster metadata: plan it against the target, then execute the plan.

Plan reads the backup's cluster-metadata files (the newest increment that could read each kind)
and the target's state, and says per item what execute will do; it changes nothing. Execute
refuses a plan made for another cluster, re-reads the passwords, applies the plan's changes in
order (topic and broker configs, SCRAM users, ACLs, deletions last) and stops at the first refusal,
saying what it applied before it. A second run of plan then execute changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import groupby
from typing import TypeVar

from pydantic import SecretStr

from kbackup import __version__
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import ConfigError, KafkaOperationError, KBackupError, PreconditionError
from kbackup.core.kafka import AclEntry, Admin, KafkaClients
from kbackup.core.kafka.admin import ScramCredential
from kbackup.core.logs import get_logger
from kbackup.core.retry import call_with_retries
from kbackup.core.times import utc_now_iso
from kbackup.format.catalog import Backup
from kbackup.format.cluster_metadata import ClusterMetadata, read_cluster_metadata
from kbackup.format.metadata_plan import (
    AclItem,
    BrokerConfigItem,
    MetadataItem,
    MetadataPlan,
    MetadataSource,
    ScramUserItem,
    TopicConfigItem,
    describe_item,
)
from kbackup.format.reset_plan import TargetInfo
from kbackup.restore.metadata_plan import (
    BackupMetadata,
    PlanInputs,
    TopicPolicy,
    acl_items,
    broker_items,
    check_principal_map,
    default_items,
    topic_items,
    user_items,
)
from kbackup.restore.metadata_settings import PLAN_KIND, MetadataRestoreSettings
from kbackup.restore.metadata_target import read_target_security
from kbackup.restore.plan import restored_topics
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.topic_drift import PARTITIONS
from kbackup.storage import Storage

log = get_logger("restore.metadata")

CLIENT_ID = "kafka-backup-restore-metadata"
_SECTIONS = ("acls", "scram_users", "broker_configs")


def backup_metadata(storage: Storage, backup: Backup, wanted: set[str]) -> BackupMetadata:
    """Each wanted section (the file's names) from the newest increment whose file holds it."""
    found = BackupMetadata()
    missing = set(wanted) & set(_SECTIONS)
    for manifest in reversed(backup.manifests):
        if not missing:
            break
        metadata = read_cluster_metadata(storage, manifest, backup.keys)
        if metadata is None:
            continue
        for section in sorted(missing):
            if _take(found, metadata, section):
                found.increments[section] = manifest.increment
                missing.discard(section)
    for section in missing:
        found.unread.setdefault(
            section, "no increment of the backup holds them (backups before kafka-backup 0.1 store none)"
        )
    return found


def _take(found: BackupMetadata, metadata: ClusterMetadata, section: str) -> bool:
    """Keep ``section`` of ``metadata`` if it was read in full; else remember why not."""
    part = metadata.sections()[section]
    if part.status == "no_authorizer":
        found.source_without_authorizer = True
    if part.status not in ("captured", "no_authorizer"):
        found.unread.setdefault(section, f"increment {metadata.increment}: {part.status}: {part.error}")
        return False
    if section == "acls":
        found.acls = list(metadata.acls.bindings)
    elif section == "scram_users":
        found.users = list(metadata.scram_users.users)
    else:
        found.broker_configs = metadata.broker_configs
    return True


def _topic_policy(restore: RestoreSettings) -> TopicPolicy:
    return TopicPolicy(
        existing_topics=restore.existing_topics,
        copy_topic_configs=restore.copy_topic_configs,
        exclude_topic_configs=list(restore.exclude_topic_configs),
        target_partitions=dict(restore.target_partitions),
    )


def _sections_of(kinds: Iterable[str]) -> set[str]:
    return {PLAN_KIND[kind] for kind in kinds}


def plan_metadata_restore(
    *,
    backup: Backup,
    storage: Storage,
    target: KafkaConnection,
    settings: MetadataRestoreSettings,
    restore: RestoreSettings,
) -> MetadataPlan:
    """Work out what restoring the backup's metadata changes on the target; changes nothing.

    ``restore``: its ``topic_mapping`` renames the topics ACLs name, and its topic selection and
    ``existing_topics`` say which topics' configs are compared, and what becomes of a difference.
    """
    sections = _sections_of(settings.kinds)
    found = backup_metadata(storage, backup, sections)
    check_principal_map(found, settings.principal_map)
    passwords = settings.load_passwords() if "scram_users" in sections else {}
    topics = restored_topics(backup, restore) if "topic_configs" in sections else []
    admin = Admin(KafkaClients(target, client_id=CLIENT_ID))
    state = read_target_security(admin, sections, [topic.target_topic for topic in topics])
    topic_mapping = dict(restore.topic_mapping)
    inputs = PlanInputs(
        settings=settings,
        topic_mapping=topic_mapping,
        servers=",".join(target.bootstrap_servers),
        users_with_password=set(passwords),
    )
    items, stopping = topic_items(topics, state, _topic_policy(restore))
    if stopping:
        raise PreconditionError(
            f"restore.existing_topics is fail and topics on the target differ from the backup: "
            f"{'; '.join(stopping)}; nothing was changed",
            hint="make them match, or set restore.existing_topics to validate (report) or apply (alter)",
        )
    warnings = [
        f"the backup holds no {section.replace('_', ' ')} to restore ({why})"
        for section, why in sorted(found.unread.items())
    ]
    if "acls" in sections and found.acls is not None:
        items += acl_items(found.acls, state, inputs)
        if found.source_without_authorizer and not found.acls:
            warnings.append("the source ran no authorizer: it had no ACL to restore")
    if "scram_users" in sections and found.users is not None:
        items += user_items(found.users, state, inputs)
    if found.broker_configs is not None:
        if "broker_defaults" in settings.kinds:
            items += default_items(found.broker_configs, state, inputs.servers)
        if "broker_configs" in settings.kinds:
            items += broker_items(found.broker_configs, state)
    skipped = sorted(
        {item.user for item in items if isinstance(item, ScramUserItem) and item.action == "skip"}
    )
    if skipped:
        warnings.append(
            f"SCRAM user(s) without a password, skipped: {', '.join(skipped)}; add them to "
            f"{settings.password_source() or 'restore_metadata.scram_passwords_file'} and plan again"
        )
    return MetadataPlan(
        created_at=utc_now_iso(),
        tool_version=__version__,
        source=MetadataSource(
            backup_id=backup.backup_id, storage_url=storage.url, increments=found.increments
        ),
        target=TargetInfo(cluster_id=state.cluster_id, bootstrap_servers=list(target.bootstrap_servers)),
        kinds=list(settings.kinds),
        principal_map=dict(settings.principal_map),
        topic_mapping=dict(topic_mapping),
        items=items,
        warnings=warnings,
    )


@dataclass
class MetadataResult:
    dry_run: bool
    #: The items applied (or, in a dry run, that would be), one line each.
    applied: list[str] = field(default_factory=list)
    #: Items the plan found already there.
    unchanged: int = 0
    #: Items left for an operator (``manual``) or skipped, one line each.
    left: list[str] = field(default_factory=list)


def execute_metadata_plan(
    plan: MetadataPlan,
    target: KafkaConnection,
    settings: MetadataRestoreSettings,
    *,
    dry_run: bool = False,
) -> MetadataResult:
    """Apply a reviewed plan to the target it was made for; stop at the first refusal."""
    admin = Admin(KafkaClients(target, client_id=CLIENT_ID))
    cluster_id = admin.cluster_id()
    if plan.target.cluster_id is not None and cluster_id != plan.target.cluster_id:
        raise PreconditionError(
            f"the plan is for cluster {plan.target.cluster_id}, but {','.join(target.bootstrap_servers)} "
            f"is cluster {cluster_id}",
            hint="make a plan against this cluster with 'kafka-backup restore-metadata plan'",
        )
    changes = plan.changes()
    passwords = _passwords_for(changes, settings)
    result = MetadataResult(
        dry_run=dry_run,
        unchanged=sum(1 for item in plan.items if item.action == "exists"),
        left=[
            f"{item.action} {describe_item(item)}: {item.reason}"
            for item in plan.items
            if item.action in ("manual", "skip", "differs")
        ],
    )
    if dry_run:
        result.applied = [f"{item.action} {describe_item(item)}" for item in changes]
        return result
    _Applier(admin, passwords, result).apply(changes)
    return result


def _passwords_for(changes: list[MetadataItem], settings: MetadataRestoreSettings) -> dict[str, SecretStr]:
    users = sorted({item.user for item in changes if isinstance(item, ScramUserItem)})
    if not users:
        return {}
    passwords = settings.load_passwords()
    missing = [user for user in users if user not in passwords]
    if missing:
        raise ConfigError(
            f"no password for SCRAM user(s) {', '.join(missing)} in "
            f"{settings.password_source() or 'any password source'}, which the plan creates; "
            "nothing was changed",
            hint="add them (restore_metadata.scram_passwords_file or _env), or make a new plan",
        )
    return passwords


#: How long execute waits for the brokers to show the ACLs and SCRAM credentials it changed.
CHANGES_VISIBLE_SECS = 30.0
Answer = TypeVar("Answer")


@dataclass
class _Applier:
    admin: Admin
    passwords: dict[str, SecretStr]
    result: MetadataResult

    #: ACL bindings created and deleted, SCRAM credentials set (user, mechanism, iterations):
    #: awaited in the broker's answers at the end.
    _created: set[AclEntry] = field(default_factory=set)
    _deleted: set[AclEntry] = field(default_factory=set)
    _credentials: set[tuple[str, str, int]] = field(default_factory=set)

    def apply(self, changes: list[MetadataItem]) -> None:
        """``changes`` in the plan's order (:meth:`MetadataPlan.changes`), where the ACLs of one
        action stand together: each such run goes in one request."""
        for (kind, _action), run in groupby(changes, key=lambda item: (item.kind, item.action)):
            items = list(run)
            if kind == "acls":
                self._acls([item for item in items if isinstance(item, AclItem)])
            else:
                for item in items:
                    self._one(item)
        self._await_visible()

    def _await_visible(self) -> None:
        """Until the broker answers with the ACLs and SCRAM credentials as changed: the controller
        acknowledges a change once committed, and each broker applies it a moment later (seen: a
        describe right after a restore answered with none), so a client started now would still
        be refused."""
        if self._created or self._deleted:

            def acls_settled(found: list[AclEntry]) -> bool:
                return self._created <= set(found) and not self._deleted & set(found)

            acls = self._await(self.admin.describe_acls, acls_settled)
            if not acls_settled(acls):
                self._not_visible("ACL", len(self._created - set(acls)) + len(self._deleted & set(acls)))
        if self._credentials:

            def listed(users: dict[str, list[ScramCredential]]) -> set[tuple[str, str, int]]:
                return {(user, c.mechanism, c.iterations) for user, creds in users.items() for c in creds}

            users = self._await(self.admin.scram_users, lambda found: self._credentials <= listed(found))
            if not self._credentials <= listed(users):
                self._not_visible("SCRAM credential", len(self._credentials - listed(users)))

    def _await(self, describe: Callable[[], Answer], settled: Callable[[Answer], bool]) -> Answer:
        return call_with_retries(
            describe, within_secs=CHANGES_VISIBLE_SECS, delay_secs=0.1, max_delay_secs=1.0, until=settled
        )

    def _not_visible(self, what: str, missing: int) -> None:
        raise KafkaOperationError(
            f"the target acknowledged the {what} changes but {missing} of them do not show "
            f"{CHANGES_VISIBLE_SECS:g}s later",
            hint="check the target's brokers; running execute again applies what is missing",
            retryable=True,
        )

    def _one(self, item: MetadataItem) -> None:
        try:
            self._change(item)
        except KBackupError as error:
            raise self._stopped(item, error) from None
        self.result.applied.append(f"{item.action} {describe_item(item)}")
        log.info("%s %s", item.action, describe_item(item))

    def _change(self, item: MetadataItem) -> None:
        if isinstance(item, ScramUserItem):
            password = self.passwords[item.user].get_secret_value()
            self.admin.upsert_scram_credential(item.user, item.mechanism, item.iterations, password)
            self._credentials.add((item.user, item.mechanism, item.iterations))
        elif isinstance(item, BrokerConfigItem):
            # The planner plans neither a default nor a sensitive value for execute.
            assert item.broker_id is not None
            assert item.value is not None
            self.admin.set_broker_configs(item.broker_id, {item.name: item.value})
        elif isinstance(item, TopicConfigItem):
            assert item.value is not None  # the planner alters only to a backup's value
            if item.name == PARTITIONS:
                self.admin.create_partitions(item.topic, int(item.value))
            else:
                self.admin.set_topic_configs(item.topic, {item.name: item.value})

    def _acls(self, batch: list[AclItem]) -> None:
        entries = {AclEntry(**item.binding.model_dump()): item for item in batch}
        send = self.admin.create_acls if batch[0].action == "create" else self.admin.delete_acls
        outcome = send(list(entries))
        refused = None
        for entry, item in entries.items():
            error = outcome.get(entry, KafkaOperationError(f"no answer for {describe_item(item)}"))
            if error is None:
                self.result.applied.append(f"{item.action} {describe_item(item)}")
                (self._created if item.action == "create" else self._deleted).add(entry)
            elif refused is None:
                refused = (item, error)
        if refused is not None:
            raise self._stopped(*refused)

    def _stopped(self, item: MetadataItem, error: KBackupError) -> KBackupError:
        done = len(self.result.applied)
        summary = f"{done} change(s) applied before it" if done else "nothing was applied"
        # The error's own class, so its exit code says what went wrong (refused, unreachable).
        stopped = type(error)(
            f"the target refused to {item.action} {describe_item(item)}: {error.message}; {summary}",
            hint="fix the cause and run execute again (what was applied stays; a new plan shows it "
            "as exists)",
        )
        stopped.json_context = {"applied": list(self.result.applied)}
        return stopped
