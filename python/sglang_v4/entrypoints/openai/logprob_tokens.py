"""The text of each token of a legacy completions ``logprobs`` object, in the context of the text.

OpenAI's legacy ``logprobs`` lists ``tokens``, ``token_logprobs``, ``text_offset`` (each token's
character position in the choice's text) and ``top_logprobs`` (per position, a dict from token
text to logprob). A token decoded on its own is not its part of the text: a byte-level token that
holds part of a multi-byte character (CJK, emoji) decodes to U+FFFD, so the token strings did not
add up to the text and ``text_offset`` drifted after the first such token; a stop string trimmed
from the text still had its tokens' strings counted.

:class:`TokenTextSplitter` gives each token the text it adds to the decoded text, as incremental
detokenization does (vLLM's ``detokenize_incrementally`` rule, read not copied: a token that
leaves an incomplete character at the end adds nothing; the one that completes it adds the whole
character). Joined, the pieces are the choice's text (:meth:`TokenTextSplitter.finish` aligns them
to the returned text: a trimmed stop string cuts the pieces too), so ``text_offset`` is each
token's true offset and ``text[text_offset[i]:]`` starts with ``tokens[i]``. The alternatives of
``top_logprobs`` are decoded in the same context (a candidate's text as if it had been sampled
there).

Decoding is windowed: only the tokens since the last position where the decoded text ended with a
complete character are decoded again (at most :data:`MAX_WINDOW` tokens), so a step costs O(1) in
the output length. This relies on the tokenizer's decode being concatenative at character
boundaries, which holds for byte-level BPE decoders (DeepSeek-V4's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_WINDOW", "TokenPiece", "TokenTextSplitter"]

#: The most tokens re-decoded per step: UTF-8 characters span at most 4 bytes, so a window that
#: still ends in U+FFFD after this many tokens holds stray bytes, and it is closed there.
MAX_WINDOW = 8

_REPLACEMENT = "\ufffd"


def _complete_len(text: str) -> int:
    """Length of ``text`` without its trailing U+FFFD run (an incomplete UTF-8 sequence)."""
    end = len(text)
    while end > 0 and text[end - 1] == _REPLACEMENT:
        end -= 1
    return end


def _common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class TokenPiece:
    """One token of a legacy ``logprobs`` object.

    Attributes:
        token_id: the token id.
        text: the part of the choice's text this token adds (may be ``""``).
        alternatives: token id -> the text that token would have added at this position (for the
            ``top_logprobs`` keys of the candidates asked for).
    """

    token_id: int
    text: str
    alternatives: dict[int, str] = field(default_factory=dict)


class TokenTextSplitter:
    """Splits the decoded text of a token sequence into per-token pieces, one segment at a time
    (a choice's echoed prompt and its output are two splitters).

    Args:
        tokenizer: an HF-style tokenizer (``decode(ids, skip_special_tokens=...)``, ``len()``).
        skip_special_tokens: decode as the returned text was decoded (the request's flag for the
            output; ``False`` for an echoed prompt, whose text holds its special tokens as written).
    """

    def __init__(self, tokenizer: Any, skip_special_tokens: bool) -> None:
        self._tok = tokenizer
        self._skip = skip_special_tokens
        try:
            self._vocab = len(tokenizer)
        except TypeError:
            self._vocab = None
        self._window: list[int] = []  # ids since the last complete-character boundary
        self._window_start = 0  # decoded characters before the window
        self._assigned = 0  # decoded characters given to tokens so far
        self._sent = 0  # characters of the returned text covered by finished pieces

    def _decode(self, ids: Sequence[int]) -> str:
        if self._vocab is not None:
            ids = [t for t in ids if 0 <= t < self._vocab]
        if not ids:
            return ""
        return self._tok.decode(list(ids), skip_special_tokens=self._skip)

    def add(self, token_id: int, alternatives: Sequence[int] = ()) -> TokenPiece:
        """The piece of the next token (decoded context only; :meth:`finish` aligns it to the
        returned text), with the pieces of the ``alternatives`` ids at the same position."""
        prev = self._window
        offset = self._assigned - self._window_start  # where this token's text starts in the window
        alts: dict[int, str] = {}
        for alt in alternatives:
            if alt == token_id or alt in alts:
                continue
            s = self._decode([*prev, alt])
            alts[alt] = s[offset : max(offset, _complete_len(s))]
        self._window = [*prev, token_id]
        s = self._decode(self._window)
        end = max(offset, _complete_len(s))
        if len(self._window) >= MAX_WINDOW:
            end = max(offset, len(s))  # stray bytes that never form a character: close the window
        text = s[offset:end]
        alts[token_id] = text
        self._assigned = self._window_start + end
        if end == len(s):  # the decoded text ends with a complete character: a clean boundary
            self._window_start += len(s)
            self._window = []
        return TokenPiece(token_id, text, alts)

    def finish(self, pieces: list[TokenPiece], text: str, final: bool) -> list[TokenPiece]:
        """Align ``pieces`` (the next ones from :meth:`add`) to ``text``, the segment's returned
        text (cumulative): each piece keeps the part that matches ``text`` where it falls, so a
        stop string trimmed from the text cuts the pieces of its tokens. With ``final`` (the text
        is complete) the last piece also takes any text the pieces did not cover, so that the
        pieces of the segment join to ``text`` exactly. Not ``final`` (a stream's chunk before the
        last), the pieces are kept as decoded: the text may still lag behind the tokens.

        Returns:
            ``pieces``, their ``text`` (and the sampled id's alternative) updated in place.
        """
        for p in pieces:
            if final:
                n = _common_prefix_len(p.text, text[self._sent :]) if self._sent < len(text) else 0
                if n != len(p.text):
                    p.text = p.text[:n]
                    p.alternatives[p.token_id] = p.text
            self._sent += len(p.text)
        if final and pieces and self._sent < len(text):
            pieces[-1].text += text[self._sent :]
            pieces[-1].alternatives[pieces[-1].token_id] = pieces[-1].text
            self._sent = len(text)
        return pieces
