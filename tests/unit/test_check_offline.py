"""``kafka-backup check --offline``: every section of a config checked without a connection to
Kafka, the storage or Spark, including the rules that used to fail late; and every example and
every documented config passes it.

Which documented configs: every ``examples/*.yaml`` that is a kafka-backup config, the config the
Kubernetes example's ConfigMap holds, and every ```yaml block of README.md and docs/*.md. Rule for
fragments: a block that writes ``...`` for a value (``security: {...}``, ``endpoint_url: ...``) is a
schematic of the keys, not a config, and is skipped (the test says which). Files a config names by
an absolute path (a CA, a client certificate and key, jars, the folders of a textfile or a
scratch dir) are made under a temporary root with the same path, as the machine that runs the
command would have them: a PEM certificate and key, an empty jar, a folder.
"""

from __future__ import annotations

import datetime
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kbackup.cli.main import run
from kbackup.core.errors import ConfigError, KafkaUnreachableError

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
NOT_CONFIGS = {"prometheus-alerts.yaml", "k8s-backup-cronjob.yaml"}  # the ConfigMap's config is taken
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
#: A variable without a default (``${NAME}``, not ``${NAME:-x}``): the test sets it.
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: A value written as ``...``: the block shows which keys exist, it is not a config.
_SCHEMATIC = re.compile(r"(:\s*\{?\.\.\.\}?\s*(#.*)?$)", re.MULTILINE)
#: An absolute path where a YAML value starts (after a space, a quote, a '[' or a '- ').
_ABSOLUTE_PATH = re.compile(r"(?<=[\s\"'\[])(/[\w.@+-]+(?:/[\w.@+-]+)*)")
PASSWORD = "placeholder-secret"


def documented_configs() -> Iterator[tuple[str, str]]:
    for path in sorted(EXAMPLES.glob("*.yaml")):
        if path.name not in NOT_CONFIGS:
            yield f"examples/{path.name}", path.read_text()
    for document in yaml.safe_load_all((EXAMPLES / "k8s-backup-cronjob.yaml").read_text()):
        if document.get("kind") == "ConfigMap":
            for name, text in document["data"].items():
                yield f"examples/k8s-backup-cronjob.yaml ConfigMap {name}", text
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text()
        for match in _FENCE.finditer(text):
            if match.group(1) == "yaml":
                line = text[: match.start()].count("\n") + 1
                yield f"{doc.relative_to(ROOT).as_posix()}:{line}", match.group(2)


CONFIGS = list(documented_configs())
SCHEMATICS = [name for name, text in CONFIGS if _SCHEMATIC.search(text)]


def test_the_documented_configs_are_found() -> None:
    names = [name for name, _ in CONFIGS]
    assert {"examples/backup.yaml", "examples/drill.yaml", "examples/restore.yaml"} <= set(names)
    assert any(name.startswith("examples/k8s-backup-cronjob.yaml ConfigMap") for name in names)
    assert sum(name.startswith(("README.md", "docs/")) for name in names) >= 15
    # The one schematic today: docs/backup.md's overview of every key (values written as '...').
    assert [name.split(":")[0] for name in SCHEMATICS] == ["docs/backup.md"]


def _certificate_and_key() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kafka-backup test")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(PASSWORD.encode()),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def _on_this_machine(text: str, root: Path) -> str:
    """``text`` with each absolute path under ``root``, and the file or folder it names made."""
    certificate, key = _certificate_and_key()

    def place(match: re.Match[str]) -> str:
        path = root / match.group(1).lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        suffix = path.suffix
        if suffix in (".pem", ".crt"):
            path.write_bytes(certificate)
        elif suffix == ".key":
            path.write_bytes(key)
        elif suffix == ".jar":
            path.write_bytes(b"")
        elif suffix == ".yaml":  # restore_metadata.scram_passwords_file
            path.write_text("order-app: order-app-Pa55word\n")
        elif suffix == ".txt":  # restore.filters keys_file
            path.write_text("# erasure request\nuser-1042\n")
        elif not suffix:
            path.mkdir(exist_ok=True)  # a folder: scratch_dir, state_dir
        return str(path)

    return _ABSOLUTE_PATH.sub(place, text)


@pytest.mark.parametrize("name_and_text", CONFIGS, ids=[name for name, _ in CONFIGS])
def test_every_documented_config_passes_the_offline_check(
    name_and_text: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name, text = name_and_text
    if name in SCHEMATICS:
        pytest.skip("a schematic of the keys (values written as '...'), not a config")
    for variable in _ENV_REFERENCE.findall(text):
        monkeypatch.setenv(variable, "127.0.0.1:9092" if variable.endswith("BOOTSTRAP") else PASSWORD)
    config = tmp_path / "config.yaml"
    config.write_text(_on_this_machine(text, tmp_path / "machine"))
    code = run(["check", "--offline", "-c", str(config)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err == ""
    for line in captured.out.splitlines():
        assert "not reached: --offline" in line, line


# -- rules that used to fail late ------------------------------------------------------------------


def check_offline(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[str], list[str]]:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    code = run(["check", "--offline", "-c", str(config)])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def test_strategy_offset_without_an_offset_fails_when_the_file_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to pass every check and fail at plan time: in three-phase-restore after the restore."""
    code, out, err = check_offline(tmp_path, "offset_reset:\n  strategy: offset\n", capsys)
    assert code == ConfigError.exit_code
    assert out == []
    assert err == [
        f"kafka-backup: error: {tmp_path / 'c.yaml'}: offset_reset: strategy: offset needs offset "
        "(the offset every partition moves to)"
    ]


def test_an_offset_another_strategy_ignores_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = check_offline(tmp_path, "offset_reset:\n  strategy: latest\n  offset: 5\n", capsys)
    assert code == ConfigError.exit_code
    assert err[0].endswith("offset_reset: offset is read only with strategy: offset, and strategy is latest")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (
            "engine: spark\nbackup:\n  continuous: true\n",
            "backup   failed (exit 3): backup.continuous: true runs on the local engine only, and engine is "
            "spark (engine: spark copies one increment per run)",
        ),
        (
            "restore:\n  producer_properties:\n    acks: '1'\n",
            "restore  failed (exit 3): restore.producer_properties: acks is set by the restore itself "
            "(exactly once needs it)",
        ),
        (
            "restore:\n  producer_properties:\n    linger.msx: '5'\n",
            "restore  failed (exit 3): restore.producer_properties.linger.msx: librdkafka has no such "
            "property (did you mean 'linger.ms'?)",
        ),
        (
            "offset_reset:\n  source_offsets: live\n",
            "offset_reset failed (exit 3): offset_reset.source_offsets: live reads the groups' offsets from "
            "the source cluster, and there is no 'source' section",
        ),
        (
            "mode: three-phase-restore\nrestore:\n  include_original_offset_header: false\n",
            "restore  failed (exit 3): mode: three-phase-restore needs x-kafka-backup-* origin headers "
            "on the "
            "restored records, but restore.include_original_offset_header is false",
        ),
        (
            "mode: drill\nsource:\n  bootstrap_servers: a:1\n",
            "drill    failed (exit 3): mode: drill needs 'source' and 'target' sections; missing: target",
        ),
        (
            "target:\n  bootstrap_servers: a:1\n  security: {security_protocol: SASL_SSL, "
            "sasl_mechanism: OAUTHBEARER}\nmapping:\n  spark_master: local[1]\n",
            "spark    local[1]: failed (exit 3): security.sasl_mechanism OAUTHBEARER: Spark's Kafka source "
            "needs a JAAS configuration",
        ),
        (
            "mapping:\n  spark_jars: [missing.jar]\n",
            "spark    local[2]: failed (exit 3): mapping.spark_jars: {tmp}/missing.jar: no such file",
        ),
        (
            "storage:\n  url: /x\n  encryption: {key_env: KBACKUP_TEST_NO_SUCH_VARIABLE}\n",
            "storage  /x: failed (exit 18): "
            "the environment variable KBACKUP_TEST_NO_SUCH_VARIABLE is not set "
            "(storage.encryption.key_env names it)",
        ),
        (
            "restore_metadata:\n  scram_passwords_file: missing.yaml\n",
            "restore_metadata failed (exit 3): SCRAM passwords file {tmp}/missing.yaml not found",
        ),
    ],
    ids=[
        "spark-follow",
        "reserved-producer-key",
        "producer-typo",
        "live-without-source",
        "three-phase-without-headers",
        "drill-without-target",
        "spark-jaas",
        "spark-jar",
        "key-variable-unset",
        "passwords-file-missing",
    ],
)
def test_each_rule_across_sections_is_one_line_with_its_role(
    text: str, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = check_offline(tmp_path, text, capsys)
    expected = line.format(tmp=tmp_path)
    assert expected in out, out
    assert code == int(re.search(r"exit (\d+)", expected).group(1))  # type: ignore[union-attr]
    assert err[0] == "kafka-backup: error: " + re.split(r"failed \(exit \d+\): ", expected, maxsplit=1)[1]


def test_offline_reports_every_failing_part_and_exits_with_the_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "source:\n  bootstrap_servers: a:1\n  properties: {fetch.max.byte: 1}\n"
        "target:\n  bootstrap_servers: b:1\n"
        "  security: {security_protocol: SSL, ssl_ca_location: no-ca.pem}\n"
        "storage:\n  url: /x\n  encryption: {key_file: no.key}\n"
        "engine: spark\nbackup:\n  continuous: true\n"
    )
    code, out, err = check_offline(tmp_path, text, capsys)
    assert code == ConfigError.exit_code
    assert out == [
        "source   a:1: failed (exit 3): source.properties.fetch.max.byte: librdkafka has no such property "
        "(did you mean 'fetch.max.bytes'?)",
        f"target   b:1: failed (exit 3): target.security.ssl_ca_location: {tmp_path}/no-ca.pem: no such file",
        "storage  /x: failed (exit 18): the key file no.key does not exist",  # relative to the current folder
        "spark    local[2]: settings valid (not reached: --offline)",
        "backup   failed (exit 3): backup.continuous: true runs on the local engine only, "
        "and engine is spark (engine: spark copies one increment per run)",
    ]
    assert err[0] == (
        "kafka-backup: error: source.properties.fetch.max.byte: librdkafka has no such property "
        "(did you mean 'fetch.max.bytes'?)"
    )


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback port that listens: any connection made to it is waiting in its queue."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        server.setblocking(False)
        yield server


def test_offline_opens_no_connection(
    listener: socket.socket, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    text = (
        f"source:\n  bootstrap_servers: {address}\ntarget:\n  bootstrap_servers: {address}\n"
        f"storage:\n  url: s3://bucket/prefix\n  endpoint_url: http://{address}\n"
        f"engine: spark\nmapping:\n  spark_master: spark://{address}\n"
    )
    code, out, err = check_offline(tmp_path, text, capsys)
    assert (code, err) == (0, [])
    assert out == [
        f"source   {address}: settings valid (not reached: --offline)",
        f"target   {address}: settings valid (not reached: --offline)",
        "storage  s3://bucket/prefix: settings valid (not reached: --offline)",
        f"spark    spark://{address}: settings valid (not reached: --offline)",
    ]
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody connected


def test_offline_json_lists_every_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "source:\n  bootstrap_servers: a:1\noffset_reset:\n  source_offsets: live\n  groups: [g]\n"
    )
    assert run(["check", "--offline", "-c", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["offline"] is True
    assert [part["role"] for part in report["parts"]] == ["source", "storage"]
    assert all(part["ok"] for part in report["parts"])


def test_offline_json_names_the_failure_and_exits_with_its_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("source:\n  bootstrap_servers: a:1\n  properties: {fetch.max.byte: 1}\n")
    assert run(["check", "--offline", "-c", str(config), "--json"]) == ConfigError.exit_code
    report = json.loads(capsys.readouterr().out)  # one JSON document: the report
    assert report["ok"] is False
    source = report["parts"][0]
    assert source["role"] == "source"
    assert source["error"]["exit_code"] == 3
    assert "did you mean 'fetch.max.bytes'" in source["error"]["message"]


def test_check_offline_help_says_how_the_exit_code_is_chosen(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["check", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--offline" in out
    assert "the exit code is the first failure's" in out
    assert KafkaUnreachableError.exit_code == 5
