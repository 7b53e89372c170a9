"""Which records of a batch match a list of keys or header values: restore filters and erasure.

A key list is read by two stages (the restore's filters and ``kafka-backup erase``) and written by
the people who answer an erasure request, so its entry syntax is a contract (docs/format.md, "Key
lists"). The keys are personal data: nothing here prints, logs or returns them; :meth:`describe`
gives counts only, and :func:`keyed_hash` is how a record proves a key without holding it.

Matching is columnar (pyarrow compute over the ``key`` and ``headers`` columns of
:data:`kbackup.format.schema.RECORD_SCHEMA`); only ``sha256:`` entries hash each record's key in
Python, since pyarrow has no SHA-256 kernel.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field, field_validator

from kbackup.core.config import StrictModel
from kbackup.core.errors import ConfigError

#: The prefixes an entry may start with; anything else is the key's UTF-8 text as written.
ENTRY_PREFIXES = ("text:", "hex:", "base64:", "sha256:")

_SHA256_HEX_LENGTH = 64


@dataclass(frozen=True)
class EntrySet:
    """Byte strings to match exactly, and SHA-256 digests of byte strings to match."""

    exact: frozenset[bytes] = frozenset()
    digests: frozenset[bytes] = frozenset()

    def __len__(self) -> int:
        return len(self.exact) + len(self.digests)

    def contains(self, value: bytes | None) -> bool:
        if value is None:
            return False
        return value in self.exact or (bool(self.digests) and hashlib.sha256(value).digest() in self.digests)

    def mask(self, column: pa.Array) -> pa.Array:
        """True where the binary ``column``'s value is in the set; null values never match."""
        result: pa.Array = pc.fill_null(
            pc.is_in(column, value_set=pa.array(sorted(self.exact), pa.binary())), False
        )
        if self.digests:
            hashed = pa.array([self.contains(v) for v in column.to_pylist()], pa.bool_())
            result = pc.or_(result, hashed)
        return result


def parse_entry(text: str) -> tuple[bool, bytes]:
    """``(is_digest, bytes)`` of one entry; ValueError naming what is wrong (never the entry's value)."""
    if text.startswith("sha256:"):
        digest = text[len("sha256:") :].strip().lower()
        if len(digest) != _SHA256_HEX_LENGTH or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError("a sha256: entry needs 64 hex digits (the SHA-256 of the key's bytes)")
        return True, bytes.fromhex(digest)
    if text.startswith("hex:"):
        try:
            return False, bytes.fromhex(text[len("hex:") :].strip())
        except ValueError:
            raise ValueError("a hex: entry needs an even number of hex digits") from None
    if text.startswith("base64:"):
        try:
            return False, base64.b64decode(text[len("base64:") :].strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("a base64: entry is not valid base64") from None
    if text.startswith("text:"):
        text = text[len("text:") :]
    if not text:
        raise ValueError("an entry is empty (an empty key is written 'hex:')")
    return False, text.encode()


def _checked_entries(entries: list[str], what: str) -> list[str]:
    """``entries``, each parsed once to refuse a bad one by its position (``what`` and its number)."""
    for number, entry in enumerate(entries, start=1):
        try:
            parse_entry(entry)
        except ValueError as error:
            raise ValueError(f"{what} {number}: {error}") from None
    return entries


def entry_set(entries: Iterable[str]) -> EntrySet:
    exact: set[bytes] = set()
    digests: set[bytes] = set()
    for entry in entries:
        is_digest, value = parse_entry(entry)
        (digests if is_digest else exact).add(value)
    return EntrySet(frozenset(exact), frozenset(digests))


class RecordMatchSettings(StrictModel):
    """Records to match: by key, by header value, or both (a record matching either is matched)."""

    keys: list[str] = Field(
        default_factory=list,
        description=(
            "Record keys: each the key's UTF-8 text, or `hex:`, `base64:` or `text:` followed by the "
            "key, or `sha256:` and the 64 hex digits of the SHA-256 of the key's bytes."
        ),
    )
    keys_file: Path | None = Field(
        default=None,
        description=(
            "A file of keys, one per line in the syntax of `keys`; blank lines and lines starting "
            "with `#` are skipped. Relative: to the config file's folder."
        ),
    )
    headers: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Header values per header name (`{name: [value, ...]}`), values in the syntax of `keys`.",
    )

    @field_validator("keys")
    @classmethod
    def _keys(cls, keys: list[str]) -> list[str]:
        return _checked_entries(keys, "keys entry")

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, values in headers.items():
            if not values:
                raise ValueError(f"header {name!r}: list at least one value")
            _checked_entries(values, f"header {name!r} value")
        return headers

    def is_empty(self) -> bool:
        return not self.keys and self.keys_file is None and not self.headers


@dataclass(frozen=True)
class RecordMatcher:
    """A loaded :class:`RecordMatchSettings`: the key entries (inline and from the file) and header values."""

    keys: EntrySet = field(default_factory=EntrySet)
    headers: dict[str, EntrySet] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: RecordMatchSettings, *, base_dir: Path | None = None) -> RecordMatcher:
        entries = list(settings.keys)
        if settings.keys_file is not None:
            path = settings.keys_file
            if base_dir is not None and not path.is_absolute():
                path = base_dir / path
            entries.extend(read_keys_file(path))
        return cls(
            keys=entry_set(entries),
            headers={name: entry_set(values) for name, values in settings.headers.items()},
        )

    @property
    def key_count(self) -> int:
        return len(self.keys)

    @property
    def header_count(self) -> int:
        return sum(len(values) for values in self.headers.values())

    def is_empty(self) -> bool:
        return self.key_count == 0 and self.header_count == 0

    def describe(self) -> str:
        """What is matched, in counts: the keys themselves are never shown."""
        parts = []
        if self.key_count:
            hashed = f" ({len(self.keys.digests)} as SHA-256)" if self.keys.digests else ""
            parts.append(f"{_count(self.key_count, 'key')}{hashed}")
        if self.headers:
            parts.append(
                f"{_count(self.header_count, 'header value')} of {_count(len(self.headers), 'header name')}"
            )
        return " or ".join(parts) if parts else "nothing"

    def key_matches(self, key: bytes | None) -> bool:
        return self.keys.contains(key)

    def mask(self, records: pa.RecordBatch | pa.Table) -> pa.BooleanArray:
        """True for each record whose key is listed or which carries a listed header value."""
        if isinstance(records, pa.Table):
            batches = records.to_batches()
            if not batches:
                return pa.array([], pa.bool_())
            return pa.concat_arrays([self._batch_mask(batch) for batch in batches])
        return self._batch_mask(records)

    def _batch_mask(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        rows = batch.num_rows
        result: pa.Array = (
            self.keys.mask(batch.column("key")) if len(self.keys) else pa.array(np.zeros(rows, dtype=bool))
        )
        if self.headers and rows:
            result = pc.or_(result, self._header_mask(batch.column("headers"), rows))
        return result

    def _header_mask(self, column: pa.ListArray, rows: int) -> pa.Array:
        flat = column.flatten()
        if len(flat) == 0:
            return pa.array(np.zeros(rows, dtype=bool))
        names, values = flat.field("key"), flat.field("value")
        matched: pa.Array | None = None
        for name, entries in self.headers.items():
            condition = pc.and_(pc.equal(names, name), entries.mask(values))
            matched = condition if matched is None else pc.or_(matched, condition)
        parents = pc.filter(pc.list_parent_indices(column), pc.fill_null(matched, False))
        mask = np.zeros(rows, dtype=bool)
        mask[parents.to_numpy(zero_copy_only=False)] = True
        return pa.array(mask)


def read_keys_file(path: Path) -> list[str]:
    """The entries of a keys file, each checked; one ConfigError naming the file and line otherwise."""
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"keys file {path} does not exist", hint="check keys_file (relative to the config file's folder)"
        ) from None
    except OSError as error:
        raise ConfigError(f"keys file {path} cannot be read: {error.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(
            f"keys file {path} is not UTF-8 text", hint="write binary keys as hex: or base64: entries"
        ) from None
    entries = []
    # Split on newlines only: str.splitlines would also cut a key at a form feed or a separator.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line.strip() or line.startswith("#"):
            continue
        try:
            parse_entry(line)
        except ValueError as error:
            raise ConfigError(f"keys file {path}, line {number}: {error}") from None
        entries.append(line)
    return entries


def keyed_hash(secret: bytes, key: bytes) -> str:
    """HMAC-SHA256 of ``key`` under ``secret``: proves a key was listed without storing it."""
    return "hmac-sha256:" + hmac.new(secret, key, hashlib.sha256).hexdigest()


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"
