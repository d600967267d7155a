"""``meta_info["reasoning_tokens"]``: how many generated tokens belong to the reasoning part.

SGLang's rule (``Req.update_reasoning_tokens``, fed by the scheduler when the server runs with a
``--reasoning-parser``): for a request with ``require_reasoning`` (the chat template opened the
reasoning, thinking mode), every generated token counts up to and including the first complete
occurrence of the parser's ``think_end_token`` ids (``</think>`` encoded without special tokens);
all of them while it has not appeared. A request without ``require_reasoning`` counts 0 (the
DeepSeek-V4 parser names no self-opened start tag), and so does every request of a server
without a reasoning parser. The count is reported in every ``/generate`` / ``Engine.generate``
``meta_info`` (stream chunks carry the count so far).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang_v4.entrypoints.chat_encoding import THINK_END, THINK_START


def think_end_token_ids(tokenizer: Any, reasoning_parser: str | None) -> list[int] | None:
    """The ids the reasoning count stops after: ``tokenizer.encode("</think>",
    add_special_tokens=False)`` when ``reasoning_parser`` is set (SGLang's
    ``get_think_end_token_ids``); ``None`` without a parser, a tokenizer, or when it encodes to
    nothing (SGLang then counts nothing)."""
    if not reasoning_parser or tokenizer is None:
        return None
    ids = [int(t) for t in tokenizer.encode(THINK_END, add_special_tokens=False)]
    return ids or None


def reasoning_marker_ids(tokenizer: Any) -> tuple[list[int], list[int]]:
    """``(<think> ids, </think> ids)``, each ``tokenizer.encode(marker, add_special_tokens=False)``
    (the sequences ``thinking_token_budget`` reads and forces,
    :mod:`sglang_v4.sampling.thinking_budget`); two empty lists without a tokenizer."""
    if tokenizer is None:
        return [], []
    enc = [[int(t) for t in tokenizer.encode(m, add_special_tokens=False)] for m in (THINK_START, THINK_END)]
    return enc[0], enc[1]


@dataclass
class ReasoningTokenCounter:
    """Incremental count of one request's reasoning tokens (see the module docstring).

    ``think_end_ids``: the end sequence (non-empty). :meth:`update` takes the request's whole
    output id list so far (it only grows) and reads only what it has not seen, so a stream costs
    O(output length) in all.
    """

    think_end_ids: list[int]
    count: int = 0
    over: bool = False
    _scanned: int = 0

    def update(self, output_ids: list[int]) -> int:
        """Count over ``output_ids`` (the cumulative outputs); returns the count so far."""
        if self.over:
            return self.count
        end, m = self.think_end_ids, len(self.think_end_ids)
        start = max(0, self._scanned - (m - 1))  # an end sequence may straddle the last call
        for i in range(start, len(output_ids) - m + 1):
            if output_ids[i : i + m] == end:
                self.count, self.over = i + m, True
                return self.count
        self._scanned = len(output_ids)
        self.count = len(output_ids)
        return self.count
