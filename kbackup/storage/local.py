"""A local folder as object storage (the embedded default)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kbackup.core.errors import StorageError
from kbackup.storage.base import ObjectInfo, Storage, check_key


class LocalStorage(Storage):
    """Objects are files below ``root``; each is written to a temporary file and renamed into place."""

    def __init__(self, root: Path) -> None:
        self.root = root.expanduser().resolve()
        self.url = str(self.root)

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _ensure_parent(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create folder {path.parent}: {exc.strerror}",
                hint="check the storage path and its permissions",
            ) from None

    @staticmethod
    def _temporary_file(path: Path) -> tuple[int, str]:
        """A new hidden file beside ``path`` (listings skip it): its descriptor and name."""
        try:
            return tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        except OSError as exc:
            raise StorageError(f"cannot write below {path.parent}: {exc.strerror}") from None

    @staticmethod
    def _sync_folder(folder: Path) -> None:
        """Make a rename into ``folder`` durable."""
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _publish(self, key: str, fill: str | Path | bytes) -> None:
        """Write to a hidden temporary file beside the target, fsync, then rename over it atomically."""
        path = self._path(key)
        self._ensure_parent(path)
        fd, tmp_name = self._temporary_file(path)
        try:
            with os.fdopen(fd, "wb") as handle:
                if isinstance(fill, bytes):
                    handle.write(fill)
                else:
                    with open(fill, "rb") as source:
                        shutil.copyfileobj(source, handle, 4 * 1024 * 1024)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp_name, path)
            self._sync_folder(path.parent)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            raise StorageError(f"writing {path} failed: {exc.strerror}") from None

    def put_bytes(self, key: str, data: bytes) -> None:
        self._publish(key, data)

    def put_file(self, key: str, path: Path) -> None:
        self._publish(key, path)

    def move_file(self, key: str, path: Path) -> None:
        """Rename the file into place when it is on the storage's filesystem, else copy it.

        Same guarantees as a copy: the data is fsynced before the rename makes it visible,
        and the folder after it.
        """
        target = self._path(key)
        self._ensure_parent(target)
        try:
            with open(path, "rb+") as handle:
                os.fsync(handle.fileno())
            os.replace(path, target)
        except OSError as exc:
            if exc.errno != errno.EXDEV:
                raise StorageError(f"writing {target} failed: {exc.strerror}") from None
            super().move_file(key, path)  # another filesystem: copy, then delete
            return
        self._sync_folder(target.parent)

    def put_bytes_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        self._ensure_parent(path)
        fd, tmp_name = self._temporary_file(path)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            try:
                # link() fails if the name exists: an atomic create-if-absent of a complete file.
                os.link(tmp_name, path)
            except FileExistsError:
                return False
            except OSError as exc:
                raise StorageError(f"writing {path} failed: {exc.strerror}") from None
            return True
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)

    def list_prefixes(self, prefix: str = "") -> list[str]:
        folder = self.root / prefix if prefix else self.root
        if prefix:
            check_key(prefix.rstrip("/"))
        if not folder.is_dir():
            return []
        return sorted(entry.name for entry in folder.iterdir() if entry.is_dir() and _holds_an_object(entry))

    def get_bytes(self, key: str) -> bytes:
        path = self._path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            raise StorageError(f"object {key} not found in {self.url}") from None
        except OSError as exc:
            raise StorageError(f"reading {path} failed: {exc.strerror}") from None

    def download(self, key: str, path: Path) -> None:
        source = self._path(key)
        try:
            shutil.copyfile(source, path)
        except FileNotFoundError:
            raise StorageError(f"object {key} not found in {self.url}") from None
        except OSError as exc:
            raise StorageError(f"reading {source} failed: {exc.strerror}") from None

    def location_exists(self) -> bool:
        return self.root.is_dir()

    def local_path(self, key: str) -> Path:
        """Where an object lives on disk (lets readers skip a copy)."""
        return self._path(key)

    def size(self, key: str) -> int | None:
        path = self._path(key)
        try:
            return path.stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            return None  # NotADirectoryError: a file where a folder of the key would be, no object
        except OSError as exc:
            raise StorageError(f"reading {path} failed: {exc.strerror}") from None

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        if not self.root.is_dir():
            return
        # Walk only below the prefix's folder part: a backup's manifests are listed without
        # visiting its data/ folder (a hundred thousand segments).
        folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        if folder:
            check_key(folder)
        start = self.root / folder if folder else self.root
        found = []
        for dirpath, _dirnames, filenames in os.walk(start):
            for filename in filenames:
                if filename.startswith(".tmp-"):
                    continue  # an unfinished write, invisible to readers
                full = Path(dirpath) / filename
                key = full.relative_to(self.root).as_posix()
                if key.startswith(prefix):
                    try:
                        stat = full.stat()
                    except FileNotFoundError:
                        continue  # removed while listed (a prune running at the same time)
                    found.append(ObjectInfo(key, stat.st_size, stat.st_mtime))
        yield from sorted(found, key=lambda info: info.key)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            pass  # already gone, or never there: a file where a folder of the key would be
        except OSError as exc:
            raise StorageError(f"deleting {path} failed: {exc.strerror}") from None


def _holds_an_object(folder: Path) -> bool:
    """Whether any object lies below ``folder``.

    An object store has no folders, only key prefixes, and a prefix goes with its last object. A
    folder here stays when a delete empties it (removing it would race a writer that has just made
    it), so listing skips empty ones: else a backup a prune removed is listed again by its empty
    folders, and every later prune plans it as a damaged backup.
    """
    for _dirpath, _dirnames, filenames in os.walk(folder):
        if any(not name.startswith(".tmp-") for name in filenames):
            return True
    return False
