"""Fake units for the worker pool's unit tests: module-level functions a spawned worker imports
by name, each doing what a restore unit does to the pool (report batches, watch the stop, die)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from kbackup.core.logs import get_logger
from kbackup.core.workers import WorkerSide

#: Bound on how long a fake unit waits for its stop, so a broken stop fails the test, not hangs it.
WAIT_SECS = 30.0


def count_batches(item: str, side: WorkerSide) -> str:
    """Three batches of 10 records, 100 bytes each, to topic ``t`` (as ``t-copy``)."""
    for _ in range(3):
        side.report("t", "t-copy", 10, 100)
    return item.upper()


def produce_until_stopped(item: str, side: WorkerSide) -> str:
    """A unit that produces a batch at a time (to topic ``t`` as ``item``) until told to stop,
    then says it stopped (a batch of one record to topic ``stopped``), as a restore unit commits
    and stops."""
    deadline = time.monotonic() + WAIT_SECS
    while not side.is_set() and time.monotonic() < deadline:
        side.report("t", item, 1, 1)
        time.sleep(0.05)
    if side.is_set():
        side.report("stopped", "stopped", 1, 0)
    return item


#: A file the other unit creates once it produces, so ``b`` dies while it runs.
RUNNING_MARKER = "KBACKUP_TEST_RUNNING_MARKER"


def die_on_b(item: str, side: WorkerSide) -> str:
    """Item ``b`` is SIGKILLed (no cleanup) once the other unit produces."""
    marker = Path(os.environ[RUNNING_MARKER])
    if item != "b":
        marker.touch()
        return produce_until_stopped(item, side)
    deadline = time.monotonic() + WAIT_SECS
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)
    return item


def fail_on_b(item: str, side: WorkerSide) -> str:
    if item == "b":
        raise ValueError("boom")
    return item


def log_a_secret(item: str, side: WorkerSide) -> str:
    """A warning that holds ``item`` (a registered secret in the parent)."""
    get_logger("test-worker").warning("the password is %s", item)
    return item


def pid_of(item: str, side: WorkerSide) -> int:
    """The worker process that ran ``item``."""
    return os.getpid()
