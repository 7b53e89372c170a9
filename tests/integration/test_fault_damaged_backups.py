"""Damaged backups kept as fixtures (tests/fixtures/damaged_backups, written by its make.py).

For each damage ``validate --deep`` names the problem and the object, and
``restore`` refuses with exit 8 before it creates a topic or produces a
record. The ``sound`` copy of the same backup is the control: it validates
and restores, so the checks below can tell a refusal from a no-op.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import BackupIntegrityError
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.damaged_backups import DAMAGE, copy_of, restore_args
from tests.support.kafka_io import consume_all, target_topics
from tests.support.restore_checks import progress_end


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_damaged_backup_is_named_by_validate_and_refused_by_restore(
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    problem, damaged_object = DAMAGE[case]
    store = copy_of(case, tmp_path)

    assert run(["validate", "-p", str(store), "--backup-id", "nightly", "--deep"]) == 8
    err = capsys.readouterr().err
    assert problem in err, err
    assert damaged_object in err, err
    assert [line.startswith("damaged: ") for line in err.splitlines()].count(True) == 1, err

    before = progress_end(target_cluster)
    assert run(restore_args(store, target_cluster, unique_name)) == BackupIntegrityError.exit_code
    err = capsys.readouterr().err
    assert problem in err, err
    assert damaged_object in err, err
    assert unique_name not in target_topics(target_cluster)
    assert progress_end(target_cluster) == before


def test_the_sound_fixture_validates_and_restores(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = copy_of("sound", tmp_path)
    assert run(["validate", "-p", str(store), "--backup-id", "nightly", "--deep"]) == 0
    assert "OK (1 increment(s), 30 records, 3 segment(s) re-read" in capsys.readouterr().out
    assert run(restore_args(store, target_cluster, unique_name)) == 0
    restored = consume_all(target_cluster, unique_name)
    assert [r.value for r in restored] == [b"order-%d" % o for o in range(30)]
