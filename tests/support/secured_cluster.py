"""An authorizer-enabled local Kafka cluster, and the set-up its tests make as its super user.

The cluster runs KRaft's ``StandardAuthorizer`` with one super user (``SUPER_USER``); every other
SCRAM user may do only what the test grants it with ACLs. The set-up requests go through
confluent-kafka directly (they are the test's own doing, the oracle the product is judged
against), except the cluster-wide broker default, which confluent-kafka cannot name: Kafka's
own ``ConfigCommand`` sets it.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kbackup.sandbox.jars import classpath, kafka_libs
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.node_faults import config_command

SUPER_USER = "admin"
SUPER_PASSWORD = "admin-Pa55-sandbox"


@contextlib.contextmanager
def secured_cluster(work_dir: Path, users: Mapping[str, str] | None = None) -> Iterator[LocalKafkaCluster]:
    """A started cluster with the authorizer, ``SUPER_USER`` and ``users`` (name -> password) seeded
    under both SCRAM mechanisms; stopped on exit."""
    cluster = LocalKafkaCluster(
        name="secured",
        work_dir=work_dir,
        libs=kafka_libs(),
        scram_users={SUPER_USER: SUPER_PASSWORD, **(users or {})},
        super_user=SUPER_USER,
    )
    try:
        cluster.start(timeout=180)
        yield cluster
    finally:
        cluster.stop()


def client_config(cluster: LocalKafkaCluster, user: str = SUPER_USER) -> dict[str, str | int | float | bool]:
    """librdkafka settings of ``user`` over SCRAM-SHA-512 on the SASL listener."""
    return {
        "bootstrap.servers": cluster.sasl_bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": cluster.scram_users[user],
    }


def admin_client(cluster: LocalKafkaCluster, user: str = SUPER_USER) -> AdminClient:
    return AdminClient(client_config(cluster, user))


def _wait_all(client: AdminClient, request: Callable[[AdminClient], Mapping[Any, Future[Any]]]) -> None:
    """Send ``request`` and wait for each of its answers, the client kept alive meanwhile (a client
    collected before its answers came cancels them)."""
    for future in request(client).values():
        future.result(30)


#: Kafka's resource types as confluent-kafka names them (librdkafka calls CLUSTER BROKER).
_RESOURCE_TYPES = {
    "TOPIC": ResourceType.TOPIC,
    "GROUP": ResourceType.GROUP,
    "CLUSTER": ResourceType.BROKER,
    "TRANSACTIONAL_ID": ResourceType.TRANSACTIONAL_ID,
}


def acl_binding(acl: tuple[str, ...]) -> AclBinding:
    """(resource type, name, pattern, principal, host, operation, permission) as a binding."""
    kind, name, pattern, principal, host, operation, permission = acl
    return AclBinding(
        _RESOURCE_TYPES[kind],
        name,
        ResourcePatternType[pattern],
        principal,
        host,
        AclOperation[operation],
        AclPermissionType[permission],
    )


def acl_tuples(cluster: LocalKafkaCluster) -> set[tuple[str, ...]]:
    """Every ACL of the cluster as (resource type, name, pattern, principal, host, operation,
    permission), read as its super user."""
    anything: Any = None
    match_all = AclBindingFilter(
        ResourceType.ANY,
        anything,
        ResourcePatternType.ANY,
        anything,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    client = admin_client(cluster)
    found = client.describe_acls(match_all).result(30)
    names = {value: key for key, value in _RESOURCE_TYPES.items()}
    return {
        (
            names[item.restype],
            item.name,
            item.resource_pattern_type.name,
            item.principal,
            item.host,
            item.operation.name,
            item.permission_type.name,
        )
        for item in found
    }


def scram_credentials(cluster: LocalKafkaCluster) -> set[tuple[str, str, int]]:
    """Every SCRAM credential of the cluster as (user, mechanism, iterations)."""
    client = admin_client(cluster)
    answer: Any = client.describe_user_scram_credentials()
    described = answer.result(30)
    return {
        (user, info.mechanism.name.replace("_", "-"), info.iterations)
        for user, description in described.items()
        for info in description.scram_credential_infos
    }


def create_acls(cluster: LocalKafkaCluster, bindings: list[AclBinding]) -> None:
    _wait_all(admin_client(cluster), lambda client: client.create_acls(bindings))


def delete_acls(cluster: LocalKafkaCluster, bindings: list[AclBinding]) -> None:
    """Delete exactly ``bindings`` (each as a filter that matches only itself)."""
    filters = [
        AclBindingFilter(
            item.restype,
            item.name,
            item.resource_pattern_type,
            item.principal,
            item.host,
            item.operation,
            item.permission_type,
        )
        for item in bindings
    ]
    _wait_all(admin_client(cluster), lambda client: client.delete_acls(filters))


def upsert_scram_credential(
    cluster: LocalKafkaCluster, user: str, mechanism: ScramMechanism, iterations: int, password: str
) -> None:
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(mechanism, iterations), password.encode()
    )
    _wait_all(admin_client(cluster), lambda client: client.alter_user_scram_credentials([upsertion]))


def create_topic_with_values(
    cluster: LocalKafkaCluster, topic: str, values: list[bytes], configs: Mapping[str, str] | None = None
) -> None:
    """One partition holding ``values`` (and ``configs`` set on it), written as the super user."""
    new = NewTopic(topic, 1, 1, config=dict(configs or {}))
    _wait_all(admin_client(cluster), lambda client: client.create_topics([new]))
    producer = Producer(client_config(cluster))
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


def set_topic_config(cluster: LocalKafkaCluster, topic: str, name: str, value: str) -> None:
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    _wait_all(admin_client(cluster), lambda client: client.incremental_alter_configs([resource]))


def topic_config(cluster: LocalKafkaCluster, topic: str, name: str) -> str:
    return _config_value(cluster, ConfigResource(ConfigResource.Type.TOPIC, topic), name)


def broker_config(cluster: LocalKafkaCluster, broker_id: int, name: str) -> str:
    return _config_value(cluster, ConfigResource(ConfigResource.Type.BROKER, str(broker_id)), name)


def _config_value(cluster: LocalKafkaCluster, resource: ConfigResource, name: str) -> str:
    client = admin_client(cluster)  # kept alive until the answer came (see _wait_all)
    entries = client.describe_configs([resource])[resource].result(30)
    return str(entries[name].value)


def set_broker_config(cluster: LocalKafkaCluster, broker_id: int, name: str, value: str) -> None:
    """Set ``name`` on one broker at run time (a DYNAMIC_BROKER_CONFIG)."""
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.BROKER, str(broker_id), incremental_configs=[entry])
    _wait_all(admin_client(cluster), lambda client: client.incremental_alter_configs([resource]))


def set_cluster_default(cluster: LocalKafkaCluster, work_dir: Path, name: str, value: str) -> None:
    """Set ``name`` as every broker's default (a DYNAMIC_DEFAULT_BROKER_CONFIG), with Kafka's
    ConfigCommand: confluent-kafka refuses the default resource (a broker named "")."""
    settings = work_dir / "super-user.properties"
    settings.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{SUPER_USER}" password="{SUPER_PASSWORD}";\n'
    )
    command = ["java", "-Xmx256m", "-cp", classpath(cluster.libs), config_command(cluster.libs)]
    command += ["--bootstrap-server", cluster.sasl_bootstrap_servers, "--command-config", str(settings)]
    command += ["--entity-type", "brokers", "--entity-default", "--alter", "--add-config", f"{name}={value}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
