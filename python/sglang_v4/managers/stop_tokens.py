"""The token ids that end generations, and the tokenizer's ids past the model's vocabulary.

Both are read once at scheduler start-up from the served model's config (``config.json``,
``generation_config.json``) and its tokenizer files; ``Scheduler.__init__`` calls them.
"""

from __future__ import annotations

import logging
from typing import Any

from sglang_v4.configs.model_config import ModelConfig

logger = logging.getLogger(__name__)

__all__ = ["stop_token_ids", "warn_tokens_beyond_vocab"]


def stop_token_ids(mc: ModelConfig, tokenizer: Any) -> set[int]:
    """The token ids that end every generation (unless ``ignore_eos``), as SGLang's
    ``Req.check_finished`` stops: ``config.json``'s and ``generation_config.json``'s
    ``eos_token_id`` (:attr:`ModelConfig.eos_token_ids`) and the tokenizer's ``eos_token``
    (``tokenizer_config.json`` / ``special_tokens_map.json``; a fine-tune may name another end
    token there than its config). An id outside the model's vocabulary (a token the model can never
    sample, e.g. an ``eos_token_id`` equal to ``vocab_size``) is left out with a warning naming
    where it came from, whichever file gave it: generations end on the others only. The same set
    masks EOS before ``min_new_tokens`` and ends a grammar.

    Args:
        mc: the served model's config.
        tokenizer: the loaded tokenizer, or ``None`` (``--skip-tokenizer-init``).
    """
    ids = {i for i in mc.eos_token_ids if 0 <= i < mc.vocab_size}
    beyond = [i for i in mc.eos_token_ids if i not in ids]
    if beyond:
        logger.warning(
            "eos_token_id %s of config.json / generation_config.json is outside the model's vocabulary "
            "(%d ids): the model can never sample it; generations end on %s only",
            beyond,
            mc.vocab_size,
            sorted(ids) or "max_new_tokens, stop strings and the tokenizer's eos_token",
        )
    tok_eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    if isinstance(tok_eos, int) and not isinstance(tok_eos, bool):
        if 0 <= tok_eos < mc.vocab_size:
            ids.add(tok_eos)
        else:
            logger.warning(
                "The tokenizer's eos_token %r (id %d) is outside the model's vocabulary (%d ids): "
                "generations end on the config's eos_token_id %s only",
                getattr(tokenizer, "eos_token", None),
                tok_eos,
                mc.vocab_size,
                sorted(ids),
            )
    return ids


def warn_tokens_beyond_vocab(
    mc: ModelConfig, tokenizer: Any, limit: int | None = None
) -> list[tuple[int, str]]:
    """Warn (once, at start-up) about the tokenizer's tokens whose ids are past the model's
    vocabulary (``config.json``'s ``vocab_size``): tokens added by ``special_tokens_map.json`` /
    ``added_tokens_decoder`` / ``extra_special_tokens`` to a tokenizer whose model was not resized.
    A prompt that holds one is refused with a 400 (its id has no embedding), and the operator's only
    clue was that 400. Returns the ``(id, token)`` pairs, in id order (``[]``: none, or no
    tokenizer); ``limit``: only the first ``limit`` of them (the warning names 8 and counts all,
    whatever ``limit``; a model far smaller than its tokenizer then maps 8 ids, not every one).
    """
    if tokenizer is None or len(tokenizer) <= mc.vocab_size:
        return []
    count = len(tokenizer) - mc.vocab_size
    shown = count if limit is None else min(count, max(limit, 8))
    ids = list(range(mc.vocab_size, mc.vocab_size + shown))
    extra = list(zip(ids, tokenizer.convert_ids_to_tokens(ids)))
    logger.warning(
        "The tokenizer has %d token(s) past the model's vocabulary (%d ids): %s; a prompt that "
        "contains one is refused (400): resize the model's embeddings or remove them from the "
        "tokenizer files",
        count,
        mc.vocab_size,
        ", ".join(f"{t!r} (id {i})" for i, t in extra[:8]) + (", ..." if count > 8 else ""),
    )
    return extra if limit is None else extra[:limit]
