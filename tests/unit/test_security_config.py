"""SASL and SSL settings of a config file become exactly the librdkafka properties, secrets held back."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.app import config as config_module
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import ConfigError
from kbackup.core.kafka import KafkaClients
from kbackup.core.secrets import redact, redact_properties
from tests.support.config_files import config_file


def test_ssl_and_sasl_settings_pass_through_to_librdkafka(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KB_TEST_SSL_KEY_PASSWORD", "ssl-key-pw-from-env-42")
    config = tmp_path / "ssl.yaml"
    config.write_text(
        """
source:
  bootstrap_servers: broker-1:9093,broker-2:9093
  security:
    security_protocol: SASL_SSL
    sasl_mechanism: SCRAM-SHA-512
    sasl_username: backup
    sasl_password: sasl-pw-in-file-17
    ssl_ca_location: /etc/kafka/ca.pem
    ssl_certificate_location: /etc/kafka/client.pem
    ssl_key_location: /etc/kafka/client.key
    ssl_key_password: ${KB_TEST_SSL_KEY_PASSWORD}
    ssl_endpoint_identification_algorithm: https
  properties:
    ssl.cipher.suites: ECDHE-RSA-AES256-GCM-SHA384
    ssl.keystore.password: keystore-pw-33
"""
    )
    source = config_module.load(config).source
    assert source is not None
    assert source.librdkafka_properties() == {
        "bootstrap.servers": "broker-1:9093,broker-2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "backup",
        "sasl.password": "sasl-pw-in-file-17",
        "ssl.ca.location": "/etc/kafka/ca.pem",
        "ssl.certificate.location": "/etc/kafka/client.pem",
        "ssl.key.location": "/etc/kafka/client.key",
        "ssl.key.password": "ssl-key-pw-from-env-42",
        "ssl.endpoint.identification.algorithm": "https",
        "ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384",
        "ssl.keystore.password": "keystore-pw-33",
    }
    # The clients get them too (plus kafka-backup's own settings).
    client_props = KafkaClients(source)._base_properties()
    assert client_props["ssl.key.password"] == "ssl-key-pw-from-env-42"
    assert client_props["security.protocol"] == "SASL_SSL"
    # Everywhere else they are hidden: the model's repr, a printable copy, and any text.
    for secret in ("sasl-pw-in-file-17", "ssl-key-pw-from-env-42", "keystore-pw-33"):
        assert secret not in repr(source)
        assert secret not in str(redact_properties(source.librdkafka_properties()))
        assert redact(f"x {secret} y") == "x *** y"
    assert "SASL_SSL" in source.describe()
    assert "sasl-pw-in-file-17" not in source.describe()


@pytest.mark.parametrize(
    ("security", "message"),
    [
        ({"security_protocol": "TLS"}, "source.security.security_protocol"),
        ({"sasl_mechanism": "SCRAM-SHA-1"}, "source.security.sasl_mechanism"),
        ({"ssl_endpoint_identification_algorithm": "sometimes"}, "ssl_endpoint_identification_algorithm"),
        ({"ssl_keystore_password": "x"}, "unknown key"),
    ],
)
def test_wrong_security_settings_are_config_errors(
    tmp_path: Path, security: dict[str, str], message: str
) -> None:

    config = config_file(tmp_path / "c.yaml", source={"bootstrap_servers": "a:1", "security": security})
    with pytest.raises(ConfigError, match=message):
        config_module.load(config)


def test_connection_without_security_sends_no_security_properties() -> None:
    props = KafkaConnection.model_validate({"bootstrap_servers": "a:1"}).librdkafka_properties()
    assert props == {"bootstrap.servers": "a:1"}
