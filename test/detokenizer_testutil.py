"""Helpers for the detokenization test modules: the detokenizer fed scheduler messages by hand.

``stream_detok`` drives a fresh ``DetokenizerManager`` with ``BatchTokenIDOut`` messages the way
the scheduler sends them (one request ``r``, a fixed number of new output ids a message, the last
message finishing the request) and returns the text chunks it sent and its final text;
``feed_each_token`` feeds a given ``DetokenizerManager`` one token a message and reports the text
sent and the decode window after each; ``encode_plain`` and ``byte_token`` build the id sequences the tests feed it;
``batch_str_out`` builds the message the detokenizer sends on to the tokenizer manager.
"""

from __future__ import annotations

from typing import Any

from sglang_v4.hf_transformers_utils import byte_level_token_bytes
from sglang_v4.managers.detokenizer_manager import DetokenizerManager
from sglang_v4.managers.io_struct import BatchStrOut, BatchTokenIDOut, finish_length


def encode_plain(hf: Any, text: str) -> list[int]:
    """The token ids of ``text`` on tokenizer ``hf`` without special tokens (no BOS)."""
    return hf.encode(text, add_special_tokens=False)


def stream_detok(
    tokenizer: Any,
    ids: list[int],
    reason: Any = None,
    per_message: int = 1,
    skip: bool = True,
    **fields: Any,
) -> tuple[list[str], str]:
    """Feed ``ids`` to a fresh detokenizer ``per_message`` tokens a message (the last message
    finishes with ``reason``, by default the length); returns the chunks sent and the final text.

    ``skip`` is the request's ``skip_special_tokens``; ``fields`` go to ``BatchTokenIDOut.append``
    unchanged (``spaces_between_special_tokens``, ``no_stop_trim``...). Asserts the request's
    decode state is dropped once it finishes.
    """
    dm = DetokenizerManager(tokenizer)
    chunks: list[str] = []
    prev = 0
    final = None
    for k in [*range(per_message, len(ids), per_message), len(ids)]:
        last = k == len(ids)
        m = BatchTokenIDOut.empty()
        m.append(
            rid="r",
            finished_reason=(reason or finish_length(k)) if last else None,
            output_ids=ids[prev:k],
            prompt_tokens=1,
            completion_tokens=k,
            skip_special_tokens=skip,
            **fields,
        )
        out = dm.handle_batch_token_id_out(m)
        chunks.append(out.output_strs[0])
        final = out.final_strs[0]
        prev = k
    assert final is not None and not dm.decode_status
    return chunks, final


def feed_each_token(
    dm: DetokenizerManager, ids: list[int], skip: bool = True
) -> list[tuple[int, str, int | None]]:
    """Feed ``ids`` to ``dm`` one token per scheduler message (the last one finishes the request
    with the length); returns ``(k, text sent so far, decode window)`` after each message, the
    window being the number of ids the request's decode state holds (``None`` once dropped)."""
    out, sent = [], ""
    for k in range(1, len(ids) + 1):
        m = BatchTokenIDOut.empty()
        m.append(
            rid="r",
            finished_reason=finish_length(k) if k == len(ids) else None,
            output_ids=ids[k - 1 : k],
            prompt_tokens=1,
            completion_tokens=k,
            skip_special_tokens=skip,
        )
        sent += dm.handle_batch_token_id_out(m).output_strs[0]
        s = dm.decode_status.get("r")
        out.append((k, sent, None if s is None else len(s.ids)))
    return out


def byte_token(hf: Any, b: int) -> int:
    """The id of the vocabulary token that is the single byte ``b`` (byte-level BPE); raises
    ``AssertionError`` when the first 512 ids hold none."""
    for t in range(512):
        if byte_level_token_bytes(hf, t) == bytes([b]):
            return t
    raise AssertionError(f"no single-byte token for {b:#x}")


def batch_str_out(rid: str, finished: bool = True) -> BatchStrOut:
    """A detokenizer message (``BatchStrOut``) for the one request ``rid``: one output token (id 1,
    text ``"x"``) after a 3-token prompt, finished by length (``{"type": "length", "length": 1}``)
    or, with ``finished=False``, still running (finish reason ``None``)."""
    return BatchStrOut(
        rids=[rid],
        finished_reasons=[{"type": "length", "length": 1} if finished else None],
        output_strs=["x"],
        final_strs=[None],
        output_ids=[[1]],
        prompt_tokens=[3],
        completion_tokens=[1],
        cached_tokens=[0],
        time_stats=[None],
        detokenizer_ts=0.0,
    )
