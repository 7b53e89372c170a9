"""Prometheus metrics and health of a run, in one place (docs/observability.md).

Everything is built on ``prometheus_client``: the metric types, the text exposition served on
``/metrics``, and the atomic textfile for node-exporter. ``BackupMetrics`` are a backup's,
``RestoreMetrics`` those of ``restore``, ``three-phase-restore`` and ``drill``; both share
``RunMetrics`` (the registry, the health, the storage and cluster requests), the server and the
textfile. Each run gets its own
``CollectorRegistry`` (never the library's global one), so a process, or a test, can hold
several. Every metric carries the ``backup_id`` label: textfiles of several scheduled backups
sit side by side in one node-exporter folder, and an alert names the backup it is about.

The copy loop (and a restore's produce loop) updates counters once per batch of records, never
per record, and the lag gauges once a second; a scrape only reads what is there.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, make_wsgi_app
from prometheus_client import write_to_textfile as prometheus_write_textfile
from pydantic import Field

from kbackup import __version__
from kbackup.core.config import StrictModel
from kbackup.core.errors import ConfigError
from kbackup.core.logs import get_logger

log = get_logger("metrics")

#: A request to the source unanswered for this long makes the run not ready (a healthy cluster
#: answers in milliseconds; a broker that went away leaves the request waiting for its timeout).
SLOW_ANSWER_SECS = 10.0
#: Seconds an increment commit may take, from a few segments on a local disk to a large upload.
COMMIT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class MetricsSettings(StrictModel):
    """The ``metrics`` section: where a run's metrics and health endpoints are served or written."""

    port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description=(
            "Serve `/metrics`, `/healthz` and `/readyz` over HTTP on this port while `backup`, `restore`, "
            "`three-phase-restore` or `drill` runs (`--metrics-port`); unset: no server."
        ),
    )
    bind_address: str = Field(
        default="0.0.0.0",  # noqa: S104 (a probe or a scraper comes from outside the pod)
        min_length=1,
        description="Address the metrics server listens on (`--metrics-bind`); `0.0.0.0`: every interface.",
    )
    textfile: str | None = Field(
        default=None,
        description=(
            "Write the metrics to this file (atomically) at each checkpoint (a backup's increment, a "
            "restore's phase) and at the end of the run, for node-exporter's textfile collector "
            "(`--metrics-textfile`); name it `*.prom`."
        ),
    )
    health_window_secs: float = Field(
        default=300,
        gt=0,
        description=(
            "`/healthz` fails when the copy loop (a restore's: while it produces) has not turned for this "
            "long, or has copied nothing for this long while records wait to be read."
        ),
    )


class Health:
    """What ``/healthz`` and ``/readyz`` answer, from times the run reports (monotonic clock).

    Written by the copy loop, its upload threads and the Kafka clients' callbacks, read by the
    HTTP server's threads: each field is one float assignment, which needs no lock.
    """

    def __init__(
        self,
        *,
        window_secs: float,
        clock: Callable[[], float] = time.monotonic,
        cluster: str = "source",
    ) -> None:
        self.window_secs = window_secs
        self._clock = clock
        #: The cluster the run reads (a backup: ``source``) or writes (a restore: ``target``).
        self.cluster = cluster
        #: Why no loop is watched now (None: the loop is watched). A restore's loop runs in one
        #: phase only; the others are bounded steps with their own timeouts.
        self.unwatched_because: str | None = None
        now = clock()
        #: The copy loop's last turn (a poll of the consumer, a commit) and its last progress.
        self.last_turn = now
        self.last_progress = now
        #: Records are known to wait to be read (false: idle at the end of the log), and since when.
        self.records_waiting = False
        self.waiting_since = now
        #: ``source_*``: the cluster's answers (``self.cluster``: the target, for a restore).
        self.source_ok: float | None = None
        self.source_failed: float | None = None
        #: Since when a request to the source waits for its answer (None: none waits).
        self.source_waiting_since: float | None = None
        self.storage_ok: float | None = None
        self.storage_failed: float | None = None

    def now(self) -> float:
        return self._clock()

    def turned(self, *, progressed: bool) -> None:
        now = self._clock()
        self.last_turn = now
        if progressed:
            self.last_progress = now

    def waiting(self, records_waiting: bool) -> None:
        """Whether records wait to be read; time idle at the end of the log is no time without progress."""
        if records_waiting and not self.records_waiting:
            self.waiting_since = self._clock()
        self.records_waiting = records_waiting

    def source_answered(self) -> None:
        self.source_ok = self._clock()
        self.source_waiting_since = None

    def source_waiting(self) -> None:
        if self.source_waiting_since is None:
            self.source_waiting_since = self._clock()

    def source_failing(self) -> None:
        self.source_failed = self._clock()

    def storage_answered(self) -> None:
        self.storage_ok = self._clock()

    def storage_failing(self) -> None:
        self.storage_failed = self._clock()

    def live(self) -> tuple[bool, str]:
        """Alive and not wedged: the loop turns, and copies or is idle at the end of the log."""
        if self.unwatched_because is not None:
            return True, f"ok: {self.unwatched_because}"
        now = self._clock()
        still = now - self.last_turn
        if still > self.window_secs:
            return False, f"the copy loop has not turned for {still:.0f}s (window {self.window_secs:g}s)"
        idle = now - max(self.last_progress, self.waiting_since)
        if self.records_waiting and idle > self.window_secs:
            return False, (
                f"no record copied for {idle:.0f}s while records wait to be read "
                f"(window {self.window_secs:g}s)"
            )
        return True, "ok: copying" if self.records_waiting else "ok: idle at the end of the log"

    def source_reachable(self) -> bool:
        return _answered_since_failure(self.source_ok, self.source_failed) and self._source_waited() is None

    def _source_waited(self) -> float | None:
        """How long a request to the source has waited, if longer than SLOW_ANSWER_SECS."""
        if self.source_waiting_since is None:
            return None
        waited = self._clock() - self.source_waiting_since
        return waited if waited > SLOW_ANSWER_SECS else None

    def storage_reachable(self) -> bool:
        return _answered_since_failure(self.storage_ok, self.storage_failed)

    def ready(self) -> tuple[bool, str]:
        """Connected: the last source request and the last storage request succeeded."""
        problems = []
        waited = self._source_waited()
        if waited is not None:
            problems.append(f"the {self.cluster} cluster has not answered a request for {waited:.0f}s")
        elif not self.source_reachable():
            problems.append(f"the {self.cluster} cluster " + _why(self.source_ok))
        if not self.storage_reachable():
            problems.append("the storage " + _why(self.storage_ok))
        if problems:
            return False, "not ready: " + "; ".join(problems)
        return True, f"ok: {self.cluster} and storage answer"


def _answered_since_failure(ok: float | None, failed: float | None) -> bool:
    return ok is not None and (failed is None or ok > failed)


def _why(ok: float | None) -> str:
    return "has not answered yet" if ok is None else "failed since its last answer"


@dataclass
class _PartitionLag:
    records: Any
    seconds: Any
    #: When records were first seen waiting with none of them read (monotonic), for their age.
    behind_since: float | None = None


class RunMetrics:
    """What the metrics of every run share: the registry, the health, and the counts of the
    requests to the storage and to the cluster the run reads or writes (``cluster``: ``source``
    for a backup, ``target`` for a restore), which the storage and the Kafka clients report
    (kbackup.storage.base.RequestObserver, kbackup.core.kafka.ClusterObserver)."""

    def __init__(
        self,
        backup_id: str,
        *,
        cluster: str,
        health_window_secs: float = 300,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backup_id = backup_id
        self.registry = CollectorRegistry()
        self.health = Health(window_secs=health_window_secs, clock=clock, cluster=cluster)
        self._wall_clock = wall_clock
        self._clock = clock
        #: Called where the run reaches a checkpoint (``exported`` writes the textfile there).
        self.after_checkpoint: Callable[[], None] = lambda: None
        registry = self.registry
        self._storage_errors = Counter(
            "kafka_backup_storage_errors",
            "Storage requests that failed, by operation and kind (transient: retried; permanent).",
            ["backup_id", "operation", "kind"],
            registry=registry,
        )
        self._storage_retries = Counter(
            "kafka_backup_storage_retries",
            "Storage requests sent again after a transient failure, by operation.",
            ["backup_id", "operation"],
            registry=registry,
        )
        self._cluster_errors = Counter(
            f"kafka_backup_{cluster}_errors",
            f"Errors the {cluster} cluster's clients reported (a broker down, a request that failed), "
            "by kind.",
            ["backup_id", "kind"],
            registry=registry,
        )
        health = self.health
        Gauge(
            f"kafka_backup_{cluster}_reachable",
            f"1 when the last request to the {cluster} cluster succeeded (what /readyz checks), else 0.",
            ["backup_id"],
            registry=registry,
        ).labels(backup_id).set_function(lambda: float(health.source_reachable()))
        Gauge(
            "kafka_backup_storage_reachable",
            "1 when the last storage request succeeded (what /readyz checks), else 0.",
            ["backup_id"],
            registry=registry,
        ).labels(backup_id).set_function(lambda: float(health.storage_reachable()))

    # -- requests (any thread) -----------------------------------------------------------------------

    def storage_request_succeeded(self, operation: str) -> None:
        self.health.storage_answered()

    def storage_request_failed(self, operation: str, *, transient: bool) -> None:
        kind = "transient" if transient else "permanent"
        self._storage_errors.labels(self.backup_id, _label(operation), kind).inc()
        self.health.storage_failing()

    def storage_request_retried(self, operation: str) -> None:
        self._storage_retries.labels(self.backup_id, _label(operation)).inc()

    # The cluster's clients report here (kbackup.core.kafka.ClusterObserver).

    def cluster_error(self, kind: str) -> None:
        self._cluster_errors.labels(self.backup_id, _label(kind)).inc()
        self.health.source_failing()

    def cluster_waiting(self) -> None:
        self.health.source_waiting()

    def cluster_answered(self) -> None:
        self.health.source_answered()


class BackupMetrics(RunMetrics):
    """The metrics of one ``backup`` run (one-shot or ``--follow``), and its health."""

    def __init__(
        self,
        backup_id: str,
        *,
        mode: str,
        health_window_secs: float = 300,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            backup_id,
            cluster="source",
            health_window_secs=health_window_secs,
            wall_clock=wall_clock,
            clock=clock,
        )
        registry = self.registry
        Info(
            "kafka_backup", "The backup this process runs: its id, mode and kafka-backup version.",
            ["backup_id"], registry=registry,
        ).labels(backup_id).info({"mode": mode, "version": __version__})  # fmt: skip
        self._records = Counter(
            "kafka_backup_records",
            "Records copied from the source into segments.",
            ["backup_id", "topic"],
            registry=registry,
        )
        self._segments = Counter(
            "kafka_backup_segments",
            "Segment files written to storage.",
            ["backup_id", "topic"],
            registry=registry,
        )
        self._segment_bytes = Counter(
            "kafka_backup_segment_bytes",
            "Bytes of segment files written to storage (compressed Parquet).",
            ["backup_id", "topic"],
            registry=registry,
        )
        self._lag_records = Gauge(
            "kafka_backup_lag_records",
            "Records on the source not yet in a committed increment: the live end offset minus the "
            "committed end offset.",
            ["backup_id", "topic", "partition"],
            registry=registry,
        )
        self._lag_seconds = Gauge(
            "kafka_backup_lag_seconds",
            "Age of the oldest record not yet in a committed increment (0: none).",
            ["backup_id", "topic", "partition"],
            registry=registry,
        )
        self._increments = Counter(
            "kafka_backup_increments",
            "Increments this process committed.",
            ["backup_id"],
            registry=registry,
        ).labels(backup_id)
        self._last_increment = Gauge(
            "kafka_backup_last_increment_timestamp_seconds",
            "When the backup's newest increment was committed (Unix time), by this run or an earlier one.",
            ["backup_id"],
            registry=registry,
        )
        self._commit_duration = Histogram(
            "kafka_backup_increment_commit_duration_seconds",
            "Time to commit an increment: finish and upload its open segments, write its manifest.",
            ["backup_id"],
            buckets=COMMIT_BUCKETS,
            registry=registry,
        ).labels(backup_id)
        self._topic_records: dict[str, Any] = {}
        self._partitions: dict[tuple[str, int], _PartitionLag] = {}

    # -- copying (the consume loop and the upload thread) -------------------------------------------

    def records_copied(self, topic: str, count: int) -> None:
        """One batch of a topic's records went into segments."""
        counter = self._topic_records.get(topic)
        if counter is None:
            counter = self._topic_records[topic] = self._records.labels(self.backup_id, topic)
        counter.inc(count)

    def segment_written(self, topic: str, size_bytes: int) -> None:
        self._segments.labels(self.backup_id, topic).inc()
        self._segment_bytes.labels(self.backup_id, topic).inc(size_bytes)

    def partition_lag(
        self, topic: str, partition: int, *, records: int, oldest_timestamp_ms: int | None
    ) -> None:
        """``records`` not yet committed; ``oldest_timestamp_ms``: the first of them read (None: none)."""
        key = (topic, partition)
        lag = self._partitions.get(key)
        if lag is None:
            labels = (self.backup_id, topic, str(partition))
            lag = self._partitions[key] = _PartitionLag(
                self._lag_records.labels(*labels), self._lag_seconds.labels(*labels)
            )
        lag.records.set(records)
        if records <= 0:
            lag.behind_since = None
            lag.seconds.set(0)
        elif oldest_timestamp_ms is not None and oldest_timestamp_ms >= 0:
            lag.behind_since = None
            lag.seconds.set(max(0.0, self._wall_clock() - oldest_timestamp_ms / 1000))
        else:
            # Records wait but none has been read yet: their age is at least the time they were seen.
            now = self._clock()
            if lag.behind_since is None:
                lag.behind_since = now
            lag.seconds.set(now - lag.behind_since)

    def forget_partition(self, topic: str, partition: int) -> None:
        """A partition no longer backed up (its topic was deleted) leaves the exposition."""
        if self._partitions.pop((topic, partition), None) is not None:
            labels = (self.backup_id, topic, str(partition))
            self._lag_records.remove(*labels)
            self._lag_seconds.remove(*labels)

    # -- increments ----------------------------------------------------------------------------------

    def backup_loaded(self, last_increment_unix: float | None) -> None:
        """The backup's newest increment before this run, if it has one."""
        if last_increment_unix is not None:
            self._last_increment.labels(self.backup_id).set(last_increment_unix)

    def increment_committed(self, duration_secs: float) -> None:
        self._increments.inc()
        self._commit_duration.observe(duration_secs)
        self._last_increment.labels(self.backup_id).set(self._wall_clock())
        self.health.turned(progressed=True)
        self.health.storage_answered()
        self.after_checkpoint()

    # The copy loop reports its source's answers and errors under these names.

    def source_answered(self) -> None:
        self.cluster_answered()

    def source_error(self, kind: str) -> None:
        self.cluster_error(kind)


#: The phases of each restore command, in order; ``done`` once the run ended well.
RESTORE_PHASES = {
    "restore": ("restore", "done"),
    "three-phase-restore": ("restore", "mapping", "reset", "verify", "audit", "done"),
    "drill": ("backup", "restore", "mapping", "reset", "verify", "audit", "proof", "done"),
}


@dataclass
class _TopicRestore:
    records: Any
    bytes: Any
    landed: Any
    landed_count: int = 0


class RestoreMetrics(RunMetrics):
    """The metrics of one ``restore``, ``three-phase-restore`` or ``drill`` run, and its health.

    ``/healthz`` watches the loop that produces records while it runs (the restore phase); the
    other phases are bounded steps with their own timeouts, and answer alive. ``/readyz`` asks
    for answers from the target cluster and the storage.
    """

    def __init__(
        self,
        backup_id: str,
        *,
        command: str,
        health_window_secs: float = 300,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            backup_id,
            cluster="target",
            health_window_secs=health_window_secs,
            wall_clock=wall_clock,
            clock=clock,
        )
        self.phases = RESTORE_PHASES[command]
        registry = self.registry
        Info(
            "kafka_backup_restore",
            "The restore this process runs: its backup id, command and kafka-backup version.",
            ["backup_id"],
            registry=registry,
        ).labels(backup_id).info({"command": command, "version": __version__})
        self._records = Counter(
            "kafka_backup_restore_records",
            "Records produced into the target topic by this run.",
            ["backup_id", "topic"],
            registry=registry,
        )
        self._bytes = Counter(
            "kafka_backup_restore_bytes",
            "Key and value bytes of the records produced into the target topic by this run.",
            ["backup_id", "topic"],
            registry=registry,
        )
        self._landed = Gauge(
            "kafka_backup_restore_landed_records",
            "Records of the restore on the target topic: produced by this run, by earlier runs of the "
            "same restore, or found already there.",
            ["backup_id", "topic"],
            registry=registry,
        )
        self._planned = Gauge(
            "kafka_backup_restore_planned_records",
            "Records the restore puts on the target topic in all (absent where segments were not counted).",
            ["backup_id", "topic"],
            registry=registry,
        )
        self._transactions = Counter(
            "kafka_backup_restore_transactions",
            "Transactions this run committed on the target (exactly-once mode).",
            ["backup_id"],
            registry=registry,
        ).labels(backup_id)
        self._phase = Gauge(
            "kafka_backup_restore_phase",
            "1 for the phase the run is in (done: it ended well), 0 for the others.",
            ["backup_id", "phase"],
            registry=registry,
        )
        self._phase_seconds = Gauge(
            "kafka_backup_restore_phase_duration_seconds",
            "How long each phase of this run took (a phase done by an earlier run: 0).",
            ["backup_id", "phase"],
            registry=registry,
        )
        self._recovery = Gauge(
            "kafka_backup_recovery_seconds",
            "Seconds from the start of the run until every consumer group was committed on the target.",
            ["backup_id"],
            registry=registry,
        )
        self._disagreements = Gauge(
            "kafka_backup_audit_disagreements",
            "Committed group positions the audit (the full offset mapping) disagrees with; 0: it agrees.",
            ["backup_id"],
            registry=registry,
        )
        self._skipped = Gauge(
            "kafka_backup_drill_skipped_records",
            "Records the drill's groups would skip after the restore; 0: the drill passed.",
            ["backup_id"],
            registry=registry,
        )
        for phase in self.phases:
            self._phase.labels(backup_id, phase).set(0)
        self._topics: dict[str, _TopicRestore] = {}
        self.current_phase: str | None = None
        self._phase_started = clock()
        self.health.unwatched_because = "no phase started yet"

    # -- phases --------------------------------------------------------------------------------------

    def phase(self, name: str) -> None:
        """The run enters phase ``name`` (one of ``self.phases``); the textfile is written."""
        now = self._clock()
        if self.current_phase is not None:
            self._phase_seconds.labels(self.backup_id, self.current_phase).set(now - self._phase_started)
            self._phase.labels(self.backup_id, self.current_phase).set(0)
        self._phase.labels(self.backup_id, name).set(1)
        self.current_phase, self._phase_started = name, now
        self.health.turned(progressed=True)
        self.health.unwatched_because = "the run ended" if name == "done" else f"in the {name} phase"
        self.after_checkpoint()

    def groups_committed(self, recovery_secs: float) -> None:
        self._recovery.labels(self.backup_id).set(recovery_secs)

    def audited(self, disagreements: int) -> None:
        self._disagreements.labels(self.backup_id).set(disagreements)

    def drill_proved(self, skipped: int) -> None:
        self._skipped.labels(self.backup_id).set(skipped)

    # -- producing (the restore loop) ----------------------------------------------------------------

    def _topic(self, topic: str) -> _TopicRestore:
        found = self._topics.get(topic)
        if found is None:
            labels = (self.backup_id, topic)
            found = self._topics[topic] = _TopicRestore(
                self._records.labels(*labels), self._bytes.labels(*labels), self._landed.labels(*labels)
            )
        return found

    def restore_planned(self, topic: str, *, planned: int | None, landed: int) -> None:
        """Before producing: the target topic's records in all (None: not counted), and how many of
        them earlier runs put there."""
        if planned is not None:
            self._planned.labels(self.backup_id, topic).set(planned)
        found = self._topic(topic)
        found.landed_count = landed
        found.landed.set(landed)

    def producing(self, running: bool) -> None:
        """The produce loop starts (watched by ``/healthz``) or ends."""
        self.health.turned(progressed=True)
        self.health.unwatched_because = None if running else f"in the {self.current_phase} phase"

    def records_produced(self, topic: str, count: int, size_bytes: int) -> None:
        """One batch of records went to the target topic's producer."""
        found = self._topic(topic)
        found.records.inc(count)
        found.bytes.inc(size_bytes)
        found.landed_count += count
        found.landed.set(found.landed_count)
        self.health.turned(progressed=count > 0)

    def records_already_landed(self, topic: str, count: int) -> None:
        """Records of a batch found already on the target (an idempotent run resumed)."""
        found = self._topic(topic)
        found.landed_count += count
        found.landed.set(found.landed_count)

    def transaction_committed(self) -> None:
        self._transactions.inc()
        self.health.source_answered()


def _label(name: str) -> str:
    """``look up`` -> ``look_up``, ``_TRANSPORT`` -> ``transport``: label values in one style."""
    return name.strip("_ ").replace(" ", "_").lower()


# -- serving -----------------------------------------------------------------------------------------


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Every probe and scrape would be a log line; they are not news."""


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def _server_class(bind_address: str, port: int) -> type[_ThreadingServer]:
    """The server class for the address family of ``bind_address`` (``::`` is IPv6)."""
    try:
        found = socket.getaddrinfo(bind_address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        raise ConfigError(
            f"--metrics-bind {bind_address} (metrics.bind_address): not an address of this machine, and "
            "no host name that resolves",
            hint="use 0.0.0.0 (every interface), 127.0.0.1, or an address that `ip addr` lists",
        ) from None
    return type("MetricsServer", (_ThreadingServer,), {"address_family": found[0][0]})


class MetricsServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` over HTTP, on a daemon thread."""

    def __init__(self, metrics: RunMetrics, *, bind_address: str, port: int) -> None:
        self.health = metrics.health
        self._metrics_app = make_wsgi_app(metrics.registry)
        server_class = _server_class(bind_address, port)
        try:
            self._server = make_server(
                bind_address, port, self._app, server_class=server_class, handler_class=_QuietHandler
            )
        except OSError as exc:
            raise _bind_error(exc, bind_address, port) from None
        self.port = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="kafka-backup-metrics", daemon=True
        )
        self._thread.start()

    def _app(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path in ("/metrics", "/"):
            answer: Iterable[bytes] = self._metrics_app(environ, start_response)
            return answer
        if path == "/healthz":
            return _probe(*self.health.live(), start_response)
        if path == "/readyz":
            return _probe(*self.health.ready(), start_response)
        return _text("404 Not Found", "not found: try /metrics, /healthz or /readyz\n", start_response)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _probe(ok: bool, reason: str, start_response: Any) -> list[bytes]:
    return _text("200 OK" if ok else "503 Service Unavailable", reason + "\n", start_response)


def _text(status: str, body: str, start_response: Any) -> list[bytes]:
    data = body.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return [data]


def _bind_error(exc: OSError, bind_address: str, port: int) -> ConfigError:
    port_flag = f"--metrics-port {port} (metrics.port)"
    if exc.errno == errno.EADDRINUSE:
        return ConfigError(
            f"{port_flag}: port {port} is already in use on {bind_address}",
            hint="choose a free port, or stop the process that listens on it (`ss -ltnp` names it)",
        )
    if exc.errno == errno.EADDRNOTAVAIL:
        return ConfigError(
            f"--metrics-bind {bind_address} (metrics.bind_address): not an address of this machine",
            hint="use 0.0.0.0 (every interface), 127.0.0.1, or an address that `ip addr` lists",
        )
    if exc.errno == errno.EACCES:
        return ConfigError(
            f"{port_flag}: not allowed to listen on port {port}",
            hint="choose a port above 1024 (lower ones need privileges)",
        )
    return ConfigError(
        f"{port_flag}: cannot listen on {bind_address}: {exc.strerror or exc}",
        hint="check --metrics-port and --metrics-bind",
    )


# -- the textfile --------------------------------------------------------------------------------------


def write_textfile(metrics: RunMetrics, path: Path) -> None:
    """The registry in node-exporter's textfile format, written atomically (temporary file, rename)."""
    prometheus_write_textfile(str(path), metrics.registry)


def check_textfile(metrics: RunMetrics, path: Path) -> None:
    """Write the textfile once now, so a path that cannot be written fails the run before it copies."""
    try:
        write_textfile(metrics, path)
    except OSError as exc:
        folder = path.parent
        reason = exc.strerror or str(exc)
        if not folder.is_dir():
            reason = f"the folder {folder} does not exist"
        raise ConfigError(
            f"--metrics-textfile {path} (metrics.textfile): cannot write it: {reason}",
            hint="name a file in an existing folder this user can write (node-exporter's "
            "--collector.textfile.directory)",
        ) from None


@contextmanager
def exported(metrics: RunMetrics, settings: MetricsSettings) -> Iterator[MetricsServer | None]:
    """Serve and write ``metrics`` as ``settings`` say, for the time of the ``with`` block.

    Bad settings (a port in use, an address this machine does not have, a textfile that cannot
    be written) raise ``ConfigError`` on entry, before the run copies anything. The textfile is
    written at each checkpoint (a backup's committed increment, a restore's phase) and once more
    on exit, however the run ended.
    """
    textfile = Path(settings.textfile).expanduser() if settings.textfile else None
    server = (
        MetricsServer(metrics, bind_address=settings.bind_address, port=settings.port)
        if settings.port is not None
        else None
    )
    if textfile is not None:
        try:
            check_textfile(metrics, textfile)
        except ConfigError:
            if server is not None:
                server.close()
            raise
    if server is not None:
        log.info("serving metrics on http://%s:%d/metrics", settings.bind_address, server.port)

    def write() -> None:
        if textfile is None:
            return
        try:
            write_textfile(metrics, textfile)
        except OSError as exc:
            # The backup itself went well; a monitoring file must not fail it.
            log.warning("could not write the metrics textfile %s: %s", textfile, exc.strerror or exc)

    metrics.after_checkpoint = write
    try:
        yield server
    finally:
        write()
        if server is not None:
            server.close()
