"""The sandbox's authorizer option: what the broker is told, and that it changes nothing for the
clusters that do not ask for it (no JVM started here; the integration tests of the cluster
metadata start one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.sandbox.kafka import LocalKafkaCluster, SandboxError


def cluster(tmp_path: Path, **kwargs: object) -> LocalKafkaCluster:
    made = LocalKafkaCluster(name="c", work_dir=tmp_path, libs=tmp_path, **kwargs)  # type: ignore[arg-type]
    made.port, made.controller_port, made.sasl_port = 9001, 9002, 9003
    return made


def test_the_authorizer_names_one_super_user_and_every_internal_listener_authenticates(
    tmp_path: Path,
) -> None:
    secured = cluster(tmp_path, scram_users={"admin": "admin-pw", "app": "app-pw"}, super_user="admin")
    props = secured._properties()
    assert props["authorizer.class.name"] == "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    assert props["super.users"] == "User:admin"
    # The broker reaches the controller and other brokers as the super user, never as ANONYMOUS.
    assert props["listener.security.protocol.map"] == (
        "CONTROLLER:SASL_PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
    )
    assert props["inter.broker.listener.name"] == "SASL_PLAINTEXT"
    assert props["sasl.mechanism.controller.protocol"] == "PLAIN"
    assert props["sasl.mechanism.inter.broker.protocol"] == "PLAIN"
    assert props["listener.name.controller.sasl.enabled.mechanisms"] == "PLAIN"
    assert props["listener.name.controller.plain.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-pw" user_admin="admin-pw";'
    )
    assert (
        'username="admin" password="admin-pw" user_admin="admin-pw" user_app="app-pw";'
        in (props["listener.name.sasl_plaintext.plain.sasl.jaas.config"])
    )
    assert "ANONYMOUS" not in props["super.users"]
    connection = secured.connection()
    assert connection.bootstrap_servers == ["127.0.0.1:9003"]
    assert connection.security.sasl_username == "admin"
    assert secured.user_connection("app").security.sasl_username == "app"


def test_clusters_without_the_option_are_unchanged(tmp_path: Path) -> None:
    scram = cluster(tmp_path, scram_users={"alice": "pw"})
    props = scram._properties()
    assert not any(key.startswith(("authorizer", "super.users", "sasl.mechanism")) for key in props)
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["listener.security.protocol.map"].startswith("CONTROLLER:PLAINTEXT,")
    assert scram.connection().bootstrap_servers == ["127.0.0.1:9001"]


def test_a_super_user_that_is_not_a_scram_user_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="not one of its SCRAM users"):
        cluster(tmp_path, scram_users={"app": "pw"}, super_user="admin")._properties()
    with pytest.raises(SandboxError, match="no SCRAM user 'nobody'"):
        cluster(tmp_path, scram_users={"app": "pw"}).user_connection("nobody")
