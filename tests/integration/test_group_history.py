"""Issue 41, the group history: ``backup --follow`` with ``backup.group_snapshot_interval`` reads the
groups between its increments, and ``describe --groups-history`` gives where a group was over time.

Real Kafka: two groups commit at different speeds while a follow run backs up; the test keeps its
own record of every commit (when it was sent, when it was acknowledged, what it set), the oracle
each position of the history is judged by: a reading taken at T shows, for each group, a value
the group had committed by the end of the reading and none it had replaced before T.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.cli_process import start_cli, wait_for
from tests.support.config_files import write_backup_config
from tests.support.kafka_io import Record, commit_group, create_topic, produce

#: How long a reading may take after its ``taken_at`` (a listing and one offsets request per group).
READING_SLACK_SECS = 3.0


@dataclass(frozen=True)
class Commit:
    sent: float
    acknowledged: float
    offsets: dict[tuple[str, int], int]


def commit_steadily(
    cluster: LocalKafkaCluster, topic: str, group: str, every: float, step: int, stop: threading.Event
) -> list[Commit]:
    """Commit ``group`` forward by ``step`` on both partitions every ``every`` seconds until ``stop``."""
    commits: list[Commit] = []
    offset = 0
    while not stop.wait(every):
        offset += step
        wanted = {(topic, 0): offset, (topic, 1): offset}
        sent = time.time()
        commit_group(cluster, group, wanted)
        commits.append(Commit(sent, time.time(), wanted))
    return commits


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def test_a_follow_run_keeps_each_groups_positions_between_increments(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique_name
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v", partition=i % 2) for i in range(600)])
    store = tmp_path / "store"
    config = write_backup_config(
        tmp_path / "follow.yaml",
        source_cluster,
        topic,
        store,
        checkpoint_interval_secs=4,
        group_snapshot_interval="0.5s",
    )
    process = start_cli("backup", "-c", str(config), "--follow", "--json")
    stop = threading.Event()
    commits: dict[str, list[Commit]] = {}
    threads = [
        threading.Thread(
            target=lambda g=group, e=every, s=step: commits.__setitem__(
                g, commit_steadily(source_cluster, topic, f"{topic}-{g}", e, s, stop)
            )
        )
        for group, every, step in (("fast", 0.3, 5), ("slow", 1.5, 2))
    ]
    try:
        wait_for(lambda: (store / "follow" / "manifests").is_dir(), "the first increment", process=process)
        for thread in threads:
            thread.start()
        time.sleep(10)
        stop.set()
        for thread in threads:
            thread.join(30)
        time.sleep(5)  # a checkpoint after the last commits: their positions are stored
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        stop.set()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert len(commits["fast"]) >= 20
    assert len(commits["slow"]) >= 4

    manifests = BackupCatalog(open_storage(str(store))).load("follow").manifests
    with_history = [m for m in manifests if m.group_history is not None]
    assert len(with_history) >= 2, [m.group_history for m in manifests]
    assert all(m.group_history is None or m.group_history.interval_secs == 0.5 for m in manifests)

    for group, _every in (("fast", 0.3), ("slow", 1.5)):
        assert (
            run(
                [
                    "describe",
                    "-p",
                    str(store),
                    "--backup-id",
                    "follow",
                    "--groups-history",
                    f"{topic}-{group}",
                    "--json",
                ]
            )
            == 0
        )
        info = json.loads(capsys.readouterr().out)
        rows = info["positions"]
        assert info["interval_secs"] == 0.5
        history = [c for c in commits[group]]
        values = [c.offsets[(topic, 0)] for c in history]
        seen = [row["offsets"][0]["offset"] for row in rows]
        # Finer than the increments: the fast group's positions far outnumber them.
        if group == "fast":
            assert len(rows) >= 2 * len(manifests), (len(rows), len(manifests))
        assert seen == sorted(seen), seen  # the groups only ever moved forward
        assert seen[-1] == values[-1]  # the last commit is in the backup
        for row in rows:
            offsets = {(o["topic"], o["partition"]): o["offset"] for o in row["offsets"]}
            assert set(offsets) == {(topic, 0), (topic, 1)}, row
            assert len(set(offsets.values())) == 1, row  # both partitions were committed together
            value = offsets[(topic, 0)]
            assert value in values, (row, values)  # never a position the group did not commit
            index = values.index(value)
            first, last = seconds(row["first_seen"]), seconds(row["last_seen"])
            # Committed by the end of the reading that first saw it ...
            assert history[index].sent <= first + READING_SLACK_SECS, (row, history[index])
            # ... and not yet replaced when the last reading that saw it began.
            if index + 1 < len(history):
                assert history[index + 1].acknowledged > last, (row, history[index + 1])

    # The files are checked like the rest of the backup.
    assert run(["validate", "-p", str(store), "--backup-id", "follow", "--deep"]) == 0
    out = capsys.readouterr().out
    assert f"{len(with_history)} group-history file(s) read and checked" in out
