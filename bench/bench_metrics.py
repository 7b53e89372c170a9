"""What serving the metrics and scraping them costs a backup, and how long a scrape takes for a
topic of 1,000 partitions.

    .venv/bin/python -m bench.bench_metrics [--records N] [--repeat R] [--partitions P]
                                            [--wide-partitions W] [--scrapes S] [--quick]
                                            [--write-docs]

What it measures: serving and scraping only, not collecting. ``kafka-backup backup`` always
collects its metrics: a run builds its ``BackupMetrics`` (its registry) whatever the flags
say, and the copy loop updates its counters and lag gauges once per batch whether or not anything
reads them; ``--metrics-port`` and ``--metrics-textfile`` only decide whether they are served over
HTTP and written to a file (``exported`` in kbackup/core/metrics.py). The product has no switch that
turns collection off, so both sides of each pair collect, and the cost of collecting is in both.

Starts one local single-node cluster and fills a topic of 1 KiB records with ProducerPerformance
(the 1 KiB topic of bench_backup). Each pair then runs two ``kafka-backup backup`` processes at
the same time, one not served (no ``--metrics-port``, no ``--metrics-textfile``) and one with
``--metrics-port`` scraped over HTTP every second, so that both see the same machine (run one
after the other on a shared host, two identical runs differ by 10-20 %); the median of the
paired ratios, of records/s and of CPU seconds per record, is judged against the issue's bound
(under 3%), for serving and scraping.

Then a topic of ``--wide-partitions`` partitions is backed up with ``--follow --metrics-port``;
once its exposition holds a lag series per partition, it is scraped ``--scrapes`` times and each
scrape timed (as Prometheus sees it: request to last byte), beside the time the registry alone
takes to render.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench._perf import (
    BackupRunResult,
    create_topic,
    measured_backup,
    produce_perf,
    refuse_smoke_figures_in_docs,
    replace_section,
    start_backup,
)
from bench._stats import rotated
from kbackup.sandbox.kafka import free_port, local_clusters

START_MARKER = "<!-- metrics:start -->"
END_MARKER = "<!-- metrics:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
#: Seconds between two scrapes during a measured backup (the issue's "scraped every second").
SCRAPE_INTERVAL_SECS = 1.0
#: The two sides of a pair: both collect metrics (a backup always does); one serves them.
UNSERVED, SERVED = "not served", "served and scraped"
SIDES = (UNSERVED, SERVED)
#: The issue's bound on what serving and scraping may cost.
BOUND = 0.03


def get(port: int, path: str = "/metrics", timeout: float = 10) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as answer:
        body: bytes = answer.read()
        return body


class Scraper:
    """Scrapes ``/metrics`` every SCRAPE_INTERVAL_SECS on a thread, as Prometheus would."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.scrapes = 0
        self.seconds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_INTERVAL_SECS):
            started = time.monotonic()
            try:
                get(self.port)
            except (urllib.error.URLError, ConnectionError):
                continue  # not listening yet, or gone: the run is starting or ending
            self.seconds.append(time.monotonic() - started)
            self.scrapes += 1

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)


@dataclass(frozen=True)
class CostRow:
    records: int
    #: Backups whose metrics nobody reads (collected all the same: the product always collects).
    unserved: tuple[BackupRunResult, ...]
    #: Backups with ``--metrics-port``, scraped every second.
    served: tuple[BackupRunResult, ...]
    scrapes: int
    scrape_seconds: tuple[float, ...]

    @property
    def paired(self) -> tuple[float, ...]:
        """served / unserved records/s of each pair of runs made at the same time."""
        return tuple(on.records / on.seconds / (off.records / off.seconds) for off, on in self._pairs)

    @property
    def paired_cpu(self) -> tuple[float, ...]:
        """served / unserved CPU seconds per record of each pair."""
        return tuple(
            (on.cpu_seconds / on.records) / (off.cpu_seconds / off.records) for off, on in self._pairs
        )

    @property
    def _pairs(self) -> list[tuple[BackupRunResult, BackupRunResult]]:
        return list(zip(self.unserved, self.served, strict=True))

    @property
    def cost(self) -> float:
        """The throughput lost to serving and scraping, from the median paired ratio (0.01: 1%)."""
        return 1 - statistics.median(self.paired)

    @property
    def cpu_cost(self) -> float:
        """The CPU per record added by serving and scraping, from the median paired ratio (0.01: 1%)."""
        return statistics.median(self.paired_cpu) - 1


def measure_cost(bootstrap: str, topic: str, records: int, repeat: int, work: Path) -> CostRow:
    """``repeat`` pairs of backups of ``topic``, the two of a pair running at the same time: one
    not served (its metrics collected all the same), one with ``--metrics-port`` scraped every second.

    Run one after the other, two identical backups on this (virtual) machine differ by 10-20 % in
    records/s and in CPU per record, as the host's speed moves; run at the same time, they see the
    same host, and a pair's ratio moves by about 4 %. Which of the two starts first alternates.
    """
    unserved: list[BackupRunResult] = []
    served: list[BackupRunResult] = []
    scrapes = 0
    scrape_seconds: list[float] = []
    for attempt in range(repeat):
        # The last pair's dirty pages are written back now, not during this pair.
        os.sync()
        port = free_port()
        stores = {side: work / f"{topic}-{side.split()[0]}-{attempt}" for side in SIDES}
        with Scraper(port) as scraper:
            started = {}
            for side in rotated(SIDES, attempt):
                flags = ["--metrics-port", str(port)] if side == SERVED else []
                started[side] = start_backup(bootstrap, topic, stores[side], "bench", flags)
            pair = {side: started[side].finish() for side in SIDES}
        scrapes += scraper.scrapes
        scrape_seconds.extend(scraper.seconds)
        for side, result in pair.items():
            if result.records != records:
                raise RuntimeError(f"backup ({side}) copied {result.records} records of {records}")
            shutil.rmtree(stores[side], ignore_errors=True)
        unserved.append(pair[UNSERVED])
        served.append(pair[SERVED])
        print(
            f"  pair {attempt + 1}: "
            + " ".join(
                f"{side} {result.records / result.seconds:,.0f} rec/s, "
                f"{result.cpu_seconds / result.records * 1e6:.2f} CPU us/record"
                for side, result in pair.items()
            ),
            flush=True,
        )
    return CostRow(records, tuple(unserved), tuple(served), scrapes, tuple(scrape_seconds))


@dataclass(frozen=True)
class ScrapeRow:
    partitions: int
    scrapes: int
    seconds: tuple[float, ...]
    exposition_bytes: int
    #: The registry of a backup with as many partitions, rendered in this process (no HTTP).
    render_seconds: float


def registry_render_seconds(partitions: int, rounds: int = 20) -> float:
    """Median time prometheus-client takes to render a backup's registry holding ``partitions``."""
    from prometheus_client import generate_latest

    from kbackup.backup.metrics import BackupMetrics

    metrics = BackupMetrics("bench", mode="follow")
    metrics.records_copied("wide", 1)
    for partition in range(partitions):
        metrics.partition_lag("wide", partition, records=partition, oldest_timestamp_ms=None)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        generate_latest(metrics.registry)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure_scrape(bootstrap: str, topic: str, partitions: int, scrapes: int, work: Path) -> ScrapeRow:
    """A follow backup of a ``partitions``-partition topic, scraped ``scrapes`` times once every
    partition has its lag series."""
    port = free_port()
    config = work / "wide.yaml"
    config.write_text(
        json.dumps(
            {
                "backup_id": "bench-wide",
                "source": {"bootstrap_servers": [bootstrap], "topics": {"include": [topic]}},
                "storage": {"url": str(work / "wide-store")},
            }
        )
    )
    command = [sys.executable, "-m", "kbackup", "backup", "-c", str(config), "--follow"]
    process = subprocess.Popen(
        [*command, "--metrics-port", str(port), "--metrics-bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
    )
    try:
        deadline = time.monotonic() + 600
        body = b""
        while body.count(b"kafka_backup_lag_records{") < partitions:
            if process.poll() is not None:
                raise RuntimeError(
                    f"the follow backup exited ({process.returncode}) before every partition showed"
                )
            if time.monotonic() > deadline:
                raise RuntimeError("not every partition had its lag series after 600 s")
            time.sleep(1)
            try:
                body = get(port)
            except (urllib.error.URLError, ConnectionError):
                continue
        seconds = []
        for _ in range(scrapes):
            started = time.monotonic()
            body = get(port)
            seconds.append(time.monotonic() - started)
            time.sleep(0.2)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(120)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(30)
    return ScrapeRow(partitions, scrapes, tuple(seconds), len(body), registry_render_seconds(partitions))


def cost_table(row: CostRow) -> str:
    off_rate = statistics.median(run.records / run.seconds for run in row.unserved)
    on_rate = statistics.median(run.records / run.seconds for run in row.served)
    scrape_ms = statistics.median(row.scrape_seconds) * 1000 if row.scrape_seconds else float("nan")
    spread = statistics.stdev(row.paired) if len(row.paired) > 1 else float("nan")
    return "\n".join(
        [
            "| records (1 KiB) | pairs | not served rec/s (median) | served, scraped every second, "
            "rec/s (median) | median paired ratio | cost | stdev of the paired ratios "
            "| CPU per record, median paired ratio | CPU cost | scrapes | median scrape |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {row.records:,} | {len(row.paired)} | {off_rate:,.0f} | {on_rate:,.0f} "
            f"| {statistics.median(row.paired):.3f} | {row.cost * 100:.1f}% | {spread:.3f} "
            f"| {statistics.median(row.paired_cpu):.3f} | {row.cpu_cost * 100:.1f}% | {row.scrapes} "
            f"| {scrape_ms:.1f} ms |",
        ]
    )


def scrape_table(row: ScrapeRow) -> str:
    ordered = sorted(row.seconds)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return "\n".join(
        [
            "| partitions | scrapes | median | p95 | max | exposition | registry rendered in-process |",
            "|---:|---:|---:|---:|---:|---:|---:|",
            f"| {row.partitions:,} | {row.scrapes} | {statistics.median(ordered) * 1000:.1f} ms "
            f"| {p95 * 1000:.1f} ms | {ordered[-1] * 1000:.1f} ms | {row.exposition_bytes / 1024:,.0f} KiB "
            f"| {row.render_seconds * 1000:.1f} ms |",
        ]
    )


def verdict_line(row: CostRow) -> str:
    """The bound, judged on both costs: the throughput ratio, and the CPU per record that bounds it
    on a busy machine; it says what was measured (serving and scraping), and what was not."""
    verdict = "met" if max(row.cost, row.cpu_cost) < BOUND else "not met"
    return (
        f"Target (serving the metrics and scraping them every second cost under {BOUND:.0%}): "
        f"**{verdict}**. The cost of collecting them is not measured: both sides collect."
    )


def section(
    row: CostRow,
    costs: str,
    scrapes: str,
    command: str,
    wide_partitions: int,
    loads: tuple[tuple[float, float, float], tuple[float, float, float]],
) -> str:
    """The Metrics section of docs/benchmarks.md."""
    (start_1, start_5, start_15), (end_1, end_5, end_15) = loads
    return "\n".join(
        [
            "## Metrics: the cost of serving and scraping them",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d} with `.venv/bin/python -m bench.bench_metrics "
            f"{command}` on {os.cpu_count()} cores ({platform.machine()}, Python "
            f"{platform.python_version()}), one local single-node broker, a local folder as storage. Load "
            f"average (1/5/15 min) at the start {start_1:.1f} / {start_5:.1f} / {start_15:.1f}, at the end "
            f"{end_1:.1f} / {end_5:.1f} / {end_15:.1f}.",
            "",
            "What this measures: serving the metrics over HTTP and scraping them, not collecting them. "
            "A backup always collects its metrics (the command builds their registry whatever its flags "
            "say, and the copy loop updates the counters and lag gauges once per batch); "
            "`--metrics-port` and `--metrics-textfile` only serve or write what is collected, and there "
            "is no setting that turns collection off. So both sides below collect, and what collecting "
            "costs is in both.",
            "",
            "Backup throughput not served (neither `--metrics-port` nor `--metrics-textfile`), and served "
            "with `--metrics-port` and scraped every second: each pair is two backups of the topic "
            "running at the same time, one of each, so both see the same machine (which of them starts "
            "first alternates). Their records/s are about half of a backup running alone, as two share "
            "the two cores:",
            "",
            costs,
            "",
            f"{verdict_line(row)} Judged on both costs: 1 - the median paired ratio of records/s, and "
            "the median paired ratio of the backup process's CPU seconds per record - 1. Pairs run at "
            "the same time because runs made one after the other on this shared host move by 10-20 % "
            "in both records/s and CPU per record as the host's speed changes, which buries a 3 % "
            "effect.",
            "",
            f"Scrape time of a `--follow` backup of a {wide_partitions:,}-partition topic (a lag series "
            "in records and one in seconds per partition), request to last byte:",
            "",
            scrapes,
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=250_000, help="records of 1 KiB in the measured topic")
    parser.add_argument(
        "--repeat",
        type=int,
        default=4,
        help="pairs of backups (not served, served and scraped) run at once",
    )
    parser.add_argument("--partitions", type=int, default=1, help="partitions of the measured topic")
    parser.add_argument("--wide-partitions", type=int, default=1000, help="partitions of the scraped topic")
    parser.add_argument("--scrapes", type=int, default=50, help="timed scrapes of the wide topic's backup")
    parser.add_argument("--write-docs", action="store_true", help=f"write the results into {DOC}")
    parser.add_argument("--quick", action="store_true", help="10,000 records, one round, 100 partitions")
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    if args.quick:
        args.records, args.repeat, args.wide_partitions, args.scrapes = 10_000, 1, 100, 5
    start_load = os.getloadavg()

    with (
        tempfile.TemporaryDirectory(prefix="kbackup-bench-") as work_dir,
        local_clusters(["bench"]) as clusters,
    ):
        work = Path(work_dir)
        bootstrap = clusters[0].bootstrap_servers
        topic = f"bench-1024b-{args.records}"
        create_topic(bootstrap, topic, args.partitions)
        print(f"{topic}: {produce_perf(bootstrap, topic, args.records, 1024)}", flush=True)
        # JIT, page cache and Python imports warm before anything is timed.
        measured_backup(bootstrap, topic, work / "warm-up", "bench")
        shutil.rmtree(work / "warm-up", ignore_errors=True)
        cost = measure_cost(bootstrap, topic, args.records, args.repeat, work)
        wide = f"bench-wide-{args.wide_partitions}"
        create_topic(bootstrap, wide, args.wide_partitions)
        print(f"{wide}: {produce_perf(bootstrap, wide, args.wide_partitions * 20, 100)}", flush=True)
        scrape = measure_scrape(bootstrap, wide, args.wide_partitions, args.scrapes, work)

    costs, scrapes = cost_table(cost), scrape_table(scrape)
    print()
    print(costs)
    print()
    print(scrapes)
    print(f"\n{verdict_line(cost)}")
    if args.write_docs:
        load = os.getloadavg()
        command = (
            f"--records {args.records} --repeat {args.repeat} --partitions {args.partitions} "
            f"--wide-partitions {args.wide_partitions} --scrapes {args.scrapes}"
        )
        body = section(cost, costs, scrapes, command, args.wide_partitions, (start_load, load))
        replace_section(DOC, START_MARKER, END_MARKER, body)
        print(f"\nwritten to {DOC}")


if __name__ == "__main__":
    main()
