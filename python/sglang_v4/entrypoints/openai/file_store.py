"""The file store of ``/v1/files`` and ``/v1/batches``: uploaded batch inputs and the output / error
files a batch writes.

Each file's content is one file on disk, ``<directory>/<file id>``, under ``--file-storage-path``
(SGLang's flag; without it a temporary directory made for this server and removed when the
store is closed or the process exits). The file objects (name, purpose, size, time) are held in memory: a restarted
server lists no earlier files, even in a directory it is given again. Each file is bounded in
size (:data:`DEFAULT_MAX_FILE_BYTES`, or ``SGLANG_V4_MAX_FILE_BYTES``); an upload over the bound is
refused before anything is written. The files a batch writes are not bounded: they hold answers
already computed for a batch the server accepted. The store is used from the server's event loop; the disk
writes are small relative to a batch's work and are done inline.

A file may be given a lifetime (OpenAI's ``expires_after``: its ``expires_at`` is ``created_at`` +
the seconds); once that time is reached the file is gone, as if deleted: it is no longer listed,
retrieved or read, and its content is removed from disk at the next store access.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field

from sglang_v4.entrypoints.openai.protocol_batch import FileObject, new_object_id, now_s

__all__ = ["DEFAULT_MAX_FILE_BYTES", "FileTooLargeError", "FileStore", "max_file_bytes_from_env"]

#: Default bound on one file's size: 64 MiB, the HTTP server's request-body bound
#: (``SGLANG_V4_MAX_REQUEST_BODY_BYTES``), so an upload the server accepts can be stored.
DEFAULT_MAX_FILE_BYTES = 64 * 1024 * 1024


def max_file_bytes_from_env() -> int:
    """The file-size bound: ``SGLANG_V4_MAX_FILE_BYTES`` (bytes) when set, else the default.

    Raises:
        ValueError: the variable is not a positive integer (names the variable).
    """
    raw = os.environ.get("SGLANG_V4_MAX_FILE_BYTES")
    if raw is None or raw == "":
        return DEFAULT_MAX_FILE_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"SGLANG_V4_MAX_FILE_BYTES must be a positive integer; got {raw!r}.") from None
    if value < 1:
        raise ValueError(f"SGLANG_V4_MAX_FILE_BYTES must be a positive integer; got {raw!r}.")
    return value


class FileTooLargeError(ValueError):
    """A file over the store's size bound (an HTTP 413)."""

    status_code = 413


@dataclass
class _Entry:
    obj: FileObject
    path: str
    order: int = field(default=0)


#: How many removed files' places :class:`FileStore` remembers for list cursors (a cursor naming an
#: older removed file starts from the first file, as an id never stored does).
GONE_CURSORS_KEPT = 100_000


class FileStore:
    """Files by id: content on disk, :class:`FileObject` in memory.

    Args:
        directory: where the contents go (created if missing); None: a new temporary directory,
            removed by :meth:`close`.
        max_file_bytes: the largest file accepted, in bytes (>= 1).

    Raises:
        ValueError: ``max_file_bytes`` below 1; OSError: the directory cannot be created.
    """

    def __init__(self, directory: str | None = None, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> None:
        if max_file_bytes < 1:
            raise ValueError(f"max_file_bytes must be >= 1; got {max_file_bytes}.")
        self.max_file_bytes = max_file_bytes
        self._owns_directory = directory is None
        if directory is None:
            directory = tempfile.mkdtemp(prefix="sglang_v4_files_")
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        # a temporary directory goes when the store is closed, collected, or the process exits
        self._cleanup = (
            weakref.finalize(self, shutil.rmtree, directory, True) if self._owns_directory else None
        )
        self._entries: dict[str, _Entry] = {}
        #: the creation rank of each removed (deleted or expired) file, so a list cursor that
        #: names one still marks its place (a page's last file deleted between two pages); the
        #: :data:`GONE_CURSORS_KEPT` latest only, so a long-running server's memory stays bounded
        self._gone: dict[str, int] = {}
        self._counter = 0

    def __len__(self) -> int:
        return len(self._entries)

    def create(
        self,
        content: bytes,
        filename: str,
        purpose: str,
        bounded: bool = True,
        expires_after_s: int | None = None,
    ) -> FileObject:
        """Store ``content`` as a new file.

        Args:
            bounded: refuse content over ``max_file_bytes`` (an upload). A batch's output and
                error files pass False: their size follows from the batch the server accepted,
                and refusing them would throw away answers already computed.
            expires_after_s: the file's lifetime in seconds from its creation (its
                ``expires_at``); None: kept until deleted.

        Raises:
            FileTooLargeError: ``bounded`` and ``content`` is over ``max_file_bytes`` (nothing is
                written).
            OSError: the write failed (nothing is kept).
        """
        if bounded and len(content) > self.max_file_bytes:
            raise FileTooLargeError(
                f"The file ({len(content)} bytes) is larger than the limit of {self.max_file_bytes} bytes "
                "(SGLANG_V4_MAX_FILE_BYTES)."
            )
        file_id = new_object_id("file")
        path = os.path.join(self.directory, file_id)
        try:
            with open(path, "wb") as f:
                f.write(content)
        except OSError:
            if os.path.exists(path):
                os.remove(path)
            raise
        created = now_s()
        obj = FileObject(
            id=file_id,
            bytes=len(content),
            created_at=created,
            filename=filename,
            purpose=purpose,
            expires_at=None if expires_after_s is None else created + expires_after_s,
        )
        self._counter += 1
        self._entries[file_id] = _Entry(obj, path, self._counter)
        return obj

    def _drop_expired(self) -> None:
        """Delete the files whose ``expires_at`` has been reached."""
        now = now_s()
        expired = [
            k for k, e in self._entries.items() if e.obj.expires_at is not None and e.obj.expires_at <= now
        ]
        for file_id in expired:
            self._remove(file_id)

    def get(self, file_id: str) -> FileObject | None:
        """The file object, or None for an unknown (or expired) id."""
        self._drop_expired()
        entry = self._entries.get(file_id)
        return entry.obj if entry is not None else None

    def read(self, file_id: str) -> bytes | None:
        """The file's content, or None for an unknown (or expired) id."""
        self._drop_expired()
        entry = self._entries.get(file_id)
        if entry is None:
            return None
        with open(entry.path, "rb") as f:
            return f.read()

    def delete(self, file_id: str) -> bool:
        """Remove a file (its content from disk); whether it was there (an expired file was not)."""
        self._drop_expired()
        return self._remove(file_id)

    def _remove(self, file_id: str) -> bool:
        entry = self._entries.pop(file_id, None)
        if entry is None:
            return False
        self._gone[file_id] = entry.order
        if len(self._gone) > GONE_CURSORS_KEPT:  # forget the oldest removal (insertion order)
            del self._gone[next(iter(self._gone))]
        try:
            os.remove(entry.path)
        except FileNotFoundError:
            pass
        return True

    def list(
        self, purpose: str | None = None, limit: int = 10000, after: str | None = None, order: str = "desc"
    ) -> tuple[list[FileObject], bool]:
        """A page of files (OpenAI's ``GET /v1/files``): those of ``purpose`` (all when None), sorted
        by creation (``order`` ``asc`` / ``desc``), starting after the place of file ``after`` in
        that order; expired files are left out. ``after`` is a cursor: it keeps its place when that
        file is of another purpose or has since been deleted or expired (a client deleting files
        while it pages must not be sent back to the first page); an id never stored starts from
        the first file. Returns ``(files, has_more)``."""
        self._drop_expired()
        desc = order == "desc"
        entries = sorted(self._entries.values(), key=lambda e: e.order, reverse=desc)
        if purpose is not None:
            entries = [e for e in entries if e.obj.purpose == purpose]
        if after is not None:
            entry = self._entries.get(after)
            place = entry.order if entry is not None else self._gone.get(after)
            if place is not None:
                entries = [e for e in entries if (e.order < place if desc else e.order > place)]
        return [e.obj for e in entries[:limit]], len(entries) > limit

    def close(self) -> None:
        """Forget every file; remove the directory when the store made it (a temporary one)."""
        self._entries.clear()
        self._gone.clear()
        if self._cleanup is not None:
            self._cleanup()
