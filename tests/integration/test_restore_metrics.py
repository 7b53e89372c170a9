"""Metrics of real restores, read from the textfile node-exporter would read (docs/observability.md).

A ``restore`` with ``--metrics-textfile`` counts the records it produced per target topic, which
equal the records restored; a ``three-phase-restore`` ends at the phase ``done`` with its recovery
time, bracketed by the test's own clock; a ``drill`` (without Spark) passes through its phases
under the backup id it names, and says that no record would be skipped. Each textfile is parsed
with prometheus-client's own parser.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime, tzinfo
from pathlib import Path

import pytest

from kbackup.app import drill as drill_module
from kbackup.app import three_phase as three_phase_module
from kbackup.cli.main import run
from kbackup.restore import service as restore_service
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port
from tests.support.backup_io import take_backup
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, commit_group, create_topic, produce
from tests.support.metrics_text import parse, series, total
from tests.support.restored_topics import restored_records
from tests.support.three_phase_runs import fill_and_back_up


@pytest.mark.parametrize("workers", ["1", "2"], ids=["one-process", "two-workers"])
def test_a_restore_writes_what_it_produced_to_its_textfile(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    workers: str,
) -> None:
    """On two workers too: their batches and transactions are counted in the parent's one registry."""
    topic, restored = unique_name, f"{unique_name}-restored"
    create_topic(source_cluster, topic, partitions=2)
    produce(
        source_cluster, topic, [Record(key=b"k%d" % i, value=b"v" * 40, partition=i % 2) for i in range(250)]
    )
    store = tmp_path / "store"
    summary = take_backup(source_cluster, store, "nightly", [topic])
    config = tmp_path / "restore.yaml"
    # Small transactions: several of them, each counted.
    config_file(config, restore={"transaction_max_records": 64})
    textfile = tmp_path / "node" / "kafka-backup-restore-nightly.prom"
    textfile.parent.mkdir()
    args = ["restore", "-c", str(config), "-b", target_cluster.bootstrap_servers, "--path", str(store)]
    args += ["--backup-id", "nightly", "--topic-mapping", f"{topic}={restored}", "--workers", workers]
    assert run([*args, "--metrics-textfile", str(textfile), "--json"]) == 0, capsys.readouterr().err
    restore = json.loads(capsys.readouterr().out)
    on_target = sum(
        len(restored_records(target_cluster, restored, partition, summary.source_cluster_id))
        for partition in (0, 1)
    )
    assert restore["records"] == on_target == 250

    found = parse(textfile.read_text())
    assert series(found, "kafka_backup_restore_records_total") == {
        (("backup_id", "nightly"), ("topic", restored)): 250
    }
    assert total(found, "kafka_backup_restore_bytes_total", topic=restored) == restore["bytes"] > 0
    assert total(found, "kafka_backup_restore_landed_records", topic=restored) == 250
    assert total(found, "kafka_backup_restore_planned_records", topic=restored) == 250
    assert restore["mode"] == "exactly-once"
    assert total(found, "kafka_backup_restore_transactions_total") == restore["transactions"] > 1
    assert series(found, "kafka_backup_restore_phase") == {
        (("backup_id", "nightly"), ("phase", "restore")): 0,
        (("backup_id", "nightly"), ("phase", "done")): 1,
    }
    assert total(found, "kafka_backup_restore_info", command="restore") == 1
    assert total(found, "kafka_backup_target_reachable") == 1
    assert total(found, "kafka_backup_storage_reachable") == 1
    assert total(found, "kafka_backup_target_errors_total") == 0
    # Atomic: written beside and renamed, nothing else is left in node-exporter's folder.
    assert [path.name for path in textfile.parent.iterdir()] == [textfile.name]

    # Run again: nothing is left to produce, and the restore's records all landed by earlier runs.
    again = tmp_path / "again.prom"
    assert run([*args, "--metrics-textfile", str(again)]) == 0, capsys.readouterr().err
    found = parse(again.read_text())
    assert total(found, "kafka_backup_restore_records_total") == 0
    assert total(found, "kafka_backup_restore_landed_records", topic=restored) == 250
    assert total(found, "kafka_backup_restore_planned_records", topic=restored) == 250


def test_a_three_phase_restore_ends_at_done_with_its_recovery_time(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, restored = unique_name, f"{unique_name}-restored"
    store = tmp_path / "store"
    fill_and_back_up(source_cluster, topic, store)
    work = tmp_path / "work"
    config = config_file(
        tmp_path / "recover.yaml",
        backup_id="nightly",
        storage={"url": str(store)},
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        restore={"topic_mapping": {topic: restored}},
        offset_reset={"snapshot_dir": str(work / "snapshots")},
        # No Spark: the groups move by the header search, and nothing is repartitioned.
        three_phase={
            "state_dir": str(work / "state"),
            "build_mapping": "when-needed",
            "group_prefix": "moved-",
        },
        metrics={"textfile": "three-phase.prom"},
    )
    # The test's own clock, read as the run passes its steps (the steps run unchanged).
    seen = spy_times(monkeypatch, three_phase_module, "three_phase_restore", before="called")
    spy_times(monkeypatch, restore_service, "run", before="restoring", seen=seen)
    spy_times(monkeypatch, three_phase_module, "execute_plan", after="committed", seen=seen)
    spy_times(monkeypatch, three_phase_module, "check_positions", before="verifying", seen=seen)
    assert run(["three-phase-restore", "-c", str(config), "--json"]) == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)

    # A relative textfile in the config file is relative to the file's folder.
    found = parse((tmp_path / "three-phase.prom").read_text())
    phases = {
        dict(labels)["phase"]: value for labels, value in series(found, "kafka_backup_restore_phase").items()
    }
    assert phases == {
        **dict.fromkeys(("metadata", "restore", "mapping", "reset", "verify", "audit"), 0),
        "done": 1,
    }
    [recovery] = series(found, "kafka_backup_recovery_seconds").values()
    # From the start of the run until every group was committed, on the test's clock: the run
    # started after three_phase_restore was called and before its restore began; the groups were
    # committed once execute_plan returned, and before the verify phase began. A recovery time of
    # 0, below 0, or the run's total time (the verify phase comes after the commit) is outside.
    assert seen["committed"] - seen["restoring"] <= recovery <= seen["verifying"] - seen["called"]
    assert recovery == pytest.approx(summary["recovery_seconds"], abs=0.01)
    assert total(found, "kafka_backup_restore_records_total", topic=restored) == 300
    assert total(found, "kafka_backup_restore_landed_records", topic=restored) == 300
    durations = {
        dict(labels)["phase"]: value
        for labels, value in series(found, "kafka_backup_restore_phase_duration_seconds").items()
    }
    assert set(durations) == {"restore", "mapping", "reset", "verify"}
    assert durations["restore"] > 0
    # No audit in this order: no verdict is claimed.
    assert not series(found, "kafka_backup_audit_disagreements")
    assert total(found, "kafka_backup_restore_info", command="three-phase-restore") == 1

    # Run again: every phase was done, the groups were committed by the earlier run: no recovery time.
    assert run(["three-phase-restore", "-c", str(config), "--json"]) == 0, capsys.readouterr().err
    capsys.readouterr()
    found = parse((tmp_path / "three-phase.prom").read_text())
    assert total(found, "kafka_backup_restore_phase", phase="done") == 1
    assert not series(found, "kafka_backup_recovery_seconds")
    assert total(found, "kafka_backup_restore_records_total") == 0


def spy_times(
    monkeypatch: pytest.MonkeyPatch,
    owner: object,
    name: str,
    *,
    before: str | None = None,
    after: str | None = None,
    seen: dict[str, float] | None = None,
) -> dict[str, float]:
    """Wrap ``owner.name`` so that ``seen[before]`` and ``seen[after]`` get the test's monotonic
    clock just before it is called and just after it returns; ``seen``."""
    seen = {} if seen is None else seen
    original = getattr(owner, name)

    def spied(*args: object, **kwargs: object) -> object:
        if before is not None:
            seen[before] = time.monotonic()
        result = original(*args, **kwargs)
        if after is not None:
            seen[after] = time.monotonic()
        return result

    monkeypatch.setattr(owner, name, spied)
    return seen


class TickingClock(datetime):
    """``now()`` one second later at each call."""

    calls = 0

    @classmethod
    def now(cls, tz: tzinfo | None = None) -> TickingClock:
        cls.calls += 1
        return cls(2026, 1, 1, 0, 0, cls.calls % 60, tzinfo=tz)


def test_a_drill_writes_its_phases_and_its_verdict_under_the_backup_it_took(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each name the drill would make is another second: a run that named its backup twice would
    # export metrics under a name other than its backup's.
    monkeypatch.setattr(drill_module, "datetime", TickingClock)
    topic, group = f"{unique_name}-orders", f"{unique_name}-app"
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v%d" % i, partition=i % 2) for i in range(60)])
    commit_group(source_cluster, group, {(topic, 0): 12, (topic, 1): 30})
    config = config_file(
        tmp_path / "drill.yaml",
        # No backup_id: the drill names its backup after the time, and its metrics carry that name.
        source={"bootstrap_servers": [source_cluster.bootstrap_servers], "topics": {"include": [topic]}},
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage={"url": str(tmp_path / "store")},
        three_phase={"build_mapping": "when-needed"},  # no Spark
        offset_reset={"groups": [group]},
        drill={"topic_prefix": f"drill-{unique_name}.", "group_prefix": f"drill-{unique_name}."},
    )
    report, textfile = tmp_path / "report.json", tmp_path / "drill.prom"
    code = run(["drill", "-c", str(config), "--report", str(report), "--metrics-textfile", str(textfile)])
    assert code == 0, capsys.readouterr().err
    document = json.loads(report.read_text())
    assert document["passed"] is True

    found = parse(textfile.read_text())
    assert {dict(labels)["backup_id"] for labels in series(found, "kafka_backup_restore_phase")} == {
        document["backup_id"]
    }
    phases = {
        dict(labels)["phase"]: value for labels, value in series(found, "kafka_backup_restore_phase").items()
    }
    assert phases["done"] == 1
    assert sum(phases.values()) == 1
    durations = {
        dict(labels)["phase"] for labels in series(found, "kafka_backup_restore_phase_duration_seconds")
    }
    assert {"backup", "restore", "reset", "verify", "proof"} <= durations
    assert total(found, "kafka_backup_drill_skipped_records") == 0
    assert series(found, "kafka_backup_drill_skipped_records")
    assert total(found, "kafka_backup_restore_records_total", topic=f"drill-{unique_name}.{topic}") == 60
    assert total(found, "kafka_backup_recovery_seconds") > 0
    assert total(found, "kafka_backup_restore_info", command="drill") == 1


def test_a_live_restore_answers_metrics_and_probes_over_http(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """A ``restore --metrics-port`` in its own process, scraped over HTTP while it runs: its planned
    records are the backup's, its produced records only grow and never exceed them, it is seen in
    its restore phase, and /healthz and /readyz answer 200."""
    topic, restored = unique_name, f"{unique_name}-restored"
    create_topic(source_cluster, topic, partitions=2)
    produce(
        source_cluster,
        topic,
        [Record(key=b"k%d" % i, value=b"v" * 400, partition=i % 2) for i in range(3000)],
    )
    store = tmp_path / "store"
    take_backup(source_cluster, store, "nightly", [topic])
    config = tmp_path / "restore.yaml"
    # Many small transactions: the restore runs long enough to be scraped more than once.
    config_file(config, restore={"transaction_max_records": 20})
    port = free_port()
    command = [sys.executable, "-m", "kbackup", "restore", "-c", str(config)]
    command += ["-b", target_cluster.bootstrap_servers, "--path", str(store), "--backup-id", "nightly"]
    command += ["--topic-mapping", f"{topic}={restored}", "--metrics-port", str(port)]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
    )
    scraped: list[dict[str, float]] = []
    probes: dict[str, int] = {}
    while process.poll() is None:
        try:
            found = parse(http_get(port, "/metrics").decode())
            for path in ("/healthz", "/readyz"):
                probes[path] = http_status(port, path)
        except OSError:
            time.sleep(0.02)  # not listening yet, or gone
            continue
        scraped.append(
            {
                "planned": total(found, "kafka_backup_restore_planned_records", topic=restored),
                "produced": total(found, "kafka_backup_restore_records_total", topic=restored),
                "restoring": total(found, "kafka_backup_restore_phase", phase="restore"),
            }
        )
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()[-3000:]
    assert len(scraped) >= 2, scraped
    assert probes == {"/healthz": 200, "/readyz": 200}
    planned = [sample for sample in scraped if sample["planned"]]
    assert planned
    assert {sample["planned"] for sample in planned} == {3000}
    produced = [sample["produced"] for sample in scraped]
    assert produced == sorted(produced)
    assert produced[-1] <= 3000
    # Scraped while it was restoring, not only before or after.
    assert any(sample["restoring"] == 1 for sample in scraped), scraped


def http_get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
        body: bytes = answer.read()
        return body


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
