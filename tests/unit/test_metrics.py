"""The metrics of a backup run, its health, the HTTP endpoints and the textfile (no Kafka needed).

Every exposition is read back with prometheus-client's own parser, as Prometheus would read it.
"""

from __future__ import annotations

import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kbackup import __version__
from kbackup.app.config import KBackupConfig, load
from kbackup.app.metrics import RecoveryMetrics as RestoreMetrics
from kbackup.app.overrides import metrics_settings
from kbackup.backup.metrics import BackupMetrics
from kbackup.cli.main import run
from kbackup.core.errors import ConfigError
from kbackup.core.metrics import Health, MetricsServer, MetricsSettings, RunMetrics, exported
from tests.support.metrics_text import Samples, parse


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def assert_conventional(registry: CollectorRegistry, labels: set[str]) -> None:
    """Every family named ``kafka_backup_*``, counters exposed as ``_total``, every sample carrying
    the backup id and no label but ``labels``: names of things and kinds of events, never a server,
    a URL or a credential."""
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        assert family.name.startswith("kafka_backup_"), family.name
        if family.type == "counter":
            assert all(s.name.endswith(("_total", "_created")) for s in family.samples)
        for sample in family.samples:
            assert sample.labels["backup_id"] == "nightly", sample
            assert set(sample.labels) <= labels, sample


def exposition(metrics: RunMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return parse(generate_latest(metrics.registry).decode())


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, tuple(sorted({"backup_id": "nightly", **labels}.items())))]


@pytest.fixture
def clocks() -> tuple[Clock, Clock]:
    """A wall clock (Unix time) and a monotonic one, moved by hand."""
    return Clock(1_700_000_000.0), Clock(1000.0)


@pytest.fixture
def metrics(clocks: tuple[Clock, Clock]) -> BackupMetrics:
    wall, mono = clocks
    return BackupMetrics("nightly", mode="follow", health_window_secs=60, wall_clock=wall, clock=mono)


def test_counters_add_up_per_topic_with_prometheus_names(metrics: BackupMetrics) -> None:
    metrics.records_copied("orders", 2000)
    metrics.records_copied("orders", 5)
    metrics.records_copied("payments", 7)
    metrics.segment_written("orders", 1024)
    metrics.segment_written("orders", 512)
    found = exposition(metrics)
    assert value(found, "kafka_backup_records_total", topic="orders") == 2005
    assert value(found, "kafka_backup_records_total", topic="payments") == 7
    assert value(found, "kafka_backup_segments_total", topic="orders") == 2
    assert value(found, "kafka_backup_segment_bytes_total", topic="orders") == 1536
    assert value(found, "kafka_backup_info", mode="follow", version=__import__("kbackup").__version__) == 1


def test_every_metric_is_named_by_the_conventions_and_carries_the_backup_id(metrics: BackupMetrics) -> None:
    metrics.records_copied("orders", 1)
    metrics.segment_written("orders", 1)
    metrics.partition_lag("orders", 0, records=1, oldest_timestamp_ms=None)
    metrics.increment_committed(0.5)
    metrics.storage_request_failed("look up", transient=True)
    metrics.storage_request_retried("look up")
    metrics.source_error("_TRANSPORT")
    assert_conventional(
        metrics.registry, {"backup_id", "topic", "partition", "operation", "kind", "mode", "version", "le"}
    )


def test_the_lag_is_records_not_committed_and_the_age_of_the_oldest(
    metrics: BackupMetrics, clocks: tuple[Clock, Clock]
) -> None:
    wall, mono = clocks
    # The oldest uncommitted record read was written 42 s ago.
    metrics.partition_lag("orders", 3, records=120, oldest_timestamp_ms=int((wall.now - 42) * 1000))
    found = exposition(metrics)
    assert value(found, "kafka_backup_lag_records", topic="orders", partition="3") == 120
    assert value(found, "kafka_backup_lag_seconds", topic="orders", partition="3") == pytest.approx(42)
    # Records wait, none read yet: their age counts from when they were first seen waiting.
    metrics.partition_lag("orders", 4, records=5, oldest_timestamp_ms=None)
    mono.now += 7
    metrics.partition_lag("orders", 4, records=6, oldest_timestamp_ms=None)
    assert value(exposition(metrics), "kafka_backup_lag_seconds", topic="orders", partition="4") == 7
    # Caught up and committed: both go to 0.
    metrics.partition_lag("orders", 3, records=0, oldest_timestamp_ms=None)
    found = exposition(metrics)
    assert value(found, "kafka_backup_lag_records", topic="orders", partition="3") == 0
    assert value(found, "kafka_backup_lag_seconds", topic="orders", partition="3") == 0
    # A partition no longer backed up leaves the exposition.
    metrics.forget_partition("orders", 4)
    assert (
        "kafka_backup_lag_records",
        (("backup_id", "nightly"), ("partition", "4"), ("topic", "orders")),
    ) not in (exposition(metrics))


def test_an_increment_sets_its_time_observes_its_duration_and_calls_back(
    metrics: BackupMetrics, clocks: tuple[Clock, Clock]
) -> None:
    wall, _ = clocks
    written = []
    metrics.after_checkpoint = lambda: written.append(True)
    metrics.backup_loaded(wall.now - 3600)
    assert value(exposition(metrics), "kafka_backup_last_increment_timestamp_seconds") == wall.now - 3600
    metrics.increment_committed(1.5)
    wall.now += 30
    metrics.increment_committed(0.2)
    found = exposition(metrics)
    assert value(found, "kafka_backup_last_increment_timestamp_seconds") == wall.now
    assert value(found, "kafka_backup_increments_total") == 2
    assert value(found, "kafka_backup_increment_commit_duration_seconds_count") == 2
    assert value(found, "kafka_backup_increment_commit_duration_seconds_sum") == pytest.approx(1.7)
    assert value(found, "kafka_backup_increment_commit_duration_seconds_bucket", le="1.0") == 1
    assert written == [True, True]


def test_a_backup_without_an_increment_has_no_last_increment_time(metrics: BackupMetrics) -> None:
    """0 would read as 'the last increment is 55 years old' and fire every staleness alert."""
    metrics.backup_loaded(None)
    assert not any(name == "kafka_backup_last_increment_timestamp_seconds" for name, _ in exposition(metrics))


def test_storage_and_source_errors_are_counted_by_kind(metrics: BackupMetrics) -> None:
    metrics.storage_request_failed("look up", transient=True)
    metrics.storage_request_failed("look up", transient=True)
    metrics.storage_request_retried("look up")
    metrics.storage_request_failed("write", transient=False)
    metrics.source_error("_TRANSPORT")
    metrics.source_error("_ALL_BROKERS_DOWN")
    metrics.source_error("_TRANSPORT")
    found = exposition(metrics)
    assert value(found, "kafka_backup_storage_errors_total", operation="look_up", kind="transient") == 2
    assert value(found, "kafka_backup_storage_errors_total", operation="write", kind="permanent") == 1
    assert value(found, "kafka_backup_storage_retries_total", operation="look_up") == 1
    assert value(found, "kafka_backup_source_errors_total", kind="transport") == 2
    assert value(found, "kafka_backup_source_errors_total", kind="all_brokers_down") == 1


def test_readiness_needs_an_answer_from_source_and_storage_since_their_last_failure() -> None:
    clock = Clock()
    health = Health(window_secs=60, clock=clock)
    assert health.ready() == (
        False,
        "not ready: the source cluster has not answered yet; the storage has not answered yet",
    )
    health.source_answered()
    health.storage_answered()
    assert health.ready()[0]
    clock.now += 1
    health.source_failing()
    ok, reason = health.ready()
    assert not ok
    assert reason == "not ready: the source cluster failed since its last answer"
    clock.now += 1
    health.source_answered()
    assert health.ready()[0]
    clock.now += 1
    health.storage_failing()
    assert health.ready() == (False, "not ready: the storage failed since its last answer")


def test_liveness_fails_when_the_loop_stops_turning_or_copies_nothing_while_records_wait() -> None:
    clock = Clock()
    health = Health(window_secs=60, clock=clock)
    assert health.live() == (True, "ok: idle at the end of the log")
    # Idle at the end of the log: turning without copying is healthy however long it lasts.
    clock.now += 600
    health.turned(progressed=False)
    assert health.live()[0]
    # Records wait and nothing is copied for longer than the window: wedged.
    health.waiting(True)
    clock.now += 30
    health.turned(progressed=False)
    assert health.live() == (True, "ok: copying")
    clock.now += 31
    health.turned(progressed=False)
    assert health.live() == (False, "no record copied for 61s while records wait to be read (window 60s)")
    health.turned(progressed=True)
    assert health.live()[0]
    # The loop itself stops turning (a call that never returns).
    clock.now += 61
    assert health.live() == (False, "the copy loop has not turned for 61s (window 60s)")


@pytest.fixture
def server(metrics: BackupMetrics) -> Iterator[MetricsServer]:
    # Port 0: the system picks a free one (the settings model asks for a real port; the server does not).
    running = MetricsServer(metrics, bind_address="127.0.0.1", port=0)
    yield running
    running.close()


def get(server: MetricsServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_server_answers_metrics_health_and_readiness(
    server: MetricsServer, metrics: BackupMetrics
) -> None:
    metrics.records_copied("orders", 3)
    status, text = get(server, "/metrics")
    assert status == 200
    assert value(parse(text), "kafka_backup_records_total", topic="orders") == 3
    assert value(parse(text), "kafka_backup_source_reachable") == 0
    assert get(server, "/healthz") == (200, "ok: idle at the end of the log\n")
    assert get(server, "/readyz")[0] == 503
    metrics.source_answered()
    metrics.storage_request_succeeded("write")
    assert get(server, "/readyz") == (200, "ok: source and storage answer\n")
    found = parse(get(server, "/metrics")[1])
    assert value(found, "kafka_backup_source_reachable") == 1
    assert value(found, "kafka_backup_storage_reachable") == 1
    metrics.source_error("_TRANSPORT")
    assert get(server, "/readyz") == (503, "not ready: the source cluster failed since its last answer\n")
    assert get(server, "/nothing")[0] == 404


def test_a_port_in_use_is_one_config_error_naming_it(metrics: BackupMetrics) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError) as caught:
            MetricsServer(metrics, bind_address="127.0.0.1", port=port)
    assert caught.value.message == (
        f"--metrics-port {port} (metrics.port): port {port} is already in use on 127.0.0.1"
    )
    assert "free port" in str(caught.value.hint)
    assert caught.value.exit_code == 3


@pytest.mark.parametrize(
    ("address", "said"),
    [
        # TEST-NET-1 (RFC 5737): never an address of this machine.
        (
            "192.0.2.1",
            r"^--metrics-bind 192\.0\.2\.1 \(metrics.bind_address\): not an address of this machine$",
        ),
        (
            "no-such-host.invalid",
            r"^--metrics-bind no-such-host\.invalid \(metrics.bind_address\): not an address of this "
            "machine, and no host name that resolves$",
        ),
    ],
)
def test_a_bind_address_this_machine_does_not_have_is_a_config_error(
    metrics: BackupMetrics, address: str, said: str
) -> None:
    with pytest.raises(ConfigError, match=said) as caught:
        MetricsServer(metrics, bind_address=address, port=0)
    assert "ip addr" in str(caught.value.hint)


def test_the_textfile_is_written_at_start_after_each_increment_and_at_exit(
    metrics: BackupMetrics, tmp_path: Path
) -> None:
    path = tmp_path / "kafka-backup.prom"
    with exported(metrics, MetricsSettings(textfile=str(path))) as server:
        assert server is None
        # Written before the run copies anything: it proves the path can be written.
        assert value(parse(path.read_text()), "kafka_backup_increments_total") == 0
        metrics.records_copied("orders", 11)
        metrics.increment_committed(0.1)
        assert value(parse(path.read_text()), "kafka_backup_records_total", topic="orders") == 11
        metrics.records_copied("orders", 4)
    assert value(parse(path.read_text()), "kafka_backup_records_total", topic="orders") == 15
    # Written by renaming a complete temporary file: none is left behind.
    assert [item.name for item in tmp_path.iterdir()] == ["kafka-backup.prom"]


@pytest.mark.parametrize("where", ["missing/kafka-backup.prom", "a-file/kafka-backup.prom"])
def test_a_textfile_that_cannot_be_written_fails_before_anything_runs(
    metrics: BackupMetrics, tmp_path: Path, where: str
) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    path = tmp_path / where
    with pytest.raises(ConfigError) as caught, exported(metrics, MetricsSettings(textfile=str(path))):
        pytest.fail("the run went on")
    assert caught.value.message.startswith(f"--metrics-textfile {path} (metrics.textfile): cannot write it: ")
    if where.startswith("missing"):
        assert caught.value.message.endswith(f"the folder {path.parent} does not exist")
    assert caught.value.exit_code == 3


def test_flags_go_over_the_metrics_section(tmp_path: Path) -> None:
    config_file = tmp_path / "backup.yaml"
    config_file.write_text(
        "metrics:\n  port: 9400\n  bind_address: 127.0.0.1\n  textfile: node/backup.prom\n"
    )
    config = load(config_file)
    # A relative textfile in the file is relative to the file's folder.
    assert config.metrics.textfile == str(tmp_path / "node" / "backup.prom")
    assert metrics_settings(config) == config.metrics
    flagged = metrics_settings(config, port=9500, textfile="x.prom")
    assert (flagged.port, flagged.bind_address, flagged.textfile) == (9500, "127.0.0.1", "x.prom")
    assert metrics_settings(KBackupConfig(), bind_address="::1").bind_address == "::1"
    with pytest.raises(ConfigError, match="port"):
        metrics_settings(config, port=70000)


def test_a_request_to_the_source_left_unanswered_makes_the_run_not_ready(metrics: BackupMetrics) -> None:
    """A broker that went away while a request was out shows as a long wait, not as an error."""
    health = metrics.health
    clock = health._clock
    assert isinstance(clock, Clock)
    metrics.cluster_answered()
    metrics.storage_request_succeeded("write")
    metrics.cluster_waiting()
    clock.now += 10
    assert health.ready()[0]  # an answer within 10 s is a normal answer
    metrics.cluster_waiting()  # another request while the first waits: the wait counts from the first
    clock.now += 1
    assert health.ready() == (False, "not ready: the source cluster has not answered a request for 11s")
    assert value(exposition(metrics), "kafka_backup_source_reachable") == 0
    metrics.cluster_answered()
    assert health.ready()[0]
    metrics.cluster_error("_ALL_BROKERS_DOWN")
    assert value(exposition(metrics), "kafka_backup_source_errors_total", kind="all_brokers_down") == 1
    assert not health.ready()[0]


def test_an_ipv6_bind_address_is_served(metrics: BackupMetrics) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError as error:
        pytest.skip(f"no IPv6 loopback here: {error}")
    server = MetricsServer(metrics, bind_address="::1", port=0)
    try:
        with urllib.request.urlopen(f"http://[::1]:{server.port}/healthz", timeout=10) as answer:
            assert answer.status == 200
    finally:
        server.close()


# -- restore, three-phase-restore and drill -------------------------------------------------------------


@pytest.fixture
def restore_metrics(clocks: tuple[Clock, Clock]) -> RestoreMetrics:
    wall, mono = clocks
    return RestoreMetrics(
        "nightly", command="three-phase-restore", health_window_secs=60, wall_clock=wall, clock=mono
    )


def test_a_restore_counts_per_target_topic_what_it_produced_and_what_landed(
    restore_metrics: RestoreMetrics,
) -> None:
    # An earlier run of the same restore put 100 of the 1,000 records there.
    restore_metrics.restore_planned("orders-dr", planned=1000, landed=100)
    restore_metrics.restore_planned("payments-dr", planned=None, landed=0)
    restore_metrics.records_produced("orders-dr", 500, 51_200)
    restore_metrics.records_already_landed("orders-dr", 20)
    restore_metrics.records_produced("orders-dr", 380, 38_912)
    restore_metrics.records_produced("payments-dr", 3, 30)
    restore_metrics.transaction_committed()
    restore_metrics.transaction_committed()
    found = exposition(restore_metrics)
    assert value(found, "kafka_backup_restore_records_total", topic="orders-dr") == 880
    assert value(found, "kafka_backup_restore_bytes_total", topic="orders-dr") == 90_112
    assert value(found, "kafka_backup_restore_landed_records", topic="orders-dr") == 1000
    assert value(found, "kafka_backup_restore_planned_records", topic="orders-dr") == 1000
    assert value(found, "kafka_backup_restore_landed_records", topic="payments-dr") == 3
    # Not counted (segments not checked): absent, never a planned 0 that reads as "done".
    assert (
        "kafka_backup_restore_planned_records",
        (("backup_id", "nightly"), ("topic", "payments-dr")),
    ) not in (found)
    assert value(found, "kafka_backup_restore_transactions_total") == 2
    assert value(found, "kafka_backup_restore_info", command="three-phase-restore", version=__version__) == 1


def test_the_phase_is_one_of_the_commands_phases_and_each_phase_keeps_its_duration(
    restore_metrics: RestoreMetrics, clocks: tuple[Clock, Clock]
) -> None:
    _, mono = clocks
    written: list[str | None] = []
    restore_metrics.after_checkpoint = lambda: written.append(restore_metrics.current_phase)

    def phases() -> dict[str, float]:
        found = exposition(restore_metrics)
        return {
            dict(labels)["phase"]: sample
            for (name, labels), sample in found.items()
            if name == "kafka_backup_restore_phase"
        }

    assert phases() == dict.fromkeys(
        ("metadata", "restore", "mapping", "reset", "verify", "audit", "done"), 0
    )
    restore_metrics.phase("restore")
    mono.now += 12
    restore_metrics.phase("reset")
    mono.now += 3
    restore_metrics.groups_committed(15.5)
    restore_metrics.phase("verify")
    restore_metrics.audited(0)
    restore_metrics.phase("done")
    assert phases() == {
        **dict.fromkeys(("metadata", "restore", "mapping", "reset", "verify", "audit"), 0),
        "done": 1,
    }
    found = exposition(restore_metrics)
    assert value(found, "kafka_backup_restore_phase_duration_seconds", phase="restore") == 12
    assert value(found, "kafka_backup_restore_phase_duration_seconds", phase="reset") == 3
    assert value(found, "kafka_backup_recovery_seconds") == 15.5
    assert value(found, "kafka_backup_audit_disagreements") == 0
    # The textfile is written as each phase starts.
    assert written == ["restore", "reset", "verify", "done"]


def test_restore_commands_have_their_own_phases() -> None:
    drill = RestoreMetrics("drill-1", command="drill")
    drill.phase("backup")
    drill.phase("proof")
    drill.drill_proved(0)
    found = parse(generate_latest(drill.registry).decode())
    assert found[("kafka_backup_restore_phase", (("backup_id", "drill-1"), ("phase", "proof")))] == 1
    assert found[("kafka_backup_drill_skipped_records", (("backup_id", "drill-1"),))] == 0
    plain = RestoreMetrics("nightly", command="restore")
    assert {
        dict(labels)["phase"]
        for (name, labels) in parse(generate_latest(plain.registry).decode())
        if name == "kafka_backup_restore_phase"
    } == {"restore", "done"}


def test_a_restore_is_live_outside_its_produce_loop_and_ready_when_target_and_storage_answer(
    restore_metrics: RestoreMetrics, clocks: tuple[Clock, Clock]
) -> None:
    _, mono = clocks
    health = restore_metrics.health
    restore_metrics.phase("restore")
    # Checking segments, planning: steps with their own timeouts, never a wedged loop.
    mono.now += 600
    assert health.live() == (True, "ok: in the restore phase")
    restore_metrics.producing(True)
    mono.now += 30
    restore_metrics.records_produced("orders-dr", 10, 100)
    mono.now += 59
    assert health.live()[0]
    mono.now += 2
    assert health.live() == (False, "the copy loop has not turned for 61s (window 60s)")
    restore_metrics.producing(False)
    assert health.live() == (True, "ok: in the restore phase")
    assert health.ready() == (
        False,
        "not ready: the target cluster has not answered yet; the storage has not answered yet",
    )
    restore_metrics.cluster_answered()
    restore_metrics.storage_request_succeeded("read")
    assert health.ready() == (True, "ok: target and storage answer")
    restore_metrics.cluster_error("_TRANSPORT")
    found = exposition(restore_metrics)
    assert value(found, "kafka_backup_target_errors_total", kind="transport") == 1
    assert value(found, "kafka_backup_target_reachable") == 0
    assert ("kafka_backup_source_reachable", (("backup_id", "nightly"),)) not in found


def test_restore_metrics_follow_the_conventions_and_carry_only_names(restore_metrics: RestoreMetrics) -> None:
    restore_metrics.restore_planned("orders-dr", planned=5, landed=0)
    restore_metrics.records_produced("orders-dr", 5, 50)
    restore_metrics.phase("restore")
    restore_metrics.groups_committed(1.0)
    restore_metrics.audited(2)
    restore_metrics.storage_request_failed("download", transient=True)
    assert_conventional(
        restore_metrics.registry, {"backup_id", "topic", "phase", "operation", "kind", "command", "version"}
    )


def test_restore_metrics_are_served_and_written_like_a_backups(
    restore_metrics: RestoreMetrics, tmp_path: Path
) -> None:
    path = tmp_path / "restore.prom"
    with exported(restore_metrics, MetricsSettings(textfile=str(path))) as server:
        assert server is None
        restore_metrics.phase("restore")
        assert value(parse(path.read_text()), "kafka_backup_restore_phase", phase="restore") == 1
        restore_metrics.records_produced("orders-dr", 7, 70)
    assert value(parse(path.read_text()), "kafka_backup_restore_records_total", topic="orders-dr") == 7
    running = MetricsServer(restore_metrics, bind_address="127.0.0.1", port=0)
    try:
        status, text = get(running, "/metrics")
        assert status == 200
        assert value(parse(text), "kafka_backup_restore_records_total", topic="orders-dr") == 7
        assert get(running, "/healthz") == (200, "ok: in the restore phase\n")
    finally:
        running.close()


@pytest.mark.parametrize("command", ["restore", "three-phase-restore", "drill"])
def test_restore_commands_refuse_bad_metrics_settings_before_any_network_call(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Nothing listens on port 1: a run that reached the network would fail with exit code 5, not 3.
    config = tmp_path / "dr.yaml"
    config.write_text(
        "backup_id: nightly\n"
        f"storage: {{url: {tmp_path / 'store'}}}\n"
        "source: {bootstrap_servers: ['127.0.0.1:1']}\n"
        "target: {bootstrap_servers: ['127.0.0.1:1']}\n"
    )
    textfile = tmp_path / "missing" / "dr.prom"
    assert run([command, "-c", str(config), "--metrics-textfile", str(textfile)]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"kafka-backup: error: --metrics-textfile {textfile} (metrics.textfile): cannot write it: "
        f"the folder {textfile.parent} does not exist"
    )
    assert not (tmp_path / "store").exists()
