"""vLLM's ``thinking_token_budget``: the end of the reasoning is forced after ``budget`` tokens.

Semantics (vLLM's ``ThinkingTokenBudgetLogitsProcessor``, read for behaviour, not copied):

* A request is *in the reasoning* when the last think-start sequence of its prompt (``<think>``)
  comes after the last think-end sequence (``</think>``); its reasoning count starts at the number
  of prompt tokens after that start (0 for the DeepSeek-V4 chat template, whose thinking-mode
  prompt ends with ``<think>``).
* Every generated token while in the reasoning adds one. Once the count reaches ``budget`` and the
  model has not ended the reasoning itself, the think-end sequence is forced: the next
  ``len(think_end_ids)`` output tokens are its ids, whatever the model's distribution says. With
  ``budget`` 0 the first token of the reasoning is the think-end token. The forced tokens are
  output tokens (``max_new_tokens`` counts them; a limit reached first cuts the output, as in
  vLLM).
* A think-end sequence the model writes itself before that ends the reasoning: nothing is forced.
* The budget is per reasoning section, as vLLM's processor re-arms: a think-start sequence the
  model writes (after the reasoning ended, or in a prompt that was not in the reasoning) opens a
  new section whose count starts at 0, bounded by the same ``budget``; one written inside an open
  section restarts its count, as vLLM's does.
* The forced id wins over ``allowed_token_ids``, ``bad_words`` and ``logit_bias``, as in vLLM
  (its sampler masks the allowed ids and bad words, then runs the budget processor, which sets
  every other logit to ``-inf``). A grammar is the exception: the scheduler does not force an id
  the request's grammar refuses and drops the budget (``schedule_batch._forced_token_ids``).

Here the forcing is a per-row override of the sampled id on the device
(:attr:`~sglang_v4.managers.model_worker_batch.SamplingBatchInfo.forced_token_ids`). A forced
row's logprob entries are SGLang's output logprobs of that row (``log_softmax`` of the penalized
logits divided by the row's temperature, as for every other token of the response) computed
with the request's penalties and finite ``logit_bias`` (the rule of the response's other tokens)
but without the vocabulary masks (``allowed_token_ids``, ``bad_words_ids``, the
``min_new_tokens`` mask, the grammar's mask), so a forced id that a mask removed still has its
finite logprob (:func:`sglang_v4.sampling.sampler.unconstrained_logprobs`).

Overlap scheduling: whether the token at output index ``i`` is forced depends on the values of
the tokens before it; the one before may still be in flight when the next batch is built. In an
open section a request whose next token is the first the budget may force makes its batch wait
for the previous result (:meth:`ThinkingBudgetState.needs_host_history`: the step at the
section's ``start``, where a model-written end just before must cancel the forcing). With
``budget`` 0 outside a section, a think-start just sampled forces the very next token: that case
is decided on the device instead (:meth:`ThinkingBudgetState.forced_if_previous`: "if the
previous token is the think-start's last id, the sampled id becomes the first think-end id",
:attr:`~sglang_v4.managers.model_worker_batch.SamplingBatchInfo.forced_if_previous`), so those
steps overlap as usual; the later ids of a multi-token think-end are forced by the host, which
knows the section by then. Every other step overlaps as usual.
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
    """One request's budget (module docstring), advanced over its outputs as they become known.

    Attributes:
        think_start_ids: the sequence that opens a section (may be empty: no re-arming).
        think_end_ids: the ids forced, in order (non-empty).
        budget: reasoning tokens allowed per section (``>= 0``).
        start: output index of the first forced id of the open section (``max(0, budget -
            reasoning tokens already in the prompt)`` for the prompt's section).
        ended: no section is open (the model or the forcing ended it, or none was opened yet):
            nothing is forced until a think-start sequence opens one. A batch that fails and is
            run again asks for the same index and gets the same id.
    """

    think_start_ids: list[int]
    think_end_ids: list[int]
    budget: int
    start: int = 0
    ended: bool = True
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
        unlimited), or ``None`` when nothing is bounded (no budget, or empty marker sequences).
        A prompt that is not in the reasoning gets a state with no open section (a ``<think>``
        the model writes opens one).

        Raises:
            ValueError: ``budget`` below -1 (the field is named).
        """
        if budget is not None and budget < -1:
            raise ValueError(f"thinking_token_budget must be -1 (unlimited) or at least 0, got {budget}.")
        if budget is None or budget == -1 or not think_start_ids or not think_end_ids:
            return None
        st = cls(list(think_start_ids), list(think_end_ids), budget)
        last_start = last_sequence_index(prompt_ids, think_start_ids)
        if last_start >= 0 and last_start > last_sequence_index(prompt_ids, think_end_ids):
            in_prompt = len(prompt_ids) - (last_start + len(think_start_ids))
            st.start, st.ended = max(0, budget - in_prompt), False
        return st

    def _ends_at(self, ids: Sequence[int], i: int, seq: list[int]) -> bool:
        m = len(seq)
        return i + 1 >= m and ids[i] == seq[-1] and list(ids[i + 1 - m : i + 1]) == seq

    def _advance(self, output_ids: Sequence[int]) -> None:
        """Read the newly known outputs (O(new tokens)): close the open section at a model-written
        end before ``start`` or after the forced ids, open one after a think-start sequence."""
        m = len(self.think_end_ids)
        for i in range(self._scanned, len(output_ids)):
            if self.ended or i < self.start:
                if not self.ended and self._ends_at(output_ids, i, self.think_end_ids):
                    self.ended = True  # the model ended the reasoning itself
                elif self._ends_at(output_ids, i, self.think_start_ids):
                    self.start, self.ended = i + 1 + self.budget, False  # a section (re)starts
            elif i == self.start + m - 1:
                self.ended = True  # the forced sequence is complete
        self._scanned = max(self._scanned, len(output_ids))

    def forced_token(self, index: int, output_ids: Sequence[int]) -> int:
        """The id output index ``index`` must be, or :data:`NOT_FORCED`.

        Args:
            index: output index of the token about to be sampled (tokens in flight included).
            output_ids: the outputs the host knows (a prefix of the ``index`` tokens before).
                Tokens not known yet are taken as neither ending nor opening a section: the
                scheduler makes a request wait for them when it matters
                (:meth:`needs_host_history`).
        """
        self._advance(output_ids)
        if self.ended or index < self.start:
            return NOT_FORCED
        j = index - self.start
        return self.think_end_ids[j] if j < len(self.think_end_ids) else NOT_FORCED

    def forced_if_previous(self, index: int, output_ids: Sequence[int]) -> tuple[int, int] | None:
        """``(C, F)``: output index ``index`` must be ``F`` if the token before it, still in flight
        (the host knows ``output_ids``, exactly ``index - 1`` outputs), is ``C``; ``None`` when no
        such condition applies (call it only where :meth:`forced_token` gave :data:`NOT_FORCED`).

        Only ``budget`` 0 outside a section needs it: a think-start whose last id is the token in
        flight opens a section that forces ``index`` at once. ``C`` is the think-start's last id,
        ``F`` the first think-end id; a multi-token think-start arms the condition only when its
        earlier ids end ``output_ids`` (known outputs only, as :meth:`forced_token` reads them).
        The model worker checks ``C`` against the row's input id, which is that token resolved on
        the device."""
        self._advance(output_ids)
        s = self.think_start_ids
        n = len(output_ids)
        if self.budget != 0 or not self.ended or not s or index != n + 1 or n < len(s) - 1:
            return None
        if len(s) > 1 and list(output_ids[n - len(s) + 1 :]) != s[:-1]:
            return None
        return s[-1], self.think_end_ids[0]

    def needs_host_history(self, num_outputs: int, output_ids: Sequence[int] = ()) -> bool:
        """Whether the next token (output index ``num_outputs``) may be forced because of the
        token before it, which the host may not know yet while a batch runs: that batch's result
        must then be processed before the next is built. Only the first forced index of an open
        section needs it (a model-written end just before cancels the forcing); outside a section
        the ``budget`` 0 case is decided on the device (:meth:`forced_if_previous`).
        ``output_ids``: the outputs the host knows (read first, as :meth:`forced_token` reads
        them)."""
        self._advance(output_ids)
        if num_outputs == 0 or self.ended:
            return False
        return num_outputs == self.start
