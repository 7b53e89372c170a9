"""Issue 41, the drill's ``--as-of`` variant: the restore drilled as of a moment of a backup's group
history, on real clusters (``drill -c FILE --as-of TIME``) and on the local drill's own throwaway
clusters (``drill --local --as-of auto``).

Real Kafka: a group commits forward steadily while ``backup --follow`` reads the groups every half
second and new records keep coming; the test keeps its own record of every commit (sent,
acknowledged, offset), the oracle. The drill group's position on the target must be the reference
translation of a position the group had committed by the moment (never a later one), and at least
the one it had a reading interval and a reading's time before it; no record stamped after the
moment is restored.
"""

from __future__ import annotations

import json
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from kbackup.app.drill_history import readings_of
from kbackup.core.config import StorageSettings
from kbackup.core.times import iso_utc
from kbackup.format.catalog import BackupCatalog
from kbackup.format.group_history import positions_of
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.cli_process import start_cli, wait_for
from tests.support.cli_run import RunCli
from tests.support.commit_record import INTERVAL_SECS, Commit, History, check_position_of
from tests.support.config_files import config_file, write_backup_config
from tests.support.kafka_io import (
    Record,
    commit_group,
    consume_all,
    create_topic,
    group_position,
    produce,
    target_topics,
)
from tests.support.oracles import reference_position
from tests.support.restored_topics import restored_records

pytestmark = pytest.mark.integration

PARTITIONS = [0, 1]
STEPS = 24


@pytest.fixture(scope="module")
def history(source_cluster: LocalKafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> History:
    """A follow backup of a topic while 5 records a partition arrive before each commit of group
    ``<topic>-app``, 5 offsets further every 0.3 s and 20 records a partition behind the data.

    The lag matters: a position at the end of the records restored as of a moment translates
    to the same target offset as every later one, so the test could not tell which it was."""
    work = tmp_path_factory.mktemp("drill-as-of")
    topic = f"dao-{int(time.time() * 1000)}"
    group = f"{topic}-app"
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v", partition=i % 2) for i in range(40)])
    store = work / "store"
    config = write_backup_config(
        work / "follow.yaml",
        source_cluster,
        topic,
        store,
        checkpoint_interval_secs=3,
        group_snapshot_interval=f"{INTERVAL_SECS}s",
    )
    process = start_cli("backup", "-c", str(config), "--follow", "--json")
    commits: list[Commit] = []
    try:
        wait_for(lambda: (store / "follow" / "manifests").is_dir(), "the first increment", process=process)
        for step in range(1, STEPS + 1):
            produce(
                source_cluster,
                topic,
                [Record(key=b"k", value=b"s%d" % step, partition=i % 2) for i in range(10)],
            )
            sent = time.time()
            commit_group(source_cluster, group, {(topic, p): 5 * step for p in PARTITIONS})
            commits.append(Commit(sent, time.time(), 5 * step))
            time.sleep(0.3)  # the group's pace, not a wait for something
        last = {(topic, p): commits[-1].offset for p in PARTITIONS}
        wait_for(lambda: backed_up_positions(store, group) == last, "an increment with the last commit")
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    return History(store, topic, group, commits)


def backed_up_positions(store: Path, group: str) -> dict[tuple[str, int], int]:
    """The group's positions in the latest increment's snapshot of backup ``follow``."""
    snapshot = BackupCatalog(open_storage(StorageSettings(url=str(store)))).load("follow").consumer_groups
    return positions_of(snapshot).get(group, {}) if snapshot is not None else {}


def drill_config(path: Path, history: History, source: LocalKafkaCluster, target: LocalKafkaCluster) -> Path:
    prefix = f"drill-{path.stem}."
    return config_file(
        path,
        backup_id="follow",
        source={"bootstrap_servers": [source.bootstrap_servers], "topics": {"include": [history.topic]}},
        target={"bootstrap_servers": [target.bootstrap_servers]},
        storage={"url": str(history.store)},
        three_phase={"build_mapping": "when-needed"},
        drill={"topic_prefix": prefix, "group_prefix": prefix, "groups": [history.group]},
    )


def test_a_drill_as_of_a_moment_restores_the_records_and_the_group_of_then(
    history: History,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    at = history.commits[10].acknowledged + 0.1
    config = drill_config(tmp_path / "moment.yaml", history, source_cluster, target_cluster)
    report = tmp_path / "report.json"

    code, out, err = cli("drill", "-c", str(config), "--as-of", iso_utc(at), "--report", str(report))

    assert code == 0, out + err
    document = json.loads(report.read_text())
    assert document["passed"] is True
    as_of = document["as_of"]
    assert (as_of["as_of"], as_of["chosen"], as_of["precision_secs"]) == (iso_utc(at), "given", INTERVAL_SECS)
    assert as_of["groups_checked"] is None  # no record of the commits on real clusters but the test's
    assert "backup" not in document["phase_seconds"]  # it took no backup: it drilled the one it was given
    assert document["backup"]["taken_by_the_drill"] is False
    assert f"as of {iso_utc(at)} (given): records stamped at or before it" in out
    assert f"groups read every {INTERVAL_SECS:g}s" in out
    page = report.with_suffix(".html").read_text()
    assert f"as of {iso_utc(at)} (given)" in page

    # The drill's copy of the group sits where the group was then, translated onto the drill's copy
    # of the topic; no record stamped after the moment was restored.
    drill_topic, drill_group = f"drill-moment.{history.topic}", f"drill-moment.{history.group}"
    cut = int(at * 1000)  # the moment as --as-of names it, to the millisecond
    source_records = consume_all(source_cluster, history.topic, PARTITIONS)
    for p in PARTITIONS:
        records = restored_records(target_cluster, drill_topic, p, source_cluster.cluster_id)
        stamped = {r.offset or 0: r.timestamp or 0 for r in source_records if r.partition == p}
        assert sorted(r.source_offset for r in records) == sorted(
            o for o, t in stamped.items() if t <= cut
        ), p
        position = group_position(target_cluster, drill_group, drill_topic, p)
        then = [
            c.offset
            for c in history.commits
            if reference_position(records, {(history.topic, p): c.offset}) == position
        ]
        assert then, (p, position)
        check_position_of(history, at, then[-1])
    assert document["records_skipped"] == 0


def test_a_drill_as_of_auto_picks_a_moment_inside_the_history(
    history: History,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    config = drill_config(tmp_path / "auto.yaml", history, source_cluster, target_cluster)
    report = tmp_path / "report.json"
    code, out, err = cli("drill", "-c", str(config), "--as-of", "auto", "--report", str(report), "--json")
    assert code == 0, out + err
    as_of: dict[str, Any] = json.loads(out)["as_of"]
    assert as_of["chosen"].startswith("auto: halfway between the backup's first and last reading")
    moment = datetime.fromisoformat(as_of["as_of"].replace("Z", "+00:00")).timestamp()
    assert history.commits[0].sent - 10 < moment < history.commits[-1].acknowledged + 10


@pytest.mark.parametrize(
    ("as_of", "code", "says"),
    [
        ("2026-11-27T13:59:00", 3, "has no time zone: write it with Z (UTC) or an offset such as +01:00"),
        ("2000-01-01T00:00:00Z", 10, "is before backup follow's first reading of the groups"),
        ("2100-01-01T00:00:00+01:00", 10, "is after backup follow's last reading of the groups"),
    ],
    ids=["no-zone", "before-the-first", "after-the-last"],
)
def test_a_moment_the_history_cannot_answer_is_one_line_and_restores_nothing(
    history: History,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    cli: RunCli,
    as_of: str,
    code: int,
    says: str,
) -> None:
    config = drill_config(tmp_path / "refused.yaml", history, source_cluster, target_cluster)
    report = tmp_path / "report.json"
    got, out, err = cli("drill", "-c", str(config), "--as-of", as_of, "--report", str(report))
    assert got == code, out + err
    assert says in err.splitlines()[0], err
    assert not report.exists()
    assert f"drill-refused.{history.topic}" not in target_topics(target_cluster)


def test_the_local_drill_as_of_a_moment_checks_each_group_against_its_own_commits(
    cli: RunCli, tmp_path: Path, spark: Any
) -> None:
    """``drill --local --as-of auto``: the drill's follow backup reads the groups every second while
    three of them commit forward and new clicks records arrive; the groups of the moment must be
    ones they had committed by then (the drill's own record), and proven on the target."""
    # ``spark``: the suite's session, which the drill's audit mapping reuses instead of starting one.
    report = tmp_path / "drill.json"

    code, out, err = cli("drill", "--local", "--as-of", "auto", "--records", "30", "--report", str(report))

    assert code == 0, out + err
    document = json.loads(report.read_text())
    assert document["passed"] is True
    as_of = document["as_of"]
    assert as_of["chosen"].startswith("auto: halfway through the drill's own commits")
    assert as_of["precision_secs"] == 1.0
    checked = {group["group"]: group for group in as_of["groups_checked"]}
    assert set(checked) == {"analytics", "billing", "audit", "crm", "payouts", "ledger"}
    assert {group["verdict"] for group in checked.values()} == {"committed by then"}
    assert as_of["passed"] is True
    # The moment is inside the history: analytics had moved past the fill's end of clicks, and not
    # yet to the end the ten steps reached (30 + 10 * 4 records a partition).
    analytics = checked["analytics"]["offsets"]
    assert 30 < analytics["clicks/0"] < 70, analytics
    # The clicks written after the moment are in the backup and not restored.
    [clicks] = [topic for topic in document["topics"] if topic["topic"] == "clicks"]
    assert 60 < clicks["records_restored"] < 140, clicks
    assert document["phase_seconds"]["backup"] > 0
    assert f"as of {as_of['as_of']} (auto: halfway through the drill's own commits" in out
    assert "history: 6 of 6 group(s) at a position they had committed by then" in out
    assert "groups read every 1s" in out


def test_a_moment_after_the_records_the_backup_holds_is_refused_before_anything_is_restored(
    history: History,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    """The history may read the groups after the last increment read the source's end offsets: a
    moment between the two has its groups' positions but not all its records, so the drill refuses
    it (its own check up front, and the restore's plan behind it) in one line, restoring nothing."""
    storage = open_storage(StorageSettings(url=str(history.store)))
    backup = BackupCatalog(storage).load("follow")
    snapshot = backup.latest.consumer_groups
    assert snapshot is not None
    covered = datetime.fromisoformat(snapshot.finished_at or snapshot.taken_at)
    last_reading = max(datetime.fromisoformat(r.known_by) for r in readings_of(backup, storage))
    moment = covered + timedelta(milliseconds=1)
    assert moment <= last_reading + timedelta(seconds=INTERVAL_SECS), (covered, last_reading)
    config = drill_config(tmp_path / "late.yaml", history, source_cluster, target_cluster)
    got, out, err = cli("drill", "-c", str(config), "--as-of", iso_utc(moment))
    assert got == 10, out + err
    assert "is after what backup follow holds" in err.splitlines()[0], err
    assert f"drill-late.{history.topic}" not in target_topics(target_cluster)
