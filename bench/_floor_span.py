"""What the bare client loops (``_client_floor``, ``_consumer_floor``) measure of their own span."""

from __future__ import annotations

import json
import resource
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: What a loop started with ``--wait-for-go`` prints once it is ready to start its clock.
READY = "ready"


def cpu_seconds() -> float:
    """User and system CPU seconds of every thread of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _peak_rss() -> int:
    """This process's peak RSS: the kernel's VmHWM, which exec starts afresh (``ru_maxrss`` of a
    child counts the memory of the parent it was forked from)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def span_result(records: int, seconds: float, cpu: float, started_at: float = 0.0) -> dict[str, Any]:
    """The one JSON line a loop prints: its records, its span's seconds and CPU, its peak RSS, and
    the span's ends in epoch seconds (``started_at``, ``ended_at``: one clock for every process)."""
    return {
        "records": records,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_rss_bytes": _peak_rss(),
        "started_at": started_at,
        "ended_at": time.time(),
    }


def wait_for_go() -> None:
    """In a loop started by :func:`run_together`: say it is ready, and start on the word."""
    print(READY, flush=True)
    input()


def run_together(commands: Sequence[list[str]], cwd: Path) -> list[dict[str, Any]]:
    """Run loops (each with ``--wait-for-go``) in processes of their own that start their spans
    together: each prepares, says it is ready, and all get the word at once. Their JSON lines."""
    processes = [
        subprocess.Popen(
            command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for command in commands
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
