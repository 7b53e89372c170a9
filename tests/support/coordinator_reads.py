"""A process that reads groups' committed offsets through kbackup's Admin across its coordinator's
loss, for tests/integration/test_fault_nodes_reset.py: librdkafka aborts a process whose request to
a group's coordinator timed out inside the library while that node was down (see
``COORDINATOR_REQUEST_TIMEOUT_SECS``), so the survival of a process is what the test looks at.

Usage: ``python -m tests.support.coordinator_reads BOOTSTRAP TIMEOUT_SECS GROUP...``. It reads every
group once (the client learns each coordinator), prints ``ready`` and waits for a line on stdin (the
test kills the coordinator meanwhile), reads again through the loss, waits ``LINGER_SECS`` with the
client open (a request the library still held would go out to the new coordinator then) and prints
each group's offsets as JSON.
"""

from __future__ import annotations

import json
import sys
import time

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import KBackupError
from kbackup.core.kafka.admin import open_admin

#: Seconds the client stays open after the reads that crossed the loss.
LINGER_SECS = 5.0


def main(bootstrap: str, timeout_secs: str, *groups: str) -> None:
    admin = open_admin(KafkaConnection(bootstrap_servers=[bootstrap]), request_timeout=float(timeout_secs))
    admin.committed_offsets_of(groups)
    print("ready", flush=True)
    sys.stdin.readline()
    offsets: dict[str, dict[str, int]] = {}
    while True:  # a read that fails retryably is asked again, as a rerun of the command would
        try:
            found = admin.committed_offsets_of(groups)
            break
        except KBackupError as error:
            if not error.retryable:
                raise
            print(f"retryable: {error.message}", file=sys.stderr, flush=True)
    time.sleep(LINGER_SECS)
    admin.committed_offsets_of(groups)
    for group, at in found.items():
        offsets[group] = {f"{topic}/{partition}": offset for (topic, partition), offset in at.items()}
    print(json.dumps(offsets), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
