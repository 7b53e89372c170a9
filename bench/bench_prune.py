"""Prune of a backup of 10,000 increments and 100,000 segments, on a folder and on moto's S3 server.

    .venv/bin/python -m bench.bench_prune [--increments N] [--segments-per-increment S]
                                          [--partitions P] [--quick] [--write-docs]

Writes one synthetic backup per store in the real layout and format (kbackup.format: manifests of
``--increments`` chained increments, each listing ``--segments-per-increment`` segments spread over
``--partitions`` partitions, consecutive offsets per partition, record times one minute per
increment, a consumer-group snapshot in each), with every segment object present (a few bytes
each: the prune reads manifests and listings, never a segment). Generation is not measured.

Then, for each store (a local folder, then a bucket of ``moto.server`` started on loopback), three
child processes of this module (``--child``), each timed from exec to exit and its peak RSS taken
from ``os.wait4``'s rusage:

- *idle*: imports what a prune imports, opens the storage and exits (the floor of the RSS);
- *plan*: ``plan_prune`` of a ``before`` policy that cuts the backup in half (every segment of the
  first half of the increments holds only older records), nothing removed;
- *execute*: the same ``plan_prune``, then ``execute_prune`` (retention generation, then the
  deletes, batched by the store's ``delete_batch_size``: 1,000 per DeleteObjects on S3).

The child calls the functions ``kafka-backup prune --before TIME [--execute]`` calls, without the
CLI's progress bar and JSON printing, and counts the S3 requests the storage makes through its
``observer`` (kbackup.storage.base.RequestObserver: each request the storage reports, by
operation); moto's own access log, read by this process, counts the HTTP requests the server
received as a cross-check. Afterwards the pruned backup is loaded again and its remaining objects
counted against what the cut should leave.

``--write-docs`` replaces the section between ``<!-- prune:start -->`` and ``<!-- prune:end -->``
of docs/benchmarks.md (appending it when absent).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench._perf import refuse_smoke_figures_in_docs, replace_section, vmhwm_bytes
from kbackup.sandbox.emulators import S3Server

START_MARKER = "<!-- prune:start -->"
END_MARKER = "<!-- prune:end -->"
REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
BACKUP_ID = "bench-prune"
TOPIC = "bench-prune"
BUCKET = "bench-prune"
S3_PREFIX = "backups"
#: The records of increment i lie in [FIRST_TIME + i minutes, FIRST_TIME + i + 1 minutes).
FIRST_TIME = datetime(2025, 1, 1, tzinfo=UTC)
INCREMENT_SPAN = timedelta(minutes=1)
RECORDS_PER_SEGMENT = 100
#: The bytes of every segment object: the prune never reads one, only its size in listings.
SEGMENT_BYTES = b"kafka-backup bench_prune synthetic segment\n"
SEGMENT_SHA256 = hashlib.sha256(SEGMENT_BYTES).hexdigest()
GROUP_ID = "bench-prune-group"
#: S3 objects written at once while generating the bucket.
UPLOAD_THREADS = 16
#: What the storage's observer calls each operation -> the S3 request kind it is.
OBSERVED_KINDS = {
    "list": "list",
    "read": "get",
    "download": "get",
    "look up": "head",
    "write": "put",
    "upload": "put",
    "delete": "delete",
}
KINDS = ("list", "get", "head", "put", "delete")


# -- the synthetic backup ----------------------------------------------------------------------------


def increment_start(increment: int) -> datetime:
    return FIRST_TIME + increment * INCREMENT_SPAN


def cut_time(increments: int) -> datetime:
    """The ``before`` time that removes every segment of the first half of the increments."""
    return increment_start(increments // 2)


def synthetic_backup(
    increments: int, segments_per_increment: int, partitions: int
) -> Iterator[tuple[str, bytes]]:
    """(key below the storage root, bytes) of every object of the backup: each increment's
    segments, then its manifest."""
    from kbackup.format.layout import manifest_key, object_key, segment_key
    from kbackup.format.manifest import (
        ConsumerGroupsSnapshot,
        GroupOffset,
        GroupSnapshot,
        Manifest,
        PartitionEntry,
        SegmentEntry,
        SourceInfo,
        TopicEntry,
    )

    next_offset = [0] * partitions
    previous_run_id: str | None = None
    span_ms = int(INCREMENT_SPAN.total_seconds() * 1000)
    for increment in range(increments):
        started = increment_start(increment)
        run_id = f"{started:%Y%m%dT%H%M%SZ}-{increment:08x}"
        base_ms = int(started.timestamp() * 1000)
        counts = [
            len(range(partition, segments_per_increment, partitions)) for partition in range(partitions)
        ]
        entries: list[PartitionEntry] = []
        segments: list[SegmentEntry] = []
        for partition, count in enumerate(counts):
            start = next_offset[partition]
            step = span_ms // max(count, 1)
            for index in range(count):
                first = start + index * RECORDS_PER_SEGMENT
                key = segment_key(TOPIC, partition, first, run_id)
                segments.append(
                    SegmentEntry(
                        key=key,
                        topic=TOPIC,
                        partition=partition,
                        first_offset=first,
                        last_offset=first + RECORDS_PER_SEGMENT - 1,
                        record_count=RECORDS_PER_SEGMENT,
                        size_bytes=len(SEGMENT_BYTES),
                        sha256=SEGMENT_SHA256,
                        min_timestamp=base_ms + index * step,
                        max_timestamp=base_ms + (index + 1) * step - 1,
                    )
                )
                yield object_key(BACKUP_ID, key), SEGMENT_BYTES
            end = start + count * RECORDS_PER_SEGMENT
            entries.append(
                PartitionEntry(
                    topic=TOPIC,
                    partition=partition,
                    start_offset=start,
                    end_offset=end,
                    log_start_offset=0,
                    record_count=end - start,
                    first_offset=start if count else None,
                    last_offset=end - 1 if count else None,
                    min_timestamp=base_ms if count else None,
                    max_timestamp=base_ms + count * step - 1 if count else None,
                )
            )
            next_offset[partition] = end
        manifest = Manifest(
            backup_id=BACKUP_ID,
            increment=increment,
            run_id=run_id,
            previous_run_id=previous_run_id,
            tool_version="bench-prune-synthetic",
            started_at=_iso(started),
            finished_at=_iso(started + INCREMENT_SPAN),
            source=SourceInfo(cluster_id="bench-source"),
            settings={"isolation_level": "read_committed", "compression": "zstd"},
            topics=[TopicEntry(name=TOPIC, partitions=partitions)],
            partitions=entries,
            segments=segments,
            consumer_groups=ConsumerGroupsSnapshot(
                taken_at=_iso(started),
                groups=[
                    GroupSnapshot(
                        group_id=GROUP_ID,
                        state="Empty",
                        offsets=[
                            GroupOffset(topic=TOPIC, partition=partition, offset=next_offset[partition])
                            for partition in range(partitions)
                        ],
                    )
                ],
            ),
        )
        yield manifest_key(BACKUP_ID, increment), manifest.to_json_bytes()
        previous_run_id = run_id


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def write_folder(root: Path, objects: Iterator[tuple[str, bytes]]) -> int:
    """Write the objects as files below ``root`` directly (LocalStorage's layout, without its
    fsync per object: generation is not measured); the number written."""
    written = 0
    made: set[Path] = set()
    for key, data in objects:
        path = root / key
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        path.write_bytes(data)
        written += 1
    os.sync()  # nothing of the generation is written back during a measurement
    return written


# -- moto's S3 server --------------------------------------------------------------------------------

_REQUEST_LINE = re.compile(r'"(GET|PUT|POST|HEAD|DELETE) (\S+) HTTP/[\d.]+" (\d{3})')


@dataclass(kw_only=True)
class MotoServer(S3Server):
    """moto's server on a loopback port; its access log (werkzeug's, on stderr) read back to count
    the requests each prune made."""

    def storage(self) -> dict[str, str]:
        """The ``storage:`` section of a config pointing at the bucket."""
        return self.storage_settings(BUCKET, S3_PREFIX)

    def log_offset(self) -> int:
        return self.log_path.stat().st_size

    def requests_since(self, offset: int) -> Counter[str]:
        """HTTP requests moto logged after ``offset`` of its log, by S3 request kind."""
        time.sleep(0.5)  # werkzeug logs a request after answering it: the last line may lag
        with self.log_path.open("rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
        found: Counter[str] = Counter()
        for match in _REQUEST_LINE.finditer(text):
            method, target = match.group(1), match.group(2)
            if method == "GET":
                found["list" if "list-type=" in target or target.rstrip("/").count("/") <= 1 else "get"] += 1
            elif method == "POST" and "delete" in target:
                found["delete"] += 1
            else:
                found[{"PUT": "put", "HEAD": "head", "DELETE": "delete"}.get(method, method.lower())] += 1
        return found


def write_bucket(storage: dict[str, str], objects: Iterator[tuple[str, bytes]]) -> int:
    """Create the bucket and put every object with a thread pool of plain boto3 calls."""
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "s3",
        endpoint_url=storage["endpoint_url"],
        region_name=storage["region"],
        aws_access_key_id=storage["access_key_id"],
        aws_secret_access_key=storage["secret_access_key"],
        config=Config(max_pool_connections=UPLOAD_THREADS, s3={"addressing_style": "path"}),
    )
    client.create_bucket(Bucket=BUCKET)
    written = 0

    def put(item: tuple[str, bytes]) -> None:
        client.put_object(Bucket=BUCKET, Key=f"{S3_PREFIX}/{item[0]}", Body=item[1])

    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        chunk: list[tuple[str, bytes]] = []
        for item in objects:
            chunk.append(item)
            if len(chunk) == 2000:
                written += sum(1 for _ in pool.map(put, chunk))
                chunk = []
        written += sum(1 for _ in pool.map(put, chunk))
    return written


# -- the measured child process ----------------------------------------------------------------------


class CountingObserver:
    """A RequestObserver that counts each request the storage reports, by S3 request kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.succeeded: Counter[str] = Counter()
        self.failed = 0
        self.retried = 0

    def storage_request_succeeded(self, operation: str) -> None:
        with self._lock:
            self.succeeded[OBSERVED_KINDS.get(operation, operation)] += 1

    def storage_request_failed(self, operation: str, *, transient: bool) -> None:
        with self._lock:
            self.failed += 1

    def storage_request_retried(self, operation: str) -> None:
        with self._lock:
            self.retried += 1

    def take(self) -> dict[str, Any]:
        """The counts so far, then start again from zero."""
        with self._lock:
            counts = {"requests": dict(self.succeeded), "failed": self.failed, "retried": self.retried}
            self.succeeded, self.failed, self.retried = Counter(), 0, 0
        return counts


#: The storage methods a prune calls, each timed in the child (``exists`` and ``delete`` are left
#: out: the base class calls them from inside these).
TIMED_METHODS = ("list", "list_prefixes", "get_bytes", "put_bytes_if_absent", "delete_many")


class StorageTimer:
    """Wall seconds during which at least one call of each of the storage's TIMED_METHODS was in
    flight (a listing: inside its iterator), and the calls. Calls made at the same time from
    several threads (manifests read ``parallel_reads`` at a time) count their common time once."""

    def __init__(self, storage: object) -> None:
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._active: dict[str, int] = {}
        self._since: dict[str, float] = {}
        for name in TIMED_METHODS:
            original = getattr(storage, name)
            setattr(
                storage,
                name,
                self._iterator(name, original) if name == "list" else self._call(name, original),
            )

    def _enter(self, name: str, *, call: bool) -> None:
        with self._lock:
            if call:
                self.calls[name] = self.calls.get(name, 0) + 1
            if self._active.get(name, 0) == 0:
                self._since[name] = time.perf_counter()
            self._active[name] = self._active.get(name, 0) + 1

    def _leave(self, name: str) -> None:
        with self._lock:
            self._active[name] -= 1
            if self._active[name] == 0:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - self._since[name]

    def _call(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._enter(name, call=True)
            try:
                return original(*args, **kwargs)
            finally:
                self._leave(name)

        return timed

    def _iterator(self, name: str, original: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
            self._enter(name, call=True)
            try:
                items = original(*args, **kwargs)
            finally:
                self._leave(name)
            while True:
                self._enter(name, call=False)
                try:
                    item = next(items)
                except StopIteration:
                    return
                finally:
                    self._leave(name)
                yield item

        return timed

    def take(self) -> dict[str, dict[str, Any]]:
        """The calls and seconds so far, by method, then start again from zero."""
        with self._lock:
            found = {
                name: {"calls": self.calls[name], "seconds": self.seconds.get(name, 0.0)}
                for name in self.calls
            }
            self.seconds, self.calls = {}, {}
        return found


def own_peak_rss() -> int:
    """This process's peak resident bytes since its exec (VmHWM). wait4's ru_maxrss is at least
    the parent's peak at the time of the fork (Linux carries the pre-exec image's high-water
    mark over the exec), so the parent stays small and each child reports this as a check."""
    return vmhwm_bytes() or 0


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """What a child process does (``spec["mode"]``: generate, idle, plan, execute or check), as JSON."""
    out = child_work(spec)
    out["own_peak_rss"] = own_peak_rss()
    return out


def child_work(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["mode"] == "generate":
        started = time.monotonic()
        objects = synthetic_backup(*spec["shape"])
        store = spec["storage"]
        written = (
            write_bucket(store, objects)
            if "endpoint_url" in store
            else write_folder(Path(store["url"]), objects)
        )
        return {"mode": "generate", "written": written, "seconds": time.monotonic() - started}
    if spec["mode"] == "check":
        return {"mode": "check", "objects_after": check_pruned(spec["storage"], *spec["shape"][:2])}
    from kbackup.core.config import StorageSettings
    from kbackup.prune.execute import execute_prune
    from kbackup.prune.plan import plan_prune
    from kbackup.prune.settings import RetentionSettings
    from kbackup.storage import open_storage

    storage = open_storage(StorageSettings.model_validate(spec["storage"]))
    counter = CountingObserver()
    storage.observer = counter
    timer = StorageTimer(storage)
    out: dict[str, Any] = {"mode": spec["mode"]}
    if spec["mode"] == "idle":
        return out
    policy = RetentionSettings(before=datetime.fromisoformat(spec["before"]))
    started = time.perf_counter()
    plan = plan_prune(storage, policy, [spec["backup_id"]])
    out["plan_seconds"] = time.perf_counter() - started
    out["plan_requests"] = counter.take()
    out["plan_storage_seconds"] = timer.take()
    out["rss_after_plan"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["parallel_reads"] = int(getattr(storage, "parallel_reads", 1))
    item = plan.backups[0]
    out["plan"] = {
        "action": item.action,
        "increments_before": item.increments_before,
        "increments_after": item.increments_after,
        "segments": len(item.segments),
        "manifests": len(item.manifests),
        "orphans": len(item.orphans),
        "deletes": plan.deletes,
    }
    if spec["mode"] == "execute":
        started = time.perf_counter()
        result = execute_prune(storage, plan)
        out["execute_seconds"] = time.perf_counter() - started
        out["execute_requests"] = counter.take()
        out["execute_storage_seconds"] = timer.take()
        out["objects_removed"] = result.objects_removed
        out["delete_requests"] = result.delete_requests
    return out


@dataclass
class ChildRun:
    out: dict[str, Any]
    #: The process from exec to exit.
    wall_seconds: float
    peak_rss_bytes: int
    #: HTTP requests moto logged while the child ran, by kind (S3 only).
    http_requests: dict[str, int] = field(default_factory=dict)


def run_child(spec: dict[str, Any], server: MotoServer | None) -> ChildRun:
    scratch = Path(tempfile.mkdtemp(prefix="bench-prune-"))
    try:
        out_path, err_path = scratch / "out.json", scratch / "err.txt"
        offset = server.log_offset() if server is not None else 0
        command = [sys.executable, "-m", "bench.bench_prune", "--child", json.dumps(spec)]
        with out_path.open("w") as out, err_path.open("w") as err:
            started = time.monotonic()
            process = subprocess.Popen(command, stdout=out, stderr=err, cwd=REPO)
            _, status, usage = os.wait4(process.pid, 0)
            wall = time.monotonic() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise RuntimeError(
                f"{spec['mode']} child failed ({process.returncode}): {err_path.read_text()[-3000:]}"
            )
        http = dict(server.requests_since(offset)) if server is not None else {}
        return ChildRun(json.loads(out_path.read_text()), wall, int(usage.ru_maxrss) * 1024, http)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


# -- one store ---------------------------------------------------------------------------------------


@dataclass
class StoreResult:
    store: str
    increments: int
    segments: int
    objects_before: int
    idle: ChildRun
    plan: ChildRun
    execute: ChildRun
    objects_after: int


def expected(increments: int, segments_per_increment: int) -> dict[str, int]:
    """What the cut at ``cut_time`` must plan: the first half's segments and manifests go."""
    half = increments // 2
    return {
        "increments_before": increments,
        "increments_after": increments - half,
        "segments": half * segments_per_increment,
        "manifests": half,
        "orphans": 0,
        "deletes": half * (segments_per_increment + 1),
    }


def generate(storage: dict[str, str], shape: tuple[int, int, int]) -> int:
    """Write the synthetic backup in a child process (this one stays small: see own_peak_rss)."""
    run = run_child({"mode": "generate", "storage": storage, "shape": list(shape)}, None)
    print(
        f"{storage['url']}: {run.out['written']:,} objects written in {run.out['seconds']:.0f} s", flush=True
    )
    return int(run.out["written"])


def measure_store(
    name: str,
    storage: dict[str, str],
    server: MotoServer | None,
    increments: int,
    segments_per_increment: int,
    objects_before: int,
) -> StoreResult:
    spec = {"storage": storage, "backup_id": BACKUP_ID, "before": cut_time(increments).isoformat()}
    runs = {}
    for mode in ("idle", "plan", "execute"):
        os.sync()
        runs[mode] = run_child({**spec, "mode": mode}, server)
        shown = {key: value for key, value in runs[mode].out.items() if key != "mode"}
        print(
            f"  {name} {mode}: {runs[mode].wall_seconds:.1f} s, peak RSS "
            f"{_mib(runs[mode].peak_rss_bytes)} (wait4), {_mib(shown.pop('own_peak_rss'))} (VmHWM) "
            f"{json.dumps(shown)}" + (f" moto saw {runs[mode].http_requests}" if server is not None else ""),
            flush=True,
        )
    want = expected(increments, segments_per_increment)
    for mode in ("plan", "execute"):
        got = {key: runs[mode].out["plan"][key] for key in want}
        if got != want or runs[mode].out["plan"]["action"] != "trim":
            raise RuntimeError(f"{name} {mode}: the plan was {runs[mode].out['plan']}, expected {want}")
    if runs["execute"].out["objects_removed"] != want["deletes"]:
        raise RuntimeError(
            f"{name}: removed {runs['execute'].out['objects_removed']}, expected {want['deletes']}"
        )
    return StoreResult(
        name,
        increments,
        increments * segments_per_increment,
        objects_before,
        runs["idle"],
        runs["plan"],
        runs["execute"],
        run_child({**spec, "mode": "check", "shape": [increments, segments_per_increment]}, None).out[
            "objects_after"
        ],
    )


def check_pruned(storage_section: dict[str, str], increments: int, segments_per_increment: int) -> int:
    """The pruned backup loads with its second half of increments, and the store holds just those
    increments' objects and one retention generation; the number of objects left."""
    from kbackup.core.config import StorageSettings
    from kbackup.format.catalog import BackupCatalog
    from kbackup.storage import open_storage

    storage = open_storage(StorageSettings.model_validate(storage_section))
    backup = BackupCatalog(storage).load(BACKUP_ID)
    kept = increments - increments // 2
    if len(backup.manifests) != kept or backup.manifests[0].increment != increments // 2:
        raise RuntimeError(
            f"the pruned backup reads {len(backup.manifests)} increments from "
            f"{backup.manifests[0].increment}, expected {kept} from {increments // 2}"
        )
    left = sum(1 for _ in storage.list(f"{BACKUP_ID}/"))
    if left != kept * (segments_per_increment + 1) + 1:
        raise RuntimeError(f"{left} objects left, expected {kept * (segments_per_increment + 1) + 1}")
    return left


# -- report ------------------------------------------------------------------------------------------


def _mib(size: int) -> str:
    return f"{size / 2**20:,.0f} MiB"


def _requests(run: ChildRun, phase: str) -> str:
    counts = run.out[f"{phase}_requests"]["requests"]
    return ", ".join(f"{kind} {counts.get(kind, 0):,}" for kind in KINDS if counts.get(kind, 0))


def table(results: list[StoreResult]) -> str:
    lines = [
        "| store | increments | segments | objects before | plan s (plan_prune) | plan process s "
        "| plan peak RSS | execute s (execute_prune) | plan + execute process s | plan + execute peak RSS "
        "| objects removed | delete requests | S3 requests of the plan | S3 requests of the execute |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for item in results:
        s3 = item.plan.http_requests != {} or item.execute.http_requests != {}
        lines.append(
            f"| {item.store} | {item.increments:,} | {item.segments:,} | {item.objects_before:,} "
            f"| {item.plan.out['plan_seconds']:.1f} | {item.plan.wall_seconds:.1f} "
            f"| {_mib(item.plan.peak_rss_bytes)} | {item.execute.out['execute_seconds']:.1f} "
            f"| {item.execute.wall_seconds:.1f} | {_mib(item.execute.peak_rss_bytes)} "
            f"| {item.execute.out['objects_removed']:,} | {item.execute.out['delete_requests']:,} "
            f"| {_requests(item.plan, 'plan') if s3 else '-'} "
            f"| {_requests(item.execute, 'execute') if s3 else '-'} |"
        )
    return "\n".join(lines)


def _inside(call: dict[str, Any] | None) -> str:
    return "-" if call is None else f"{call['seconds']:.1f} ({call['calls']:,})"


def time_table(results: list[StoreResult]) -> str:
    """Where each measured call spent its time: inside the storage's methods, and the rest."""
    lines = [
        "| store | call | seconds | in list (calls) | in list_prefixes (calls) | in get_bytes (calls) "
        "| in put_bytes_if_absent (calls) | in delete_many (calls) | the rest (parsing, planning) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for item in results:
        for run, phase in ((item.plan, "plan"), (item.execute, "execute")):
            total = run.out[f"{phase}_seconds"]
            inside = run.out[f"{phase}_storage_seconds"]
            cells = " | ".join(_inside(inside.get(name)) for name in TIMED_METHODS)
            rest = total - sum(call["seconds"] for call in inside.values())
            lines.append(f"| {item.store} | {phase}_prune | {total:.1f} | {cells} | {rest:.1f} |")
    return "\n".join(lines)


def rss_gap(results: list[StoreResult]) -> int:
    """The largest difference between wait4's peak RSS of a measured child and its own VmHWM."""
    runs = [run for item in results for run in (item.idle, item.plan, item.execute)]
    return max(abs(run.peak_rss_bytes - int(run.out["own_peak_rss"])) for run in runs)


def cross_check(results: list[StoreResult]) -> list[str]:
    """Where moto's access log and the storage's observer disagree on the request counts."""
    found = []
    for item in results:
        if not item.plan.http_requests and not item.execute.http_requests:
            continue
        for run, phases in ((item.plan, ("plan",)), (item.execute, ("plan", "execute"))):
            observed: Counter[str] = Counter()
            for phase in phases:
                observed.update(run.out[f"{phase}_requests"]["requests"])
            if dict(observed) != run.http_requests:
                found.append(
                    f"{item.store} {run.out['mode']}: the observer counted {dict(observed)}, "
                    f"moto logged {run.http_requests}"
                )
    return found


def _spent(run: ChildRun, phase: str, name: str) -> tuple[float, int]:
    call = run.out[f"{phase}_storage_seconds"].get(name)
    return (0.0, 0) if call is None else (float(call["seconds"]), int(call["calls"]))


def _at_a_time(run: ChildRun) -> str:
    reads = int(run.out.get("parallel_reads", 1))
    return "one after the other" if reads == 1 else f"up to {reads} at a time (`parallel_reads`)"


def findings(results: list[StoreResult]) -> list[str]:
    """What the figures show, in sentences made from the measured values."""
    lines = []
    for item in results:
        plan_s = item.plan.out["plan_seconds"]
        list_s, lists = _spent(item.plan, "plan", "list")
        get_s, gets = _spent(item.plan, "plan", "get_bytes")
        delete_s, _ = _spent(item.execute, "execute", "delete_many")
        requests = item.plan.out["plan_requests"]["requests"].get("list", 0)
        pages = f", {requests:,} list requests of {list_s / requests * 1000:.0f} ms each" if requests else ""
        lines.append(
            f"- {item.store}: of the plan's {plan_s:.1f} s, {list_s:.1f} s ({list_s / plan_s:.0%}) went "
            f"in {lists} listings{pages}, and {get_s:.1f} s ({get_s / plan_s:.0%}) in {gets:,} object "
            f"reads, {_at_a_time(item.plan)} ({get_s / max(gets, 1) * 1000:.2f} ms of wall time per "
            "read). Its peak RSS is "
            f"{_mib(item.plan.peak_rss_bytes - item.idle.peak_rss_bytes)} above the idle process's. "
            f"The execute removed {item.execute.out['objects_removed']:,} objects in "
            f"{item.execute.out['delete_requests']:,} delete requests, {delete_s:.1f} s of its "
            f"{item.execute.out['execute_seconds']:.1f} s."
        )
    return lines


def sources_digest() -> str:
    """A digest of kbackup's sources: the run refuses to write figures measured on two versions."""
    digest = hashlib.sha256()
    for path in sorted((REPO / "kbackup").rglob("*.py")):
        digest.update(path.relative_to(REPO).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def commit() -> str:
    """The checked-out commit, and whether kbackup/ differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "kbackup"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "an unknown commit"
    return f"commit {head}" + (" with local changes in kbackup/" if dirty else "")


def machine() -> str:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({platform.machine()}, Python {platform.python_version()}), "
        f"{memory:.1f} GiB memory"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--increments", type=int, default=10_000, help="increments of the backup")
    parser.add_argument("--segments-per-increment", type=int, default=10, help="segments in each increment")
    parser.add_argument("--partitions", type=int, default=10, help="partitions the segments spread over")
    parser.add_argument("--quick", action="store_true", help="200 increments")
    parser.add_argument("--write-docs", action="store_true", help=f"write the results into {DOC}")
    parser.add_argument("--child", metavar="JSON", help=argparse.SUPPRESS)
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.quick:
        args.increments = 200
    if args.increments < 2 or args.segments_per_increment < 1 or args.partitions < 1:
        parser.error("at least 2 increments, 1 segment per increment and 1 partition")
    start_load = os.getloadavg()
    sources, measured_commit = sources_digest(), commit()
    print(
        f"machine: {machine()}, load average {start_load[0]:.1f} / {start_load[1]:.1f} / {start_load[2]:.1f}"
    )
    shape = (args.increments, args.segments_per_increment, args.partitions)
    results = []
    with tempfile.TemporaryDirectory(prefix="kbackup-bench-prune-") as work_dir:
        work = Path(work_dir)
        folder = work / "store"
        written = generate({"url": str(folder)}, shape)
        results.append(
            measure_store(
                "folder", {"url": str(folder)}, None, args.increments, args.segments_per_increment, written
            )
        )
        shutil.rmtree(folder, ignore_errors=True)
        with MotoServer(log_path=work / "moto.log") as server:
            written = generate(server.storage(), shape)
            results.append(
                measure_store(
                    "S3 (moto server)",
                    server.storage(),
                    server,
                    args.increments,
                    args.segments_per_increment,
                    written,
                )
            )
    end_load = os.getloadavg()
    rows = table(results)
    times = time_table(results)
    disagreements = cross_check(results)
    print()
    print(rows)
    print()
    print(times)
    for line in disagreements:
        print(f"request counts differ: {line}")
    if sources_digest() != sources:
        raise SystemExit(
            "kbackup's sources changed while the benchmark ran: the figures mix two versions; "
            "nothing written, run it again"
        )
    if not args.write_docs:
        return
    command = (
        f".venv/bin/python -m bench.bench_prune --increments {args.increments} "
        f"--segments-per-increment {args.segments_per_increment} --partitions {args.partitions} --write-docs"
    )
    folder_result, s3_result = results
    body = "\n".join(
        [
            "## Prune",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d} at {measured_commit} with `{command}` on {machine()}. "
            f"Load average (1/5/15 min) at the start {start_load[0]:.1f} / {start_load[1]:.1f} / "
            f"{start_load[2]:.1f}, at the end {end_load[0]:.1f} / {end_load[1]:.1f} / {end_load[2]:.1f}.",
            "",
            f"One synthetic backup of {args.increments:,} chained increments of "
            f"{args.segments_per_increment} segments each over {args.partitions} partitions "
            "(manifests in the real format, one consumer-group snapshot per increment, every segment "
            "object present but a few bytes long), in a local folder and in a bucket of moto's S3 "
            "server on loopback (`python -m moto.server`, on the same two cores). The policy is "
            f"`--before {_iso(cut_time(args.increments))}`: every segment of the first half of the "
            "increments goes, and those increments' manifests with them. *plan* is a process that "
            "runs `plan_prune` and exits; *plan + execute* one that runs `plan_prune` then "
            "`execute_prune` (the retention generation, then the deletes in batches of the store's "
            "`delete_batch_size`: 1,000 per DeleteObjects on S3, one object per unlink on a folder). "
            "Each is timed in-process around the call and as a process from exec to exit; peak RSS "
            "is the process's (`wait4`; each process's own VmHWM agreed within "
            f"{_mib(rss_gap(results))}). A process that imports the same modules, opens the storage "
            f"and exits peaks at {_mib(folder_result.idle.peak_rss_bytes)} on the folder and "
            f"{_mib(s3_result.idle.peak_rss_bytes)} on S3.",
            "",
            rows,
            "",
            "Where the time of each call went: the wall seconds during which a call of each of the "
            "storage's methods was in flight (reads made at the same time count once), the calls, and "
            "the rest (parsing manifests, planning):",
            "",
            times,
            "",
            *findings(results),
            "",
            "S3 requests are counted by the storage's `observer` (each request kbackup's S3 storage "
            "reports, by operation) inside the measured process; moto's access log counted "
            + (
                "the same HTTP requests."
                if not disagreements
                else "different figures: " + "; ".join(disagreements) + "."
            )
            + f" After the execute, the backup loaded with {args.increments - args.increments // 2:,} "
            f"increments and the store held {folder_result.objects_after:,} objects (the kept "
            "increments' manifests and segments, and the retention generation), on both stores.",
        ]
    )
    replace_section(DOC, START_MARKER, END_MARKER, body)
    print(f"\nwritten to {DOC}")


if __name__ == "__main__":
    main()
