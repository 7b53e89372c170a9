"""Spark's Kafka source options for a connection: librdkafka settings said the Java client's way.

kafka-backup's connections are written in librdkafka's terms (the Python
clients use librdkafka); Spark's Kafka source runs the Java client. The
security settings that have a Java equivalent are translated here; the
free-form librdkafka ``properties`` are not (their names and values differ
between the two clients), so Java-only settings go in
``mapping.kafka_options``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kbackup.core.config import KafkaConnection, read_text_file
from kbackup.core.errors import ConfigError
from kbackup.core.secrets import register_secret

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}


def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _read_pem(path: str, what: str) -> str:
    return read_text_file(path, f"security.{what}:")


def spark_kafka_options(
    connection: KafkaConnection, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """``kafka.*`` options for ``spark.read.format("kafka")`` that reach the same cluster."""
    security = connection.security
    java: dict[str, str] = {"bootstrap.servers": ",".join(connection.bootstrap_servers)}
    if security.security_protocol:
        java["security.protocol"] = security.security_protocol
    user_options = {key.removeprefix("kafka."): value for key, value in (extra or {}).items()}
    if security.sasl_mechanism:
        java["sasl.mechanism"] = security.sasl_mechanism
        module = _LOGIN_MODULES.get(security.sasl_mechanism)
        if module is not None and security.sasl_username and security.sasl_password is not None:
            password = security.sasl_password.get_secret_value()
            jaas = (
                f"{module} required username={_jaas_quote(security.sasl_username)} "
                f"password={_jaas_quote(password)};"
            )
            register_secret(jaas)
            java["sasl.jaas.config"] = jaas
        elif "sasl.jaas.config" not in user_options:
            raise ConfigError(
                f"security.sasl_mechanism {security.sasl_mechanism}: Spark's Kafka source needs a JAAS "
                "configuration",
                hint="set sasl_username and sasl_password, or mapping.kafka_options['sasl.jaas.config']",
            )
    if security.ssl_ca_location:
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.location"] = _absolute(security.ssl_ca_location)
    if security.ssl_certificate_location and security.ssl_key_location:
        # Java reads a PEM key store from one file or from inline values; librdkafka has two files.
        java["ssl.keystore.type"] = "PEM"
        java["ssl.keystore.certificate.chain"] = _read_pem(
            security.ssl_certificate_location, "ssl_certificate_location"
        )
        key = _read_pem(security.ssl_key_location, "ssl_key_location")
        register_secret(key)
        java["ssl.keystore.key"] = key
        if security.ssl_key_password is not None:
            java["ssl.key.password"] = security.ssl_key_password.get_secret_value()
    if security.ssl_endpoint_identification_algorithm:
        algorithm = security.ssl_endpoint_identification_algorithm
        java["ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else algorithm
    java.update(
        {key: _absolute(value) if key.endswith(".location") else value for key, value in user_options.items()}
    )
    return {f"kafka.{key}": value for key, value in java.items()}


def _absolute(path: str) -> str:
    """A file the Java client opens, made absolute against the current folder: Spark's driver runs
    with its working folder in kafka-backup's cache (see spark_session.spark_conf)."""
    return str(Path(path).expanduser().absolute()) if path else path
