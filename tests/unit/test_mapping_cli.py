"""show-offset-mapping's usage errors and an unreachable target: clear, fast, before Spark starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.config import KafkaConnection
from kbackup.core.errors import ConfigError, KafkaUnreachableError, UsageError
from kbackup.mapping import build_offset_mapping
from kbackup.mapping.spark_kafka import spark_kafka_options
from kbackup.sandbox.kafka import free_port

NOWHERE = "127.0.0.1:9"  # discard port: a usage check must fail before any connection attempt


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--topic", "t", "--source-cluster", "c", "--format", "parquet"], "give --output FILE"),
        (["--topic", "t"], "give --source-cluster"),
        (["--source-cluster", "c"], "either --topic (one or more) or --all-topics"),
        (["--topic", "t", "--all-topics", "--source-cluster", "c"], "either --topic"),
    ],
)
def test_usage_errors_exit_2_with_the_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["show-offset-mapping", "-b", NOWHERE, *argv]) == UsageError.exit_code
    assert message in capsys.readouterr().err


def test_a_format_other_than_the_four_is_a_wrong_value(capsys: pytest.CaptureFixture[str]) -> None:
    code = run(
        ["show-offset-mapping", "-b", NOWHERE, "-t", "t", "--source-cluster-id", "c", "--format", "xml"]
    )
    assert code == ConfigError.exit_code
    assert capsys.readouterr().err.splitlines() == [
        "kafka-backup: error: --format xml: choose text, json, csv or parquet"
    ]


def test_no_target_cluster_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["show-offset-mapping", "--topic", "t", "--source-cluster", "c"]) == UsageError.exit_code
    assert "--bootstrap-servers" in capsys.readouterr().err


def test_source_cluster_and_target_come_from_the_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    config = tmp_path / "c.yaml"
    config.write_text(
        f"target:\n  bootstrap_servers: 127.0.0.1:{port}\n  connect_timeout_secs: 1\n"
        "offset_reset:\n  source_cluster: prod-us-east-1\n"
    )
    assert run(["show-offset-mapping", "-c", str(config), "--topic", "t"]) == KafkaUnreachableError.exit_code
    assert f"127.0.0.1:{port}" in capsys.readouterr().err


def test_unreachable_target_fails_in_bounded_time_naming_the_servers() -> None:
    servers = f"127.0.0.1:{free_port()}"
    connection = KafkaConnection(bootstrap_servers=[servers], connect_timeout_secs=2)
    with pytest.raises(KafkaUnreachableError, match=servers) as caught:
        build_offset_mapping(connection, source_cluster="c", topics=["t"])
    # The connection's own deadline is what the client was given, and what the message names.
    assert "within 2s" in caught.value.message


def test_connection_security_becomes_java_client_options(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    connection = KafkaConnection.model_validate(
        {
            "bootstrap_servers": ["b1:9093", "b2:9093"],
            "security": {
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_username": "backup",
                "sasl_password": 'pa"ss',
                "ssl_ca_location": str(ca),
                "ssl_endpoint_identification_algorithm": "none",
            },
        }
    )
    options = spark_kafka_options(connection, {"ssl.truststore.type": "JKS", "kafka.client.rack": "r1"})
    assert options["kafka.bootstrap.servers"] == "b1:9093,b2:9093"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="backup" password="pa\\"ss";'
    )
    assert options["kafka.ssl.truststore.location"] == str(ca)
    assert options["kafka.ssl.truststore.type"] == "JKS"  # the user's setting wins
    assert options["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert options["kafka.client.rack"] == "r1"


def test_spark_submit_entry_is_show_offset_mapping(capsys: pytest.CaptureFixture[str]) -> None:
    """The spark-submit application parses with the CLI itself: the same options and --help."""
    from kbackup.cli.spark_submit import main

    assert main(["--help"]) == 0
    shown = capsys.readouterr().out
    for option in ("--all-topics", "--kafka-option", "--min-partitions", "--connect-timeout", "--config"):
        assert option in shown
    # Both --topic and --all-topics: refused before any network call, with the CLI's usage code.
    code = main(["-b", NOWHERE, "-t", "a", "--all-topics", "--source-cluster", "c"])
    assert code == UsageError.exit_code
    assert "either --topic" in capsys.readouterr().err


def test_kafka_options_from_the_command_line_go_over_the_config() -> None:
    from kbackup.app.config import KBackupConfig
    from kbackup.app.overrides import mapping_inputs

    config = KBackupConfig.model_validate(
        {
            "target": {"bootstrap_servers": "k:9092", "connect_timeout_secs": 3},
            "mapping": {"kafka_options": {"client.rack": "r1", "x.y": "old"}},
        }
    )
    inputs = mapping_inputs(
        config,
        source_cluster="c",
        kafka_options={"x.y": "1=2"},
        min_partitions=4,
        connect_timeout_secs=9,
    )
    assert inputs.settings.kafka_options == {"client.rack": "r1", "x.y": "1=2"}
    assert inputs.settings.min_partitions == 4
    assert inputs.connection.connect_timeout_secs == 9
    argv = ["show-offset-mapping", "-b", NOWHERE, "-t", "a", "--source-cluster", "c", "--kafka-option", "x"]
    assert run(argv) == ConfigError.exit_code  # a wrong value of an option


def test_spark_submit_script_reports_errors_as_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from kbackup.cli.spark_submit import main

    code = main(["-b", NOWHERE, "-t", "a", "--source-cluster", "c", "--format", "parquet"])
    assert code == UsageError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("kafka-backup: error: ")
    assert "give --output FILE" in err


def test_spark_read_options_cover_exactly_the_planned_offsets_read_committed() -> None:
    from kbackup.format.mapping_file import ScannedPartition
    from kbackup.mapping.job import read_options

    options = read_options(
        {
            "kafka.bootstrap.servers": "k:1",
            "kafka.isolation.level": "read_uncommitted",
            "kafka.max.poll.records": "5",
        },
        [ScannedPartition("a", 0, 3, 10), ScannedPartition("a", 2, 0, 7), ScannedPartition("b", 1, 4, 5)],
        max_records_per_partition=100,
    )
    assert options["assign"] == '{"a": [0, 2], "b": [1]}'
    assert options["startingOffsets"] == '{"a": {"0": 3, "2": 0}, "b": {"1": 4}}'
    assert options["endingOffsets"] == '{"a": {"0": 10, "2": 7}, "b": {"1": 5}}'
    assert options["kafka.isolation.level"] == "read_committed"
    assert options["kafka.max.poll.records"] == "5"
    assert options["failOnDataLoss"] == "true"
    assert options["maxRecordsPerPartition"] == "100"
    assert "minPartitions" not in options


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"\xff\xfe not a PEM", "is not UTF-8 text"), (None, "not found")],
    ids=["not-utf8", "missing"],
)
def test_a_pem_file_that_cannot_be_read_is_a_config_error(
    tmp_path: Path, content: bytes | None, expected: str
) -> None:
    """The client certificate Spark's Kafka source gets inline: unreadable is one config line."""
    certificate, key = tmp_path / "client.pem", tmp_path / "client.key"
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    if content is not None:
        certificate.write_bytes(content)
    connection = KafkaConnection.model_validate(
        {
            "bootstrap_servers": ["b:9093"],
            "security": {
                "security_protocol": "SSL",
                "ssl_certificate_location": str(certificate),
                "ssl_key_location": str(key),
            },
        }
    )
    with pytest.raises(ConfigError) as raised:
        spark_kafka_options(connection)
    assert "security.ssl_certificate_location" in raised.value.message
    assert expected in raised.value.message
