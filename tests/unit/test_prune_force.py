"""``prune --force`` with a policy that removes everything: refused without ``--force`` (exit 10,
nothing removed), and with it removing exactly what the plan says (docs/prune.md; issue 33).

What went is judged from the folder itself, listed before and after by the test: the objects gone
must be exactly those the test knows the policy covers and the plan counts (and names: the same plan
built in-process), and nothing else of the store may change by a byte.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kbackup.core.errors import PreconditionError
from kbackup.format.catalog import BackupCatalog
from kbackup.format.segments import SegmentLimits
from kbackup.prune.plan import BackupPlan, plan_prune
from kbackup.prune.settings import RetentionSettings
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage
from tests.support.cli_run import RunCli

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "damaged_backups"
#: 2023-11-14: every record is far older than any --older-than below.
BASE_TIME = 1_700_000_000_000


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` and its bytes, read from the folder (not through kafka-backup)."""
    return {
        str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()
    }


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Backups ``a`` and ``b`` (two increments, two partitions, segments of five records), a damaged
    backup ``z-broken`` (a prune over every backup skips it), and a file that is no backup."""
    root = tmp_path / "store"
    storage = LocalStorage(root)
    for backup_id in ("a", "b"):
        for increment in range(2):
            builder = BackupBuilder(
                storage, backup_id, scratch_dir=tmp_path, limits=SegmentLimits(max_records=5)
            )
            builder.topic("orders", 2)
            for partition in range(2):
                builder.partition(
                    "orders",
                    partition,
                    [
                        BackupRecord(
                            offset=increment * 10 + o, value=b"v", timestamp=BASE_TIME + increment * 10 + o
                        )
                        for o in range(10)
                    ],
                )
            builder.commit()
    shutil.copytree(FIXTURES / "bad-json" / "nightly", root / "z-broken")
    (root / "README").write_text("kafka backups of prod\n")
    return root


def named_keys(item: BackupPlan) -> set[str]:
    return {
        *item.segments,
        *item.manifests,
        *item.generations,
        *item.orphans,
        *item.leases,
        *item.objects,
        *item.retention_objects,
    }


def under(keys: dict[str, bytes] | set[str], prefix: str) -> set[str]:
    return {key for key in keys if key.startswith(prefix)}


def test_removing_every_backup_needs_force_and_then_removes_exactly_what_the_plan_says(
    store: Path, cli: RunCli
) -> None:
    before = files(store)
    expected_gone = under(before, "a/") | under(before, "b/")
    assert len(under(before, "a/")) == 10  # 8 segments and 2 manifests, as built

    # Without --force: refused, planning or executing, and nothing is removed.
    for execute in ([], ["--execute"]):
        code, _out, err = cli("prune", "-p", str(store), "--all", "--keep-last", "0", *execute)
        assert code == PreconditionError.exit_code, err
        assert "would remove every backup" in err.splitlines()[0], err
        assert files(store) == before

    # The plan (with --force, without --execute) says what goes, and removes nothing.
    code, out, err = cli("prune", "-p", str(store), "--all", "--keep-last", "0", "--force", "--json")
    assert code == 0, err
    assert files(store) == before
    plan = json.loads(out)
    assert plan["executed"] is None
    actions = {item["backup_id"]: (item["action"], item["objects_removed"]) for item in plan["backups"]}
    assert actions == {
        "a": ("remove", len(under(before, "a/"))),
        "b": ("remove", len(under(before, "b/"))),
        "z-broken": ("skip", 0),
    }
    assert plan["objects_removed"] == len(expected_gone)
    # The same plan built in-process names each object: exactly those the test expects to go.
    named = plan_prune(LocalStorage(store), RetentionSettings(keep_last=0, force=True))
    assert {item.backup_id: item.deletes for item in named.backups} == {
        backup_id: count for backup_id, (_action, count) in actions.items()
    }
    named_before = set().union(*(named_keys(item) for item in named.backups)) & set(before)
    assert named_before == expected_gone

    code, out, err = cli(
        "prune", "-p", str(store), "--all", "--keep-last", "0", "--force", "--execute", "--json"
    )
    assert code == 0, err
    after = files(store)
    assert set(before) - set(after) == expected_gone  # every object named is gone, no other
    assert {key: after[key] for key in after} == {key: before[key] for key in after}  # the rest unchanged
    assert set(after) == {*under(before, "z-broken/"), "README"}  # nothing left behind either
    assert BackupCatalog(LocalStorage(store)).backup_ids() == ["z-broken"]
    # Gone from every listing, as on an object store: the folders the removal emptied do not make
    # a later prune plan the removed backups again (as damaged ones).
    assert BackupCatalog(LocalStorage(store)).stored_ids() == ["z-broken"]
    later = plan_prune(LocalStorage(store), RetentionSettings(keep_last=0, force=True))
    assert [item.backup_id for item in later.backups] == ["z-broken"]
    assert json.loads(out)["executed"]["objects_removed"] == len(expected_gone)

    # A policy that removes nothing is not refused: nothing is left that it could remove (the
    # damaged backup is skipped, not removed).
    for policy in (["--keep-last", "3"], ["--keep-last", "0"]):
        code, out, err = cli("prune", "-p", str(store), "--all", *policy, "--execute", "--json")
        assert code == 0, err
        assert json.loads(out)["executed"]["objects_removed"] == 0
        assert files(store) == after


def test_removing_every_segment_of_a_backup_needs_force_and_then_removes_exactly_what_the_plan_says(
    store: Path, cli: RunCli
) -> None:
    before = files(store)
    segments = under(before, "a/data/")
    assert len(segments) == 8
    args = ["prune", "-p", str(store), "--backup-id", "a", "--older-than", "1d"]

    code, _out, err = cli(*args, "--execute")
    assert code == PreconditionError.exit_code, err
    assert "would remove every segment of backup a (8)" in err.splitlines()[0], err
    assert files(store) == before

    code, out, err = cli(*args, "--force", "--json")
    assert code == 0, err
    assert files(store) == before
    (item,) = json.loads(out)["backups"]
    assert (item["action"], item["segments_removed"], item["manifests_removed"]) == ("trim", 8, 1)
    assert (item["increments_before"], item["increments_after"]) == (2, 1)
    # Every segment goes, and the manifest of increment 0 (increment 1's stays: it ends the chain).
    expected_gone = segments | {"a/manifests/00000000.json"}
    named = plan_prune(LocalStorage(store), RetentionSettings(older_than="1d", force=True), ["a"])
    (named_item,) = named.backups
    assert (len(named_item.segments), len(named_item.manifests)) == (8, 1)
    assert named_keys(named_item) == expected_gone

    code, out, err = cli(*args, "--force", "--execute", "--json")
    assert code == 0, err
    after = files(store)
    assert set(before) - set(after) == expected_gone
    assert set(after) - set(before) == {"a/retention/00000001.json"}  # the new window, and nothing else
    assert {key: after[key] for key in before if key in after} == {
        key: before[key] for key in before if key in after
    }
    # What is left of a reads back as an empty window at the old end of each partition.
    backup = BackupCatalog(LocalStorage(store)).load("a")
    assert [m.increment for m in backup.manifests] == [1]
    assert {key: (c.start_offset, c.end_offset, len(c.segments)) for key, c in backup.coverage().items()} == {
        ("orders", 0): (20, 20, 0),
        ("orders", 1): (20, 20, 0),
    }
