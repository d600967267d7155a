"""vLLM's ``thinking_token_budget``: the end of the reasoning is forced after ``budget`` tokens.

Semantics (vLLM's ``ThinkingTokenBudgetLogitsProcessor``, read for behaviour, not copied):

* A request is *in the reasoning* when the last think-start sequence of its prompt (``<think>``)
  comes after the last think-end sequence (``</think>``); its reasoning count starts at the number
  of prompt tokens after that start (0 for the DeepSeek-V4 chat template, whose thinking-mode
  prompt ends with ``<think>``). A request whose prompt is not in the reasoning is not bounded.
* Every generated token while in the reasoning adds one. Once the count reaches ``budget`` and the
  model has not ended the reasoning itself, the think-end sequence is forced: the next
  ``len(think_end_ids)`` output tokens are its ids, whatever the model's distribution says. With
  ``budget`` 0 the first output token is the think-end token. The forced tokens are output tokens
  (``max_new_tokens`` counts them; a limit reached first cuts the output, as in vLLM).
* A think-end sequence the model writes itself before that ends the reasoning: nothing is forced.

Here the forcing is a per-row override of the sampled id on the device
(:attr:`~sglang_v4.managers.model_worker_batch.SamplingBatchInfo.forced_token_ids`): the sampled
token's logprob entries are those of the model's distribution (vLLM's default ``raw`` logprobs
are also computed before its logits processors).

Overlap scheduling: whether the token at output index ``start`` is forced depends on the values of
the tokens before it; the one before may still be in flight when the next batch is built, so a
request about to reach ``start`` makes its batch wait for the previous result
(:meth:`ThinkingBudgetState.needs_host_history`). Every other step overlaps as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ThinkingBudgetState", "last_sequence_index", "NOT_FORCED"]

#: :meth:`ThinkingBudgetState.forced_token` when the sampled token stands.
NOT_FORCED = -1


def last_sequence_index(ids: Sequence[int], seq: Sequence[int]) -> int:
    """Start index of the last occurrence of ``seq`` in ``ids``; ``-1`` when absent or ``seq`` is empty.

    The candidates are found with ``list.index`` on the reversed ids (C speed: a long prompt is
    scanned on the scheduler's thread when a request with a budget arrives)."""
    m = len(seq)
    if m == 0:
        return -1
    seq, ids = list(seq), ids if isinstance(ids, list) else list(ids)
    n, first = len(ids), seq[0]
    rev = ids[::-1]  # ids[i] is rev[n - 1 - i]; a match starts at i <= n - m, so rev index >= m - 1
    j = m - 1
    while True:
        try:
            j = rev.index(first, j)
        except ValueError:
            return -1
        i = n - 1 - j
        if ids[i : i + m] == seq:
            return i
        j += 1


@dataclass(slots=True)
class ThinkingBudgetState:
    """One request's budget (module docstring).

    Attributes:
        think_end_ids: the ids forced, in order (non-empty).
        start: output index of the first forced id (``max(0, budget - reasoning tokens already in
            the prompt)``).
        ended: the reasoning is over (the model wrote the end sequence before ``start``, or an
            index past the forced ids was asked for): nothing more is forced. A batch that fails
            and is run again asks for the same index and gets the same id.
    """

    think_end_ids: list[int]
    start: int
    ended: bool = False
    _scanned: int = 0

    @classmethod
    def for_prompt(
        cls,
        prompt_ids: Sequence[int],
        budget: int | None,
        think_start_ids: list[int],
        think_end_ids: list[int],
    ) -> ThinkingBudgetState | None:
        """The state of a request with ``prompt_ids`` and ``budget`` (``None`` or ``-1``:
        unlimited), or ``None`` when nothing is bounded (no budget, empty marker sequences, or a
        prompt that is not in the reasoning).

        Raises:
            ValueError: ``budget`` below -1 (the field is named).
        """
        if budget is not None and budget < -1:
            raise ValueError(f"thinking_token_budget must be -1 (unlimited) or at least 0, got {budget}.")
        if budget is None or budget == -1 or not think_start_ids or not think_end_ids:
            return None
        last_start = last_sequence_index(prompt_ids, think_start_ids)
        if last_start < 0 or last_start <= last_sequence_index(prompt_ids, think_end_ids):
            return None
        in_prompt = len(prompt_ids) - (last_start + len(think_start_ids))
        return cls(list(think_end_ids), max(0, budget - in_prompt))

    def _ended_by_model(self, output_ids: Sequence[int]) -> bool:
        """Scan the newly known outputs before ``start`` for the end sequence (O(new tokens))."""
        m = len(self.think_end_ids)
        upto = min(len(output_ids), self.start)  # an end starting at or after start is ours
        lo = max(0, self._scanned - (m - 1))
        for i in range(lo, upto):
            if output_ids[i] == self.think_end_ids[0] and list(output_ids[i : i + m]) == self.think_end_ids:
                return True
        self._scanned = max(self._scanned, upto)
        return False

    def forced_token(self, index: int, output_ids: Sequence[int]) -> int:
        """The id output index ``index`` must be, or :data:`NOT_FORCED`.

        Args:
            index: output index of the token about to be sampled (tokens in flight included).
            output_ids: the outputs the host knows (a prefix of the ``index`` tokens before).
                Tokens not known yet are taken as not ending the reasoning: the scheduler makes a
                request wait for them when it matters (:meth:`needs_host_history`).
        """
        if self.ended:
            return NOT_FORCED
        if index < self.start:
            return NOT_FORCED
        if self._ended_by_model(output_ids):
            self.ended = True
            return NOT_FORCED
        j = index - self.start
        if j >= len(self.think_end_ids):
            self.ended = True
            return NOT_FORCED
        return self.think_end_ids[j]

    def needs_host_history(self, num_outputs: int) -> bool:
        """The next token (output index ``num_outputs``) is the first that may be forced and the
        token before is still unknown to the host while a batch runs: that batch's result must be
        processed before the next is built."""
        return not self.ended and num_outputs == self.start and self.start > 0
