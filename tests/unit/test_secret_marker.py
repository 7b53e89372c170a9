"""No secret is ever printed: a marker fed through every config key and map that can hold one,
in every wrong type, through URL credentials and queries, reaches no output of any command.

Each case writes a config file that fails validation (``mode: nope`` besides the marked key, so
a right-typed secret fails too), runs commands that read it, and looks for the marker on stdout
and stderr (text, ``--json``, ``--debug`` tracebacks, JSON logs) and in every file the command
left in its folder (reports, plans, snapshots). Markers are unique per case: the redactor
remembers secrets registered by an earlier case, which must not make a later case pass.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kbackup.cli.main import run
from kbackup.core.errors import ConfigError

_numbers = itertools.count(1)


def new_marker() -> str:
    return f"LEAKME-{next(_numbers):05d}x"


def new_number_marker() -> int:
    # A number a password could be (an unquoted YAML value of digits), found in text as its digits.
    return 48151623420000 + next(_numbers)


def nested(dotted: list[str], value: Any) -> dict[str, Any]:
    """``{a: {b: value}}`` from ``["a", "b"]`` (a property name with dots is one item)."""
    for key in reversed(dotted):
        value = {key: value}
    assert isinstance(value, dict)
    return value


def merged(*parts: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(result.get(key), dict):
                result[key] = merged(result[key], value)
            else:
                result[key] = value
    return result


#: Every key that can hold a secret, as the path to it (a section's required keys beside it).
SECRET_KEYS: dict[str, tuple[list[str], dict[str, Any]]] = {
    "source.properties (secret name)": (
        ["source", "properties", "sasl.password"],
        {"source": {"bootstrap_servers": "a:1"}},
    ),
    "source.properties (plain name)": (
        ["source", "properties", "client.id"],
        {"source": {"bootstrap_servers": "a:1"}},
    ),
    "target.properties": (
        ["target", "properties", "sasl.jaas.config"],
        {"target": {"bootstrap_servers": "a:1"}},
    ),
    "source.security.sasl_password": (
        ["source", "security", "sasl_password"],
        {"source": {"bootstrap_servers": "a:1"}},
    ),
    "source.security.sasl_username": (
        ["source", "security", "sasl_username"],
        {"source": {"bootstrap_servers": "a:1"}},
    ),
    "target.security.ssl_key_password": (
        ["target", "security", "ssl_key_password"],
        {"target": {"bootstrap_servers": "a:1"}},
    ),
    "storage.access_key_id": (["storage", "access_key_id"], {}),
    "storage.secret_access_key": (["storage", "secret_access_key"], {}),
    "storage.session_token": (["storage", "session_token"], {}),
    "storage.encryption.key_env": (["storage", "encryption", "key_env"], {}),
    "restore.producer_properties (secret name)": (["restore", "producer_properties", "sasl.password"], {}),
    "restore.producer_properties (plain name)": (["restore", "producer_properties", "linger.ms"], {}),
    "mapping.spark_conf": (["mapping", "spark_conf", "spark.hadoop.fs.s3a.secret.key"], {}),
    "mapping.kafka_options": (["mapping", "kafka_options", "kafka.sasl.jaas.config"], {}),
}

#: Every wrong type a YAML value can have, and the right one (string) for a file failing elsewhere.
#: Booleans and null carry no marker: they check the key still fails with one clear line.
VALUE_SHAPES = [
    "string",
    "list",
    "mapping value",
    "mapping key",  # an unquoted YAML value '{LEAKME}' is a mapping whose key is the secret
    "list in a mapping",
    "number",
    "boolean",
    "null",
]


def shaped(shape: str) -> tuple[Any, str | None]:
    """A value of ``shape`` holding a new marker, and the marker as it would appear in text."""
    marker = new_marker()
    values: dict[str, Any] = {
        "string": marker,
        "list": [marker],
        "mapping value": {"k": marker},
        "mapping key": {marker: None},
        "list in a mapping": {"k": [marker]},
    }
    if shape in values:
        return values[shape], marker
    if shape == "number":
        number = new_number_marker()
        return number, str(number)
    return {"boolean": True, "null": None}[shape], None


#: Values of URL-like keys and of servers whose credentials (or query values) must never show.
URL_CASES: dict[str, Callable[[str], dict[str, Any]]] = {
    "s3 url userinfo": lambda m: {"storage": {"url": f"s3://user:{m}@bucket/x"}},
    "s3 url password with @": lambda m: {"storage": {"url": f"s3://user:p@{m}@bucket/x"}},
    "s3 url user only": lambda m: {"storage": {"url": f"s3://{m}@bucket/x"}},
    "file url userinfo": lambda m: {"storage": {"url": f"file://user:{m}@host/data"}},
    "mistyped s3 url userinfo": lambda m: {"storage": {"url": f"s3//user:{m}@bucket/x"}},
    "s3 url query value": lambda m: {"storage": {"url": f"s3://bucket/x?secret_access_key={m}"}},
    "s3 url query endpoint userinfo": lambda m: {
        "storage": {"url": f"s3://bucket/x?endpoint=http://user:{m}@minio:9000"}
    },
    "endpoint_url userinfo": lambda m: {"storage": {"endpoint_url": f"http://user:{m}@minio:9000"}},
    "endpoint_url userinfo, bad scheme": lambda m: {
        "storage": {"endpoint_url": f"htp://user:{m}@minio:9000"}
    },
    "endpoint_url userinfo, bad port": lambda m: {
        "storage": {"endpoint_url": f"http://user:{m}@minio:99999"}
    },
    "kms_endpoint_url userinfo": lambda m: {
        "storage": {"encryption": {"kms_key_id": "alias/k", "kms_endpoint_url": f"http://user:{m}@kms:4566"}}
    },
    "bootstrap server userinfo": lambda m: {"source": {"bootstrap_servers": f"user:{m}@kafka:9092"}},
    "bootstrap server list userinfo": lambda m: {
        "target": {"bootstrap_servers": ["a:1", f"u:{m}@kafka:9092"]}
    },
    "spark_master userinfo": lambda m: {"mapping": {"spark_master": f"spark://user:{m}@spark:7077"}},
    "bucket userinfo": lambda m: {"storage": {"backend": "s3", "bucket": f"user:{m}@bucket"}},
}

#: YAML a password may be written in that YAML itself cannot read.
RAW_YAML_CASES: dict[str, Callable[[str], str]] = {
    "tagged int": lambda m: f"source:\n  bootstrap_servers: a:1\n  security:\n    sasl_password: !!int {m}\n",
    "tagged float": lambda m: f"storage:\n  secret_access_key: !!float {m}\n",
    "unclosed list": lambda m: f"source:\n  bootstrap_servers: a:1\n  properties:\n    sasl.password: [{m}\n",
    "unclosed mapping": lambda m: f"storage:\n  access_key_id: {{{m}\n",
    "binary": lambda m: f"storage:\n  session_token: !!binary {m}\n",
}

#: Every command that reads a config file, with what else it needs to get that far.
COMMANDS: list[list[str]] = [
    ["check"],
    ["backup"],
    ["list"],
    ["describe", "--backup-id", "b"],
    ["validate", "--backup-id", "b"],
    ["status"],
    ["prune", "--keep-last", "1", "--backup-id", "b"],
    ["rekey", "--new-encryption-key", "env:KBACKUP_NO_SUCH_KEY"],
    ["restore", "--backup-id", "b"],
    ["show-offset-mapping"],
    ["offset-reset", "plan"],
    ["offset-reset", "execute", "--plan", "plan.json"],
    ["offset-rollback", "--list"],
    ["three-phase-restore"],
    ["drill"],
]


def runs(config: Path) -> Iterator[list[str]]:
    """``check`` as text, ``--json``, and under ``--debug`` with JSON logs: what a user would try."""
    yield ["check", "-c", str(config)]
    yield ["check", "-c", str(config), "--json"]
    yield ["--debug", "-vv", "--log-format", "json", "check", "-c", str(config)]


def assert_never_shown(
    marker: str | None,
    args: list[str],
    folder: Path,
    capfd: pytest.CaptureFixture[str],
    *,
    config: Path | None = None,
    exit_code: int | None = ConfigError.exit_code,
) -> str:
    code = run(args)
    out, err = capfd.readouterr()
    if exit_code is not None:
        assert code == exit_code, (args, out, err)
    assert "Traceback" not in err or "--debug" in args, err
    if marker is not None:
        assert marker not in out, (args, out)
        assert marker not in err, (args, err)
        for path in folder.rglob("*"):
            if path.is_file() and path != config:
                assert marker not in path.read_text(errors="replace"), path
    return err


def write_config(folder: Path, data: dict[str, Any]) -> Path:
    config = folder / "kbackup.yaml"
    config.write_text(yaml.safe_dump(merged(data, {"mode": "nope"}), sort_keys=False))
    return config


@pytest.fixture(autouse=True)
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # What a command writes by default (reports, snapshots) lands here, where the test reads it.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KBACKUP_NO_PROGRESS", "1")


@pytest.mark.parametrize("shape", VALUE_SHAPES)
@pytest.mark.parametrize("key", list(SECRET_KEYS))
def test_a_secret_in_any_type_is_never_printed(
    key: str, shape: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    path, beside = SECRET_KEYS[key]
    value, marker = shaped(shape)
    config = write_config(tmp_path, merged(beside, nested(path, value)))
    for args in runs(config):
        err = assert_never_shown(marker, args, tmp_path, capfd, config=config)
        assert "kafka-backup: error: " in err


@pytest.mark.parametrize("case", list(URL_CASES))
def test_url_credentials_are_never_printed(
    case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    marker = new_marker()
    config = write_config(tmp_path, URL_CASES[case](marker))
    for args in runs(config):
        assert_never_shown(marker, args, tmp_path, capfd, config=config)


@pytest.mark.parametrize("case", list(RAW_YAML_CASES))
def test_a_secret_yaml_cannot_read_is_never_printed(
    case: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    marker = new_marker()
    config = tmp_path / "kbackup.yaml"
    config.write_text("mode: nope\n" + RAW_YAML_CASES[case](marker))
    for args in runs(config):
        assert_never_shown(marker, args, tmp_path, capfd, config=config)


def every_secret_at_once() -> tuple[dict[str, Any], list[str]]:
    """One file with a marker at every secret key (each in another wrong type) and URL."""
    data: dict[str, Any] = {}
    markers: list[str] = []
    shapes = itertools.cycle(["list", "mapping value", "mapping key", "number", "string"])
    for path, beside in SECRET_KEYS.values():
        value, marker = shaped(next(shapes))
        data = merged(data, beside, nested(path, value))
        assert marker is not None
        markers.append(marker)
    for case in ("s3 url userinfo", "endpoint_url userinfo", "spark_master userinfo"):
        marker = new_marker()
        data = merged(data, URL_CASES[case](marker))
        markers.append(marker)
    return data, markers


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(command) for command in COMMANDS])
def test_no_command_prints_a_secret_of_its_config(
    command: list[str], as_json: bool, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    data, markers = every_secret_at_once()
    config = write_config(tmp_path, data)
    args = [*command, "-c", str(config), *(["--json"] if as_json else [])]
    code = run(args)
    out, err = capfd.readouterr()
    assert code == ConfigError.exit_code, (out, err)
    for marker in markers:
        assert marker not in out, (marker, out)
        assert marker not in err, (marker, err)
    for path in tmp_path.rglob("*"):
        if path.is_file() and path != config:
            text = path.read_text(errors="replace")
            assert not [marker for marker in markers if marker in text], path


#: Commands that take a storage URL with ``--path``, with what else they need to get that far.
PATH_COMMANDS: list[list[str]] = [
    ["list"],
    ["describe", "--backup-id", "b"],
    ["validate", "--backup-id", "b"],
    ["status"],
    ["prune", "--keep-last", "1", "--backup-id", "b"],
    ["backup", "-b", "127.0.0.1:1", "--backup-id", "b"],
    ["restore", "-b", "127.0.0.1:1", "--backup-id", "b"],
]


@pytest.mark.parametrize(
    "url",
    [
        "s3://user:{m}@bucket/x",
        "s3://{m}@bucket/x",
        "file://user:{m}@host/data",
        "s3://bucket/x?access_key_id={m}",
        "s3://bucket/x?endpoint=http://u:{m}@minio:9000",
    ],
)
@pytest.mark.parametrize("command", PATH_COMMANDS, ids=[" ".join(command) for command in PATH_COMMANDS])
def test_credentials_in_path_are_refused_unprinted(
    command: list[str], url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    marker = new_marker()
    for args in ([*command, "-p", url.format(m=marker)], [*command, "-p", url.format(m=marker), "--json"]):
        err = assert_never_shown(marker, args, tmp_path, capfd)
        first = err.strip().splitlines()[0]
        assert first.startswith("kafka-backup: error: --path: "), err


@pytest.mark.parametrize("spec", ["{m}", "{m}+/9Qw==", "env:{m} x", "env:{m}=", "nope:{m}", "kms:"])
@pytest.mark.parametrize("command", PATH_COMMANDS, ids=[" ".join(command) for command in PATH_COMMANDS])
def test_a_key_pasted_for_its_source_is_never_printed(
    command: list[str], spec: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # --encryption-key takes where the key is (file:, env:, kms:); the key itself is pasted by mistake.
    marker = new_marker()
    args = [*command, "-p", str(tmp_path), "--encryption-key", spec.format(m=marker)]
    for attempt in (args, [*args, "--json"]):
        err = assert_never_shown(marker, attempt, tmp_path, capfd)
        assert err.startswith("kafka-backup: error: --encryption-key: "), err
