"""A disk cache of xgrammar's vocabulary scan (``xgrammar.TokenizerInfo``) per tokenizer file.

Building a ``TokenizerInfo`` reads the whole vocabulary (about 129k tokens for DeepSeek-V4) through
``transformers`` and decodes every token: 2-3 s of one CPU core, paid by every scheduler at start-up
before the server is ready. The result depends only on the ``tokenizer.json`` bytes, the model's
vocabulary size (logits width), the stop token ids and the xgrammar version, so it is stored once
with xgrammar's own serializer (``TokenizerInfo.serialize_json`` / ``deserialize_json``) under
``$SGLANG_V4_CACHE/xgrammar/`` (default ``~/.cache/sglang_v4/xgrammar/``) and read back by later
starts (about 0.4 s).

The key is a SHA-256 over those four inputs: a changed file, vocabulary size, stop id set or
xgrammar release gets a fresh scan. Entries are written atomically (a temporary file renamed into
place), so concurrent starts never read half a file; an unreadable or corrupt entry is ignored and
rewritten. When the cache directory cannot be written the scan is simply not stored (start-up goes
on, a debug log says why).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from sglang_v4.tools.default_model import default_cache_dir

logger = logging.getLogger(__name__)

#: Sub-directory of the sglang-v4 cache that holds the serialized scans.
CACHE_SUBDIR = "xgrammar"


def tokenizer_info_key(tokenizer_bytes: bytes, vocab_size: int, stop_token_ids: Sequence[int]) -> str:
    """Hex SHA-256 naming one scan: the ``tokenizer.json`` bytes, ``vocab_size`` (logits width,
    tokens), the stop ids (order-free) and the installed xgrammar version."""
    h = hashlib.sha256()
    h.update(importlib.metadata.version("xgrammar").encode())
    h.update(b"\0%d\0" % int(vocab_size))
    h.update(",".join(str(int(t)) for t in sorted(set(stop_token_ids))).encode())
    h.update(b"\0")
    h.update(tokenizer_bytes)
    return h.hexdigest()


def load_tokenizer_info(
    tokenizer_json: str, vocab_size: int, stop_token_ids: Sequence[int], cache_dir: str | None = None
) -> Any:
    """The ``xgrammar.TokenizerInfo`` of the ``tokenizer.json`` file at ``tokenizer_json``, read
    from the disk cache when an entry for the same inputs exists, else built with
    ``TokenizerInfo.from_huggingface`` and stored.

    Args:
        tokenizer_json: path of a Hugging Face ``tokenizer.json``.
        vocab_size: the model's vocabulary size (may exceed the tokenizer's).
        stop_token_ids: token ids that may end a grammar (the EOS ids).
        cache_dir: the sglang-v4 cache root; ``None`` uses ``$SGLANG_V4_CACHE`` or
            ``~/.cache/sglang_v4``.

    Raises:
        OSError: the tokenizer file cannot be read. Cache read/write failures are not raised.
    """
    import xgrammar as xgr

    with open(tokenizer_json, "rb") as f:
        data = f.read()
    stop = [int(t) for t in stop_token_ids]
    root = os.path.join(cache_dir or default_cache_dir(), CACHE_SUBDIR)
    entry = os.path.join(root, tokenizer_info_key(data, vocab_size, stop) + ".json")
    try:
        with open(entry, encoding="utf-8") as f:
            return xgr.TokenizerInfo.deserialize_json(f.read())
    except FileNotFoundError:
        pass
    except Exception as e:  # a corrupt or foreign entry: rebuild and overwrite it
        logger.debug("ignoring unreadable tokenizer-info cache entry %s: %s", entry, e)
    from transformers import PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast(tokenizer_file=tokenizer_json)
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=int(vocab_size), stop_token_ids=stop)
    _store(root, entry, info.serialize_json())
    return info


def _store(root: str, entry: str, text: str) -> None:
    """Write ``text`` to ``entry`` atomically; a failure is logged at debug level only."""
    tmp = None
    try:
        os.makedirs(root, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tokinfo.", suffix=".tmp", dir=root)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the entry from other users of the cache
        os.replace(tmp, entry)
        tmp = None
    except OSError as e:
        logger.debug("tokenizer-info cache not written (%s): %s", entry, e)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
