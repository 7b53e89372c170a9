"""A backup captures the source's ACLs, SCRAM users and dynamic broker configs (issue 37, phase 1).

One authorizer-enabled cluster for the module (tests/support/secured_cluster.py): the set-up
creates, as its super user, ACLs of every resource type and both pattern types, SCRAM users of both
mechanisms with different iterations, a config on broker 1 (and a sensitive one) and a cluster-wide
default. What a backup stores is judged against that set-up, never against the product's output.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import ScramMechanism  # type: ignore[attr-defined]

from kbackup.format.catalog import BackupCatalog
from kbackup.format.cluster_metadata import ClusterMetadata, read_cluster_metadata
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.cli_run import RunCli
from tests.support.config_files import config_file
from tests.support.secured_cluster import (
    SUPER_USER,
    acl_binding,
    create_acls,
    create_topic_with_values,
    delete_acls,
    secured_cluster,
    set_broker_config,
    set_cluster_default,
    upsert_scram_credential,
)

TOPIC = "orders"
#: The backup's principal of the refused case: it may read topics and groups, not the cluster.
READER = "reader"
USERS = {READER: "reader-Pa55", "svc_a": "svc_a-Pa55", "svc_b": "svc_b-Pa55"}
#: (resource type, name, pattern, principal, host, operation, permission): every binding the set-up makes.
ACLS = {
    ("TOPIC", "orders", "LITERAL", "User:svc_a", "*", "READ", "ALLOW"),
    ("TOPIC", "logs-", "PREFIXED", "User:svc_b", "*", "WRITE", "ALLOW"),
    ("GROUP", "billing", "LITERAL", "User:svc_a", "*", "READ", "ALLOW"),
    ("GROUP", "app-", "PREFIXED", "User:svc_b", "10.0.0.1", "DESCRIBE", "DENY"),
    ("CLUSTER", "kafka-cluster", "LITERAL", "User:svc_b", "*", "IDEMPOTENT_WRITE", "ALLOW"),
    ("TRANSACTIONAL_ID", "tx-1", "LITERAL", "User:svc_a", "*", "WRITE", "ALLOW"),
    ("TRANSACTIONAL_ID", "tx-", "PREFIXED", "User:svc_b", "*", "DESCRIBE", "ALLOW"),
    *(
        (kind, "*", "LITERAL", f"User:{READER}", "*", operation, "ALLOW")
        for kind, operation in [
            ("TOPIC", "READ"),
            ("TOPIC", "DESCRIBE"),
            ("TOPIC", "DESCRIBE_CONFIGS"),
            ("GROUP", "READ"),
            ("GROUP", "DESCRIBE"),
        ]
    ),
}
#: (user, mechanism, iterations): the storage format seeds every ``scram_users`` entry under both
#: mechanisms with Kafka's default of 4096 iterations; the set-up then replaces one credential of
#: svc_a and one of svc_b with other iterations.
SCRAM = {
    *(
        (user, mechanism, 4096)
        for user in (SUPER_USER, READER)
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    ),
    ("svc_a", "SCRAM-SHA-256", 8192),
    ("svc_a", "SCRAM-SHA-512", 4096),
    ("svc_b", "SCRAM-SHA-256", 4096),
    ("svc_b", "SCRAM-SHA-512", 10000),
}
BROKER_CONFIG = ("log.cleaner.io.buffer.load.factor", "0.8")
SENSITIVE_CONFIG = ("listener.name.sasl_plaintext.ssl.key.password", "key-Pa55-not-stored")
#: ``min.insync.replicas=1`` is Kafka's own: its storage format writes it as the cluster default.
CLUSTER_DEFAULTS = {("log.cleaner.threads", "2"), ("min.insync.replicas", "1")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    work_dir = tmp_path_factory.mktemp("secured-kafka")
    with secured_cluster(work_dir, USERS) as started:
        create_acls(started, [acl_binding(acl) for acl in ACLS])
        upsert_scram_credential(started, "svc_a", ScramMechanism.SCRAM_SHA_256, 8192, "svc_a-new")
        upsert_scram_credential(started, "svc_b", ScramMechanism.SCRAM_SHA_512, 10000, "svc_b-new")
        set_broker_config(started, 1, *BROKER_CONFIG)
        set_broker_config(started, 1, *SENSITIVE_CONFIG)
        set_cluster_default(started, work_dir, "log.cleaner.threads", "2")
        create_topic_with_values(started, TOPIC, [b"v0", b"v1", b"v2"])
        yield started


def _backup(
    cli: RunCli, cluster: LocalKafkaCluster, user: str, tmp_path: Path
) -> tuple[Path, Path, tuple[int, str, str]]:
    """``backup --json`` of the topic as ``user``: the store, the config, and the CLI's outcome."""
    store = tmp_path / "store"
    config = _config(tmp_path / "backup.yaml", cluster, user, store)
    return store, config, cli("backup", "-c", str(config), "--json")


def _config(path: Path, cluster: LocalKafkaCluster, user: str, store: Path) -> Path:
    security = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": user,
        "sasl_password": cluster.scram_users[user],
    }
    source = {"bootstrap_servers": [cluster.sasl_bootstrap_servers], "security": security}
    return config_file(
        path,
        backup_id="b",
        source={**source, "topics": {"include": [TOPIC]}},
        storage={"url": str(store)},
    )


def stored_metadata(store: Path) -> list[ClusterMetadata]:
    """Each increment's cluster-metadata file, read back through the manifest that names it."""
    storage = open_storage(str(store))
    files = [
        read_cluster_metadata(storage, manifest, None)
        for manifest in BackupCatalog(storage).load("b").manifests
    ]
    assert None not in files
    return [item for item in files if item is not None]


def _acls(metadata: ClusterMetadata) -> set[tuple[str, ...]]:
    return {tuple(binding.model_dump().values()) for binding in metadata.acls.bindings}


def _scram(metadata: ClusterMetadata) -> set[tuple[str, str, int]]:
    return {
        (user.user, item.mechanism, item.iterations)
        for user in metadata.scram_users.users
        for item in user.credentials
    }


def test_a_backup_captures_every_acl_scram_user_and_dynamic_broker_config(
    cluster: LocalKafkaCluster, tmp_path: Path, cli: RunCli
) -> None:
    store, config, (code, out, err) = _backup(cli, cluster, SUPER_USER, tmp_path)
    assert code == 0, err
    assert json.loads(out)["problems"] == []

    [metadata] = stored_metadata(store)
    assert _acls(metadata) == ACLS
    assert metadata.acls.status == "captured"
    assert _scram(metadata) == SCRAM
    configs = metadata.broker_configs
    assert {(item.name, item.value) for item in configs.cluster_default} == CLUSTER_DEFAULTS
    [broker] = configs.brokers
    assert broker.broker_id == 1
    assert {(item.name, item.value, item.sensitive) for item in broker.configs} == {
        (*BROKER_CONFIG, False),
        (SENSITIVE_CONFIG[0], None, True),
    }
    assert SENSITIVE_CONFIG[1] not in "".join(path.read_text() for path in store.rglob("*.json"))

    code, out, err = cli("describe", "-c", str(config), "--json")
    assert code == 0, err
    [row] = json.loads(out)["increments"]
    assert row["cluster_metadata"] == {
        "acls": {"status": "captured", "count": len(ACLS)},
        "scram_users": {"status": "captured", "count": len(USERS) + 1},
        "broker_configs": {"status": "captured", "count": len(CLUSTER_DEFAULTS) + 2},
    }
    code, out, err = cli("describe", "-c", str(config))
    assert code == 0, err
    assert f"ACLs {len(ACLS)}, SCRAM users {len(USERS) + 1}, broker configs 4" in out


def test_a_changed_acl_alone_is_an_increment_and_unchanged_metadata_is_none(
    cluster: LocalKafkaCluster, tmp_path: Path, cli: RunCli
) -> None:
    store, config, (code, _out, err) = _backup(cli, cluster, SUPER_USER, tmp_path)
    assert code == 0, err
    code, out, err = cli("backup", "-c", str(config), "--json")
    assert code == 0, err
    assert json.loads(out)["nothing_new_since"] == 0
    added = ("TOPIC", "audit", "LITERAL", "User:svc_a", "*", "WRITE", "ALLOW")
    create_acls(cluster, [acl_binding(added)])
    try:
        code, out, err = cli("backup", "-c", str(config), "--json")
    finally:
        delete_acls(cluster, [acl_binding(added)])
    assert code == 0, err
    [increment] = json.loads(out)["increments"]
    assert (increment["increment"], increment["records"]) == (1, 0)
    first, second = stored_metadata(store)
    assert _acls(first) == ACLS
    assert _acls(second) == ACLS | {added}


def test_a_principal_that_may_not_describe_the_cluster_still_backs_up_and_names_what_it_missed(
    cluster: LocalKafkaCluster, tmp_path: Path, cli: RunCli
) -> None:
    store, config, (code, out, err) = _backup(cli, cluster, READER, tmp_path)
    # Succeeds (exit 0: records and groups are whole), warning once of each kind it missed.
    assert code == 0, err
    summary = json.loads(out)
    assert summary["records"] == 3
    assert summary["problems"] == []
    warnings = summary["warnings"]
    assert len(warnings) == 3, warnings
    for kind in ("ACLs", "SCRAM users", "dynamic broker configs"):
        [line] = [warning for warning in warnings if warning.startswith(f"{kind} not captured")]
        assert "the backup's principal may not read them" in line
    [increment] = summary["increments"]
    assert {kind: item["status"] for kind, item in increment["cluster_metadata"].items()} == dict.fromkeys(
        ("acls", "scram_users", "broker_configs"), "not_authorized"
    )
    [metadata] = stored_metadata(store)
    assert metadata.acls.bindings == []
    assert metadata.scram_users.users == []

    code, out, err = cli("describe", "-c", str(config))
    assert code == 0, err
    assert "ACLs (not authorized), SCRAM users (not authorized), broker configs (not authorized)" in out


def test_a_cluster_without_an_authorizer_records_no_authorizer(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, cli: RunCli
) -> None:
    from tests.support.kafka_io import Record, create_topic, produce

    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v")])
    store = tmp_path / "store"
    args = ["backup", "-b", source_cluster.bootstrap_servers, "--include", unique_name]
    code, out, err = cli(*args, "--path", str(store), "--backup-id", "b", "--json")
    assert code == 0, err
    summary: dict[str, Any] = json.loads(out)
    assert summary["problems"] == []
    [metadata] = stored_metadata(store)
    assert (metadata.acls.status, metadata.acls.error, metadata.acls.bindings) == ("no_authorizer", None, [])
    assert metadata.scram_users.status == "captured"
    assert metadata.broker_configs.status == "captured"
