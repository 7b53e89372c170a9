"""docs/exit-codes.md's "One code per kind of mistake", run against the CLI (issue 34, items 7, 10, 12).

For each kind of mistake the table lists, every command that can meet it is run: the exit code must
be the table's, stderr one ``kafka-backup: error:`` line (and at most a next step), and under
``--json`` the same error on stdout. Nothing here reaches a network: every refusal comes first.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from kbackup.backup import BackupJob
from kbackup.cli import reset_cmds
from kbackup.cli.app import app
from kbackup.cli.main import run
from kbackup.core.errors import PreconditionError
from kbackup.format.reset_plan import ResetPlan
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage
from tests.support.cli_lines import parse_cli

DOC = Path(__file__).parents[2] / "docs" / "exit-codes.md"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "damaged_backups"
#: Nothing listens on port 1; every case is refused before a connection is tried anyway.
NO_BROKER = "127.0.0.1:1"
STORE = "store"  # an empty folder that exists (the tests run in tmp_path)
ABSENT = "absent"  # a folder that does not
BACKUP_ID_NEXT = "name the backup with --backup-id nightly"
HOST_PORT_NEXT = "give host:port, e.g. kafka:9092"


def documented_codes() -> dict[str, int]:
    """The table's ``| `kind` | code | ...`` rows."""
    section = DOC.read_text().split("## One code per kind of mistake", 1)[1]
    rows = re.findall(r"^\|\s*`([a-z-]+)`\s*\|\s*(\d+)\s*\|", section, re.MULTILINE)
    return {kind: int(code) for kind, code in rows}


@dataclass(frozen=True)
class Case:
    kind: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    line: str
    next_step: str | None = None

    @property
    def id(self) -> str:
        return f"{self.kind}:{' '.join(self.command)}"


#: Each command, and what it needs besides the mistake to get as far as the mistake.
CONFIG_COMMANDS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("backup",), ()),
    (("list",), ()),
    (("describe",), ()),
    (("validate",), ()),
    (("status",), ()),
    (("prune",), ()),
    (("rekey",), ("--new-encryption-key", "env:KBACKUP_NO_SUCH_KEY")),
    (("parquet-key",), ("-o", "spark.properties")),
    (("restore",), ()),
    (("show-offset-mapping",), ()),
    (("offset-reset", "plan"), ()),
    (("offset-reset", "execute"), ("--plan", "plan.json")),
    (("offset-reset-bulk",), ("--groups-file", "groups.txt")),
    (("offset-rollback",), ()),
    (("three-phase-restore",), ()),
    (("drill",), ()),
    (("check",), ()),
]
EVERY_COMMAND = [*(command for command, _ in CONFIG_COMMANDS), ("keygen",), ("sandbox",)]
#: Commands with -b/--bootstrap-servers; whether each has --backup-id (OSO's -b) to point to.
BOOTSTRAP_COMMANDS: list[tuple[tuple[str, ...], tuple[str, ...], bool]] = [
    (("backup",), (), True),
    (("status",), (), True),
    (("restore",), (), True),
    (("show-offset-mapping",), (), False),
    (("offset-reset", "plan"), (), True),
    (("offset-reset", "execute"), ("--plan", "plan.json"), False),
    (("offset-rollback",), (), False),
    (("three-phase-restore",), (), True),
    (("check",), (), False),
]
#: Commands that read backups from a storage location, with what they need to get to it.
STORE_COMMANDS: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("list",), ()),
    (("describe",), ("--backup-id", "nightly")),
    (("validate",), ("--backup-id", "nightly")),
    (("status",), ()),
    (("prune",), ("--all", "--keep-last", "1")),
    (("rekey",), ("--new-encryption-key", "env:KBACKUP_NO_SUCH_KEY")),
    (("parquet-key",), ("--backup-id", "nightly", "-o", "spark.properties")),
    (("restore",), ("--backup-id", "nightly", "-b", NO_BROKER)),
    (("three-phase-restore",), ("--backup-id", "nightly", "-b", NO_BROKER)),
    (("offset-reset", "plan"), ("--backup-id", "nightly", "-b", NO_BROKER)),
]
NO_BACKUP_ID = "no backup id: give --backup-id or set backup_id in the config file"
NO_TARGET = "no target cluster: give --bootstrap-servers or set a target section in the config file"
NO_SOURCE = "no source cluster: give --bootstrap-servers or set a source section in the config file"


def cases() -> list[Case]:
    found = [
        Case("unknown-option", command, ("--no-such-option",), "No such option: --no-such-option")
        for command in EVERY_COMMAND
    ]
    found += [
        Case("option-without-value", command, (*needs, "-c"), "Option '-c' requires an argument")
        for command, needs in CONFIG_COMMANDS
    ]
    found += [
        Case("option-without-value", ("keygen",), ("-o",), "Option '-o' requires an argument"),
        Case("option-without-value", ("sandbox",), ("-n",), "Option '-n' requires an argument"),
        Case(
            "conflicting-options",
            ("prune",),
            ("-p", STORE, "--keep-last", "1", "--all", "--backup-id", "nightly"),
            "give --backup-id or --all, not both",
        ),
        Case(
            "conflicting-options",
            ("offset-rollback",),
            ("--list", "--snapshot", "20261122T031500Z-a1b2c3"),
            "give --list or --snapshot, not both",
        ),
        Case(
            "conflicting-options",
            ("drill",),
            ("--local", "-c", "dr.yaml"),
            "give --local or --config, not both",
        ),
    ]
    found += [
        Case("no-backup-id", command, needs, NO_BACKUP_ID)
        for command, needs in [
            (("backup",), ("-b", NO_BROKER, "-p", STORE)),
            (("describe",), ("-p", STORE)),
            (("validate",), ("-p", STORE)),
            (("prune",), ("-p", STORE, "--keep-last", "1")),
            (("parquet-key",), ("-p", STORE, "-o", "spark.properties")),
            (("restore",), ("-b", NO_BROKER, "-p", STORE)),
            (("three-phase-restore",), ("-b", NO_BROKER, "-p", STORE)),
            (("offset-reset", "plan"), ("-b", NO_BROKER, "-p", STORE)),
        ]
    ]
    found += [
        Case("no-backup-id", command, ("-c", "no-backup-id.yaml", *needs), NO_BACKUP_ID)
        for command, needs in [(("restore",), ()), (("three-phase-restore",), ())]
    ]
    found += [
        Case(
            "no-backup-id",
            ("offset-reset-bulk",),
            ("-c", "no-backup-id.yaml", "--groups-file", "groups.txt"),
            "no backup id: set backup_id in the config file (the groups' offsets are read from that backup)",
        )
    ]
    found += [
        Case("no-cluster", command, ("-c", "no-cluster.yaml", *needs), NO_TARGET)
        for command, needs in [
            (("restore",), ()),
            (("three-phase-restore",), ()),
            (("offset-reset", "plan"), ()),
            (("show-offset-mapping",), ("--source-cluster-id", "prod", "-t", "orders")),
        ]
    ]
    found += [
        Case("no-cluster", ("backup",), ("-c", "no-cluster.yaml"), NO_SOURCE),
        Case(
            "no-cluster",
            ("offset-reset-bulk",),
            ("-c", "no-cluster.yaml", "--groups-file", "groups.txt"),
            "no target cluster: set a target section in the config file (the cluster the groups move to)",
        ),
    ]
    found += [
        Case("not-a-number", command, args, f"Invalid value for '{option}'")
        for command, args, option in [
            (("prune",), ("--keep-last", "x"), "--keep-last"),
            (("status",), ("--max-lag", "x"), "--max-lag"),
            (("drill",), ("--records", "x"), "--records"),
            (("offset-reset", "execute"), ("--plan", "plan.json", "--parallelism", "x"), "--parallelism"),
            (("show-offset-mapping",), ("--min-partitions", "x"), "--min-partitions"),
            (("backup",), ("--metrics-port", "x"), "--metrics-port"),
            (("restore",), ("--metrics-port", "x"), "--metrics-port"),
            (("three-phase-restore",), ("--metrics-port", "x"), "--metrics-port"),
            (("sandbox",), ("-n", "x"), "--clusters"),
        ]
    ]
    found += [
        Case("bad-duration", command, (*needs, option, "3x"), f"{option} 3x: '3x' is not a duration: write")
        for command, needs, option in [
            (("status",), ("-p", STORE), "--max-age"),
            (("prune",), ("-p", STORE, "--all"), "--older-than"),
            (("prune",), ("-p", STORE, "--all"), "--keep-within"),
            (("prune",), ("-p", STORE, "--all", "--keep-last", "1"), "--orphan-grace"),
        ]
    ]
    for command, needs, has_backup_id in BOOTSTRAP_COMMANDS:
        found += [
            Case(
                "bootstrap-not-host-port",
                command,
                ("-b", "nightly", *needs),
                "--bootstrap-servers 'nightly': expected host:port; -b here is the cluster's bootstrap "
                "servers (Kafka's --bootstrap-server), not a backup id as in OSO kafka-backup",
                BACKUP_ID_NEXT if has_backup_id else HOST_PORT_NEXT,
            ),
            Case(
                "bootstrap-bad-port",
                command,
                ("--bootstrap-server", "kafka:99999", *needs),
                "--bootstrap-servers 'kafka:99999': port 99999 is not between 1 and 65535",
            ),
            Case(
                "bootstrap-bad-port",
                command,
                ("--bootstrap-servers", "kafka:9092,kafka-2:0", *needs),
                "--bootstrap-servers 'kafka-2:0': port 0 is not between 1 and 65535",
            ),
            Case(
                "empty-bootstrap", command, ("-b", "", *needs), "--bootstrap-servers is empty: give host:port"
            ),
        ]
    found += [
        Case("empty-path", command, ("-p", "", *needs), "--path is empty: give a folder")
        for command, needs in [
            *STORE_COMMANDS,
            (("backup",), ("-b", NO_BROKER, "--backup-id", "nightly")),
        ]
    ]
    found += [
        Case(
            "not-name-value",
            ("restore",),
            ("--topic-mapping", "orders"),
            "--topic-mapping 'orders': expected NAME=VALUE",
        ),
        Case(
            "not-name-value",
            ("show-offset-mapping",),
            ("-b", NO_BROKER, "--kafka-option", "fetch.max.bytes"),
            "--kafka-option 'fetch.max.bytes': expected NAME=VALUE",
        ),
    ]
    found += [
        Case("bad-engine", command, ("--engine", "fast"), "--engine fast: choose local or spark")
        for command in [("backup",), ("restore",), ("three-phase-restore",), ("drill",)]
    ]
    found += [
        Case(
            "config-file-missing",
            command,
            (*needs, "-c", "missing.yaml"),
            "config file missing.yaml not found",
            "check the path given to --config",
        )
        for command, needs in CONFIG_COMMANDS
    ]
    found += [
        Case(
            "config-file-unreadable",
            command,
            (*needs, "-c", "."),
            "config file . cannot be read: Is a directory",
        )
        for command, needs in CONFIG_COMMANDS
    ]
    found += [
        Case("no-storage-folder", command, ("-p", ABSENT, *needs), "there is no folder {tmp}/absent")
        for command, needs in STORE_COMMANDS
    ]
    found += [
        Case(
            "no-such-backup",
            command,
            ("-p", STORE, "--backup-id", "nightly", *needs),
            "no backup 'nightly' in {tmp}/store",
        )
        for command, needs in [
            (("describe",), ()),
            (("validate",), ()),
            (("status",), ()),
            (("prune",), ("--keep-last", "1")),
            (("parquet-key",), ("-o", "spark.properties")),
            (("restore",), ("-b", NO_BROKER)),
            (("three-phase-restore",), ("-b", NO_BROKER)),
            (("offset-reset", "plan"), ("-b", NO_BROKER)),
        ]
    ]
    return found


CASES = cases()


def takes_json(command: tuple[str, ...]) -> bool:
    found: object = typer.main.get_command(app)
    for word in command:
        found = found.commands[word]  # type: ignore[attr-defined]
    return any(param.name == "as_json" for param in found.params)  # type: ignore[attr-defined]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / STORE).mkdir()
    (tmp_path / "groups.txt").write_text("g\n")
    (tmp_path / "dr.yaml").write_text("backup_id: nightly\n")
    # A config that names everything but the backup, and one that names everything but the clusters.
    (tmp_path / "no-backup-id.yaml").write_text(
        f"target:\n  bootstrap_servers: {NO_BROKER}\nstorage:\n  url: {STORE}\n"
    )
    (tmp_path / "no-cluster.yaml").write_text(f"backup_id: nightly\nstorage:\n  url: {STORE}\n")
    return tmp_path


def test_every_kind_of_mistake_in_the_table_is_run_and_only_those() -> None:
    assert {case.kind for case in CASES} == set(documented_codes())


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_the_same_mistake_gets_the_same_code_and_line_on_every_command(
    case: Case, as_json: bool, folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if as_json and not takes_json(case.command):
        pytest.skip(f"{' '.join(case.command)} has no --json")
    code = run([*case.command, *(["--json"] if as_json else []), *case.args])
    out, err = capsys.readouterr()
    expected = documented_codes()[case.kind]
    assert code == expected, (out, err)
    line = case.line.format(tmp=folder)
    lines = err.splitlines()
    assert lines[0].startswith(f"kafka-backup: error: {line}"), err
    assert len(lines) <= 2, err
    if len(lines) == 2:
        assert lines[1].startswith("kafka-backup: next step: "), err
    if case.next_step is not None:
        assert lines[1:] == [f"kafka-backup: next step: {case.next_step}"], err
    if as_json:
        error = json.loads(out)["error"]
        assert error["exit_code"] == expected
        assert f"kafka-backup: error: {error['message']}" == lines[0]
    else:
        assert out == ""


# Item 10: the names users of Kafka's tools and of OSO kafka-backup type.


@pytest.mark.parametrize(
    ("command", "needs"),
    [(command, needs) for command, needs, _has_backup_id in BOOTSTRAP_COMMANDS],
    ids=[" ".join(command) for command, _needs, _has_backup_id in BOOTSTRAP_COMMANDS],
)
def test_kafkas_bootstrap_server_spelling_is_taken(command: tuple[str, ...], needs: tuple[str, ...]) -> None:
    assert parse_cli([*command, "--bootstrap-server", "kafka:9092", *needs]) == list(command)


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (("backup",), "--source-cluster-id"),
        (("backup",), "--source-cluster"),
        (("show-offset-mapping",), "--source-cluster-id"),
        (("show-offset-mapping",), "--source-cluster"),
    ],
)
def test_both_spellings_of_the_source_cluster_are_taken(command: tuple[str, ...], option: str) -> None:
    assert parse_cli([*command, option, "prod-east"]) == list(command)


@pytest.mark.parametrize("option", ["--source-cluster-id", "--source-cluster"])
def test_either_source_cluster_spelling_reaches_the_backup(
    option: str, folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kbackup.backup as backup_stage

    seen: list[str] = []

    def run_backup(job: BackupJob, **_kwargs: object) -> None:
        seen.append(job.settings.source_cluster_id or "")
        raise PreconditionError("stopped before copying")

    monkeypatch.setattr(backup_stage, "run_backup", run_backup)
    code = run(["backup", option, "prod-east", "-b", NO_BROKER, "-p", STORE, "--backup-id", "b"])
    assert code == PreconditionError.exit_code, capsys.readouterr().err
    assert seen == ["prod-east"]


def test_show_offset_mapping_refuses_a_regex_topic(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = run(["show-offset-mapping", "-b", NO_BROKER, "--source-cluster-id", "c", "-t", "orders.*"])
    assert code == 3
    assert capsys.readouterr().err.splitlines() == [
        "kafka-backup: error: --topic 'orders.*' is not a topic name: show-offset-mapping scans topics by "
        "their exact name (letters, digits, '.', '_', '-'), it takes no regex as restore's --topic does",
        "kafka-backup: next step: give each restored topic with its own -t, or --all-topics",
    ]


def test_the_help_says_which_topic_option_is_a_regex(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["show-offset-mapping", "--help"]) == 0
    assert "exact name, not a regex" in " ".join(capsys.readouterr().out.split())
    assert run(["restore", "--help"]) == 0
    assert "full-match regex" in " ".join(capsys.readouterr().out.split())


def test_offset_reset_plan_takes_the_target_store_backup_and_groups_as_options(
    folder: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[object, list[str] | None]] = []

    def make_plan(config: object, groups: list[str] | None) -> ResetPlan:
        seen.append((config, groups))
        raise PreconditionError("planned")

    monkeypatch.setattr(reset_cmds, "_make_plan", make_plan)
    args = ["offset-reset", "plan", "-b", "kafka:9092", "-p", STORE, "--backup-id", "nightly"]
    code = run([*args, "-g", "g1", "-g", "g2,g3", "--groups", "g4"])
    assert code == PreconditionError.exit_code, capsys.readouterr().err
    config, groups = seen[0]
    assert groups == ["g1", "g2", "g3", "g4"]
    assert config.target.bootstrap_servers == ["kafka:9092"]  # type: ignore[attr-defined]
    assert config.backup_id == "nightly"  # type: ignore[attr-defined]
    assert config.storage.url.endswith(STORE)  # type: ignore[attr-defined]


# Item 12: prune never teaches --force for a plan that deletes nothing, nor says "every backup"
# of a root where some were not read.


def _readable_backup(root: Path, scratch: Path, backup_id: str) -> None:
    builder = BackupBuilder(LocalStorage(root), backup_id, scratch_dir=scratch)
    builder.topic("orders", 1)
    builder.partition(
        "orders", 0, [BackupRecord(offset=o, value=b"v", timestamp=1_700_000_000_000 + o) for o in range(3)]
    )
    builder.commit()


def test_prune_of_a_root_of_unreadable_backups_removes_nothing_and_teaches_no_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    shutil.copytree(FIXTURES / "bad-json" / "nightly", root / "broken-1")
    shutil.copytree(FIXTURES / "bad-json" / "nightly", root / "broken-2")
    code = run(["prune", "-p", str(root), "--all", "--keep-last", "0"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "--force" not in out + err
    assert "would remove 0 object(s)" in out


def test_prune_that_removes_every_backup_it_read_says_the_unread_ones_stay(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "store"
    _readable_backup(root, tmp_path, "a")
    shutil.copytree(FIXTURES / "bad-json" / "nightly", root / "z-broken")
    code = run(["prune", "-p", str(root), "--all", "--keep-last", "0"])
    err = capsys.readouterr().err
    assert code == PreconditionError.exit_code
    assert err.splitlines()[0] == (
        f"kafka-backup: error: the policy would remove every backup it read in {root} (1; 1 not read "
        "stay); give --force to allow it"
    )


# The same kinds where no command line reaches them first: a library call gets the same class.


def test_an_engine_put_over_a_config_is_a_wrong_value() -> None:
    from kbackup.app.config import KBackupConfig
    from kbackup.app.overrides import with_engine
    from kbackup.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^--engine fast: choose local or spark$"):
        with_engine(KBackupConfig(), "fast", None)


def test_a_log_format_other_than_text_or_json_is_a_wrong_value() -> None:
    from kbackup.core.errors import ConfigError
    from kbackup.core.logs import configure_logging

    with pytest.raises(ConfigError, match=r"^--log-format 'xml': expected one of text, json$"):
        configure_logging(log_format="xml")


def test_a_restore_without_a_backup_id_is_called_wrong(tmp_path: Path) -> None:
    from kbackup.core.config import KafkaConnection, StorageSettings
    from kbackup.core.errors import UsageError
    from kbackup.restore import service
    from kbackup.restore.settings import RestoreSettings

    with pytest.raises(UsageError, match=f"^{NO_BACKUP_ID}$"):
        service.prepare(
            backup_id=None,
            storage=StorageSettings(url=str(tmp_path)),
            target=KafkaConnection(bootstrap_servers=[NO_BROKER]),
            settings=RestoreSettings(),
        )
    with pytest.raises(UsageError, match=f"^{NO_TARGET}$"):
        service.prepare(
            backup_id="nightly",
            storage=StorageSettings(url=str(tmp_path)),
            target=None,
            settings=RestoreSettings(),
        )
