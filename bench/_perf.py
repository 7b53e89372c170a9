"""Helpers for the backup benchmark: Kafka's own perf tools and a measured kafka-backup subprocess."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from kbackup.sandbox.jars import KAFKA_VERSION, kafka_libs


def create_topic(
    bootstrap: str, topic: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    """Create a topic of the cluster's default replication factor (1 on one node, 3 on three) and
    wait until the broker has it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    for future in admin.create_topics([NewTopic(topic, partitions, -1, config=config or {})]).values():
        future.result(60)


def java_tool(main_class: str, *args: str, timeout: float = 900) -> str:
    """Run one of Kafka's tools from the sandbox's jars; its stdout."""
    command = ["java", "-Xmx1g", "-cp", f"{kafka_libs()}/*", main_class, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"{main_class} failed ({result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )
    return result.stdout


def produce_perf(bootstrap: str, topic: str, records: int, record_size: int) -> str:
    """Fill a topic with ProducerPerformance (random payload, acks=1); its summary line."""
    out = java_tool(
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic", topic,
        "--num-records", str(records),
        "--record-size", str(record_size),
        "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1", "linger.ms=20", "batch.size=262144",
    )  # fmt: skip
    return out.strip().splitlines()[-1]


@dataclass(frozen=True)
class ConsumerPerfResult:
    records: int
    megabytes: float
    #: Start to end of consumption (includes joining the group), as the tool reports it.
    mb_per_sec: float
    records_per_sec: float
    #: The same without the group join ("fetch.*" columns).
    fetch_mb_per_sec: float
    fetch_records_per_sec: float


def consumer_perf(
    bootstrap: str, topic: str, records: int, properties: dict[str, str] | None = None
) -> ConsumerPerfResult:
    """ConsumerPerformance reading ``records`` of ``topic``; ``properties`` go to its consumer."""
    extra = [
        arg for key, value in (properties or {}).items() for arg in ("--command-property", f"{key}={value}")
    ]
    out = java_tool(
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server", bootstrap,
        "--topic", topic,
        "--num-records", str(records),
        "--timeout", "60000",
        "--group", f"perf-{topic}-{time.monotonic_ns()}",
        *extra,
    )  # fmt: skip
    lines = [line for line in out.splitlines() if line.strip()]
    header = [name.strip() for name in lines[-2].split(",")]
    values = [value.strip() for value in lines[-1].split(",")]
    row = dict(zip(header, values, strict=True))
    return ConsumerPerfResult(
        records=int(row["data.consumed.in.nMsg"]),
        megabytes=float(row["data.consumed.in.MB"]),
        mb_per_sec=float(row["MB.sec"]),
        records_per_sec=float(row["nMsg.sec"]),
        fetch_mb_per_sec=float(row["fetch.MB.sec"]),
        fetch_records_per_sec=float(row["fetch.nMsg.sec"]),
    )


@dataclass(frozen=True)
class BackupRunResult:
    records: int
    #: The run's own duration (connect, group snapshot, copy, upload, manifest).
    seconds: float
    #: The process from exec to exit (adds Python start-up and imports).
    wall_seconds: float
    peak_rss_bytes: int
    stored_bytes: int
    #: User and system CPU seconds of the process (wait4's rusage), all its threads.
    cpu_seconds: float = 0.0


class StartedBackup:
    """A ``kafka-backup backup`` child process started by ``start_backup``; ``finish`` waits for it."""

    def __init__(self, command: Sequence[str], scratch: Path) -> None:
        self._scratch = scratch
        self._out_path = scratch / "out.json"
        self.started = time.monotonic()
        with self._out_path.open("w") as out, open(os.devnull, "w") as err:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=err, env={**os.environ, "KBACKUP_NO_PROGRESS": "1"}
            )

    def finish(self) -> BackupRunResult:
        """Wait for the process; its peak RSS and CPU come from wait4's rusage."""
        try:
            _, status, usage = os.wait4(self.process.pid, 0)
            wall = time.monotonic() - self.started
            self.process.returncode = os.waitstatus_to_exitcode(status)
            if self.process.returncode != 0:
                raise RuntimeError(
                    f"backup failed ({self.process.returncode}): {self._out_path.read_text()[-2000:]}"
                )
            summary = json.loads(self._out_path.read_text())
        finally:
            shutil.rmtree(self._scratch, ignore_errors=True)
        return BackupRunResult(
            records=int(summary["records"]),
            seconds=float(summary["seconds"]),
            wall_seconds=wall,
            peak_rss_bytes=int(usage.ru_maxrss) * 1024,  # Linux reports KiB
            stored_bytes=int(summary["bytes"]),
            cpu_seconds=usage.ru_utime + usage.ru_stime,
        )


def start_backup(
    bootstrap: str,
    topic: str,
    storage_dir: Path | dict[str, object],
    backup_id: str,
    flags: Sequence[str] = (),
    /,
    **settings: object,
) -> StartedBackup:
    """Start ``kafka-backup backup`` (with ``flags``) as a child process, without waiting for it.
    ``storage_dir`` is a folder or a whole ``storage`` section; ``settings`` go into the config's
    ``backup`` section."""
    config = {
        "backup_id": backup_id,
        "source": {"bootstrap_servers": [bootstrap], "topics": {"include": [topic]}},
        "storage": {"url": str(storage_dir)} if isinstance(storage_dir, Path) else storage_dir,
        "backup": {"consumer_group_snapshot": True, **settings},
    }
    scratch = Path(tempfile.mkdtemp(prefix="bench-"))
    config_path = scratch / "backup.yaml"
    config_path.write_text(json.dumps(config))  # JSON is YAML
    command = [sys.executable, "-m", "kbackup", "backup", "-c", str(config_path), "--json", *flags]
    return StartedBackup(command, scratch)


def measured_backup(
    bootstrap: str,
    topic: str,
    storage_dir: Path | dict[str, object],
    backup_id: str,
    flags: Sequence[str] = (),
    /,
    **settings: object,
) -> BackupRunResult:
    """Run ``kafka-backup backup`` (with ``flags``) as a child process and wait for it."""
    return start_backup(bootstrap, topic, storage_dir, backup_id, flags, **settings).finish()


def cluster_words(nodes: int) -> str:
    """The cluster a benchmark ran on, as its report names it."""
    if nodes == 1:
        return f"one local Kafka {KAFKA_VERSION} broker (KRaft, loopback)"
    return (
        f"a local {nodes}-node Kafka {KAFKA_VERSION} cluster (KRaft, loopback, replication factor "
        f"{min(nodes, 3)}, min.insync.replicas={min(nodes, 2)})"
    )


def cluster_heading(nodes: int) -> str:
    """:func:`cluster_words` as a heading (capital first letter, the rest as written)."""
    words = cluster_words(nodes)
    return words[0].upper() + words[1:]


def node_counts_of(text: str) -> list[int]:
    """``--nodes``: one count or several, comma-separated (``1,3``)."""
    try:
        counts = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--nodes takes node counts such as 1 or 1,3, not {text!r}"
        ) from None
    if not counts or not all(1 <= count <= 3 for count in counts):
        raise argparse.ArgumentTypeError(f"--nodes takes counts from 1 to 3, not {text!r}")
    return counts


def refuse_smoke_figures_in_docs(args: argparse.Namespace) -> None:
    """Stop (exit 2, one line on stderr) when a benchmark is asked for ``--quick --write-docs``: smoke
    sizes must never replace the full-size figures in docs/benchmarks.md. Every benchmark calls this
    right after parsing its arguments, before it starts anything."""
    if getattr(args, "quick", False) and getattr(args, "write_docs", False):
        print(
            f"{Path(sys.argv[0]).name}: error: --quick --write-docs refused: --quick measures smoke "
            "sizes, whose figures must not go into docs/benchmarks.md (drop one of the two)",
            file=sys.stderr,
        )
        raise SystemExit(2)


def replace_section(document: Path, start_marker: str, end_marker: str, body: str) -> None:
    """Write ``body`` between the markers in ``document`` (created if needed); the rest is kept."""
    text = document.read_text() if document.exists() else "# Benchmarks\n"
    section = f"{start_marker}\n{body.strip()}\n{end_marker}"
    pattern = re.compile(re.escape(start_marker) + r".*?" + re.escape(end_marker), re.DOTALL)
    text = (
        pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip() + f"\n\n{section}\n"
    )
    document.write_text(text if text.endswith("\n") else text + "\n")


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants now (from /proc; any that ended meanwhile are left out)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        try:
            children: list[int] = []
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as listed:
                    children.extend(int(child) for child in listed.read().split())
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        found.append(current)
        pending.extend(children)
    return found


def _tree_rss_bytes(pid: int) -> int:
    """Resident bytes of a process and all its descendants now (0 for any that ended meanwhile)."""
    total = 0
    for current in process_tree(pid):
        try:
            with open(f"/proc/{current}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


def vmhwm_bytes(pid: int | None = None) -> int | None:
    """A process's peak resident bytes since its exec (the kernel's VmHWM; ``pid`` None: this
    process); None once it is gone. ``ru_maxrss`` of a child counts the parent it was forked from."""
    try:
        with open(f"/proc/{pid or 'self'}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return None


def run_with_tree_peak_rss(command: list[str], *, interval: float = 0.2) -> tuple[int, float, int]:
    """Run ``command``; (exit code, seconds, peak resident bytes of it and its child processes).

    The peak is sampled every ``interval`` seconds: a process tree (Python driving a Spark JVM)
    has no single rusage figure that adds the two up.
    """
    import threading

    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(interval):
            peak = max(peak, _tree_rss_bytes(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    code = process.wait()
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    return code, seconds, peak
