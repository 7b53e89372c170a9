"""Crash points (``kbackup.core.faults``): the n-th occurrence kills the process, and a counting point
fires at the call that takes its count to n, never before and never in a run that does not get there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from kbackup.core.faults import ENVIRONMENT_VARIABLE

#: A "run" that reaches a counting point three times, with 3, 4 and 5 records, printing what it did.
RUN = """
from kbackup.core.faults import crash_point
for records in (3, 4, 5):
    crash_point("test:records", records)
    print(records, flush=True)
"""


def run_with(crash_at: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, ENVIRONMENT_VARIABLE: crash_at}
    return subprocess.run(
        [sys.executable, "-c", RUN], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.mark.parametrize(
    ("crash_at", "printed"),
    [
        ("test:records@1", []),
        ("test:records@3", []),
        ("test:records@4", ["3"]),  # the second call takes the count from 3 to 7
        ("test:records@7", ["3"]),
        ("test:records@8", ["3", "4"]),
        ("test:records@12", ["3", "4"]),
    ],
)
def test_a_counting_point_fires_at_the_call_that_reaches_its_count(crash_at: str, printed: list[str]) -> None:
    done = run_with(crash_at)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.split() == printed


def test_a_count_the_run_never_reaches_does_not_fire() -> None:
    done = run_with("test:records@13")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "4", "5"]


def test_other_points_are_not_counted() -> None:
    done = run_with("test:other@1,backup:records-read@1")
    assert done.returncode == 0, done.stderr
