"""What the bare client loops (``_client_floor``, ``_consumer_floor``) measure of their own span."""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench._perf import vmhwm_bytes

#: What a loop started with ``--wait-for-go`` prints once it is ready to start its clock.
READY = "ready"
#: The partitions of each of two loop processes: the split two workers reach over three equal
#: partitions (a queue of units: one takes two of them), so at most 1.5 x one process even on
#: idle cores.
TWO_WORKER_SPLIT = ((0, 2), (1,))


def add_split_arguments(parser: argparse.ArgumentParser) -> None:
    """A loop's ``--only`` and ``--wait-for-go`` (see :func:`run_together`)."""
    parser.add_argument("--only", default="", help="comma-separated partitions (default: all)")
    parser.add_argument("--wait-for-go", action="store_true", help="print ready, start on a line of stdin")


def only_partitions(only: str) -> set[int] | None:
    """``--only``'s partitions; None: all."""
    return {int(p) for p in only.split(",")} if only else None


def cpu_seconds() -> float:
    """User and system CPU seconds of every thread of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def span_result(records: int, seconds: float, cpu: float, started_at: float = 0.0) -> dict[str, Any]:
    """The one JSON line a loop prints: its records, its span's seconds and CPU, its peak RSS, and
    the span's ends in epoch seconds (``started_at``, ``ended_at``: one clock for every process)."""
    return {
        "records": records,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_rss_bytes": vmhwm_bytes() or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "started_at": started_at,
        "ended_at": time.time(),
    }


def wait_for_go() -> None:
    """In a loop started by :func:`run_together`: say it is ready, and start on the word."""
    print(READY, flush=True)
    input()


def run_together(command: list[str], groups: Sequence[Sequence[int]], cwd: Path) -> list[dict[str, Any]]:
    """Run a loop's ``command`` in one process per group of partitions (``--only``), their spans
    started together (``--wait-for-go``): each prepares, says it is ready, and all get the word at
    once. Their JSON lines."""
    processes = [
        subprocess.Popen(
            [*command, "--wait-for-go", "--only", ",".join(map(str, group))],
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for group in groups
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            if process.stdout.readline().strip() != READY:
                raise RuntimeError(f"a loop did not start: {process.communicate()[1][-3000:]}")
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        results = []
        for process in processes:
            out, err = process.communicate()
            if process.returncode != 0:
                raise RuntimeError(f"a loop exited {process.returncode}:\n{err[-3000:]}")
            results.append(json.loads(out))
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()


def joined(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several loops' lines as one run: their records, the span from the first start to the last
    end, the sum of their CPU seconds and of their peak RSS."""
    return {
        "records": sum(int(r["records"]) for r in results),
        "seconds": max(float(r["ended_at"]) for r in results) - min(float(r["started_at"]) for r in results),
        "cpu_seconds": sum(float(r["cpu_seconds"]) for r in results),
        "peak_rss_bytes": sum(int(r["peak_rss_bytes"]) for r in results),
    }
