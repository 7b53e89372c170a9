"""Reading a JSON document that comes from outside (a store, a file, a Kafka record).

Every reader of a document parses it here, so every way the bytes can fail to be one is caught
in one place and becomes the reader's own error: bytes that are not UTF-8, text that is not JSON
(truncated, a flipped byte), nesting deeper than Python's recursion limit, a number of more
digits than ``int()`` converts, a ``\\ud800`` escape that decodes to a lone surrogate (no file,
object key or Kafka client can hold it), and a value that does not fit the document's model.

A reader passes ``fail``: it turns a short description of the problem into the error the reader
raises (``BackupIntegrityError`` for an object of a backup, ``ConfigError`` for a file a user
hands in), with the reader's own wording and hint.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from kbackup.core.errors import BackupIntegrityError, ConfigError

#: Turns a problem ("Expecting value at line 1, column 2") into the exception a reader raises.
Fail = Callable[[str], Exception]
Model = TypeVar("Model", bound=BaseModel)

#: A JSON escape of a UTF-16 surrogate; only a pair of them is a character.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json(data: bytes | str, fail: Fail) -> Any:
    """``data`` (UTF-8, a byte order mark allowed) as a JSON value; ``fail(problem)`` if it is not
    one, problem saying what is wrong and where."""
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise fail(f"byte {exc.start} is not UTF-8") from None
    else:
        text = data
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"{exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError:
        raise fail("nested too deeply") from None
    except ValueError as exc:  # a number longer than sys.get_int_max_str_digits()
        raise fail(str(exc).split(";")[0]) from None
    if _SURROGATE_ESCAPE.search(text) is not None:
        _check_text(value, fail)
    return value


def _check_text(value: Any, fail: Fail) -> None:
    """Every string in ``value`` (keys too) is text: no lone surrogate from a ``\\udXXX`` escape."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                shown = repr(item) if len(item) <= 40 else repr(item[:40]) + "..."
                raise fail(
                    f"the string {shown} holds a lone surrogate escape (\\ud800-\\udfff), not text"
                ) from None


def first_problem(exc: ValidationError) -> str:
    """A model's first complaint, where it is and how many more there are: ``a.0.b: msg``."""
    problem = exc.errors(include_url=False)[0]
    location = ".".join(str(part) for part in problem["loc"]) or "(top level)"
    more = f" [and {exc.error_count() - 1} more problem(s)]" if exc.error_count() > 1 else ""
    return f"{location}: {problem['msg']}{more}"


def validate(model: type[Model], value: Any, fail: Fail) -> Model:
    """``value`` checked against ``model``; ``fail(first_problem)`` if it does not fit."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise fail(first_problem(exc)) from None


def versioned_object(
    data: bytes, object_name: str, *, expected_format: str, max_version: int
) -> dict[str, Any]:
    """An object of a backup that names its ``format`` and ``format_version`` (a retention
    generation, a lease, a cluster-metadata file): parsed, of that format, and of a version this
    kafka-backup reads; a BackupIntegrityError naming the object otherwise."""
    raw = parse_json(
        data, lambda problem: BackupIntegrityError(f"{object_name} is not valid JSON: {problem}")
    )
    if not isinstance(raw, dict) or raw.get("format") != expected_format:
        raise BackupIntegrityError(f"{object_name} is not a {expected_format} object")
    version = raw.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise BackupIntegrityError(f"{object_name} has an invalid format_version {version!r}")
    if version > max_version:
        raise BackupIntegrityError(
            f"{object_name} has format version {version}, this kafka-backup reads versions up to "
            f"{max_version}",
            hint="upgrade kafka-backup to read this backup",
        )
    return raw


def parse_plan_document(
    data: bytes,
    source: str,
    model: type[Model],
    *,
    expected_format: str,
    version: int,
    kind: str,
    command: str,
) -> Model:
    """A plan a user hands back for execute (``kind``: "reset plan", ...; ``command``: the one that
    writes it), from its bytes: of that format and version, fitting ``model``; every problem is a
    ConfigError naming ``source``."""
    raw = parse_json(data, lambda problem: unreadable_plan(source, problem, command))
    if not isinstance(raw, dict) or raw.get("format") != expected_format:
        raise ConfigError(
            f"{source} is not a kafka-backup {kind}",
            hint=f"make one with 'kafka-backup {command} --output FILE'",
        )
    if raw.get("format_version") != version:
        raise ConfigError(f"plan file {source} has version {raw.get('format_version')!r}, expected {version}")
    return validate(model, raw, lambda problem: ConfigError(f"plan file {source} is malformed at {problem}"))


def unreadable_plan(source: str, problem: str, command: str) -> ConfigError:
    return ConfigError(
        f"plan file {source} is not a readable JSON document: {problem}",
        hint=f"re-create it with 'kafka-backup {command}'",
    )


def read_plan_bytes(path: str | Path, command: str) -> bytes:
    """A plan file's bytes; a missing or unreadable file is a ConfigError naming it."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"plan file {path} not found") from None
    except (OSError, ValueError) as exc:  # a folder, no permission, a NUL in the name
        raise unreadable_plan(str(path), str(exc), command) from None
