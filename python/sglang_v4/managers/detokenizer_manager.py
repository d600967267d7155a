"""Detokenizer process: ``BatchTokenIDOut`` (token ids) -> ``BatchStrOut`` (text).

Incremental detokenization follows SGLang's ``detokenizer_manager.py`` scheme: per request keep a
*surrounding* offset and a *read* offset into the decoded ids; each step decodes
``ids[surr:read]`` and ``ids[surr:]`` and emits the text difference. The commit rules:

1. The difference is non-empty and does not end in U+FFFD: it is committed (SGLang's rule), the
   offsets move to ``surr = read``, ``read = len(ids)``.
2. It ends in U+FFFD: that character may still become one (an incomplete UTF-8 sequence split
   across tokens), so it is held back -- but only it. The longest token prefix ``ids[:j]`` whose
   text is a *proper* prefix of the current text is committed: in a byte-level decode, appending
   bytes can change only the last character, so everything before it is final. Stray bytes that
   never form a character (e.g. a run of lone continuation bytes, each decoding to U+FFFD) are thus
   committed one token behind, instead of being held until the request ends (SGLang holds them).
3. Bound: if more than :data:`MAX_HELD_TOKENS` tokens are pending (e.g. a run of skipped special
   tokens that decode to nothing), everything is committed. The decode window ``ids[surr:]`` is
   therefore at most ``2 * (MAX_HELD_TOKENS + 1)`` tokens, whatever the output length.
4. Text held back by 2 is still sent early up to its last complete character (the printable
   prefix); sent text is never taken back.

On finish, a matched stop string is cut from the text (or a matched stop token id dropped) unless
``no_stop_trim``; the complete final text goes into ``BatchStrOut.final_strs`` so the tokenizer
manager never has to un-send streamed text.
"""

from __future__ import annotations

import logging
import os
import traceback
from dataclasses import dataclass
from typing import Any

import zmq

from sglang_v4.managers.io_struct import BatchStrOut, BatchTokenIDOut, FinishReason
from sglang_v4.server_args import PortArgs, ServerArgs
from sglang_v4.utils import (
    configure_logging,
    exit_on_sigterm,
    find_printable_text,
    get_tokenizer,
    set_parent_death_signal,
    set_process_name,
    start_parent_watchdog,
)

logger = logging.getLogger(__name__)

#: At most this many output tokens are held back undecoded (rule 3 of the module docstring). UTF-8
#: characters span at most 4 bytes, so a byte-level tokenizer never needs more than 3.
MAX_HELD_TOKENS = 8

_REPLACEMENT = "\ufffd"


@dataclass
class DecodeStatus:
    """Incremental decode state of one request.

    ``decoded_text``: committed output text; ``surr_offset`` / ``read_offset``: token offsets into
    the request's ``decode_ids``; ``sent_offset``: characters already emitted (>= committed length
    when a printable prefix of an incomplete character was sent early).
    """

    decoded_text: str
    surr_offset: int
    read_offset: int
    sent_offset: int = 0


def trim_matched_stop(text: str, finished_reason: FinishReason | None, no_stop_trim: bool) -> str:
    """Cut ``text`` at a matched stop string (SGLang semantics).

    With ``finished_reason = {"type": "stop", "matched": "<str>"}`` the text is cut before the
    first occurrence of the string (or right after it when ``no_stop_trim``). Other reasons leave
    the text unchanged (stop *token* ids are dropped before decoding, see :class:`DetokenizerManager`).
    """
    if not finished_reason:
        return text
    matched = finished_reason.get("matched")
    if not isinstance(matched, str) or not matched:
        return text
    pos = text.find(matched)
    if pos < 0:
        return text
    return text[: pos + len(matched)] if no_stop_trim else text[:pos]


class DetokenizerManager:
    """Turns scheduler token outputs into text, one :class:`DecodeStatus` per running request."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.vocab_limit = len(tokenizer)
        self.decode_status: dict[str, DecodeStatus] = {}

    def _decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        ids = [t for t in ids if 0 <= t < self.vocab_limit]
        if not ids:
            return ""
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def _stable_prefix(
        self, ids: list[int], s: DecodeStatus, surr_text: str, full: str, skip: bool
    ) -> tuple[int, str] | None:
        """The longest commit point ``j`` (``read < j < len(ids)``) of rule 2 and the text it adds.

        ``ids[surr:j]`` must decode to a proper prefix of ``full`` (= decode ``ids[surr:]``) that
        extends ``surr_text``, and the next context ``ids[read:j]`` to a proper prefix of decode
        ``ids[read:]``, so that the next step's text difference stays well defined.
        """
        tail = None
        for j in range(len(ids) - 1, s.read_offset, -1):
            t = self._decode(ids[s.surr_offset : j], skip)
            if not (len(surr_text) < len(t) < len(full) and full.startswith(t) and t.startswith(surr_text)):
                continue
            if tail is None:
                tail = self._decode(ids[s.read_offset :], skip)
            ctx = self._decode(ids[s.read_offset : j], skip)
            if len(ctx) < len(tail) and tail.startswith(ctx):
                return j, t[len(surr_text) :]
        return None

    def _advance(self, s: DecodeStatus, ids: list[int], skip: bool) -> str:
        """Apply the commit rules of the module docstring to an unfinished request; returns the
        text to send now (new since the last message)."""
        surr_text = self._decode(ids[s.surr_offset : s.read_offset], skip)
        full = self._decode(ids[s.surr_offset :], skip)
        new_text = full[len(surr_text) :]
        rest = ""
        if new_text and not new_text.endswith(_REPLACEMENT):
            self._commit(s, len(ids), new_text)
        elif len(ids) - s.read_offset > MAX_HELD_TOKENS:
            self._commit(s, len(ids), new_text)
        else:
            found = self._stable_prefix(ids, s, surr_text, full, skip) if new_text else None
            rest = new_text
            if found is not None:
                j, piece = found
                self._commit(s, j, piece)
                rest = new_text[len(piece) :]
        candidate = s.decoded_text + find_printable_text(rest)
        out = candidate[s.sent_offset :]
        s.sent_offset = max(s.sent_offset, len(candidate))
        return out

    @staticmethod
    def _commit(s: DecodeStatus, end: int, text: str) -> None:
        s.decoded_text += text
        s.surr_offset = s.read_offset
        s.read_offset = end

    def handle_batch_token_id_out(self, recv: BatchTokenIDOut) -> BatchStrOut:
        """Decode one scheduler message; returns the matching :class:`BatchStrOut`."""
        output_strs: list[str] = []
        final_strs: list[str | None] = []
        for i, rid in enumerate(recv.rids):
            ids = list(recv.decode_ids[i])
            reason = recv.finished_reasons[i]
            no_trim = bool(recv.no_stop_trim[i]) if recv.no_stop_trim else False
            skip = bool(recv.skip_special_tokens[i]) if recv.skip_special_tokens else True
            s = self.decode_status.get(rid)
            if s is None:
                s = DecodeStatus(decoded_text="", surr_offset=0, read_offset=recv.read_offsets[i])
                self.decode_status[rid] = s
            if reason is not None:
                # Finished: drop a matched stop token id unless no_stop_trim, then decode the tail.
                matched = reason.get("matched")
                read_ids = ids
                if (
                    isinstance(matched, int)
                    and not isinstance(matched, bool)
                    and not no_trim
                    and len(ids) > s.read_offset
                    and ids[-1] == matched
                ):
                    read_ids = ids[:-1]
                surr_text = self._decode(ids[s.surr_offset : s.read_offset], skip)
                read_text = self._decode(read_ids[s.surr_offset :], skip)
                full = s.decoded_text + read_text[len(surr_text) :]
                final = trim_matched_stop(full, reason, no_trim)
                output_strs.append(final[s.sent_offset :])
                final_strs.append(final)
                del self.decode_status[rid]
                continue
            output_strs.append(self._advance(s, ids, skip))
            final_strs.append(None)
        n = len(recv.rids)

        def lst(v: list[Any]) -> list[Any]:
            return v if len(v) == n else [[] for _ in range(n)]

        return BatchStrOut(
            rids=recv.rids,
            finished_reasons=recv.finished_reasons,
            output_strs=output_strs,
            final_strs=final_strs,
            output_ids=recv.output_ids,
            prompt_tokens=recv.prompt_tokens,
            completion_tokens=recv.completion_tokens,
            cached_tokens=recv.cached_tokens,
            input_token_logprobs_val=lst(recv.input_token_logprobs_val),
            input_token_logprobs_idx=lst(recv.input_token_logprobs_idx),
            output_token_logprobs_val=lst(recv.output_token_logprobs_val),
            output_token_logprobs_idx=lst(recv.output_token_logprobs_idx),
            input_top_logprobs_val=lst(recv.input_top_logprobs_val),
            input_top_logprobs_idx=lst(recv.input_top_logprobs_idx),
            output_top_logprobs_val=lst(recv.output_top_logprobs_val),
            output_top_logprobs_idx=lst(recv.output_top_logprobs_idx),
            retraction_counts=recv.retraction_counts if len(recv.retraction_counts) == n else [0] * n,
        )


def run_detokenizer_process(server_args: ServerArgs, port_args: PortArgs, parent_pid: int) -> None:
    """Entry point of the detokenizer process: PULL ``BatchTokenIDOut``, PUSH ``BatchStrOut``.

    Other messages (control outputs) are forwarded unchanged. Exits with the parent.
    """
    configure_logging(server_args.log_level, prefix=" Detokenizer")
    set_process_name("sglang_v4::detokenizer")
    set_parent_death_signal()
    exit_on_sigterm()
    start_parent_watchdog(parent_pid)
    try:
        tokenizer = get_tokenizer(server_args.tokenizer_path or server_args.model_path or "")
        manager = DetokenizerManager(tokenizer)
        ctx = zmq.Context(2)
        recv = ctx.socket(zmq.PULL)
        recv.bind(port_args.detokenizer_ipc_name)
        send = ctx.socket(zmq.PUSH)
        send.connect(port_args.tokenizer_ipc_name)
        while True:
            msg = recv.recv_pyobj()
            if isinstance(msg, BatchTokenIDOut):
                send.send_pyobj(manager.handle_batch_token_id_out(msg))
            else:
                send.send_pyobj(msg)
    except Exception:
        logger.error("Detokenizer crashed:\n%s", traceback.format_exc())
        os._exit(1)
