"""DeepSeek's fill-in-the-middle (FIM) completion prompt: ``/v1/completions`` with ``suffix``.

DeepSeek's completions API takes a ``prompt`` (the text before the gap) and a ``suffix`` (the
text after it) and answers the middle. DeepSeek-V4 tokenizers carry the FIM control tokens
``<｜fim▁begin｜>`` (id 128801), ``<｜fim▁hole｜>`` (128800) and ``<｜fim▁end｜>`` (128802); the
prompt is rendered as ::

    <｜fim▁begin｜>{prompt}<｜fim▁hole｜>{suffix}<｜fim▁end｜>

(the format of DeepSeek's coder models, and of vLLM's DeepSeek-V4 renderer for the same field,
vllm-project/vllm#44228) and then tokenized as any text prompt of the route, so the model reads
the three markers as their control tokens. The answer's ``text`` is the middle only; a client
rebuilds the file as ``prompt + text + suffix``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FIM_BEGIN", "FIM_END", "FIM_HOLE", "fim_token_ids", "render_fim_prompt"]

FIM_BEGIN = "<｜fim▁begin｜>"
FIM_HOLE = "<｜fim▁hole｜>"
FIM_END = "<｜fim▁end｜>"


def fim_token_ids(tokenizer: Any) -> tuple[int, int, int] | None:
    """The ids of ``(FIM_BEGIN, FIM_HOLE, FIM_END)`` in ``tokenizer`` (a ``transformers``
    tokenizer), or ``None`` when one of them is not a single token of its own (a tokenizer
    without DeepSeek's FIM tokens: the route then has no FIM format to render)."""
    if tokenizer is None:
        return None
    ids = []
    for marker in (FIM_BEGIN, FIM_HOLE, FIM_END):
        enc = tokenizer.encode(marker, add_special_tokens=False)
        if len(enc) != 1 or tokenizer.decode(enc) != marker:
            return None
        ids.append(int(enc[0]))
    return ids[0], ids[1], ids[2]


def render_fim_prompt(prompt: str, suffix: str) -> str:
    """The FIM prompt text of ``prompt`` (before the gap) and ``suffix`` (after it)."""
    return f"{FIM_BEGIN}{prompt}{FIM_HOLE}{suffix}{FIM_END}"
