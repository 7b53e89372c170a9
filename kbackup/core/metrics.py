"""Prometheus metrics and health of a run: what every run's metrics share (docs/observability.md).

Everything is built on ``prometheus_client``: the metric types, the text exposition served on
``/metrics``, and the atomic textfile for node-exporter. Each stage declares its own metrics as
a table of :class:`MetricDeclaration` (kbackup.backup.metrics, kbackup.restore.metrics, and
kbackup.app.metrics for the runs around a restore) on a :class:`RunMetrics`: the registry, the
health, the storage and cluster requests. This module serves them and writes the textfile,
knowing no stage. Each run gets its own
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
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any, Literal, TypedDict
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, make_wsgi_app
from prometheus_client import write_to_textfile as prometheus_write_textfile
from pydantic import Field

from kbackup.core.config import StrictModel
from kbackup.core.errors import ConfigError
from kbackup.core.logs import get_logger

log = get_logger("metrics")

#: A request to the source unanswered for this long makes the run not ready (a healthy cluster
#: answers in milliseconds; a broker that went away leaves the request waiting for its timeout).
SLOW_ANSWER_SECS = 10.0


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


#: What a metric is: prometheus-client's type for each kind a declaration names.
MetricKind = Literal["counter", "gauge", "histogram", "info"]
_METRIC_TYPES: dict[str, Any] = {"counter": Counter, "gauge": Gauge, "histogram": Histogram, "info": Info}


@dataclass(frozen=True)
class MetricDeclaration:
    """One metric a run exports, as docs/observability.md lists it. Every metric carries the
    ``backup_id`` label first; ``labels`` are the ones after it."""

    name: str
    kind: MetricKind
    help: str
    labels: tuple[str, ...] = ()
    #: A histogram's bucket bounds (prometheus-client's defaults when None).
    buckets: tuple[float, ...] | None = None


def declare_metrics(registry: CollectorRegistry, table: Mapping[str, MetricDeclaration]) -> dict[str, Any]:
    """The metrics of ``table`` registered in ``registry``, under the table's keys, in the table's
    order (the order of the exposition)."""
    metrics: dict[str, Any] = {}
    for key, declared in table.items():
        options = {"buckets": declared.buckets} if declared.buckets is not None else {}
        metrics[key] = _METRIC_TYPES[declared.kind](
            declared.name, declared.help, ["backup_id", *declared.labels], registry=registry, **options
        )
    return metrics


def request_metrics(cluster: str) -> dict[str, MetricDeclaration]:
    """The metrics of every run: the requests to the storage and to the ``cluster`` it reads or writes."""
    return {
        "storage_errors": MetricDeclaration(
            "kafka_backup_storage_errors",
            "counter",
            "Storage requests that failed, by operation and kind (transient: retried; permanent).",
            ("operation", "kind"),
        ),
        "storage_retries": MetricDeclaration(
            "kafka_backup_storage_retries",
            "counter",
            "Storage requests sent again after a transient failure, by operation.",
            ("operation",),
        ),
        "cluster_errors": MetricDeclaration(
            f"kafka_backup_{cluster}_errors",
            "counter",
            f"Errors the {cluster} cluster's clients reported (a broker down, a request that failed), "
            "by kind.",
            ("kind",),
        ),
        "cluster_reachable": MetricDeclaration(
            f"kafka_backup_{cluster}_reachable",
            "gauge",
            f"1 when the last request to the {cluster} cluster succeeded (what /readyz checks), else 0.",
        ),
        "storage_reachable": MetricDeclaration(
            "kafka_backup_storage_reachable",
            "gauge",
            "1 when the last storage request succeeded (what /readyz checks), else 0.",
        ),
    }


class RunTiming(TypedDict, total=False):
    """How a run's metrics tell time, as :class:`RunMetrics` takes it (a stage's metrics pass it on):
    the health window, the wall clock (Unix time) and the monotonic clock (tests move both by hand)."""

    health_window_secs: float
    wall_clock: Callable[[], float]
    clock: Callable[[], float]


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
        declared = declare_metrics(self.registry, request_metrics(cluster))
        self._storage_errors = declared["storage_errors"]
        self._storage_retries = declared["storage_retries"]
        self._cluster_errors = declared["cluster_errors"]
        health = self.health
        cluster_reachable, storage_reachable = declared["cluster_reachable"], declared["storage_reachable"]
        cluster_reachable.labels(backup_id).set_function(lambda: float(health.source_reachable()))
        storage_reachable.labels(backup_id).set_function(lambda: float(health.storage_reachable()))

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
