"""Logging set-up: one stderr handler, secrets redacted, librdkafka routed through it.

Two formats: text for people (the default), and ``json`` for log shippers: one JSON object per
line with the time (ISO 8601, UTC), level, logger, message and the structured fields the event
was logged with (``extra={"backup_id": ..., "topic": ..., "partition": ..., "increment": ...}``).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from kbackup.core.errors import ConfigError
from kbackup.core.secrets import redact
from kbackup.core.times import iso_utc

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


LOG_FORMATS = ("text", "json")
#: What every LogRecord carries; any other attribute of a record came with ``extra=``.
_RECORD_ATTRIBUTES = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _redacted(value: Any) -> Any:
    """``value`` with every registered secret masked in its strings, as JSON types."""
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {str(key): _redacted(item) for key, item in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_redacted(item) for item in value]
    return redact(str(value))


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, then the record's own fields."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRIBUTES and not key.startswith("_") and key not in payload:
                payload[key] = value
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        # Each string is redacted before encoding: in the encoded line a secret holding a quote or
        # a backslash would be escaped and no longer match.
        return json.dumps(_redacted(payload), ensure_ascii=False)


#: The arguments of the last :func:`configure_logging`, for a worker process to log as this one does.
_configured: tuple[int, bool, str] | None = None


def logging_configuration() -> tuple[int, bool, str] | None:
    """``(verbosity, debug, log_format)`` as this process configured its logs (None: it did not)."""
    return _configured


def configure_logging(verbosity: int = 0, debug: bool = False, log_format: str = "text") -> None:
    """Send kafka-backup's logs to stderr, as text or (``log_format="json"``) JSON lines.

    ``verbosity`` 0 shows warnings, 1 info, 2+ debug; ``debug`` implies debug
    level. librdkafka's chatter stays at error level unless debugging, since a
    client retrying a broker logs every attempt.
    """
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"--log-format {log_format!r}: expected one of {', '.join(LOG_FORMATS)}")
    level = logging.DEBUG if debug or verbosity >= 2 else logging.INFO if verbosity == 1 else logging.WARNING
    root = logging.getLogger(LOGGER_NAME)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    handler.addFilter(RedactingFilter())
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    logging.getLogger(LIBRDKAFKA_LOGGER_NAME).setLevel(logging.DEBUG if debug else logging.CRITICAL)
    global _configured
    _configured = (verbosity, debug, log_format)


def get_logger(name: str) -> logging.Logger:
    """A logger below the ``kbackup`` root, e.g. ``get_logger("backup")``."""
    return logging.getLogger(f"{LOGGER_NAME}.{name}")
