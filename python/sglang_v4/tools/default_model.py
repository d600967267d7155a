"""The embedded default model: the ``tiny`` preset, HF format, float32 weights, seed 0.

Written on first use to ``$SGLANG_V4_CACHE/default-tiny-v3`` (default cache
``~/.cache/sglang_v4``) and reused afterwards. The directory appears atomically: the checkpoint is
written into a temporary sibling directory which is then renamed, so concurrent first uses (e.g.
several test workers) never see a half-written model. Writers also take an exclusive lock on
``<cache>/.default-tiny-v3.lock`` (``fcntl.flock``, where available) while they write, so the
processes that start together build the model once: the others wait, then find it complete. Without
the lock (no ``fcntl``) each writes its own copy and the loser of the rename discards it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # not POSIX: no lock, the atomic rename alone keeps the directory whole
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "default-tiny-v3"  # bump whenever the tiny preset or the weights change
_COMPLETE_MARKER = ".complete"


def default_cache_dir() -> str:
    """``$SGLANG_V4_CACHE`` if set, else ``~/.cache/sglang_v4``."""
    return os.environ.get("SGLANG_V4_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sglang_v4")


def _is_complete(path: str) -> bool:
    return os.path.exists(os.path.join(path, _COMPLETE_MARKER)) and os.path.exists(
        os.path.join(path, "config.json")
    )


def ensure_default_model(cache_dir: str | None = None) -> str:
    """Path of the default model directory, writing it first if it does not exist yet.

    Args:
        cache_dir: parent directory; ``None`` uses :func:`default_cache_dir`.

    Returns:
        ``<cache_dir>/default-tiny-v3``, a complete HF-format checkpoint (config.json, safetensors
        shards + index, tokenizer files) of the ``tiny`` preset with seed-0 float32 weights.
    """
    root = cache_dir or default_cache_dir()
    path = os.path.join(root, DEFAULT_MODEL_NAME)
    if _is_complete(path):
        return path
    os.makedirs(root, exist_ok=True)
    with _writer_lock(os.path.join(root, f".{DEFAULT_MODEL_NAME}.lock")):
        if _is_complete(path):  # written by another process while this one waited for the lock
            return path
        _write_default_model(root, path)
    return path


@contextlib.contextmanager
def _writer_lock(lock_path: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path`` (created if missing) for the block; a no-op
    where ``fcntl`` is missing. The lock file stays (removing it would let a waiter lock an
    unlinked inode while a newcomer locks a new file)."""
    if fcntl is None:
        yield
        return
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _write_default_model(root: str, path: str) -> None:
    """Write the checkpoint into a temporary directory under ``root``, then rename it to ``path``
    (atomic: a reader sees no directory or a complete one)."""
    # torch and the model code only when the model must be written (a start-up pays ~1 s for them)
    from sglang_v4.tools.make_checkpoint import write_checkpoint

    logger.info(
        "Writing the embedded default model (tiny preset, random seed-0 weights) to %s "
        "(first use; set SGLANG_V4_CACHE to put it elsewhere)",
        path,
    )
    tmp = tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_NAME}.", dir=root)
    try:
        write_checkpoint(tmp, preset="tiny", fmt="hf", weights="fp32", seed=0)
        open(os.path.join(tmp, _COMPLETE_MARKER), "w").close()
        if os.path.exists(path) and not _is_complete(path):
            # a leftover from an older, non-atomic writer: move it out of the way first (another
            # writer without the lock may have moved it already)
            stale = tempfile.mkdtemp(prefix=f".{DEFAULT_MODEL_NAME}.stale.", dir=root)
            with contextlib.suppress(FileNotFoundError):
                os.replace(path, os.path.join(stale, "old"))
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(tmp, path)
        except OSError:
            if not _is_complete(path):  # not a lost race: a real error
                raise
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
