"""``kafka-backup check`` tries every part (source, target, storage, Spark) and says which is which;
its lines tell an unknown host from a closed port, name the key and the file of a CA that is not
there, and suggest the property a typo meant. No Kafka needed: the endpoints are a name under
``.invalid`` (RFC 2606: never resolves) and a loopback port nothing listens on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import ConfigError, KafkaUnreachableError
from kbackup.sandbox.kafka import free_port

UNKNOWN_HOST = "kafka-a.invalid"


def check(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, list[str], list[str]]:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    code = run(["check", "-c", str(config), *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def test_every_part_is_tried_and_named_by_its_role(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to stop at the source: the target and the storage were never reached, and the one
    line did not say which cluster it was about."""
    port = free_port()
    store = tmp_path / "store"
    code, out, err = check(
        tmp_path,
        f"source:\n  bootstrap_servers: {UNKNOWN_HOST}:9092\n  connect_timeout_secs: 1\n"
        f"target:\n  bootstrap_servers: 127.0.0.1:{port}\n  connect_timeout_secs: 1\n"
        f"storage:\n  url: {store}\n",
        capsys,
    )
    assert code == KafkaUnreachableError.exit_code
    assert out == [
        f"source   {UNKNOWN_HOST}:9092: failed (exit 5): no broker of {UNKNOWN_HOST}:9092 answered within 1s "
        f"while trying to read cluster metadata: the host name {UNKNOWN_HOST} does not resolve",
        f"target   127.0.0.1:{port}: failed (exit 5): no broker of 127.0.0.1:{port} answered within 1s "
        f"while trying to read cluster metadata: nothing listens at 127.0.0.1:{port} (connection refused)",
        f"storage  {store}: no such folder yet (a backup creates it), 0 object(s)",
    ]
    assert err == [
        f"kafka-backup: error: source: no broker of {UNKNOWN_HOST}:9092 answered within 1s while trying to "
        f"read cluster metadata: the host name {UNKNOWN_HOST} does not resolve",
        "kafka-backup: next step: check the host names in source.bootstrap_servers (a typo? a name only "
        "another network's DNS knows?); running the same command again may succeed",
    ]


def test_a_refused_port_is_not_an_unknown_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    code, _, err = check(
        tmp_path, f"target:\n  bootstrap_servers: 127.0.0.1:{port}\n  connect_timeout_secs: 1\n", capsys
    )
    assert code == KafkaUnreachableError.exit_code
    assert err == [
        f"kafka-backup: error: target: no broker of 127.0.0.1:{port} answered within 1s while trying to read "
        f"cluster metadata: nothing listens at 127.0.0.1:{port} (connection refused)",
        "kafka-backup: next step: check the ports in target.bootstrap_servers and that the brokers are "
        "running; "
        "running the same command again may succeed",
    ]


def test_the_exit_code_is_the_first_failures_and_later_parts_are_still_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A source that cannot be reached (5) before a target whose property is a typo (3): exit 5,
    and the target's line is there."""
    code, out, _ = check(
        tmp_path,
        f"source:\n  bootstrap_servers: 127.0.0.1:{free_port()}\n  connect_timeout_secs: 1\n"
        "target:\n  bootstrap_servers: 127.0.0.1:9\n  properties:\n    fetch.max.byte: 1\n",
        capsys,
    )
    assert code == KafkaUnreachableError.exit_code
    assert out[1] == (
        "target   127.0.0.1:9: failed (exit 3): target.properties.fetch.max.byte: librdkafka has no such "
        "property (did you mean 'fetch.max.bytes'?)"
    )


def test_a_ca_file_that_is_not_there_names_the_key_and_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """librdkafka said only 'ssl.ca.location failed: ... BIO routines::no such file'."""
    code, _, err = check(
        tmp_path,
        "source:\n  bootstrap_servers: 127.0.0.1:9\n  security:\n    security_protocol: SSL\n"
        "    ssl_ca_location: certs/ca.pem\n",
        capsys,
    )
    assert code == ConfigError.exit_code
    assert err[0] == (
        f"kafka-backup: error: source.security.ssl_ca_location: {tmp_path}/certs/ca.pem: "
        f"no such folder {tmp_path}/certs"
    )


def test_a_ca_property_that_is_not_a_certificate_names_the_key_and_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    code, _, err = check(
        tmp_path,
        "target:\n  bootstrap_servers: 127.0.0.1:9\n  properties:\n    security.protocol: SSL\n"
        "    ssl.ca.location: ca.pem\n",
        capsys,
    )
    assert code == ConfigError.exit_code
    assert err[0].startswith(
        f"kafka-backup: error: target.properties.ssl.ca.location: {tmp_path}/ca.pem: "
        "librdkafka cannot use it: "
    )


def test_a_property_typo_gets_the_property_it_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = check(
        tmp_path, "source:\n  bootstrap_servers: 127.0.0.1:9\n  properties:\n    fetch.max.byte: 1\n", capsys
    )
    assert code == ConfigError.exit_code
    assert err[0] == (
        "kafka-backup: error: source.properties.fetch.max.byte: librdkafka has no such property "
        "(did you mean 'fetch.max.bytes'?)"
    )


def test_bootstrap_servers_names_the_cluster_checked_instead_of_the_configs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`-b` added a third cluster to the config's two; its help says it overrides them, as
    `--bootstrap-server` means "this cluster" to Kafka's own tools."""
    port = free_port()
    code, out, _ = check(
        tmp_path,
        f"source:\n  bootstrap_servers: {UNKNOWN_HOST}:9092\n"
        f"target:\n  bootstrap_servers: {UNKNOWN_HOST}:9093\n"
        f"storage:\n  url: {tmp_path / 'store'}\n",
        capsys,
        "-b",
        f"127.0.0.1:{port}",
    )
    assert code == KafkaUnreachableError.exit_code
    assert [line.split()[0] for line in out] == ["cluster", "storage"]
    assert out[0].startswith(f"cluster  127.0.0.1:{port}: failed (exit 5): ")
    assert UNKNOWN_HOST not in "\n".join(out)


def test_json_reports_every_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()
    code, out, _ = check(
        tmp_path,
        f"source:\n  bootstrap_servers: 127.0.0.1:{port}\n  connect_timeout_secs: 1\n"
        f"storage:\n  url: {tmp_path / 'store'}\n",
        capsys,
        "--json",
    )
    assert code == KafkaUnreachableError.exit_code
    report = json.loads("\n".join(out))  # one document: the report, with the failure in it
    assert report["ok"] is False
    assert [(part["role"], part["ok"]) for part in report["parts"]] == [("source", False), ("storage", True)]
    assert report["parts"][0]["error"]["kind"] == "kafka-unreachable"
    assert report["parts"][0]["error"]["message"].endswith(
        f"nothing listens at 127.0.0.1:{port} (connection refused)"
    )


def test_help_says_what_bootstrap_servers_does_and_which_code_is_returned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["check", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "Check this cluster instead of the config's source and target" in out
    assert "the exit code is the first failure's" in out
