"""Named crash points, for the tests that kill a run at a chosen moment.

``KBACKUP_CRASH_AT=<name>[,<name>...]`` makes the process SIGKILL itself when it
reaches a point of that name: no cleanup, no flush, exactly like a power
loss. Unset (always, outside tests) it costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENVIRONMENT_VARIABLE = "KBACKUP_CRASH_AT"


def crash_point(name: str) -> None:
    wanted = os.environ.get(ENVIRONMENT_VARIABLE)
    if wanted and name in wanted.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
