"""Detokenizer process: ``BatchTokenIDOut`` (token ids) -> ``BatchStrOut`` (text).

The scheduler sends only each request's new token ids; the detokenizer keeps, per request, the ids
it still needs (from the surrounding offset on: older ones are dropped once committed), so a step
costs O(new tokens + the undecided tail), not O(output length).

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
3. Bound: if more than :data:`MAX_HELD_TOKENS` tokens are pending, everything is committed. The
   decode window ``ids[surr:]`` is therefore at most ``2 * (MAX_HELD_TOKENS + 1)`` tokens,
   whatever the output length. Special tokens a ``skip_special_tokens`` request skips never
   enter the window (the tokenizer's decode drops them before decoding, so the text is the same):
   a run of them between the bytes of one character cannot force that character out half-made.
4. Text held back by 2 is still sent early up to its last complete character (the printable
   prefix); sent text is never taken back.

On finish, a matched stop string is cut from the text (or a matched stop token id dropped) unless
``no_stop_trim`` (with ``stop_str_after_token_id``, at its first occurrence after the text of the
first such token *id* -- where the scheduler started matching -- not after the first occurrence of
that token's text, which the output may also spell with other tokens; with ``min_new_tokens``, at
its first occurrence after the text of that many tokens); the
complete final text goes into ``BatchStrOut.final_strs`` so the tokenizer manager never has to
un-send streamed text.
"""

from __future__ import annotations

import logging
import os
import traceback
from dataclasses import dataclass, field
from typing import Any

import zmq

from sglang_v4.managers.io_struct import BatchStrOut, BatchTokenIDOut, FinishReason
from sglang_v4.managers.req_time_stats import wall_clock
from sglang_v4.server_args import PortArgs, ServerArgs
from sglang_v4.utils import (
    configure_logging,
    exit_on_sigterm,
    exit_without_teardown,
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

    ``ids``: the request's output ids from ``surr_offset`` on (earlier ones are committed and
    dropped); ``pieces``: the committed output text in pieces (joined only at the finish, so a
    step does not copy the whole text), ``decoded_len`` its length; ``surr_offset`` /
    ``read_offset``: token offsets into ``ids``; ``sent_offset``: characters already emitted
    (>= ``decoded_len``: committed text is sent at once, and a printable prefix of an incomplete
    character may be sent early).
    """

    surr_offset: int = 0
    read_offset: int = 0
    sent_offset: int = 0
    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    decoded_len: int = 0
    #: The first ``min_new_tokens`` output ids of a request with stop strings (kept whole: the
    #: text they decode to is where its stop strings start to match).
    head_ids: list[int] = field(default_factory=list)
    #: Characters of output text through the first ``stop_str_after_token_id`` token (where the
    #: scheduler's stop strings start to match); -1 until that token is generated.
    after_start: int = -1

    @property
    def decoded_text(self) -> str:
        """The committed text (O(length): for the finish only)."""
        return "".join(self.pieces)

    def commit(self, text: str, read_end: int) -> str:
        """Commit ``text`` decoded up to token ``read_end``; returns the part not sent yet."""
        start = self.decoded_len
        self.pieces.append(text)
        self.decoded_len += len(text)
        self.surr_offset, self.read_offset = self.read_offset, read_end
        out = text[self.sent_offset - start :]
        self.sent_offset = max(self.sent_offset, self.decoded_len)
        return out

    def send_pending(self, printable: str) -> str:
        """Send the part of ``printable`` (text after the committed text) not sent yet."""
        out = printable[self.sent_offset - self.decoded_len :]
        self.sent_offset = max(self.sent_offset, self.decoded_len + len(printable))
        return out

    def trim(self) -> None:
        """Drop the ids before ``surr_offset`` (never decoded again)."""
        if self.surr_offset > 0:
            del self.ids[: self.surr_offset]
            self.read_offset -= self.surr_offset
            self.surr_offset = 0


def trim_matched_stop(
    text: str,
    finished_reason: FinishReason | None,
    no_stop_trim: bool,
    after: str | None = None,
    min_start: int = 0,
) -> str:
    """Cut ``text`` at a matched stop string (SGLang semantics).

    With ``finished_reason = {"type": "stop", "matched": "<str>"}`` the text is cut before the
    first occurrence of the string (or right after it when ``no_stop_trim``). Other reasons leave
    the text unchanged (stop *token* ids are dropped before decoding, see :class:`DetokenizerManager`).
    ``after``: the text of the request's ``stop_str_after_token_id`` token, for a caller that knows
    only the text; the scheduler matched the stop string only after that token, so the search
    starts after the first occurrence of its text (an earlier occurrence, e.g. in the reasoning,
    is not the match). ``min_start``: a character offset before which no occurrence is the match;
    :class:`DetokenizerManager` passes the later of the first offset whose occurrence ends after
    the text of the first ``min_new_tokens`` tokens (that length minus ``len(matched) - 1``) and
    the text length through the ``stop_str_after_token_id`` token
    (exact where ``after`` is not: the output may spell that token's text with other tokens
    before the token itself).
    """
    if not finished_reason:
        return text
    matched = finished_reason.get("matched")
    if not isinstance(matched, str) or not matched:
        return text
    start = 0
    if after:
        at = text.find(after)
        start = at + len(after) if at >= 0 else 0
    pos = text.find(matched, max(start, min_start))
    if pos < 0:
        return text
    return text[: pos + len(matched)] if no_stop_trim else text[:pos]


class DetokenizerManager:
    """Turns scheduler token outputs into text, one :class:`DecodeStatus` per running request."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.vocab_limit = len(tokenizer)
        self.decode_status: dict[str, DecodeStatus] = {}
        self._skipped: dict[int, bool] = {}  # token id -> a skip_special_tokens decode drops it

    def _is_skipped(self, tid: int) -> bool:
        """Whether ``tid`` is a token a ``skip_special_tokens`` decode drops: one that decodes to
        text on its own but to nothing when special tokens are skipped (cached per id)."""
        hit = self._skipped.get(tid)
        if hit is None:
            hit = self._skipped[tid] = self._decode([tid], True) == "" and self._decode([tid], False) != ""
        return hit

    def _decode(self, ids: list[int], skip_special_tokens: bool, spaces: bool = True) -> str:
        """Text of ``ids`` (ids outside the vocabulary dropped). ``spaces``: the request's
        ``spaces_between_special_tokens``, handed to the tokenizer's ``decode`` as SGLang's
        detokenizer hands it to ``batch_decode`` (the tokenizer decides what it means:
        transformers' and ``tokenizers``' fast tokenizers ignore it)."""
        ids = [t for t in ids if 0 <= t < self.vocab_limit]
        if not ids:
            return ""
        return self.tokenizer.decode(
            ids, skip_special_tokens=skip_special_tokens, spaces_between_special_tokens=spaces
        )

    def _stable_prefix(
        self, ids: list[int], s: DecodeStatus, surr_text: str, full: str, skip: bool, spaces: bool
    ) -> tuple[int, str] | None:
        """The longest commit point ``j`` (``read < j < len(ids)``) of rule 2 and the text it adds.

        ``ids[surr:j]`` must decode to a proper prefix of ``full`` (= decode ``ids[surr:]``) that
        extends ``surr_text``, and the next context ``ids[read:j]`` to a proper prefix of decode
        ``ids[read:]``, so that the next step's text difference stays well defined.
        """
        tail = None
        for j in range(len(ids) - 1, s.read_offset, -1):
            t = self._decode(ids[s.surr_offset : j], skip, spaces)
            if not (len(surr_text) < len(t) < len(full) and full.startswith(t) and t.startswith(surr_text)):
                continue
            if tail is None:
                tail = self._decode(ids[s.read_offset :], skip, spaces)
            ctx = self._decode(ids[s.read_offset : j], skip, spaces)
            if len(ctx) < len(tail) and tail.startswith(ctx):
                return j, t[len(surr_text) :]
        return None

    def _text_len_through(self, s: DecodeStatus, end: int, skip: bool, spaces: bool) -> int:
        """Characters of the request's output text decoded from its ids up to ``s.ids[end]``
        (exclusive; ``end >= s.read_offset``): the committed text, whose last part is the text of
        ``ids[surr:read]``, extended by the text ``ids[read:end]`` adds to it."""
        surr_text = self._decode(s.ids[s.surr_offset : s.read_offset], skip, spaces)
        return s.decoded_len - len(surr_text) + len(self._decode(s.ids[s.surr_offset : end], skip, spaces))

    def _advance(self, s: DecodeStatus, skip: bool, spaces: bool) -> str:
        """Apply the commit rules of the module docstring to an unfinished request (its new ids
        already appended to ``s.ids``); returns the text to send now (new since the last message)."""
        ids = s.ids
        surr_text = self._decode(ids[s.surr_offset : s.read_offset], skip, spaces)
        full = self._decode(ids[s.surr_offset :], skip, spaces)
        new_text = full[len(surr_text) :]
        if (new_text and not new_text.endswith(_REPLACEMENT)) or len(ids) - s.read_offset > MAX_HELD_TOKENS:
            return s.commit(new_text, len(ids))  # rules 1 and 3
        out, rest = "", new_text
        found = self._stable_prefix(ids, s, surr_text, full, skip, spaces) if new_text else None
        if found is not None:  # rule 2: commit up to the last complete character
            j, piece = found
            out = s.commit(piece, j)
            rest = new_text[len(piece) :]
        return out + s.send_pending(find_printable_text(rest))  # rule 4

    def handle_batch_token_id_out(self, recv: BatchTokenIDOut) -> BatchStrOut:
        """Decode one scheduler message; returns the matching :class:`BatchStrOut`."""
        output_strs: list[str] = []
        final_strs: list[str | None] = []
        for i, rid in enumerate(recv.rids):
            reason = recv.finished_reasons[i]
            no_trim = bool(recv.no_stop_trim[i]) if recv.no_stop_trim else False
            skip = bool(recv.skip_special_tokens[i]) if recv.skip_special_tokens else True
            spaces = (
                bool(recv.spaces_between_special_tokens[i]) if recv.spaces_between_special_tokens else True
            )
            s = self.decode_status.get(rid)
            if s is None:
                s = self.decode_status[rid] = DecodeStatus()
            new_ids = recv.output_ids[i]
            before = len(s.ids)
            s.ids.extend([t for t in new_ids if not self._is_skipped(t)] if skip else new_ids)
            ids = s.ids
            after_id = recv.stop_str_after_token_id[i] if recv.stop_str_after_token_id else None
            if after_id is not None and s.after_start < 0 and after_id in new_ids:
                # where the scheduler's stop strings start to match: after this token's position,
                # not after the first place its text occurs (other tokens may spell it earlier)
                upto = new_ids[: new_ids.index(after_id) + 1]
                kept = sum(1 for t in upto if not self._is_skipped(t)) if skip else len(upto)
                s.after_start = self._text_len_through(s, before + kept, skip, spaces)
            min_toks = recv.stop_str_min_tokens[i] if recv.stop_str_min_tokens else 0
            if len(s.head_ids) < min_toks:
                s.head_ids.extend(recv.output_ids[i][: min_toks - len(s.head_ids)])
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
                surr_text = self._decode(ids[s.surr_offset : s.read_offset], skip, spaces)
                read_text = self._decode(read_ids[s.surr_offset :], skip, spaces)
                full = s.decoded_text + read_text[len(surr_text) :]
                # a stop string may begin inside the text of the first min_new_tokens tokens
                # when it ends after it (the scheduler's rule, check_stop): its match is the
                # first occurrence that ends past that text
                min_start = (
                    max(0, len(self._decode(s.head_ids, skip, spaces).rstrip("\ufffd")) - len(matched) + 1)
                    if min_toks and isinstance(matched, str)
                    else 0
                )
                final = trim_matched_stop(full, reason, no_trim, None, max(min_start, s.after_start))
                output_strs.append(final[s.sent_offset :])
                final_strs.append(final)
                del self.decode_status[rid]
                continue
            out = self._advance(s, skip, spaces)
            s.trim()
            output_strs.append(out)
            final_strs.append(None)
        out = str_out_from_token_out(recv, output_strs, final_strs)
        if recv.time_stats:  # the scheduler records stage stamps: add this process's
            out.detokenizer_ts = wall_clock()
        return out


def str_out_from_token_out(
    recv: BatchTokenIDOut, output_strs: list[str] | None = None, final_strs: list[str | None] | None = None
) -> BatchStrOut:
    """The :class:`BatchStrOut` of ``recv`` with the given texts (``None``: no text, i.e. ``""``
    new text and no final text for every request, as with ``--skip-tokenizer-init``).

    The other fields are copied; a logprob column that is not one entry per request (a scheduler
    that leaves it empty) becomes empty entries, so the tokenizer manager can index every column.
    """
    n = len(recv.rids)

    def lst(v: list[Any]) -> list[Any]:
        return v if len(v) == n else [[] for _ in range(n)]

    return BatchStrOut(
        rids=recv.rids,
        finished_reasons=recv.finished_reasons,
        output_strs=output_strs if output_strs is not None else [""] * n,
        final_strs=final_strs if final_strs is not None else [None] * n,
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
        input_token_ids_logprobs_val=lst(recv.input_token_ids_logprobs_val),
        output_token_ids_logprobs_val=lst(recv.output_token_ids_logprobs_val),
        input_token_ranks=lst(recv.input_token_ranks),
        retraction_counts=recv.retraction_counts if len(recv.retraction_counts) == n else [0] * n,
        time_stats=recv.time_stats,
    )


def run_detokenizer_process(server_args: ServerArgs, port_args: PortArgs, parent_pid: int) -> None:
    """Entry point of the detokenizer process: PULL ``BatchTokenIDOut``, PUSH ``BatchStrOut``.

    Other messages (control outputs) are forwarded unchanged. With ``skip_tokenizer_init`` no
    tokenizer is loaded and every message is forwarded unchanged (the scheduler then sends its
    outputs to the tokenizer manager directly, so none is expected). Exits with the parent, and
    with code 0 on SIGTERM: at once, its sockets closed without linger and without the
    interpreter's module teardown (a few tenths of a second with the tokenizer libraries loaded,
    which a server's stop used to wait for).
    """
    configure_logging(server_args.log_level, prefix=" Detokenizer")
    set_process_name("sglang_v4::detokenizer")
    set_parent_death_signal()
    exit_on_sigterm()
    start_parent_watchdog(parent_pid)
    ctx: zmq.Context[Any] | None = None
    try:
        manager = None
        if not server_args.skip_tokenizer_init:
            manager = DetokenizerManager(
                get_tokenizer(server_args.tokenizer_path or server_args.model_path or "")
            )
        ctx = zmq.Context(2)
        recv = ctx.socket(zmq.PULL)
        recv.bind(port_args.detokenizer_ipc_name)
        send = ctx.socket(zmq.PUSH)
        send.connect(port_args.tokenizer_ipc_name)
        while True:
            msg = recv.recv_pyobj()
            if manager is not None and isinstance(msg, BatchTokenIDOut):
                send.send_pyobj(manager.handle_batch_token_id_out(msg))
            else:
                send.send_pyobj(msg)
    except SystemExit as e:  # SIGTERM (exit_on_sigterm): a normal stop
        if ctx is not None:
            ctx.destroy(linger=0)
        exit_without_teardown(e.code if isinstance(e.code, int) else 0)
    except Exception:
        logger.error("Detokenizer crashed:\n%s", traceback.format_exc())
        os._exit(1)
