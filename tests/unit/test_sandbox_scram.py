"""The sandbox's SASL and TLS options change only the clusters that ask for them (no JVM started here;
keytool makes one certificate)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.sandbox.kafka import LocalKafkaCluster, SandboxError


def cluster(tmp_path: Path, **kwargs: object) -> LocalKafkaCluster:
    made = LocalKafkaCluster(name="c", work_dir=tmp_path, libs=tmp_path, **kwargs)  # type: ignore[arg-type]
    made.port, made.controller_port, made.sasl_port, made.ssl_port = 9001, 9002, 9003, 9004
    return made


def test_default_cluster_has_only_plaintext_listeners(tmp_path: Path) -> None:
    plain = cluster(tmp_path)
    props = plain._properties()
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9001,CONTROLLER://127.0.0.1:9002"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9001"
    assert not any("sasl" in key for key in props)
    assert plain._scram_format_arguments() == []
    with pytest.raises(SandboxError, match="no SASL listener"):
        _ = plain.sasl_bootstrap_servers
    with pytest.raises(SandboxError, match="no TLS listener"):
        _ = plain.ssl_bootstrap_servers


def test_scram_cluster_adds_a_sasl_listener_and_seeds_users(tmp_path: Path) -> None:
    scram = cluster(tmp_path, scram_users={"alice": "alice-pw-1"})
    props = scram._properties()
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:9001,SASL_PLAINTEXT://127.0.0.1:9003,CONTROLLER://127.0.0.1:9002"
    )
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9001,SASL_PLAINTEXT://127.0.0.1:9003"
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"
    assert "ScramLoginModule" in props["listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config"]
    assert props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw-1";'
    )
    assert scram._scram_format_arguments() == [
        "--add-scram",
        "SCRAM-SHA-256=[name=alice,password=alice-pw-1]",
        "--add-scram",
        "SCRAM-SHA-512=[name=alice,password=alice-pw-1]",
    ]
    assert scram.sasl_bootstrap_servers == "127.0.0.1:9003"


@pytest.mark.parametrize(("user", "password"), [("a b", "pw"), ("alice", "p,w"), ("alice", "p]w")])
def test_scram_users_the_format_tool_cannot_parse_are_refused(
    tmp_path: Path, user: str, password: str
) -> None:
    with pytest.raises(SandboxError, match="SCRAM user"):
        cluster(tmp_path, scram_users={user: password})._scram_format_arguments()


def test_tls_cluster_adds_an_ssl_listener_with_a_certificate_for_loopback(tmp_path: Path) -> None:
    both = cluster(tmp_path, scram_users={"alice": "pw"}, tls=True)
    props = both._properties()
    assert props["listeners"] == (
        "PLAINTEXT://127.0.0.1:9001,SASL_PLAINTEXT://127.0.0.1:9003,SSL://127.0.0.1:9004,"
        "CONTROLLER://127.0.0.1:9002"
    )
    assert props["listener.security.protocol.map"] == (
        "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL"
    )
    assert props["inter.broker.listener.name"] == "PLAINTEXT"
    assert props["listener.name.ssl.ssl.keystore.type"] == "PKCS12"
    assert both.ssl_bootstrap_servers == "127.0.0.1:9004"
    both.make_certificate()
    pem = both.tls_ca_file.read_text()
    assert pem.startswith("-----BEGIN CERTIFICATE-----")
    assert Path(props["listener.name.ssl.ssl.keystore.location"]).stat().st_size > 0
    both.make_certificate()  # once: a second call keeps the certificate
    assert both.tls_ca_file.read_text() == pem
