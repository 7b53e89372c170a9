"""The secured local drill's access proof (``drill --local --secured``): the application principals it
grants rights to on the source, and the proof, by connecting as each of them, that the restored ACLs
and SCRAM users let it do on the target exactly what it could on the source.

The ACLs and checks are chosen so that the comparison means something after the drill's rename
(the drill restores topic ``T`` as ``drill.T``, and the metadata restore follows
``restore.topic_mapping``): a literal ACL on a drilled topic follows the rename, so the reader's
rights on ``orders`` are checked on ``drill.orders`` on the target; a prefixed topic ACL keeps its
prefix (the plan says so), so prefixed ACLs here name only the topics the write checks write to,
which the drill does not back up and makes under the same names on both clusters; group ACLs and
transactional ids are not renamed (the drill's copies of the groups are, but no ACL follows them),
so those checks ask for the same names on both clusters.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from kbackup.app.drill_report import AccessOutcome
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KBackupError
from kbackup.core.files import write_file
from kbackup.core.kafka import AclEntry, KafkaClients, TopicSpec, open_admin
from kbackup.core.kafka.access import AccessCheck, check_access
from kbackup.core.secrets import register_secret

#: Every cluster's super user: the drill's backup, restore and set-up run as it.
SUPER_USER = "drill_admin"
#: Reads the drill's ``orders`` and describes its group ``analytics``; nothing else.
READER = "drill_reader"
#: Writes the topics under ``access.`` but not ``access.audit`` (an explicit DENY), and starts
#: transactions under ``drill-writer-``; reads nothing.
WRITER = "drill_writer"
APP_USERS = (READER, WRITER)

#: The topics the write checks write to: made for them on both clusters, never backed up (the checks
#: must not append to the drilled topics, whose groups were just positioned).
WRITE_TOPICS = ("access.events", "access.audit")

DRILL_ACLS = (
    AclEntry("TOPIC", "orders", "LITERAL", f"User:{READER}", "*", "READ", "ALLOW"),
    AclEntry("GROUP", "analytics", "LITERAL", f"User:{READER}", "*", "READ", "ALLOW"),
    AclEntry("TOPIC", "access.", "PREFIXED", f"User:{WRITER}", "*", "WRITE", "ALLOW"),
    AclEntry("TOPIC", "access.audit", "LITERAL", f"User:{WRITER}", "*", "WRITE", "DENY"),
    AclEntry("TRANSACTIONAL_ID", "drill-writer-", "PREFIXED", f"User:{WRITER}", "*", "WRITE", "ALLOW"),
)

#: Each principal runs every check on both clusters: each is allowed to one of them and denied to
#: the other, and ``write-topic access.audit`` is denied to both (the writer by its DENY).
ACCESS_CHECKS = (
    AccessCheck("read-topic", "orders"),
    AccessCheck("read-topic", "payments"),
    AccessCheck("describe-group", "analytics"),
    AccessCheck("write-topic", "access.events"),
    AccessCheck("write-topic", "access.audit"),
    AccessCheck("transactional-id", "drill-writer-1"),
)

#: The checks whose resource is a topic, and so asked on the target under its restored name.
TOPIC_OPERATIONS = frozenset({"describe-topic", "read-topic", "write-topic"})


@dataclass(frozen=True)
class DrillUsers:
    """The SCRAM users of the secured drill's clusters, with passwords made for this run."""

    passwords: Mapping[str, str]

    @classmethod
    def generate(cls) -> DrillUsers:
        passwords = {user: secrets.token_urlsafe(18) for user in (SUPER_USER, *APP_USERS)}
        for password in passwords.values():
            register_secret(password)  # masked in every log line from now on
        return cls(passwords)

    def of_source(self) -> dict[str, str]:
        """The source holds every user: the app users are what the metadata restore brings back."""
        return dict(self.passwords)

    def of_target(self) -> dict[str, str]:
        """The target starts with its super user only: the rest comes from the backup."""
        return {SUPER_USER: self.passwords[SUPER_USER]}

    def write_passwords_file(self, path: Path) -> Path:
        """The app users' passwords as ``restore_metadata.scram_passwords_file`` reads them."""
        wanted = {user: self.passwords[user] for user in APP_USERS}
        # New and readable by this user only (write_file's mode for a file that holds a secret).
        write_file(path, yaml.safe_dump(wanted), "the drill's SCRAM passwords file", never_overwrite="new")
        return path

    def connection(self, servers: str, user: str) -> KafkaConnection:
        """``user`` over SCRAM-SHA-512 on the SASL listener ``servers``."""
        security = {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": user,
            "sasl_password": self.passwords[user],
        }
        return KafkaConnection.model_validate({"bootstrap_servers": [servers], "security": security})


def make_write_topics(connection: KafkaConnection) -> None:
    """The topics the write checks write to, made as the super user ``connection`` is (made once:
    one that exists is kept)."""
    refusals = open_admin(connection).create_topics(TopicSpec(name, 1, 1) for name in WRITE_TOPICS)
    for refused in refusals.values():
        if refused is not None and refused.code_name != "TOPIC_ALREADY_EXISTS":
            raise refused.error


def grant_source_rights(connection: KafkaConnection) -> None:
    """The drill's ACLs and write topics on the source, as its super user ``connection``."""
    make_write_topics(connection)
    refused: list[KBackupError] = [
        error for error in open_admin(connection).create_acls(DRILL_ACLS).values() if error is not None
    ]
    if refused:
        raise refused[0]


def target_check(check: AccessCheck, topic_mapping: Mapping[str, str]) -> AccessCheck:
    """``check`` as asked on the target: a topic under the name it was restored as."""
    if check.operation in TOPIC_OPERATIONS:
        return AccessCheck(check.operation, topic_mapping.get(check.resource, check.resource))
    return check


def prove_access(
    users: DrillUsers,
    *,
    source_servers: str,
    target: KafkaConnection,
    target_servers: str,
    topic_mapping: Mapping[str, str],
) -> list[AccessOutcome]:
    """Each app user's checks on the source and on the target (``target`` is its super user's
    connection, which makes the write topics there first)."""
    make_write_topics(target)
    outcomes: list[AccessOutcome] = []
    for user in APP_USERS:
        on_source = KafkaClients(
            users.connection(source_servers, user), client_id="kafka-backup-drill-access"
        )
        on_target = KafkaClients(
            users.connection(target_servers, user), client_id="kafka-backup-drill-access"
        )
        for check in ACCESS_CHECKS:
            restored = target_check(check, topic_mapping)
            outcomes.append(
                AccessOutcome(
                    principal=f"User:{user}",
                    check=str(check),
                    target_check=str(restored),
                    source=check_access(on_source, check),
                    target=check_access(on_target, restored),
                )
            )
    return outcomes
