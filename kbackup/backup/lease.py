"""The lease a running backup holds on its backup id, so that a prune leaves it alone.

Written when the run starts, renewed on a thread well before it expires, removed when the run
ends. A run killed without removing it leaves a lease that expires by itself (docs/format.md,
"Retention": what prune does while a lease is live).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable

from kbackup.core.errors import KBackupError
from kbackup.core.logs import get_logger
from kbackup.format.generations import Lease, lease_key, utc_iso
from kbackup.storage import Storage

log = get_logger("backup")

#: A lease counts this long after its last renewal: long enough that a busy machine renews it in
#: time, short enough that a dead run's objects become collectable within minutes.
LEASE_SECONDS = 300.0
#: Renewed this often (a third of its life: two renewals may fail before it lapses).
RENEW_SECONDS = LEASE_SECONDS / 3


class LeaseKeeper:
    """Holds ``<backup id>/leases/<run id>.json`` while the ``with`` block runs."""

    def __init__(
        self,
        storage: Storage,
        backup_id: str,
        run_id: str,
        *,
        lease_secs: float = LEASE_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.storage = storage
        self.key = lease_key(backup_id, run_id)
        self._lease = Lease(
            backup_id=backup_id,
            run_id=run_id,
            holder=f"{socket.gethostname()}:{os.getpid()}",
            acquired_at=utc_iso(clock()),
            expires_at=0,
        )
        self._lease_secs = lease_secs
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._renew_until_stopped, name="kafka-backup-lease", daemon=True
        )

    def renew(self) -> None:
        lease = self._lease.model_copy(update={"expires_at": self._clock() + self._lease_secs})
        self.storage.put_bytes(self.key, lease.to_json_bytes())

    def _renew_until_stopped(self) -> None:
        while not self._stop.wait(min(RENEW_SECONDS, self._lease_secs / 3)):
            try:
                self.renew()
            except KBackupError as exc:
                # The backup itself goes on; a prune may then treat the run as gone (its grace
                # period still protects what it uploaded in the last hour).
                log.warning("could not renew the backup's lease %s: %s", self.key, exc.message)

    def __enter__(self) -> LeaseKeeper:
        self.renew()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        with contextlib.suppress(KBackupError):
            self.storage.delete(self.key)
