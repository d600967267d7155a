"""Incremental detokenization commit rules (``managers/detokenizer_manager.py``) on the real V4
tokenizer, against ``transformers``' full decode of the same ids as the oracle.

* Stray bytes (token 225 is the lone continuation byte 0x80; each decodes to U+FFFD): text is sent
  as it is produced, one token behind (the last one might still start a character), and the
  decode window stays bounded; SGLang's rule alone held all of it until the request ended.
* A property test over random mixes of byte tokens, emoji pieces, CJK, ASCII and skipped special
  tokens, streamed in random message sizes: every cumulative text is a prefix of the full decode
  of the ids so far and extends it minus its trailing U+FFFD; the finished text is the full
  decode; the window never exceeds ``2 * (MAX_HELD_TOKENS + 1)`` tokens.
* Found by hand: more skipped special tokens than the window bound between the bytes of one
  character forced it out as U+FFFD before its last bytes came; skipped special tokens no longer
  enter the window.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_v4.managers.detokenizer_manager import MAX_HELD_TOKENS, DetokenizerManager
from sglang_v4.managers.io_struct import BatchTokenIDOut, finish_length, finish_stop
from sglang_v4.utils import FastTokenizer

STRAY = 225  # byte-level token of the lone UTF-8 continuation byte 0x80
FFFD = "\ufffd"


def _msg(ids: list[int], start: int, reason=None, skip: bool = True, spaces: bool = True) -> BatchTokenIDOut:
    """The scheduler's message for output ids ``ids`` of which ``ids[start:]`` are new
    (``spaces``: the request's ``spaces_between_special_tokens``)."""
    m = BatchTokenIDOut.empty()
    m.append(
        rid="r",
        finished_reason=reason,
        output_ids=ids[start:],
        prompt_tokens=1,
        completion_tokens=len(ids),
        skip_special_tokens=skip,
        spaces_between_special_tokens=spaces,
    )
    return m


def _stream(dm: DetokenizerManager, ids: list[int], cuts: list[int], skip: bool = True, spaces: bool = True):
    """Feed ``ids`` in messages ending at ``cuts`` (the last cut finishes the request); yields
    ``(k, cumulative text, window)`` after each message (window None once finished)."""
    sent, prev = "", 0
    for k in cuts:
        reason = finish_length(k) if k == len(ids) else None
        out = dm.handle_batch_token_id_out(_msg(ids[:k], prev, reason, skip, spaces))
        prev = k
        sent += out.output_strs[0]
        s = dm.decode_status.get("r")
        # the decode window: the ids the detokenizer still holds (from its surrounding offset on)
        yield k, sent, (None if s is None else len(s.ids)), out.final_strs[0]


def test_stray_bytes_stream_as_produced_with_bounded_window(fast, hf) -> None:
    assert hf.decode([STRAY]) == FFFD
    n = 200
    ids = [STRAY] * n
    seen = list(_stream(DetokenizerManager(fast), ids, list(range(1, n + 1))))
    for k, sent, window, _ in seen[:-1]:
        assert sent == FFFD * (k - 1), k  # one token behind: the last byte could still start a char
        assert window is not None and window <= 2, (k, window)
    assert seen[-1][1] == seen[-1][3] == hf.decode(ids) == FFFD * n


def test_held_byte_completes_a_character(fast, hf) -> None:
    """Stray bytes, then an emoji split into its lead-bytes token and its last byte (225)."""
    emoji = hf.encode("😀", add_special_tokens=False)
    assert len(emoji) == 2 and emoji[1] == STRAY
    ids = [STRAY] * 5 + emoji + [STRAY] * 3 + hf.encode(" ok", add_special_tokens=False)
    seen = list(_stream(DetokenizerManager(fast), ids, list(range(1, len(ids) + 1))))
    full = hf.decode(ids)
    assert seen[-1][1] == full and "😀" in full
    for _, sent, _, _ in seen:
        assert full.startswith(sent)
    assert seen[6][1] == FFFD * 5 + "😀"  # complete at once when the character completes


def test_skipped_special_tokens_keep_the_window_bounded(fast, hf) -> None:
    ids = hf.encode("a", add_special_tokens=False) + [1] * 50 + hf.encode("b", add_special_tokens=False)
    seen = list(_stream(DetokenizerManager(fast), ids, list(range(1, len(ids) + 1))))
    assert max(w for _, _, w, _ in seen if w is not None) <= 2 * (MAX_HELD_TOKENS + 1)
    assert seen[-1][1] == hf.decode(ids, skip_special_tokens=True) == "ab"


def test_stop_token_after_stray_bytes_is_trimmed(fast, hf) -> None:
    ids = [STRAY] * 4 + hf.encode(" end", add_special_tokens=False) + [1]
    dm = DetokenizerManager(fast)
    sent = ""
    for k in range(1, len(ids)):
        sent += dm.handle_batch_token_id_out(_msg(ids[:k], k - 1)).output_strs[0]
    out = dm.handle_batch_token_id_out(_msg(ids, len(ids) - 1, finish_stop(1), skip=False))
    assert out.final_strs[0] == hf.decode(ids[:-1]) == sent + out.output_strs[0]


def _token_pool(hf) -> list[int]:
    pieces = ["😀", "🚀", "中文", "é", " hello", "\n", "ü", "你好"]
    pool = {STRAY, 226, 227, 240, 255, 300}  # single bytes / partial sequences
    for p in pieces:
        pool.update(hf.encode(p, add_special_tokens=False))
    pool.update({0, 1})  # special tokens (skipped when decoding)
    return sorted(pool)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_incremental_text_is_always_a_prefix_of_the_full_decode(fast, hf, data) -> None:
    pool = _token_pool(hf)
    ids = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=40), label="ids")
    steps = data.draw(st.lists(st.integers(1, 4), min_size=len(ids), max_size=len(ids)), label="steps")
    cuts, k = [], 0
    for s in steps:
        k = min(len(ids), k + s)
        cuts.append(k)
        if k == len(ids):
            break
    dm = DetokenizerManager(fast)
    last = ""
    for k, sent, window, final in _stream(dm, ids, cuts):
        now = hf.decode(ids[:k], skip_special_tokens=True)
        if window is not None:
            assert now.startswith(sent), (ids[:k], sent, now)
            assert sent.startswith(now.rstrip(FFFD)), (ids[:k], sent, now)
            assert window <= 2 * (MAX_HELD_TOKENS + 1)
        else:
            assert sent == final == now
        assert sent.startswith(last)
        last = sent


def test_skipped_special_tokens_inside_a_character_do_not_split_it(fast, hf) -> None:
    """Found by hand: a run of more special tokens than ``MAX_HELD_TOKENS`` between the bytes of
    one character (skipped: they decode to nothing) filled the pending window, so the bound
    committed the half-made character as U+FFFD; the finished text, the tokenizer's decode, has the
    character whole, so the stream was no longer a prefix of it. Skipped special tokens no longer
    count: every cumulative text is a prefix of the decode of the ids so far, and no chunk holds
    U+FFFD (the text has none)."""
    emoji = hf.encode("🫠", add_special_tokens=False)
    ids = [*hf.encode("a", add_special_tokens=False), emoji[0], *[0] * (MAX_HELD_TOKENS + 2), *emoji[1:]]
    ids += hf.encode("b", add_special_tokens=False)
    assert hf.decode(ids, skip_special_tokens=True) == "a🫠b"
    dm = DetokenizerManager(fast)
    steps = list(_stream(dm, ids, list(range(1, len(ids) + 1))))
    for k, sent, window, _ in steps:
        assert FFFD not in sent, (k, sent)
        assert hf.decode(ids[:k], skip_special_tokens=True).startswith(sent)
        assert window is None or window <= 2 * (MAX_HELD_TOKENS + 1)
    assert steps[-1][1] == steps[-1][3] == "a🫠b"


class SlowRuleTokenizer:
    """``tok`` decoding as transformers 4's slow tokenizers do (``PreTrainedTokenizer._decode``):
    the ids between added tokens decode as one piece, each added token is its own piece (special
    ones dropped with ``skip_special_tokens``), and the pieces are joined by a space when
    ``spaces_between_special_tokens`` (default True) -- a tokenizer for which the flag matters."""

    def __init__(self, base: FastTokenizer) -> None:
        self.base = base
        self.added = set(base._tok.get_added_tokens_decoder())
        self.special = set(base.all_special_ids)

    def __len__(self) -> int:
        return len(self.base)

    def decode(
        self, ids, skip_special_tokens: bool = False, spaces_between_special_tokens: bool = True
    ) -> str:
        pieces: list[str] = []
        run: list[int] = []
        for t in ids:
            if skip_special_tokens and t in self.special:
                continue
            if t in self.added:
                if run:
                    pieces.append(self.base.decode(run))
                    run = []
                pieces.append(self.base.decode([t]))
            else:
                run.append(t)
        if run:
            pieces.append(self.base.decode(run))
        return (" " if spaces_between_special_tokens else "").join(pieces)


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("spaces", [True, False])
def test_spaces_between_special_tokens_reaches_the_tokenizer(fast, spaces: bool, skip: bool) -> None:
    """Found by hand: the request's ``spaces_between_special_tokens`` reached the detokenizer but
    not the tokenizer's ``decode``, so a tokenizer that honours it (transformers 4's slow ones;
    SGLang hands it to ``batch_decode``) always decoded with its default. Oracle: that
    tokenizer's decode of the whole id sequence with the request's flag; the streamed text (one
    token and three tokens per message) and the final text must equal it."""
    slow = SlowRuleTokenizer(fast)
    think, end_think = fast.convert_tokens_to_ids("<think>"), fast.convert_tokens_to_ids("</think>")
    enc = lambda text: fast.encode(text, add_special_tokens=False)  # noqa: E731
    ids = [
        think,
        *enc("Let me see."),
        end_think,
        think,
        end_think,
        *enc("Hi 你好"),
        fast.bos_token_id,
        *enc("!"),
    ]
    want = slow.decode(ids, skip_special_tokens=skip, spaces_between_special_tokens=spaces)
    other = slow.decode(ids, skip_special_tokens=skip, spaces_between_special_tokens=not spaces)
    assert want != other  # the flag changes this tokenizer's text
    for step in (1, 3):
        cuts = [*range(step, len(ids), step), len(ids)]
        *_, (_, sent, _, final) = _stream(DetokenizerManager(slow), ids, cuts, skip, spaces)
        assert (sent, final) == (want, want), (step, sent, final)
