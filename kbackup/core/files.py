"""Files a user names (an ``--output``): written, or refused with one line that names the file.

A folder that does not exist, a path through a regular file, a read-only folder or a full disk is
the user's to fix, not a bug: every way such a write fails is a ``ConfigError`` (exit 3, as a
metrics textfile that cannot be written) naming the file and the reason, with a next step.
:func:`check_writable` asks the same question before a command starts work that takes minutes,
so its result is not lost at the last step. Reading a file a user names is
``kbackup.core.config.read_text_file``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from kbackup.core.errors import ConfigError, PreconditionError

WRITABLE_HINT = "name a file in an existing folder this user can write"


def _reason(path: Path, exc: OSError | ValueError) -> str:
    """Why ``path`` cannot be written, in the words of the folder that is the cause when there is one."""
    if isinstance(exc, ValueError):  # os.open's refusal of a NUL in the name
        return "the name holds a NUL character"
    if isinstance(exc, IsADirectoryError) or path.is_dir():
        return "it is a folder"
    if isinstance(exc, FileNotFoundError | NotADirectoryError):
        # The nearest ancestor that exists tells which: a file where a folder is needed, or a
        # folder that is missing below it.
        missing = path.parent
        for folder in path.parents:
            if folder.exists():
                if not folder.is_dir():
                    return f"{folder} is a file, not a folder"
                break
            missing = folder
        return f"the folder {missing} does not exist"
    return exc.strerror or str(exc)


def cannot_write(path: Path, what: str, exc: OSError | ValueError) -> ConfigError:
    return ConfigError(f"{what} {path}: cannot write it: {_reason(path, exc)}", hint=WRITABLE_HINT)


def _exists_refusal(path: Path, refusal: str) -> PreconditionError:
    return PreconditionError(f"{path} exists: {refusal}", hint="choose another --output file")


def check_writable(path: Path, what: str, *, never_overwrite: str | None = None) -> None:
    """Refuse now a file that :func:`write_file` could not write later, changing nothing.

    An existing file is opened for appending and closed (its bytes and times stay); a new one is
    created and removed. Trying is the only answer that holds for root, ACLs and read-only mounts.
    With ``never_overwrite`` (the reason) an existing file is refused as ``write_file`` would.
    """
    if never_overwrite is not None and (path.exists() or path.is_symlink()):
        raise _exists_refusal(path, never_overwrite)
    try:
        if path.exists() and not path.is_dir():
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
            return
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        path.unlink()
    except (OSError, ValueError) as exc:
        raise cannot_write(path, what, exc) from None


def write_file(path: Path, data: bytes | str, what: str, *, never_overwrite: str | None = None) -> None:
    """Write ``data`` (str as UTF-8) to ``path``, replacing what it holds.

    With ``never_overwrite`` (the reason, said when the file exists) the file must be new, and is
    created readable by this user only (0600): it holds a key. A write that fails part way removes
    such a new file rather than leave half a key behind.
    """
    content = data.encode("utf-8") if isinstance(data, str) else data
    if never_overwrite is None:
        try:
            path.write_bytes(content)
        except (OSError, ValueError) as exc:
            raise cannot_write(path, what, exc) from None
        return
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise _exists_refusal(path, never_overwrite) from None
    except (OSError, ValueError) as exc:
        raise cannot_write(path, what, exc) from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink()
        raise cannot_write(path, what, exc) from None
