"""Wrong and hostile input through the CLI: one clear line, a documented exit code, nothing written.

No broker listens on ``NO_BROKER``: a command that got as far as the network
would fail with exit code 5, not with the code these tests expect.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.core.errors import ConfigError, KBackupError, UsageError
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage, open_storage

NO_BROKER = "127.0.0.1:1"

HOSTILE_BACKUP_IDS = [
    "../escape",
    "..",
    ".",
    "a/b",
    "/etc",
    "nightly/../../x",
    "back\\slash",
    "with space",
    "new\nline",
    "x" * 201,
    "caf\u00e9",
    "",
]


def files_below(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*"))


def one_error_line(err: str) -> str:
    """The error line; any further line is only the 'next step'."""
    lines = err.strip().splitlines()
    assert lines, "nothing on stderr"
    assert lines[0].startswith("kafka-backup: error: "), lines
    assert all(line.startswith("kafka-backup: next step: ") for line in lines[1:]), lines
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    storage = LocalStorage(tmp_path / "store")
    builder = BackupBuilder(storage, "nightly", scratch_dir=tmp_path)
    builder.topic("orders", 1)
    builder.partition("orders", 0, [BackupRecord(offset=0, value=b"v")])
    builder.commit()
    return tmp_path / "store"


@pytest.mark.parametrize("backup_id", HOSTILE_BACKUP_IDS)
@pytest.mark.parametrize("command", ["backup", "restore", "describe", "validate", "status"])
def test_backup_ids_that_leave_their_folder_are_refused(
    command: str, backup_id: str, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = files_below(tmp_path)
    beside = sorted(entry.name for entry in tmp_path.parent.iterdir())
    args = [command, "--path", str(store), "--backup-id", backup_id]
    if command in ("backup", "restore"):
        args += ["-b", NO_BROKER]
    code = run(args)
    err = capsys.readouterr().err
    assert code in (ConfigError.exit_code, UsageError.exit_code), err
    line = one_error_line(err)
    assert "backup id" in line or "backup_id" in line, line
    assert files_below(tmp_path) == before
    assert sorted(entry.name for entry in tmp_path.parent.iterdir()) == beside  # nothing beside it either


def test_backup_id_in_a_config_file_is_checked_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"backup_id: ../../escape\nsource:\n  bootstrap_servers: {NO_BROKER}\nstorage:\n  url: {tmp_path}/s\n"
    )
    assert run(["backup", "-c", str(config)]) == ConfigError.exit_code
    assert "backup_id" in one_error_line(capsys.readouterr().err)
    assert files_below(tmp_path) == ["c.yaml"]


@pytest.mark.parametrize(
    "url",
    [
        "s3://bucket/../other",
        "s3://bucket/prod/../../other",
        "s3://bucket/%2e%2e/other",
        "s3://bucket/a/./b",
        "s3://bucket/a//b",
        "s3://bucket/with space",
        "s3://bucket/back\\slash",
    ],
)
def test_s3_prefixes_that_could_escape_are_refused(url: str) -> None:
    with pytest.raises(ConfigError, match="not a safe relative path"):
        open_storage(StorageSettings(url=url, endpoint_url="http://127.0.0.1:1", region="us-east-1"))


def test_seed_style_s3_prefix_is_checked_the_same_way() -> None:
    settings = StorageSettings.model_validate({"backend": "s3", "bucket": "b", "prefix": "ok/../../x"})
    with pytest.raises(ConfigError, match="not a safe relative path"):
        open_storage(settings)


def test_safe_s3_prefixes_are_kept() -> None:
    storage = open_storage(StorageSettings(url="s3://bucket/backups/prod-1/", region="us-east-1"))
    assert storage.url == "s3://bucket/backups/prod-1"


def test_hostile_s3_prefix_fails_the_command_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(["backup", "-b", NO_BROKER, "--include", "x", "--path", "s3://b/../x", "--backup-id", "n"])
    assert code == ConfigError.exit_code
    assert "s3://b/../x" in one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("args", "expected", "message"),
    [
        (
            ["--time-window-start", "2026-11-22T00:00:00Z", "--time-window-end", "2026-11-21T00:00:00Z"],
            3,
            "--time-window-end 2026-11-21T00:00:00Z must be after --time-window-start 2026-11-22T00:00:00Z",
        ),
        (
            ["--time-window-start", "100", "--time-window-end", "100"],
            3,
            "--time-window-end 100 must be after --time-window-start 100",
        ),
        (["--time-window-end", "1" + "0" * 30], 3, "outside Kafka's timestamp range"),
        (["--offset-range", "orders:0:9-3"], 3, "end 3 is below start 9"),
        (["--offset-range", "orders:0:" + "9" * 25 + "-"], 3, "must be at most 9223372036854775807"),
        (["--offset-range", "orders:-1:0-5"], 3, "--offset-range"),
        (["--offset-range", "orders:0:-5-9"], 3, "--offset-range"),
        (["--topic", "orders("], 3, "invalid regular expression"),
        (["--topic-mapping", "orders=" + "t" * 250], 3, "is not a valid Kafka topic name"),
        (["--topic-mapping", "orders=../evil"], 3, "is not a valid Kafka topic name"),
        (["--target-partitions", "orders=0"], 3, "at least 1 partition"),
    ],
)
def test_wrong_restore_selections_are_refused_before_the_network(
    args: list[str],
    expected: int,
    message: str,
    store: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    before = files_below(tmp_path)
    code = run(["restore", "-p", str(store), "--backup-id", "nightly", "-b", NO_BROKER, *args])
    err = capsys.readouterr().err
    assert code == expected, err
    assert message in one_error_line(err)
    assert files_below(tmp_path) == before


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("source:\n  bootstrap_servers: a:1\n  topics:\n    include: []\n", "source.topics.include"),
        (
            "source:\n  bootstrap_servers: a:1\n  topics:\n    exclude: ['[z-a]']\n",
            "invalid regular expression",
        ),
        ("source:\n  bootstrap_servers: []\n", "source.bootstrap_servers"),
        ("source:\n  bootstrap_servers: a:1\n  connect_timeout_secs: -5\n", "source.connect_timeout_secs"),
        ("offset_reset:\n  offset: -1\n", "offset_reset.offset"),
        ("restore:\n  offset_ranges: {orders: {0: {start: -4}}}\n", "restore.offset_ranges"),
        ("restore:\n  partitions: {orders: [-1]}\n", "restore.partitions"),
        ("restore:\n  time_window_start: 99999999999999999999999\n", "restore.time_window_start"),
        ("backup:\n  segment_max_bytes: 1.5e400\n", "backup.segment_max_bytes"),
        ("storage:\n  url: ftp://bucket\n", "storage.url"),
        ("storage:\n  sse: des\n", "storage.sse"),
        ("mode: everything\n", "mode"),
        ("- a list\n- not a mapping\n", "expected a mapping"),
        ("source: {bootstrap_servers: a:1, bootstrap_servers: b:2}\n", "key 'bootstrap_servers' twice"),
        ('restore:\n  topics: ["\\ud800"]\n', "lone surrogate"),
    ],
)
def test_wrong_config_values_exit_3_with_one_line(
    yaml_text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(yaml_text)
    assert run(["check", "-c", str(config)]) == ConfigError.exit_code
    assert message in one_error_line(capsys.readouterr().err)


def test_config_that_is_not_utf8_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_bytes(b"source:\n  bootstrap_servers: \xff\xfe:1\n")
    assert run(["check", "-c", str(config)]) == ConfigError.exit_code
    assert "is not UTF-8 text" in one_error_line(capsys.readouterr().err)


def test_every_error_class_has_a_documented_code() -> None:
    from kbackup.core.errors import EXIT_CODES

    def subclasses(cls: type[KBackupError]) -> list[type[KBackupError]]:
        return [cls, *(sub for child in cls.__subclasses__() for sub in subclasses(child))]

    import kbackup.sandbox.kafka  # noqa: F401  (its SandboxError is a KBackupError too)

    for cls in subclasses(KBackupError):
        assert cls.exit_code in EXIT_CODES, cls
