"""The text of each token of a legacy completions ``logprobs`` object, in the context of the text.

OpenAI's legacy ``logprobs`` lists ``tokens``, ``token_logprobs``, ``text_offset`` (each token's
character position in the choice's text) and ``top_logprobs`` (per position, a dict from token
text to logprob). A token decoded on its own is not its part of the text: a byte-level token that
holds part of a multi-byte character (CJK, emoji) decodes to U+FFFD, so the token strings did not
add up to the text and ``text_offset`` drifted after the first such token; a stop string trimmed
from the text still had its tokens' strings counted.

:class:`TokenTextSplitter` gives each token the text it adds to the decoded text: the
characters whose last byte it holds. The tokens' raw bytes (byte-level BPE) go through an
incremental UTF-8 decoder with U+FFFD for invalid bytes (what the tokenizer's decode does to the
whole sequence), so a token that leaves a character incomplete adds nothing and the one that
completes it adds the whole character; a byte that can never start or continue a character adds
its U+FFFD at once. Joined, the pieces are the choice's text (:meth:`TokenTextSplitter.finish`
aligns them to the returned text: a trimmed stop string cuts the pieces too), so ``text_offset``
is each token's true offset and ``text[text_offset[i]:]`` starts with ``tokens[i]``; a stream
sends a token with the first chunk whose text holds its piece (:meth:`TokenTextSplitter.ready`),
so text the stream holds back (a possible stop string) never reaches ``tokens`` early. The
alternatives of ``top_logprobs`` are decoded in the same context (a candidate's text as if it had
been sampled there), as vLLM keys them; a candidate that is a special token the text would skip
is keyed by its own text rather than by ``""``.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sglang_v4.utils import byte_level_token_bytes

__all__ = ["TokenPiece", "TokenTextSplitter"]


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
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._sent = 0  # characters of the returned text covered by finished pieces

    def _bytes(self, tid: int) -> bytes:
        """The bytes token ``tid`` adds to the decoded byte stream: its byte-level spelling, none
        for a special token the decode skips, else its decoded text's UTF-8 (an added token)."""
        try:
            alone = self._tok.decode([tid], skip_special_tokens=self._skip)
        except Exception:  # noqa: BLE001 - an id outside the vocabulary decodes to nothing
            return b""
        if not alone:
            return b""
        raw = byte_level_token_bytes(self._tok, tid)
        return raw if raw is not None else alone.encode("utf-8")

    def _standalone(self, tid: int) -> str:
        try:
            return self._tok.decode([tid], skip_special_tokens=False)
        except Exception:  # noqa: BLE001 - an id outside the vocabulary
            return str(tid)

    def add(self, token_id: int, alternatives: Sequence[int] = ()) -> TokenPiece:
        """The piece of the next token (decoded context only; :meth:`finish` aligns it to the
        returned text), with the pieces of the ``alternatives`` ids at the same position."""
        state = self._utf8.getstate()
        alts: dict[int, str] = {}
        for alt in alternatives:
            if alt == token_id or alt in alts:
                continue
            raw = self._bytes(alt)
            if raw:
                alts[alt] = self._utf8.decode(raw)
                self._utf8.setstate(state)
            else:  # a special token the text would skip: named by its own text, not ""
                alts[alt] = self._standalone(alt)
        text = self._utf8.decode(self._bytes(token_id))
        alts[token_id] = text
        return TokenPiece(token_id, text, alts)

    def ready(self, pieces: Sequence[TokenPiece], text: str) -> int:
        """How many of ``pieces`` (the next ones from :meth:`add`, in order) the cumulative text
        ``text`` already holds where they fall: a stream's chunk sends only those, so that no
        token carries text the stream has not sent (text held back as a possible stop string, an
        incomplete character) and may never send (the stop string trimmed at the finish)."""
        pos, k = self._sent, 0
        for p in pieces:
            end = pos + len(p.text)
            if end > len(text) or text[pos:end] != p.text:
                break
            pos, k = end, k + 1
        return k

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
