"""Storage URLs with a typo are refused before anything is written (issue 18, item 6).

``s3//bucket/prod`` (colon missing) used to back up into ``./s3/bucket/prod`` on local disk and
exit 0; ``file://relative/x`` used to mean the folder ``/x``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import ConfigError
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import Record, create_topic, produce


@pytest.fixture
def topic(source_cluster: LocalKafkaCluster, unique_name: str) -> str:
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v")] * 5)
    return unique_name


def backup_to(cluster: LocalKafkaCluster, topic: str, path: str) -> int:
    return run(
        ["backup", "-b", cluster.bootstrap_servers, "--include", topic, "--backup-id", "b", "--path", path]
    )


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("s3//kbackup-test/prod", "s3://kbackup-test/prod"), ("file///srv/backups", "file:///srv/backups")],
)
def test_a_url_with_its_colon_missing_is_refused_and_nothing_is_written(
    source_cluster: LocalKafkaCluster,
    topic: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    typed: str,
    meant: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert backup_to(source_cluster, topic, typed) == ConfigError.exit_code
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"kafka-backup: error: --path: {typed!r} looks like {meant} with the "
        f"colon missing (a folder really named so: ./{typed})"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_file_url_naming_a_host_is_refused_and_says_where_a_relative_folder_resolves(
    source_cluster: LocalKafkaCluster,
    topic: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``file://backups{tmp}/x`` reads as host 'backups', folder {tmp}/x: it used to write there."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    absolute = tmp_path / "x"
    assert backup_to(source_cluster, topic, f"file://backups{absolute}") == ConfigError.exit_code
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(
        f"kafka-backup: error: --path: 'file://backups{absolute}' names the host 'backups' and the "
        f"folder {absolute}: a file:// URL holds an absolute path (file:///data/backups); for a relative "
        f"folder write backups{absolute} (in a config file relative to the file's folder, on the command "
        "line to the current folder)"
    )
    assert not absolute.exists()
    assert list(cwd.iterdir()) == []


def test_a_relative_folder_is_backed_up_below_the_current_folder_and_the_summary_says_where(
    source_cluster: LocalKafkaCluster,
    topic: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert backup_to(source_cluster, topic, "backups/prod") == 0
    out = capsys.readouterr().out
    assert f"to {tmp_path / 'backups' / 'prod'}: 1 topic(s)" in out
    assert (tmp_path / "backups" / "prod" / "b" / "manifests").is_dir()
