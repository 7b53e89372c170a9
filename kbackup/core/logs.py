"""Logging set-up: one stderr handler, secrets redacted, librdkafka routed through it."""

from __future__ import annotations

import logging
import sys

from kbackup.core.secrets import redact

LOGGER_NAME = "kbackup"
#: librdkafka's own log lines (connection failures, retries) go to this logger
#: instead of straight to stderr, so they obey --verbose and are redacted.
LIBRDKAFKA_LOGGER_NAME = "kbackup.librdkafka"


class RedactingFilter(logging.Filter):
    """Masks registered secret values in every record that passes through."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg = cleaned
            record.args = None
        return True


def configure_logging(verbosity: int = 0, debug: bool = False) -> None:
    """Send kafka-backup's logs to stderr.

    ``verbosity`` 0 shows warnings, 1 info, 2+ debug; ``debug`` implies debug
    level. librdkafka's chatter stays at error level unless debugging, since a
    client retrying a broker logs every attempt.
    """
    level = logging.DEBUG if debug or verbosity >= 2 else logging.INFO if verbosity == 1 else logging.WARNING
    root = logging.getLogger(LOGGER_NAME)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    logging.getLogger(LIBRDKAFKA_LOGGER_NAME).setLevel(logging.DEBUG if debug else logging.CRITICAL)


def get_logger(name: str) -> logging.Logger:
    """A logger below the ``kbackup`` root, e.g. ``get_logger("backup")``."""
    return logging.getLogger(f"{LOGGER_NAME}.{name}")
