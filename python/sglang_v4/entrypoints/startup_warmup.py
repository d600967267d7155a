"""The start-up warm-up generation: the one request the HTTP server runs before ``/health`` turns
200 (:func:`warmup_request`), fitted to the served context so a small ``--context-length`` still
starts. SGLang warms its server up the same way (a short generation on a fixed prompt) before it
reports ready.
"""

from __future__ import annotations

from sglang_v4.managers.io_struct import GenerateReqInput
from sglang_v4.managers.tokenizer_manager import TokenizerManager

__all__ = ["WARMUP_IDS_NO_TOKENIZER", "WARMUP_MAX_NEW_TOKENS", "WARMUP_PROMPT", "warmup_request"]

WARMUP_PROMPT = "The capital city of France is"
WARMUP_MAX_NEW_TOKENS = 8
#: The warm-up prompt of a server without a tokenizer (``--skip-tokenizer-init``).
WARMUP_IDS_NO_TOKENIZER = [10, 11, 12]


def warmup_request(tm: TokenizerManager) -> GenerateReqInput:
    """The start-up generation, fitted to the served context.

    The prompt is ``WARMUP_PROMPT``'s token ids (``WARMUP_IDS_NO_TOKENIZER`` with
    ``--skip-tokenizer-init``) cut to the longest input the server accepts, and
    ``max_new_tokens`` is at most ``WARMUP_MAX_NEW_TOKENS`` and what the context leaves (0 when the
    prompt fills it), so a small ``--context-length`` still starts.
    """
    ids = (
        list(tm.tokenizer.encode(WARMUP_PROMPT))
        if tm.tokenizer is not None
        else list(WARMUP_IDS_NO_TOKENIZER)
    )
    ids = ids[: max(1, min(tm.max_req_input_len, tm.context_len))]
    max_new = max(0, min(WARMUP_MAX_NEW_TOKENS, tm.context_len - len(ids)))
    return GenerateReqInput(
        input_ids=ids,
        sampling_params={"temperature": 0.0, "max_new_tokens": max_new},
        log_metrics=False,
    )
