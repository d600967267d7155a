"""The ``encrypted_content`` of ``reasoning`` items: the model's reasoning carried by the client.

A client that keeps no state on the server (``store: false``) and asks for
``include: ["reasoning.encrypted_content"]`` (Codex does both on every request) replays the
reasoning items of earlier turns by their ``encrypted_content`` alone, without their
``reasoning_text`` content. OpenAI's blob is encrypted with a key only its servers hold; this
server holds none, so its blob is the reasoning text compressed and encoded
(:func:`encode_reasoning`: ``zlib``, then URL-safe base64, after the :data:`REASONING_STATE_PREFIX`
tag), which only has to survive the round trip through the client. Replayed, a blob of this server
gives back the text (:func:`decode_reasoning`), so a tool loop's reasoning stays in the prompt of
the next turn, as DeepSeek-V4's thinking mode renders it; a blob of another server (no such tag)
is opaque and replays nothing. The blob is not secret: the text is in the item's ``content`` too.
"""

from __future__ import annotations

import base64
import binascii
import zlib

from sglang_v4.entrypoints.openai.serving_base import RequestError

__all__ = ["ENCRYPTED_REASONING_INCLUDE", "REASONING_STATE_PREFIX", "encode_reasoning", "decode_reasoning"]

#: The ``include`` value that asks for reasoning items' ``encrypted_content`` (OpenAI's name).
ENCRYPTED_REASONING_INCLUDE = "reasoning.encrypted_content"
#: The tag that starts every blob this server writes (a versioned format name).
REASONING_STATE_PREFIX = "sglang-v4-reasoning-v1."
#: Bound on a decoded blob (bytes of UTF-8 text): a replayed blob may not inflate past it.
MAX_REASONING_BYTES = 64 * 1024 * 1024


def encode_reasoning(text: str) -> str:
    """The ``encrypted_content`` of a reasoning item of text ``text``: the tag, then the URL-safe
    base64 of the ``zlib``-compressed UTF-8 text (ASCII only)."""
    packed = base64.urlsafe_b64encode(zlib.compress(text.encode("utf-8"))).decode("ascii")
    return REASONING_STATE_PREFIX + packed


def decode_reasoning(blob: str, field: str) -> str | None:
    """The reasoning text of an ``encrypted_content`` blob written by :func:`encode_reasoning`;
    ``None`` for a blob of another server (no :data:`REASONING_STATE_PREFIX` tag).

    Raises:
        RequestError: 400 naming ``field`` for a blob with the tag that does not decode (cut or
            altered), or that inflates past :data:`MAX_REASONING_BYTES`.
    """
    if not blob.startswith(REASONING_STATE_PREFIX):
        return None
    try:
        packed = base64.urlsafe_b64decode(blob[len(REASONING_STATE_PREFIX) :].encode("ascii"))
        d = zlib.decompressobj()
        raw = d.decompress(packed, MAX_REASONING_BYTES + 1)
        if len(raw) > MAX_REASONING_BYTES or not d.eof or d.unused_data:
            raise ValueError("not one whole zlib stream within the bound")
        return raw.decode("utf-8")
    except (ValueError, UnicodeError, binascii.Error, zlib.error):
        raise RequestError(
            f"{field} is not an encrypted_content this server wrote, or it was altered.",
            400,
            param=field,
        ) from None
