"""Token ids of a rendered chat prompt whose request text is read as plain text.

A chat prompt is template markup (BOS, role tokens, ``<think>``, DSML...) around the text the
request gave (message content, reasoning, tool results and arguments). Tokenizing the joined string
turns a special-token string inside that text -- ``<｜User｜>`` or ``</think>`` in a user message --
into the control token itself, so a message can open a forged turn or end the reasoning early and
the prompt's token count is not the one DeepSeek's encoder (``deepseek-recipe``) gives: that
encoder tokenizes the request's text as plain text, special-token strings included, and only the
template's markup as special tokens (public reports of the same fault elsewhere:
huggingface/transformers#29279, vllm-project/vllm#31735, InternLM/lmdeploy#4960).

:func:`encode_with_plain_spans` does what the encoder does, given the character spans of the
request's text (:class:`~sglang_v4.entrypoints.chat_encoding.RenderedPrompt`): outside the spans
the added tokens of the vocabulary are matched as the tokenizer matches them (leftmost, longest
first); every run of text between two matched tokens, spans included, is encoded by the same
tokenizer with no added token, so a prompt whose request text holds no special-token string gets
exactly the ids of encoding the whole string.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["encode_with_plain_spans", "prepare_plain_encoding"]

_BUILD_LOCK = threading.Lock()


@dataclass(frozen=True)
class _PlainCodec:
    """``plain``: a ``tokenizers.Tokenizer`` without added tokens; ``pattern``: the added tokens'
    contents, longest first; ``ids``: content -> id."""

    plain: Any
    pattern: re.Pattern[str]
    ids: dict[str, int]


def _backend(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` behind ``tokenizer`` (FastTokenizer's or a transformers fast
    tokenizer's), or ``None``."""
    for name in ("backend_tokenizer", "_tok"):
        backend = getattr(tokenizer, name, None)
        if backend is not None and hasattr(backend, "to_str"):
            return backend
    return None


def _build_codec(tokenizer: Any) -> _PlainCodec | None:
    """The codec of ``tokenizer``; ``None`` when its added tokens cannot be matched by a plain
    string search (a token that strips whitespace or matches whole words only, or one matched on
    normalized text under a normalizer)."""
    backend = _backend(tokenizer)
    if backend is None:
        return None
    spec = json.loads(backend.to_str())
    added = spec.get("added_tokens") or []
    normalizer = spec.get("normalizer")
    has_normalizer = bool(normalizer) and not (
        normalizer.get("type") == "Sequence" and not normalizer.get("normalizers")
    )
    for tok in added:
        if tok.get("lstrip") or tok.get("rstrip") or tok.get("single_word"):
            return None
        if tok.get("normalized") and has_normalizer:
            return None
    spec["added_tokens"] = []
    import tokenizers

    plain = tokenizers.Tokenizer.from_str(json.dumps(spec))
    plain.no_padding()  # the runs are encoded as one batch: never padded to a common length
    ids = {tok["content"]: int(tok["id"]) for tok in added if tok.get("content")}
    alternatives = sorted(ids, key=len, reverse=True)
    pattern = re.compile("|".join(map(re.escape, alternatives))) if alternatives else re.compile(r"(?!)")
    return _PlainCodec(plain, pattern, ids)


def _codec(tokenizer: Any) -> _PlainCodec | None:
    """:func:`_build_codec`, built once per tokenizer object."""
    cached = getattr(tokenizer, "_sglang_v4_plain_codec", False)
    if cached is False:
        with _BUILD_LOCK:
            cached = getattr(tokenizer, "_sglang_v4_plain_codec", False)
            if cached is False:
                cached = _build_codec(tokenizer)
                try:
                    tokenizer._sglang_v4_plain_codec = cached
                except AttributeError:  # an object without attributes: built each time
                    pass
    return cached


def prepare_plain_encoding(tokenizer: Any, background: bool = True) -> None:
    """Build what :func:`encode_with_plain_spans` needs for ``tokenizer`` now (a copy of the
    tokenizer without added tokens: about half a second for the V4 vocabulary), in a daemon
    thread when ``background``, so the first chat request does not wait for it."""
    if background:
        threading.Thread(target=_codec, args=(tokenizer,), name="plain-encoding", daemon=True).start()
    else:
        _codec(tokenizer)


def encode_with_plain_spans(tokenizer: Any, text: str, plain_spans: Sequence[tuple[int, int]]) -> list[int]:
    """Token ids of the prompt ``text`` (no BOS / EOS added), the ``plain_spans`` read as plain text.

    Args:
        tokenizer: a :class:`~sglang_v4.utils.FastTokenizer` or a transformers tokenizer.
        text: the rendered prompt.
        plain_spans: sorted, disjoint ``(start, end)`` character ranges of ``text`` in which a
            special-token string is text (the request's own text); ``()``: none.

    Returns:
        The ids (see the module docstring). A tokenizer without a ``tokenizers`` backend, or whose
        added tokens a string search cannot match (:func:`_build_codec`), encodes ``text`` as a
        whole, spans or not.

    Raises:
        ValueError: a span outside ``text``, reversed, or overlapping the one before.
    """
    if not plain_spans:
        return list(tokenizer.encode(text, add_special_tokens=False))
    prev = 0
    for start, end in plain_spans:
        if not prev <= start <= end <= len(text):
            raise ValueError(
                f"plain_spans: ({start}, {end}) is not a sorted span of the {len(text)}-character text."
            )
        prev = end
    codec = _codec(tokenizer)
    if codec is None:
        return list(tokenizer.encode(text, add_special_tokens=False))
    pieces: list[str | int] = []  # text runs and the ids of the markup's added tokens
    run_start = 0

    def markup(a: int, b: int) -> None:
        nonlocal run_start
        for m in codec.pattern.finditer(text, a, b):
            if m.start() > run_start:
                pieces.append(text[run_start : m.start()])
            pieces.append(codec.ids[m.group()])
            run_start = m.end()

    at = 0
    for start, end in plain_spans:
        markup(at, start)
        at = end
    markup(at, len(text))
    if run_start < len(text):
        pieces.append(text[run_start:])
    runs = [p for p in pieces if isinstance(p, str)]
    encoded = iter(codec.plain.encode_batch(runs, add_special_tokens=False)) if runs else iter(())
    out: list[int] = []
    for p in pieces:
        out.extend(next(encoded).ids if isinstance(p, str) else [p])
    return out
