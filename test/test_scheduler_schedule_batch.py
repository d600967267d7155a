"""``Req`` and ``ScheduleBatch`` without a model: extend ranges, which requests sample, the logits
rows each needs, the forward mode, and the runner inputs, checked against the definitions
(prompt logprob of token ``s`` needs the logits at ``s - 1``; a request samples when its chunk
reaches the end of its tokens and its budget allows another token)."""

from __future__ import annotations

import pytest
from sglang_v4.managers.model_worker_batch import ForwardMode
from sglang_v4.managers.req import Req
from sglang_v4.managers.schedule_batch import ScheduleBatch
from sglang_v4.sampling.sampling_params import SamplingParams


def make_req(n_prompt: int, n_out: int = 0, computed: int = 0, max_new: int = 8, **kw) -> Req:
    r = Req(
        rid=f"r{n_prompt}-{n_out}-{computed}",
        origin_input_ids=list(range(100, 100 + n_prompt)),
        sampling_params=SamplingParams(),
        max_new_tokens=max_new,
        **kw,
    )
    r.output_ids = list(range(900, 900 + n_out))
    r.num_computed = computed
    r.req_pool_idx = 1
    r.input_logprobs_done = not (r.return_logprob and r.logprob_start_len >= 0)
    return r


def test_token_ids_equal_fill_ids_slices() -> None:
    r = make_req(5, n_out=3)
    for a in range(9):
        for b in range(a, 9):
            assert r.token_ids(a, b) == r.fill_ids[a:b]


def test_extend_ranges_sampling_and_modes() -> None:
    decode = make_req(10, n_out=2, computed=11)  # one token left: decode
    chunk = make_req(300, computed=100)  # a middle chunk of a prefill: no sampling
    last = make_req(40, computed=32)  # the last chunk of a prefill: samples
    b = ScheduleBatch()
    b.add(decode, 12)
    assert b.forward_mode is ForwardMode.DECODE
    b.add(chunk, 200)
    b.add(last, 40)
    assert b.forward_mode is ForwardMode.MIXED and len(b) == 3 and chunk in b
    assert b.prefix_lens == [11, 100, 32] and b.extend_lens == [1, 100, 8]
    assert b.sample_flags == [True, False, True]
    assert b.logits_counts == [1, 0, 1]
    assert b.num_decode_reqs == 1 and b.num_extend_tokens == 108
    ins = b.get_forward_inputs()
    assert [x.input_ids for x in ins] == [
        decode.fill_ids[11:12],
        chunk.fill_ids[100:200],
        last.fill_ids[32:40],
    ]
    assert [x.prefix_len for x in ins] == [11, 100, 32]
    assert [x.logits_start for x in ins] == [0, 100, 7]
    only_chunk = ScheduleBatch()
    only_chunk.add(make_req(300, computed=0), 256)
    assert only_chunk.forward_mode is ForwardMode.EXTEND


def test_max_new_tokens_zero_does_not_sample() -> None:
    r = make_req(20, max_new=0)
    b = ScheduleBatch()
    b.add(r, 20)
    assert b.sample_flags == [False] and b.logits_counts == [0]


@pytest.mark.parametrize("start", [0, 1, 5, 9, 15])
def test_prompt_logprob_rows(start: int) -> None:
    """Chunks ``[0, 8)`` and ``[8, 16)`` of a 16-token prompt with logprobs from ``start``: the rows
    returned are exactly positions ``start .. 14`` (plus 15, which samples): as SGLang, the entry of
    token ``start`` is ``None`` (no logits at ``start - 1``), token ``k > start`` from row ``k - 1``."""
    rows: list[int] = []
    r = make_req(16, return_logprob=True, logprob_start_len=start)
    for lo, hi in ((0, 8), (8, 16)):
        r.num_computed = lo
        b = ScheduleBatch()
        b.add(r, hi)
        rows += list(range(lo + b.logits_starts[0], hi))
    assert rows == list(range(start, 16))


@pytest.mark.parametrize("start,expect", [(-1, 15), (0, 0), (1, 1), (300, 15), (9, 9), (15, 15)])
def test_max_prefix_len(start: int, expect: int) -> None:
    r = make_req(16, return_logprob=start >= 0, logprob_start_len=start)
    assert r.max_prefix_len() == expect


def test_add_rejects_empty_or_overlong_range() -> None:
    r = make_req(10, computed=4)
    with pytest.raises(ValueError):
        ScheduleBatch().add(r, 4)
    with pytest.raises(ValueError):
        ScheduleBatch().add(r, 11)


def _decode_batch(overlap: bool) -> tuple[ScheduleBatch, list[Req]]:
    """Three decoding requests: with ``overlap`` each has its last token still in flight (a
    future id), else every token is known."""
    reqs = []
    for i, (n_prompt, n_out) in enumerate([(10, 2), (5, 0), (7, 4)]):
        r = make_req(n_prompt, n_out=n_out, computed=n_prompt + n_out - 1)
        r.req_pool_idx = i + 1
        if overlap:  # the previous batch computed the last known token and samples one more
            r.num_computed += 1
            r.num_inflight, r.num_future, r.future_id = 0, 1, -(10 + i)
        reqs.append(r)
    b = ScheduleBatch()
    for r in reqs:
        b.add_decode(r)
    return b, reqs


@pytest.mark.parametrize("overlap", [False, True])
def test_launch_of_a_decode_batch_equals_worker_batch_then_mark_in_flight(overlap: bool) -> None:
    """``launch`` (one pass for a decode batch, fixed columns reused from the last batch) gives
    the same worker batch and leaves the requests as the two general calls in turn."""
    from sglang_v4.managers.schedule_batch import FixedColumns

    ref_batch, ref_reqs = _decode_batch(overlap)
    slots = [4, 5, 6]
    ref_batch.future_slots = slots
    ref = ref_batch.get_model_worker_batch([])
    ref_batch.mark_in_flight(slots)
    cols = FixedColumns()
    _, reqs = _decode_batch(overlap)
    before = [(r.num_inflight, r.num_future, r.future_id) for r in reqs]
    for _ in range(2):  # the same requests again: the second launch reuses the kept columns
        for r, (a, b, c) in zip(reqs, before):
            r.num_inflight, r.num_future, r.future_id = a, b, c
        batch = ScheduleBatch()
        for r in reqs:
            batch.add_decode(r)
        wb = batch.launch([], list(slots), cols)
        assert wb.forward_mode is ref.forward_mode is ForwardMode.DECODE
        assert wb.forward_inputs == ref.forward_inputs
        assert [x.input_ids for x in wb.forward_inputs] == (
            [[-10], [-11], [-12]] if overlap else [[901], [104], [903]]
        )
        assert wb.logits_counts == ref.logits_counts and wb.input_logprobs == ref.input_logprobs
        assert wb.sampling is not None and ref.sampling is not None
        for f in (
            "rows",
            "params",
            "prompt_ids",
            "output_lens",
            "top_logprobs_nums",
            "future_slots",
            "plain_greedy",
        ):
            assert getattr(wb.sampling, f) == getattr(ref.sampling, f), f
        for r, rr in zip(reqs, ref_reqs):
            assert (r.num_inflight, r.num_future, r.future_id) == (
                rr.num_inflight,
                rr.num_future,
                rr.future_id,
            )
        assert cols.reqs == reqs  # kept for the next batch


def test_plain_greedy_flag_only_when_every_row_is_plain() -> None:
    """The sampling inputs claim ``plain_greedy`` only when every sampling row is greedy without
    a penalty, logit bias, min_new_tokens or grammar (the sampler then skips its per-row checks),
    on the one-pass decode launch and on the general worker batch alike."""
    from sglang_v4.managers.schedule_batch import FixedColumns

    def greedy(**kw) -> SamplingParams:
        sp = SamplingParams(temperature=0.0, **kw)
        sp.normalize(None)
        return sp

    variants = {
        "plain": (greedy(), None, True),
        "sampled": (SamplingParams(temperature=0.7), None, False),
        "repetition": (greedy(repetition_penalty=1.2), None, False),
        "frequency": (greedy(frequency_penalty=0.5), None, False),
        "bias": (greedy(logit_bias={"7": 1.0}), None, False),
        "min_new": (greedy(min_new_tokens=2), None, False),
        "grammar": (greedy(), object(), False),
    }
    for name, (sp, grammar, plain) in variants.items():
        for general in (False, True):
            reqs = [make_req(6, n_out=2, computed=7), make_req(5, n_out=1, computed=5)]
            reqs[0].sampling_params = greedy()
            reqs[1].sampling_params, reqs[1].grammar = sp, grammar
            Req.__post_init__(reqs[1])  # the penalty flag from the new params
            for i, r in enumerate(reqs):
                r.req_pool_idx = i + 1
            batch = ScheduleBatch()
            for r in reqs:
                batch.add_decode(r)
            if general:
                batch.future_slots = [0, 1]
                wb = batch.get_model_worker_batch([])
            else:
                wb = batch.launch([], [0, 1], FixedColumns())
            assert wb.sampling is not None
            assert wb.sampling.plain_greedy is plain, (name, general)
