"""Settings a config file gives that would be ignored are refused when it is read (issue 34, item 12).

``storage.url`` beside the seed tool's ``backend``/``path``/``bucket``/``prefix``, ``backend: s3``
without a bucket, S3-only keys on a folder, and a broker's port outside 1-65535: each is exit 3
and one line naming the file and the keys, from ``check --offline`` as from every command.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import ConfigError


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refusal(
    config: str, capsys: pytest.CaptureFixture[str], command: tuple[str, ...] = ("check", "--offline")
) -> str:
    Path("c.yaml").write_text(config)
    code = run([*command, "-c", "c.yaml"])
    out, err = capsys.readouterr()
    assert code == ConfigError.exit_code, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0].removeprefix("kafka-backup: error: ")


@pytest.mark.parametrize(
    ("storage", "line"),
    [
        (
            "url: ./a\n  backend: filesystem\n  path: ./b\n",
            "c.yaml: storage: url, backend and path each say where backups are: keep url alone, or remove "
            "it and keep backend and path",
        ),
        (
            "url: ./a\n  path: ./b\n",
            "c.yaml: storage: url and path each say where backups are: keep url alone, or remove it and "
            "keep path",
        ),
        (
            "url: s3://a/x\n  bucket: b\n",
            "c.yaml: storage: url and bucket each say where backups are: keep url alone, or remove it and "
            "keep bucket",
        ),
    ],
    ids=["url-backend-path", "url-path", "url-bucket"],
)
def test_a_url_beside_the_seed_tools_location_keys_is_refused(
    storage: str, line: str, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert refusal(f"storage:\n  {storage}", capsys) == line


@pytest.mark.parametrize(
    ("storage", "line"),
    [
        (
            "url: ./a\n  endpoint_url: http://minio:9000\n  region: eu-west-1\n",
            "c.yaml: storage: endpoint_url and region are for an S3 store, and url ./a is a folder: remove "
            "them, or write url: s3://bucket/prefix",
        ),
        (
            "url: file:///srv/backups\n  sse: AES256\n",
            "c.yaml: storage: sse is for an S3 store, and url file:///srv/backups is a folder: remove it, "
            "or write url: s3://bucket/prefix",
        ),
        (
            "backend: filesystem\n  path: ./a\n  bucket: b\n  prefix: p\n",
            "c.yaml: storage: bucket and prefix are for an S3 store, and backend filesystem is a folder: "
            "remove them, or write url: s3://bucket/prefix",
        ),
        (
            "path: ./a\n  access_key_id: AKIA-MARKER\n  secret_access_key: SECRET-MARKER\n",
            "c.yaml: storage: access_key_id and secret_access_key are for an S3 store, and path ./a is a "
            "folder: remove them, or write url: s3://bucket/prefix",
        ),
    ],
    ids=["url-endpoint-region", "file-url-sse", "filesystem-bucket", "path-credentials"],
)
def test_s3_keys_on_a_folder_are_refused(
    storage: str, line: str, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert refusal(f"storage:\n  {storage}", capsys) == line


def test_a_folder_with_a_kms_key_keeps_the_endpoint_region_and_credentials_kms_reads(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("c.yaml").write_text(
        "storage:\n  url: ./a\n  endpoint_url: http://localstack:4566\n  region: eu-west-1\n"
        "  access_key_id: AKIA-CONFLICTS-KEY\n  secret_access_key: conflicts-secret-value\n"
        "  encryption: {kms_key_id: alias/backups}\n"
    )
    assert run(["check", "--offline", "-c", "c.yaml"]) == 0, capsys.readouterr().err


def test_a_kms_key_does_not_make_a_bucket_on_a_folder_right(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refusal(
        "storage:\n  url: ./a\n  bucket: b\n  region: eu-west-1\n  encryption: {kms_key_id: alias/backups}\n",
        capsys,
    )
    assert line.startswith("c.yaml: storage: url and bucket each say where backups are")


def test_an_s3_backend_without_a_bucket_is_refused_when_the_file_is_read(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every command, not only those that open the storage: list is refused as check is.
    for command in [("check", "--offline"), ("list",)]:
        assert refusal("storage:\n  backend: s3\n  prefix: prod\n", capsys, command) == (
            "c.yaml: storage: backend s3 needs a bucket: set bucket (and prefix), or write url: "
            "s3://bucket/prefix"
        )


def test_an_s3_backend_with_a_folder_path_is_refused(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert refusal("storage:\n  backend: s3\n  bucket: b\n  path: ./a\n", capsys) == (
        "c.yaml: storage: path is the folder of backend filesystem; an s3 backend takes bucket and prefix"
    )


@pytest.mark.parametrize(
    ("storage", "url"),
    [
        ("backend: s3\n  bucket: b\n  prefix: /prod/\n  region: eu-west-1\n", "s3://b/prod"),
        ("bucket: b\n  sse: AES256\n", "s3://b"),
        ("backend: filesystem\n  path: /srv/backups\n", "/srv/backups"),
        ("url: s3://b/prod\n  endpoint_url: http://minio:9000\n", "s3://b/prod"),
    ],
)
def test_the_seed_tools_keys_and_s3_keys_on_s3_still_pass(
    storage: str, url: str, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Path("c.yaml").write_text(f"storage:\n  {storage}")
    assert run(["check", "--offline", "-c", "c.yaml"]) == 0, capsys.readouterr().err
    assert f"storage  {url}: settings valid" in capsys.readouterr().out


def test_a_folder_given_to_path_drops_the_files_s3_settings(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-p`` replaces where backups are: a folder for a file written for S3 is read as a folder,
    not refused for the bucket's endpoint and credentials."""
    Path("copy").mkdir()
    Path("c.yaml").write_text(
        "storage:\n  url: s3://b/prod\n  endpoint_url: http://minio:9000\n  region: eu-west-1\n"
        "  access_key_id: AKIA-CONFLICTS-KEY\n  secret_access_key: conflicts-secret-value\n  sse: AES256\n"
    )
    assert run(["list", "-c", "c.yaml", "-p", "copy"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    ("servers", "line"),
    [
        ("kafka:99999", "'kafka:99999': port 99999 is not between 1 and 65535"),
        ("kafka:65536", "'kafka:65536': port 65536 is not between 1 and 65535"),
        ("kafka:9092,kafka-2:0", "'kafka-2:0': port 0 is not between 1 and 65535"),
    ],
)
@pytest.mark.parametrize("section", ["source", "target"])
def test_a_brokers_port_outside_1_to_65535_is_refused_in_a_file(
    section: str, servers: str, line: str, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = f"{section}:\n  bootstrap_servers: {servers!r}\n"
    assert refusal(config, capsys) == f"c.yaml: {section}.bootstrap_servers: {line}"


def test_ports_1_and_65535_are_taken(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    Path("c.yaml").write_text("source:\n  bootstrap_servers: kafka:1,kafka-2:65535\n")
    assert run(["check", "--offline", "-c", "c.yaml"]) == 0, capsys.readouterr().err


def test_s3_keys_without_any_location_are_refused_unless_path_names_the_store(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Backups went to ./kafka-backups without a word; a file holding only S3 settings, with --path
    # naming the store on each command, stays valid.
    Path("c.yaml").write_text("storage:\n  endpoint_url: http://minio:9000\n  region: eu-west-1\n")
    for command in (["check", "--offline"], ["list"]):
        code = run([*command, "-c", "c.yaml"])
        out, err = capsys.readouterr()
        assert code == ConfigError.exit_code, (out, err)
        assert "endpoint_url and region are for an S3 store, and no bucket is given" in out + err
        assert not (folder / "kafka-backups").exists()
    (folder / "copy").mkdir()
    assert run(["list", "-c", "c.yaml", "-p", str(folder / "copy")]) == 0, capsys.readouterr().err
