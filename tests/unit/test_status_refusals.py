"""``kafka-backup status`` never passes a damaged backup or an empty store as healthy (docs/status.md:
exit 8 for a manifest missing from the chain or unreadable, exit 9 for a storage with no backup;
issue 33).

The damage is the test's own: fixture copies (tests/fixtures/damaged_backups) and backups built with
the format writer, then broken by deleting or cutting a manifest. The ``sound`` fixture and the
builder's backup before its damage are the controls: they exit 0, so a refusal below is the
damage's doing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import BackupIntegrityError, NotFoundError
from kbackup.format.catalog import BackupCatalog
from kbackup.format.layout import manifest_key
from kbackup.prune import execute as prune_execute
from kbackup.prune.execute import execute_prune
from kbackup.prune.plan import plan_prune
from kbackup.prune.settings import RetentionSettings
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "damaged_backups"
#: The invocations a monitor runs: plain, JSON, and as an alerting check with a generous limit.
INVOCATIONS = [[], ["--json"], ["--max-age", "1000d"], ["--max-age", "1000d", "--json"]]


def status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(["status", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def build(storage: LocalStorage, backup_id: str, increments: int, scratch: Path) -> None:
    """``increments`` increments of one partition, ten records each."""
    for increment in range(increments):
        builder = BackupBuilder(storage, backup_id, scratch_dir=scratch)
        builder.topic("orders", 1)
        builder.partition(
            "orders",
            0,
            [BackupRecord(offset=increment * 10 + o, value=b"v", timestamp=1_000 + o) for o in range(10)],
        )
        builder.commit()


def assert_refused(
    capsys: pytest.CaptureFixture[str], store: Path, extra: list[str], expected: int, *named: str
) -> None:
    """Every invocation exits ``expected`` with one error line naming ``named``, and prints no status
    that could pass for a healthy one."""
    for invocation in INVOCATIONS:
        code, out, err = status(capsys, "-p", str(store), *extra, *invocation)
        assert code == expected, (invocation, code, out, err)
        lines = err.strip().splitlines()
        assert lines, (invocation, out)
        assert lines[0].startswith("kafka-backup: error: "), (invocation, err)
        assert len(lines) <= 2, err  # the error, and at most its next step
        for words in named:
            assert words in lines[0], (invocation, words, lines[0])
        if "--json" in invocation:
            payload = json.loads(out)  # one JSON object: the error, no status beside it
            assert set(payload) == {"error"}, payload
            assert payload["error"]["exit_code"] == expected
        else:
            assert out == "", out


@pytest.mark.parametrize(
    ("case", "named"),
    [
        ("bad-json", ("nightly/manifests/00000000.json", "is not valid JSON")),
        ("unknown-version", ("nightly/manifests/00000000.json", "format version 99")),
    ],
)
@pytest.mark.parametrize("which", [[], ["--backup-id", "nightly"]])
def test_an_unreadable_manifest_exits_8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str, named: tuple[str, ...], which: list[str]
) -> None:
    sound = tmp_path / "sound"
    shutil.copytree(FIXTURES / "sound", sound)
    code, out, err = status(capsys, "-p", str(sound), *which, "--max-age", "1000d")
    assert (code, "backup nightly in") == (0, out[: len("backup nightly in")]), err  # the control
    store = tmp_path / case
    shutil.copytree(FIXTURES / case, store)
    assert_refused(capsys, store, which, BackupIntegrityError.exit_code, *named)


@pytest.mark.parametrize("missing", [0, 1])
def test_a_manifest_missing_from_the_chain_exits_8(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], missing: int
) -> None:
    """Three increments, then the first or a middle one's manifest deleted: what is left still reads
    as a backup (the newest manifest is there), but the chain is broken."""
    store = tmp_path / "store"
    storage = LocalStorage(store)
    build(storage, "nightly", 3, tmp_path)
    code, out, err = status(capsys, "-p", str(store), "--json")
    assert code == 0, err  # the control: the chain whole
    assert json.loads(out)["backups"][0]["last_increment"] == 2
    storage.local_path(manifest_key("nightly", missing)).unlink()
    assert BackupCatalog(storage).backup_ids() == ["nightly"]  # still listed as a backup
    assert_refused(
        capsys,
        store,
        [],
        BackupIntegrityError.exit_code,
        "nightly",
        f"manifest of increment {missing} is missing",
    )
    assert_refused(
        capsys, store, ["--backup-id", "nightly"], BackupIntegrityError.exit_code, f"increment {missing}"
    )


def test_one_damaged_backup_among_sound_ones_never_passes_as_healthy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every backup of the store is checked: the damaged one sorts after the sound ones. Since issue
    34 the sound ones are still shown (an unreadable backup must not hide their alerts:
    tests/unit/test_status_unreadable.py), but the exit code is still the damaged backup's."""
    store = tmp_path / "store"
    storage = LocalStorage(store)
    build(storage, "a-first", 1, tmp_path)
    build(storage, "b-second", 2, tmp_path)
    shutil.copytree(FIXTURES / "bad-json" / "nightly", store / "z-broken")
    assert BackupCatalog(storage).backup_ids() == ["a-first", "b-second", "z-broken"]
    for invocation in INVOCATIONS:
        code, out, err = status(capsys, "-p", str(store), *invocation)
        assert code == BackupIntegrityError.exit_code, (invocation, code, out, err)
        first = err.strip().splitlines()[0]
        assert first.startswith("kafka-backup: unreadable: backup z-broken: "), (invocation, err)
        assert "z-broken/manifests/00000000.json is not valid JSON" in first, (invocation, err)
        if "--json" in invocation:
            payload = json.loads(out)
            assert payload["ok"] is False
            assert [b["backup_id"] for b in payload["unreadable"]] == ["z-broken"]
    # Named on its own, a sound backup of the same store is still shown.
    code, out, err = status(capsys, "-p", str(store), "--backup-id", "a-first", "--json")
    assert code == 0, err
    assert [b["backup_id"] for b in json.loads(out)["backups"]] == ["a-first"]


class _Killed(Exception):
    pass


def test_a_store_with_no_backup_exits_9(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An empty folder, and one that does not exist.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_refused(capsys, empty, [], NotFoundError.exit_code, f"no backup in {empty}")
    assert_refused(capsys, tmp_path / "absent", [], NotFoundError.exit_code, "there is no folder")
    assert not (tmp_path / "absent").exists()  # status created nothing

    # Objects, but no backup: a stray file, and the segments of a run that died before its first
    # manifest.
    litter = tmp_path / "litter"
    (litter / "nightly" / "data" / "orders" / "0").mkdir(parents=True)
    (litter / "nightly" / "data" / "orders" / "0" / "00000000000000000000-x.parquet").write_bytes(b"PAR1")
    (litter / "README").write_text("backups go here\n")
    assert_refused(capsys, litter, [], NotFoundError.exit_code, f"no backup in {litter}")

    # A backup whose removal a prune committed and was stopped before it deleted anything: its
    # objects are all there, but it is gone.
    removed = tmp_path / "removed"
    storage = LocalStorage(removed)
    build(storage, "nightly", 2, tmp_path)
    objects = sorted(info.key for info in storage.list(""))
    plan = plan_prune(storage, RetentionSettings(keep_last=0, force=True))
    steps = 0

    def stop(name: str) -> None:
        nonlocal steps
        steps += 1
        if name == "prune:step" and steps == 2:  # the generation committed, no delete sent yet
            raise _Killed

    monkeypatch.setattr(prune_execute, "crash_point", stop)
    with pytest.raises(_Killed):
        execute_prune(storage, plan)
    assert set(objects) < {info.key for info in storage.list("")}  # nothing deleted, a generation added
    assert_refused(capsys, removed, [], NotFoundError.exit_code, f"no backup in {removed}")

    # A backup id that is not there, in a store that has another.
    sound = tmp_path / "sound"
    shutil.copytree(FIXTURES / "sound", sound)
    assert_refused(capsys, sound, ["--backup-id", "nope"], NotFoundError.exit_code, "no backup 'nope'")
