"""``restore-metadata plan|execute`` onto an empty authorizer-enabled target (issue 37, phase 2).

Two authorizer-enabled clusters for the module (tests/support/secured_cluster.py). The source's
set-up, made as its super user, is the oracle: ACLs of every resource type and both pattern types
(an explicit DENY among them), SCRAM users under both mechanisms with different iterations. After
a backup, the metadata restore and the data restore, the target's ACLs and credentials are read
back as its super user and compared with the source's, and each application principal runs the
same operations on both clusters (kbackup.core.kafka.access): every one must be allowed or denied
on the target exactly as on the source.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka.admin import ScramMechanism  # type: ignore[attr-defined]

from kbackup.core.kafka import KafkaClients
from kbackup.core.kafka.access import AccessCheck, check_access
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.cli_run import RunCli
from tests.support.config_files import config_file
from tests.support.secured_cluster import (
    SUPER_PASSWORD,
    SUPER_USER,
    acl_binding,
    acl_tuples,
    broker_config,
    create_acls,
    create_topic_with_values,
    scram_credentials,
    secured_cluster,
    set_broker_config,
    set_cluster_default,
    set_topic_config,
    topic_config,
    upsert_scram_credential,
)

pytestmark = pytest.mark.integration

USERS = {"svc_a": "svc_a-Pa55-word", "svc_b": "svc_b-Pa55-word", "reader": "reader-Pa55-word"}
TOPICS = ("orders", "logs-app")
TOPIC_CONFIGS = {"logs-app": {"retention.ms": "86400000"}}
#: Set on the source's broker 1 (restored onto the target's broker 1), and as every broker's default
#: (which confluent-kafka cannot set: the plan gives the operator's command).
BROKER_CONFIG = ("log.cleaner.io.buffer.load.factor", "0.8")
CLUSTER_DEFAULT = ("log.cleaner.threads", "2")
ACLS = {
    ("TOPIC", "orders", "LITERAL", "User:svc_a", "*", "READ", "ALLOW"),
    ("TOPIC", "orders", "LITERAL", "User:svc_b", "*", "READ", "DENY"),
    ("TOPIC", "logs-", "PREFIXED", "User:svc_b", "*", "WRITE", "ALLOW"),
    ("GROUP", "billing", "LITERAL", "User:svc_a", "*", "READ", "ALLOW"),
    ("GROUP", "app-", "PREFIXED", "User:svc_b", "10.0.0.1", "DESCRIBE", "DENY"),
    ("CLUSTER", "kafka-cluster", "LITERAL", "User:svc_b", "*", "IDEMPOTENT_WRITE", "ALLOW"),
    ("TRANSACTIONAL_ID", "tx-1", "LITERAL", "User:svc_a", "*", "WRITE", "ALLOW"),
    ("TRANSACTIONAL_ID", "tx-", "PREFIXED", "User:svc_b", "*", "DESCRIBE", "ALLOW"),
}
CHECKS = [
    AccessCheck("describe-topic", "orders"),
    AccessCheck("read-topic", "orders"),
    AccessCheck("write-topic", "orders"),
    AccessCheck("write-topic", "logs-app"),
    AccessCheck("describe-group", "billing"),
    AccessCheck("transactional-id", "tx-1"),
    AccessCheck("transactional-id", "tx-9"),
    AccessCheck("describe-acls"),
]

#: What each principal may do, read off ``ACLS`` by hand (READ implies DESCRIBE; a DENY wins; svc_b's
#: Describe on the ``tx-`` prefix does not let it start a transaction).
EXPECTED = {
    "svc_a": {
        "describe-topic orders": "allowed",
        "read-topic orders": "allowed",
        "write-topic orders": "denied",
        "write-topic logs-app": "denied",
        "describe-group billing": "allowed",
        "transactional-id tx-1": "allowed",
        "transactional-id tx-9": "denied",
        "describe-acls": "denied",
    },
    "svc_b": {
        "describe-topic orders": "denied",
        "read-topic orders": "denied",
        "write-topic orders": "denied",
        "write-topic logs-app": "allowed",
        "describe-group billing": "denied",
        "transactional-id tx-1": "denied",
        "transactional-id tx-9": "denied",
        "describe-acls": "denied",
    },
}


Pair = tuple[LocalKafkaCluster, LocalKafkaCluster]


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(secured_cluster(tmp_path_factory.mktemp("source"), USERS))
        target = stack.enter_context(secured_cluster(tmp_path_factory.mktemp("target")))
        create_acls(source, [acl_binding(acl) for acl in ACLS])
        # svc_a's SHA-256 credential with other iterations (same password): the restore keeps both.
        upsert_scram_credential(source, "svc_a", ScramMechanism.SCRAM_SHA_256, 8192, USERS["svc_a"])
        set_broker_config(source, 1, *BROKER_CONFIG)
        set_cluster_default(source, tmp_path_factory.mktemp("config-command"), *CLUSTER_DEFAULT)
        for topic in TOPICS:
            create_topic_with_values(source, topic, [b"v0", b"v1"], configs=TOPIC_CONFIGS.get(topic))
        yield source, target


def _security(user: str, password: str) -> dict[str, str]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": user,
        "sasl_password": password,
    }


@pytest.fixture(scope="module")
def backed_up(clusters: Pair, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A backup of the source's topics and metadata; the store's folder."""
    from kbackup.cli.main import run

    source, _ = clusters
    folder = tmp_path_factory.mktemp("backup")
    store = folder / "store"
    config = config_file(
        folder / "backup.yaml",
        backup_id="b",
        source={
            "bootstrap_servers": [source.sasl_bootstrap_servers],
            "security": _security(SUPER_USER, SUPER_PASSWORD),
            "topics": {"include": list(TOPICS)},
        },
        storage={"url": str(store)},
    )
    assert run(["backup", "-c", str(config)]) == 0
    return store


def _restore_config(path: Path, target: LocalKafkaCluster, store: Path, **metadata: Any) -> Path:
    passwords = path.parent / "passwords.yaml"
    passwords.write_text("".join(f"{user}: {USERS[user]}\n" for user in ("svc_a", "svc_b")))
    return config_file(
        path,
        backup_id="b",
        target={
            "bootstrap_servers": [target.sasl_bootstrap_servers],
            "security": _security(SUPER_USER, SUPER_PASSWORD),
        },
        storage={"url": str(store)},
        restore_metadata={
            "kinds": ["acls", "users", "broker_defaults", "broker_configs"],
            "scram_passwords_file": str(passwords),
            **metadata,
        },
    )


def _access(cluster: LocalKafkaCluster, user: str) -> dict[str, str]:
    clients = KafkaClients(
        cluster.user_connection(user) if user in cluster.scram_users else _as(cluster, user)
    )
    return {str(check): check_access(clients, check) for check in CHECKS}


def _as(cluster: LocalKafkaCluster, user: str) -> Any:
    """A connection as ``user``, with the source's password, to a cluster that did not seed it."""
    from kbackup.core.config import KafkaConnection

    return KafkaConnection.model_validate(
        {"bootstrap_servers": [cluster.sasl_bootstrap_servers], "security": _security(user, USERS[user])}
    )


def test_bad_inputs_are_one_line_and_change_nothing(
    clusters: Pair, backed_up: Path, tmp_path: Path, cli: RunCli
) -> None:
    source, target = clusters
    before = (acl_tuples(target), scram_credentials(target))
    config = _restore_config(tmp_path / "dr.yaml", target, backed_up)

    # Two principals mapped onto one: refused before the target is read.
    merged = _restore_config(
        tmp_path / "merged.yaml", target, backed_up, principal_map={"User:svc_a": "User:svc_b"}
    )
    code, _, err = cli("restore-metadata", "plan", "-c", str(merged))
    assert code == 3, err
    assert "maps User:svc_a and User:svc_b onto User:svc_b" in err

    # A plan made for the source, executed against the target: refused, naming both clusters.
    on_source = config_file(
        tmp_path / "source.yaml",
        backup_id="b",
        target={
            "bootstrap_servers": [source.sasl_bootstrap_servers],
            "security": _security(SUPER_USER, SUPER_PASSWORD),
        },
        storage={"url": str(backed_up)},
        restore_metadata={"kinds": ["acls"]},
    )
    plan_file = tmp_path / "source-plan.json"
    code, _, err = cli("restore-metadata", "plan", "-c", str(on_source), "-o", str(plan_file))
    assert code == 0, err
    code, _, err = cli("restore-metadata", "execute", "-c", str(config), "--plan", str(plan_file))
    assert code == 10, err
    assert "the plan is for cluster" in err

    # A password file that lost a user the plan creates: refused before any change.
    plan_file = tmp_path / "plan.json"
    code, _, err = cli("restore-metadata", "plan", "-c", str(config), "-o", str(plan_file))
    assert code == 0, err
    (tmp_path / "passwords.yaml").write_text(f"svc_a: {USERS['svc_a']}\n")
    code, _, err = cli("restore-metadata", "execute", "-c", str(config), "--plan", str(plan_file))
    assert code == 3, err
    assert "no password for SCRAM user(s) svc_b" in err
    assert "nothing was changed" in err
    assert (acl_tuples(target), scram_credentials(target)) == before
    assert not acl_tuples(target)  # the target was empty: this test runs before the restore's


def test_acls_and_users_come_back_and_each_principal_may_do_exactly_what_it_could(
    clusters: Pair, backed_up: Path, tmp_path: Path, cli: RunCli
) -> None:
    source, target = clusters
    config = _restore_config(tmp_path / "dr.yaml", target, backed_up)
    plan_file = tmp_path / "plan.json"

    code, out, err = cli("restore-metadata", "plan", "-c", str(config), "-o", str(plan_file), "--json")
    assert code == 0, err
    plan = json.loads(out)
    actions = {(item["kind"], item["action"]) for item in plan["items"]}
    assert ("acls", "create") in actions
    assert ("scram_users", "create") in actions
    # reader has no password in the file: listed, skipped, and named in a warning.
    skipped = [item for item in plan["items"] if item["kind"] == "scram_users" and item["action"] == "skip"]
    assert {item["user"] for item in skipped} == {"reader"}
    assert any("reader" in warning for warning in plan["warnings"])
    assert all(password not in plan_file.read_text() for password in USERS.values())
    [manual] = [item for item in plan["items"] if item["action"] == "manual"]
    assert (manual["name"], manual["value"]) == CLUSTER_DEFAULT
    assert "--entity-default --alter --add-config log.cleaner.threads=2" in manual["reason"]

    code, out, err = cli("restore-metadata", "execute", "-c", str(config), "--plan", str(plan_file))
    assert code == 0, err
    assert all(password not in out + err for password in USERS.values())

    assert acl_tuples(target) == acl_tuples(source) == ACLS
    restored_users = {row for row in scram_credentials(target) if row[0] in ("svc_a", "svc_b")}
    assert restored_users == {row for row in scram_credentials(source) if row[0] in ("svc_a", "svc_b")}
    assert ("svc_a", "SCRAM-SHA-256", 8192) in restored_users
    assert broker_config(target, 1, BROKER_CONFIG[0]) == BROKER_CONFIG[1]

    code, _, err = cli("restore", "-c", str(config))
    assert code == 0, err
    for user in ("svc_a", "svc_b"):
        on_source = _access(source, user)
        assert on_source == EXPECTED[user]  # the checks tell allowed from denied on the source
        assert _access(target, user) == on_source, user

    # A topic config changed on the target since: existing_topics apply sets it back.
    set_topic_config(target, "logs-app", "retention.ms", "1000")
    topics = _restore_config(tmp_path / "topics.yaml", target, backed_up, kinds=["topic_configs"])
    with_apply = yaml.safe_load(topics.read_text())
    topics.write_text(yaml.safe_dump({**with_apply, "restore": {"existing_topics": "apply"}}))
    code, out, err = cli(
        "restore-metadata", "plan", "-c", str(topics), "-o", str(tmp_path / "t.json"), "--json"
    )
    assert code == 0, err
    altered = [item for item in json.loads(out)["items"] if item["action"] == "alter"]
    assert [(i["topic"], i["name"], i["value"], i["target_value"]) for i in altered] == [
        ("logs-app", "retention.ms", "86400000", "1000")
    ]
    code, _, err = cli("restore-metadata", "execute", "-c", str(topics), "--plan", str(tmp_path / "t.json"))
    assert code == 0, err
    assert topic_config(target, "logs-app", "retention.ms") == "86400000"

    # Again: every item is there, nothing changes.
    code, out, err = cli("restore-metadata", "plan", "-c", str(config), "--json")
    assert code == 0, err
    again = json.loads(out)
    assert not [item for item in again["items"] if item["action"] in ("create", "alter", "delete")]
    code, out, err = cli("restore-metadata", "execute", "-c", str(config), "--plan", str(plan_file), "--json")
    assert code == 0, err
    assert acl_tuples(target) == ACLS


def test_three_phase_dry_run_previews_the_metadata_phase_first(
    clusters: Pair, backed_up: Path, tmp_path: Path, cli: RunCli
) -> None:
    """With ``restore_metadata.enabled``, the three-phase restore's preview starts with the metadata
    plan (after the test above, every item is on the target already: ``exists``)."""
    _, target = clusters
    config = _restore_config(tmp_path / "dr.yaml", target, backed_up, enabled=True)
    code, out, err = cli("three-phase-restore", "-c", str(config), "--dry-run", "--json")
    assert code == 0, err
    phases = json.loads(out)["phases"]
    assert next(iter(phases)) == "metadata"
    actions = {item["action"] for item in phases["metadata"]["items"]}
    assert "exists" in actions
    assert not actions & {"create", "alter", "delete"}


def test_an_acl_the_authorizer_refuses_stops_execute_saying_what_was_applied(
    clusters: Pair, backed_up: Path, tmp_path: Path, cli: RunCli
) -> None:
    """A plan (edited by hand) with one binding the broker accepts and one it refuses (a principal
    without a type): the first is created, the second named in one line with the count applied."""
    _, target = clusters
    config = _restore_config(tmp_path / "dr.yaml", target, backed_up, kinds=["acls"])
    plan_file = tmp_path / "plan.json"
    code, _, err = cli("restore-metadata", "plan", "-c", str(config), "-o", str(plan_file))
    assert code == 0, err
    plan = json.loads(plan_file.read_text())
    accepted = ("TOPIC", "extra", "LITERAL", "User:svc_c", "*", "READ", "ALLOW")
    refused = ("TOPIC", "extra", "LITERAL", "svc_d", "*", "READ", "ALLOW")
    fields = (
        "resource_type",
        "resource_name",
        "pattern_type",
        "principal",
        "host",
        "operation",
        "permission",
    )
    plan["items"] = [
        {"kind": "acls", "action": "create", "binding": dict(zip(fields, acl, strict=True))}
        for acl in (accepted, refused)
    ]
    plan_file.write_text(json.dumps(plan))
    code, _, err = cli("restore-metadata", "execute", "-c", str(config), "--plan", str(plan_file))
    assert code == 6, err
    assert "the target refused to create ACL ALLOW svc_d READ" in err
    assert "1 change(s) applied before it" in err
    assert accepted in acl_tuples(target)
    assert not any(acl[3] == "svc_d" for acl in acl_tuples(target))
