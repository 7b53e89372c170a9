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


#: Names of a file that holds a secret (``storage.gcs.credentials_file``): the value is where the
#: secret is kept, and the path is what an operator needs to read in an error about it.
_SECRET_FILE_KEY_PATTERN = re.compile(r"_file$", re.IGNORECASE)


def is_secret_key(name: str) -> bool:
    """True when a property or setting name denotes a secret value (not the file that holds one)."""
    return bool(_SECRET_KEY_PATTERN.search(name)) and not _SECRET_FILE_KEY_PATTERN.search(name)


def register_secret(value: str | None) -> None:
    """Remember a secret value so that :func:`redact` masks it wherever it appears."""
    # Very short values would mask ordinary words; they are still never printed
    # on purpose because they live in SecretStr fields.
    if value and len(value) >= 4:
        with _lock:
            _registered.add(value)


def registered_secrets() -> frozenset[str]:
    """Every secret registered in this process, for a worker process of ours to register too (it
    redacts what it logs as this one does; the values travel only in the pipe that starts it)."""
    with _lock:
        return frozenset(_registered)


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


#: The user name and password of a URL (``s3://user:pass@bucket``, ``http://u:p@host``), up to
#: the last ``@`` before the path: a password may hold an ``@`` of its own.
_URL_USERINFO = re.compile(r"(?<=//)[^/?#\s]*@")
#: Each value of a URL's query (``?access_key=...``): the keys are kept, they name what was meant.
_URL_QUERY_VALUE = re.compile(r"(?<=[?&])([^=&#\s]*)=[^&#\s]*")


def has_url_userinfo(text: str) -> bool:
    """True when ``text`` holds a URL with a user name or password (``scheme://user:pass@host``)."""
    return bool(_URL_USERINFO.search(text))


def printable_url(url: str) -> str:
    """``url`` safe to print: a user name and password, and every query value, replaced by ``***``."""
    return _URL_QUERY_VALUE.sub(rf"\1={REDACTED}", _URL_USERINFO.sub(f"{REDACTED}@", url))


def mask_url_userinfo(text: str) -> str:
    """``text`` with the user name and password of every URL in it replaced by ``***``."""
    return _URL_USERINFO.sub(f"{REDACTED}@", text)
