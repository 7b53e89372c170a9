"""Every metric examples/prometheus-alerts.yaml and examples/grafana-dashboard.json use has a sample
in the exposition of a real run, read with prometheus-client's own parser: a metric declared by its
HELP and TYPE lines alone would give Prometheus no series, and a rule on it would never fire.

The runs are those that produce each metric: a backup one of whose bootstrap servers is down and
whose S3 store resets connections for a while (source and storage errors, storage retries); a drill
(its restore, its phases, its recovery time, its verdict); and a three-phase restore whose audit
disagrees (tests/integration/test_three_phase.py's scenario), served with ``--metrics-port`` and
written with ``--metrics-textfile``, whose samples make the audit's alert rule fire.

The alert rule is evaluated by Prometheus' own promtool (``promtool test rules``,
tests/support/promtool.py; ``make promtool`` installs it) on the samples of the scrape and of the
textfile, and, as a control, on the same samples with the audit's gauge at 0.
"""

from __future__ import annotations

import contextlib
import io
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from kbackup.app.audit import AuditResult
from kbackup.cli.main import run
from kbackup.core.errors import AuditDisagreementError
from kbackup.core.kafka import open_admin
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port
from tests.conftest import TEST_BUCKET
from tests.support.config_files import config_file, write_three_phase_config
from tests.support.faulty_proxy import FaultyProxy
from tests.support.kafka_io import Record, commit_group, create_topic, group_position, produce
from tests.support.metrics_text import (
    alert_rules,
    example_metric_names,
    parse,
    sampled_names,
    series,
    total,
)
from tests.support.promtool import Alert, AlertCase, alert_test
from tests.support.three_phase_runs import GROUPS, fill_and_back_up, kill_before_the_audit

AUDIT_ALERT = "KafkaBackupRestoreAuditDisagrees"
#: The partition of the restored topic whose start the scenario moves past some moved groups.
CUT_PARTITION, CUT_OFFSET = 1, 120
#: Connections the S3 proxy resets at most while it waits for the run to count a failure (each
#: S3 request is tried once by botocore, with max_attempts 1, then again by the run after 0.5 s,
#: 1 s, 2 s ...).
GIVE_UP_AFTER_FAULTS = 6


@dataclass
class DisagreeingAudit:
    """The second run of a three-phase restore whose audit disagrees, and what it exported."""

    exit_code: int
    stderr: str
    #: /metrics, scraped over HTTP right after the audit's verdict, before the run failed on it
    #: (once: the run reached its verdict once).
    scraped: list[str]
    textfile: str
    #: The moved groups' positions the scenario put below the partition's new start: what the
    #: audit must disagree with (counted by the test from the target, not from the run).
    below_start: int


@pytest.fixture(scope="module")
def disagreeing_audit(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> DisagreeingAudit:
    """The audit scenario of test_three_phase, with its helpers: a three-phase restore (``build_mapping:
    audit``) killed once its groups are committed and verified; then records deleted under some
    moved groups (partition 1 of the restored topic starts at 120); then the run again, in this
    process (its mapping in the shared Spark session): its audit disagrees and it exits 15."""
    work = tmp_path_factory.mktemp("audit")
    topic = f"metrics-audit-{uuid.uuid4().hex[:8]}"
    store = work / "store"
    fill_and_back_up(source_cluster, topic, store)
    config = write_three_phase_config(work / "restore.yaml", target_cluster, store, topic, "audit")
    kill_before_the_audit(config)
    restored = f"{topic}-restored"
    admin = open_admin(target_cluster.connection())
    [deleted] = admin.client.delete_records([TopicPartition(restored, CUT_PARTITION, CUT_OFFSET)]).values()
    deleted.result(30)
    positions = [
        group_position(target_cluster, f"moved-{topic}-{group}", restored, CUT_PARTITION) for group in GROUPS
    ]
    below_start = sum(1 for position in positions if position is not None and position < CUT_OFFSET)

    port, textfile = free_port(), work / "three-phase.prom"
    scraped: list[str] = []
    raise_for_disagreement = AuditResult.raise_for_disagreement

    def scraped_first(result: AuditResult) -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            scraped.append(answer.read().decode())
        raise_for_disagreement(result)

    stderr = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stderr(stderr):
        patch.setattr(AuditResult, "raise_for_disagreement", scraped_first)
        args = ["three-phase-restore", "-c", str(config), "--metrics-port", str(port)]
        code = run([*args, "--metrics-bind", "127.0.0.1", "--metrics-textfile", str(textfile)])
    return DisagreeingAudit(code, stderr.getvalue(), scraped, textfile.read_text(), below_start)


def test_an_audit_that_disagrees_sets_its_metric_and_fires_its_alert(
    disagreeing_audit: DisagreeingAudit,
) -> None:
    audit = disagreeing_audit
    assert audit.exit_code == AuditDisagreementError.exit_code, audit.stderr[-3000:]
    # reader-a (0) and reader-b (near 80) sit below 120 on partition 1; reader-c (its end) does not.
    assert audit.below_start == 2
    assert (
        f"the audit (the full offset mapping) disagrees with {audit.below_start} committed group position(s)"
        in audit.stderr
    )
    assert len(audit.scraped) == 1
    # The alert promtool must see firing at the first evaluation of the samples (no `for:`: a
    # textfile is written once): the run's backup id, the rule's severity, the test's own count.
    expected = Alert(
        {"backup_id": "nightly", "severity": "critical"},
        {
            "summary": (
                f"The audit of the restore of nightly disagrees with {audit.below_start} group position(s)"
            ),
            "description": alert_rules()[AUDIT_ALERT]["annotations"]["description"],
        },
    )
    cases = []
    for where, text in (("scrape", audit.scraped[0]), ("textfile", audit.textfile)):
        found = parse(text)
        assert series(found, "kafka_backup_audit_disagreements") == {
            (("backup_id", "nightly"),): audit.below_start
        }, where
        # The run failed in its audit phase, and says so (docs/observability.md).
        phases = {
            dict(labels)["phase"]: value
            for labels, value in series(found, "kafka_backup_restore_phase").items()
        }
        assert phases["audit"] == 1, where
        assert sum(phases.values()) == 1, where
        cases.append(AlertCase(f"the {where}", found, [expected]))
        # The control: the same samples from an audit that agreed fire nothing.
        agreed = {
            key: 0.0 if key[0] == "kafka_backup_audit_disagreements" else value
            for key, value in found.items()
        }
        cases.append(AlertCase(f"the {where} with the audit's gauge at 0", agreed))
    failure = alert_test(AUDIT_ALERT, cases)
    assert failure is None, failure


@contextlib.contextmanager
def outage_until_counted(proxy: FaultyProxy, port: int) -> Iterator[None]:
    """Reset every connection through ``proxy`` until the run served on ``port`` has counted a failed
    storage request, then forward: an outage the run meets, counts, and rides out. A run that never
    counts one gets the store back after a few failed connections, so that its test fails on the
    count, not on the run giving up."""

    def counted() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
                return total(parse(answer.read().decode()), "kafka_backup_storage_errors_total") > 0
        except OSError:
            return False  # not serving yet

    ended = threading.Event()

    def watch() -> None:
        while not ended.wait(0.01) and not counted() and proxy.faults_served < GIVE_UP_AFTER_FAULTS:
            pass
        proxy.set_mode("forward")

    proxy.set_mode("reset")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        ended.set()
        watcher.join(10)


def backup_meeting_outages(source: LocalKafkaCluster, s3_server: S3Server, topic: str, tmp_path: Path) -> str:
    """A one-shot backup whose S3 store resets its connections until the run has counted a failure,
    and one of whose two bootstrap servers is down (the clients connect to both:
    ``enable.sparse.connections`` off); its textfile."""
    s3_proxy = FaultyProxy(upstream_port=s3_server.port)
    down = f"127.0.0.1:{free_port()}"
    textfile, config = tmp_path / "backup.prom", tmp_path / "backup.yaml"
    config_file(
        config,
        backup_id="nightly",
        source={
            "bootstrap_servers": [down, source.bootstrap_servers],
            "topics": {"include": [topic]},
            "properties": {"enable.sparse.connections": "false"},
        },
        storage={
            **s3_server.storage_settings(TEST_BUCKET, f"examples-{topic}"),
            "endpoint_url": s3_proxy.endpoint_url,
            # One try per request inside botocore: each failure reaches the run's own retry loop,
            # which counts it (tests/integration/test_storage_max_attempts.py).
            "max_attempts": 1,
        },
        metrics={"textfile": str(textfile)},
    )
    port = free_port()
    try:
        with outage_until_counted(s3_proxy, port):
            code = run(
                ["backup", "-c", str(config), "--metrics-port", str(port), "--metrics-bind", "127.0.0.1"]
            )
    finally:
        s3_proxy.close()
    assert code == 0
    assert s3_proxy.faults_served > 0  # the outage was really met
    return textfile.read_text()


def drill(source: LocalKafkaCluster, target: LocalKafkaCluster, topic: str, tmp_path: Path) -> str:
    """A drill without Spark of ``topic`` and one group reading it; its textfile."""
    group = f"{topic}-app"
    commit_group(source, group, {(topic, 0): 12, (topic, 1): 15})
    config, textfile = tmp_path / "drill.yaml", tmp_path / "drill.prom"
    config_file(
        config,
        backup_id="drill",
        source={"bootstrap_servers": [source.bootstrap_servers], "topics": {"include": [topic]}},
        target={"bootstrap_servers": [target.bootstrap_servers]},
        storage={"url": str(tmp_path / "drill-store")},
        three_phase={"build_mapping": "when-needed"},
        offset_reset={"groups": [group]},
        drill={"topic_prefix": f"drill-{topic}.", "group_prefix": f"drill-{topic}."},
    )
    report = tmp_path / "report.json"
    assert (
        run(["drill", "-c", str(config), "--report", str(report), "--metrics-textfile", str(textfile)]) == 0
    )
    return textfile.read_text()


def test_every_metric_the_examples_use_has_a_sample_in_a_real_run(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    s3_server: S3Server,
    disagreeing_audit: DisagreeingAudit,
    unique_name: str,
    tmp_path: Path,
) -> None:
    topic = unique_name
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k%d" % i, value=b"v", partition=i % 2) for i in range(40)])
    backup_text = backup_meeting_outages(source_cluster, s3_server, topic, tmp_path)
    drill_text = drill(source_cluster, target_cluster, topic, tmp_path)
    # Real runs, not empty registries.
    backup = parse(backup_text)
    assert total(backup, "kafka_backup_records_total") == 40
    assert total(backup, "kafka_backup_source_errors_total") > 0
    assert total(backup, "kafka_backup_storage_errors_total", kind="transient") > 0
    assert total(backup, "kafka_backup_storage_retries_total") > 0
    drilled = parse(drill_text)
    assert total(drilled, "kafka_backup_restore_records_total", topic=f"drill-{topic}.{topic}") == 40
    assert total(drilled, "kafka_backup_restore_phase", phase="done") == 1

    runs = (backup_text, drill_text, disagreeing_audit.textfile)
    sampled = set().union(*(sampled_names(text) for text in runs))
    for example, used in example_metric_names().items():
        assert used, f"{example} uses no kafka_backup_ metric"
        missing = sorted(used - sampled)
        assert not missing, f"{example} uses metrics without a sample in any run: {missing}"
