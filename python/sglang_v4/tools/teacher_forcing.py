"""Teacher-forced scoring of a token sequence through a :class:`ModelRunner` (chunked prefill),
for the accuracy checks that compare the runtime with a reference model."""

from __future__ import annotations

from typing import Any

import torch


def next_token_logprobs(runner: Any, ids: list[int], chunk: int) -> torch.Tensor:
    """Teacher-forced logprob of ``ids[t + 1]`` at every position ``t``, the prompt prefilled in
    chunks of ``chunk`` tokens.

    Args:
        runner: a :class:`~sglang_v4.model_executor.model_runner.ModelRunner` (its ``pool``,
            ``page_size`` and ``forward``); one request slot and the pages of ``ids`` are taken
            from its pool and not returned.
        ids: the token ids, at least 2.
        chunk: tokens per forward (``>= 1``).

    Returns:
        float32 CPU tensor of shape ``[len(ids) - 1]`` (natural-log probabilities).
    """
    from sglang_v4.model_executor.forward_batch import ReqForwardInput

    pool, page = runner.pool, runner.page_size
    slot = pool.req_slots.alloc()
    pool.reset_req_state(slot)
    blocks: list[int] = []
    wins: dict[int, int] = {}
    outs = []
    for s in range(0, len(ids), chunk):
        part = ids[s : s + chunk]
        end = s + len(part)
        while len(blocks) < -(-end // page):
            blocks += pool.block_alloc.alloc_or_raise(1)
        for k in range(max(0, (s - 127) // 128), (end - 1) // 128 + 1):  # 128-token window pages
            if k not in wins:
                wins[k] = pool.window_alloc.alloc_or_raise(1)[0]
        _, logits = runner.forward([ReqForwardInput(slot, part, s, list(blocks), dict(wins), 0)])
        outs.append(torch.log_softmax(logits.float(), dim=-1).cpu())
    lp = torch.cat(outs)[:-1]
    return lp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
