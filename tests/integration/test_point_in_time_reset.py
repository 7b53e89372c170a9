"""Issue 41, ``offset-reset --as-of``: a group put back where it was at a chosen moment, rewound in
place on the live source (``--in-place``) or translated onto a restored target.

Real Kafka: a group commits forward steadily while ``backup --follow`` reads the groups every half
second; the test keeps its own record of every commit (sent, acknowledged, offsets), the oracle:
the position for a moment T must be one the group had committed by T (never a later one) and at
least the one it had committed a reading interval and a reading's time before T.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from kbackup.cli.main import run
from kbackup.core.kafka import open_admin
from kbackup.core.times import iso_utc
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.backup_io import take_backup
from tests.support.cli_process import start_cli, wait_for
from tests.support.commit_record import INTERVAL_SECS, Commit, History, check_position_of
from tests.support.config_files import write_backup_config, write_three_phase_config
from tests.support.kafka_io import (
    Record,
    admin,
    commit_group,
    consume_all,
    create_topic,
    group_positions,
    produce,
)

PARTITIONS = [0, 1]


@pytest.fixture(scope="module")
def history(source_cluster: LocalKafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> History:
    """A follow backup of a topic while records keep coming (5 a partition before each commit) and
    group ``<topic>-app`` commits 5 offsets further every 0.3 s."""
    work = tmp_path_factory.mktemp("point-in-time")
    topic = f"pit-{int(time.time() * 1000)}"
    group = f"{topic}-app"
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v", partition=i % 2) for i in range(100)])
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
        for step in range(1, 31):
            batch = [Record(key=b"k", value=b"s%d" % step, partition=i % 2) for i in range(10)]
            produce(source_cluster, topic, batch)
            sent = time.time()
            commit_group(source_cluster, group, {(topic, p): 5 * step for p in PARTITIONS})
            commits.append(Commit(sent, time.time(), 5 * step))
            time.sleep(0.3)
        time.sleep(4)  # a checkpoint after the last commit
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    return History(store, topic, group, commits)


def moment(history: History, index: int) -> float:
    """A moment between commit ``index`` and the next (a little after the first was acknowledged)."""
    return history.commits[index].acknowledged + 0.1


def plan(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = run(["offset-reset", "plan", *args])
    captured = capsys.readouterr()
    if code != 0:
        return code, captured.err
    return code, json.loads(captured.out) if "--json" in args else captured.out


def test_a_group_rewound_in_place_to_a_moment_is_where_it_was_then(
    history: History, source_cluster: LocalKafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = moment(history, 12)
    common = ["-b", source_cluster.bootstrap_servers, "-p", str(history.store), "--backup-id", "follow"]
    common += ["-g", history.group, "--as-of", iso_utc(at)]
    plan_file = tmp_path / "rewind.json"
    code, planned = plan([*common, "--in-place", "--json", "--output", str(plan_file)], capsys)
    assert code == 0, planned
    assert isinstance(planned, dict)
    assert planned["strategy"] == "rewind"
    assert planned["source"]["as_of"] == iso_utc(at)
    assert planned["source"]["precision_secs"] == INTERVAL_SECS
    [group] = planned["groups"]
    rows = {row["target_partition"]: row for row in group["partitions"]}
    assert sorted(rows) == PARTITIONS
    then = {row["new_offset"] for row in rows.values()}
    assert len(then) == 1  # both partitions were committed together
    [offset] = then
    check_position_of(history, at, offset)
    last = history.commits[-1].offset
    for row in rows.values():
        assert (row["method"], row["target_topic"], row["target_committed"]) == (
            "rewind",
            history.topic,
            last,
        )
        assert row["rereads"] == last - offset  # what the rewind makes it process again
        assert row["retention_gap"] == 0

    # The text says where it was then, where it is now, and the precision.
    code, text = plan([*common, "--in-place"], capsys)
    assert code == 0
    assert isinstance(text, str)
    assert f"as of {iso_utc(at)}" in text
    assert f"groups read every {INTERVAL_SECS:g}s: one may have committed since" in text
    assert f"rewound in place on cluster {open_admin(source_cluster.connection()).cluster_id()}" in text

    # Execute refuses to move the group back unless told, and then moves it exactly there.
    execute = ["offset-reset", "execute", "--plan", str(plan_file), "-b", source_cluster.bootstrap_servers]
    execute += ["--snapshot-dir", str(tmp_path / "snapshots")]
    assert run(execute) == 10
    assert "would move backwards" in capsys.readouterr().err
    assert group_positions(source_cluster, history.group, history.topic, PARTITIONS) == {0: last, 1: last}
    assert run([*execute, "--allow-rewind"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert group_positions(source_cluster, history.group, history.topic, PARTITIONS) == {0: offset, 1: offset}


def test_a_group_translated_as_of_a_moment_onto_a_restored_target(
    history: History,
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    restored = f"{history.topic}-restored"
    storage = ["-p", str(history.store), "--backup-id", "follow"]
    assert (
        run(
            [
                "restore",
                *storage,
                "-b",
                target_cluster.bootstrap_servers,
                "--topic-mapping",
                f"{history.topic}={restored}",
            ]
        )
        == 0
    )
    capsys.readouterr()
    for index in (3, 20):
        at = moment(history, index)
        config = tmp_path / f"reset-{index}.yaml"
        config.write_text(
            json.dumps(
                {
                    "backup_id": "follow",
                    "storage": {"url": str(history.store)},
                    "target": {"bootstrap_servers": [target_cluster.bootstrap_servers]},
                    "restore": {"topic_mapping": {history.topic: restored}},
                    "offset_reset": {"groups": [history.group], "as_of": iso_utc(at)},
                }
            )
        )
        code, planned = plan(["-c", str(config), "--json"], capsys)
        assert code == 0, planned
        assert isinstance(planned, dict)
        rows = planned["groups"][0]["partitions"]
        assert {row["method"] for row in rows} == {"binary-search"}
        [source_offset] = {row["source_committed"][str(row["target_partition"])] for row in rows}
        check_position_of(history, at, source_offset)
        # A fresh target topic restored from offset 0 without holes: the same offsets, exactly.
        assert {row["new_offset"] for row in rows} == {source_offset}
        assert {row["expected_origin"]["offset"] for row in rows} == {source_offset}


@pytest.mark.parametrize(
    ("as_of", "code", "says"),
    [
        ("2026-11-27T13:59:00", 3, "has no time zone: write it with Z (UTC) or an offset such as +01:00"),
        ("2000-01-01T00:00:00Z", 10, "is before backup follow's first reading of the groups"),
        ("2100-01-01T00:00:00+01:00", 10, "is after backup follow's last reading of the groups"),
    ],
    ids=["no-zone", "before-the-first", "after-the-last"],
)
def test_a_moment_the_history_cannot_answer_is_one_line(
    history: History,
    source_cluster: LocalKafkaCluster,
    capsys: pytest.CaptureFixture[str],
    as_of: str,
    code: int,
    says: str,
) -> None:
    args = ["-b", source_cluster.bootstrap_servers, "-p", str(history.store), "--backup-id", "follow"]
    before = group_positions(source_cluster, history.group, history.topic, PARTITIONS)
    got, err = plan([*args, "--as-of", as_of, "--in-place"], capsys)
    assert got == code, err
    assert isinstance(err, str)
    assert says in err.splitlines()[0], err
    assert group_positions(source_cluster, history.group, history.topic, PARTITIONS) == before


def test_a_rewind_onto_a_topic_re_created_since_or_another_cluster_is_refused(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The offsets of then name records of the topic the backup read, on the cluster it read."""
    topic, group = unique_name, f"{unique_name}-app"
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v", partition=i % 2) for i in range(40)])
    commit_group(source_cluster, group, {(topic, 0): 7, (topic, 1): 9})
    store = tmp_path / "store"
    take_backup(source_cluster, store, "nightly", [topic])
    snapshot = BackupCatalog(open_storage(str(store))).load("nightly").consumer_groups
    assert snapshot is not None
    assert snapshot.finished_at is not None
    at = snapshot.finished_at  # its one reading of the groups
    args = ["-p", str(store), "--backup-id", "nightly", "-g", group, "--as-of", at, "--in-place"]
    code, err = plan(["-b", target_cluster.bootstrap_servers, *args], capsys)
    assert code == 10
    assert "a rewind moves groups back on the cluster the backup was taken from" in err.splitlines()[0]
    code, planned = plan(["-b", source_cluster.bootstrap_servers, *args, "--json"], capsys)
    assert code == 0, planned
    assert {row["new_offset"] for row in planned["groups"][0]["partitions"]} == {7, 9}

    client = admin(source_cluster)  # kept alive until its answer came
    client.delete_topics([topic])[topic].result()
    wait_for(lambda: topic not in client.list_topics(timeout=10).topics, "the topic deleted")
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"w", partition=i % 2) for i in range(40)])
    code, err = plan(["-b", source_cluster.bootstrap_servers, *args], capsys)
    assert code == 10
    assert f"topic {topic} was deleted and re-created since the backup read it" in err.splitlines()[0]


def test_a_three_phase_restore_as_of_a_moment_holds_its_records_and_its_groups(
    history: History,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The records stamped at or before the moment, exactly, and the group at its position of then,
    translated: never beyond the records restored."""
    at = moment(history, 15)
    at_ms = int(at * 1000)
    config = write_three_phase_config(
        tmp_path / "restore.yaml", target_cluster, history.store, history.topic, "audit"
    )
    restored = f"{history.topic}-as-of"  # another test restored into <topic>-restored
    text = config.read_text().replace("backup_id: nightly", "backup_id: follow")
    config.write_text(text.replace(f"{history.topic}-restored", restored))
    code = run(["three-phase-restore", "-c", str(config), "--as-of", iso_utc(at)])
    assert code == 0, capsys.readouterr().err
    for partition in PARTITIONS:
        source = consume_all(source_cluster, history.topic, [partition])
        then = [r for r in source if r.timestamp is not None and r.timestamp <= at_ms]
        assert len(then) < len(source)  # the moment cuts the partition
        got = consume_all(target_cluster, restored, [partition])
        assert [(r.value, r.timestamp) for r in got] == [(r.value, r.timestamp) for r in then]
    moved = group_positions(target_cluster, f"moved-{history.group}", restored, PARTITIONS)
    origins = set()
    for partition, position in moved.items():
        assert position is not None
        # The source offset of the record the group resumes at (transaction markers shift the
        # target's offsets): where the group was then, and a record the restore holds.
        resumes_at = [
            r
            for r in consume_all(target_cluster, restored, [partition])
            if r.offset is not None and r.offset >= position
        ]
        assert resumes_at, (partition, position)
        origins.add(int(dict(resumes_at[0].headers)["x-kafka-backup-offset"] or b"-1"))
    assert len(origins) == 1, (moved, origins)
    [offset] = origins
    check_position_of(history, at, offset)


def test_a_restore_as_of_a_moment_after_the_backup_is_one_line(
    history: History, target_cluster: LocalKafkaCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    args = [
        "restore",
        "-p",
        str(history.store),
        "--backup-id",
        "follow",
        "-b",
        target_cluster.bootstrap_servers,
    ]
    args += ["--topic-mapping", f"{history.topic}={history.topic}-late"]
    assert run([*args, "--as-of", "2100-01-01T00:00:00Z"]) == 10
    first = capsys.readouterr().err.splitlines()[0]
    assert "restore as of 2100-01-01T00:00:00.000Z is after what backup follow holds" in first
    assert run([*args, "--as-of", "2100-01-01T00:00:00"]) == 3
    assert "has no time zone" in capsys.readouterr().err


# Last in the file: it deletes records of the source topic the other tests read.
def test_a_rewind_past_what_retention_kept_starts_at_the_log_start_and_says_so(
    history: History, source_cluster: LocalKafkaCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    at = moment(history, 12)
    common = ["-b", source_cluster.bootstrap_servers, "-p", str(history.store), "--backup-id", "follow"]
    common += ["-g", history.group, "--as-of", iso_utc(at), "--in-place", "--json"]
    code, planned = plan(common, capsys)
    assert code == 0, planned
    [offset] = {row["new_offset"] for row in planned["groups"][0]["partitions"]}
    open_admin(source_cluster.connection()).delete_records({(history.topic, 1): offset + 3})
    code, replanned = plan(common, capsys)
    assert code == 0, replanned
    rows = {row["target_partition"]: row for row in replanned["groups"][0]["partitions"]}
    assert (rows[0]["new_offset"], rows[0]["retention_gap"]) == (offset, 0)
    assert (rows[1]["new_offset"], rows[1]["retention_gap"]) == (offset + 3, 3)
    assert any("retention removed offsets" in note for note in rows[1]["notes"])
