"""Keeping secrets out of everything kafka-backup prints or writes.

Secrets are held as ``pydantic.SecretStr`` in the config models, so their
``repr`` and ``str`` never show the value. As a second line of defence every
secret value that is loaded is registered here, and the log handler, the CLI
error handler and the JSON writers pass their text through :func:`redact`.
"""

from __future__ import annotations

import re
import threading

REDACTED = "***"

#: librdkafka / client property names whose values are secrets.
_SECRET_KEY_PATTERN = re.compile(r"(password|secret|jaas|token|credential|private[._-]?key)", re.IGNORECASE)

_lock = threading.Lock()
_registered: set[str] = set()


def is_secret_key(name: str) -> bool:
    """True when a property or setting name denotes a secret value."""
    return bool(_SECRET_KEY_PATTERN.search(name))


def register_secret(value: str | None) -> None:
    """Remember a secret value so that :func:`redact` masks it wherever it appears."""
    # Very short values would mask ordinary words; they are still never printed
    # on purpose because they live in SecretStr fields.
    if value and len(value) >= 4:
        with _lock:
            _registered.add(value)


def redact(text: str) -> str:
    """Replace every registered secret value in ``text`` with ``***``."""
    with _lock:
        secrets = sorted(_registered, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def redact_properties(properties: dict[str, str]) -> dict[str, str]:
    """A copy of client properties that is safe to show: secret values masked."""
    return {key: (REDACTED if is_secret_key(key) else value) for key, value in properties.items()}
