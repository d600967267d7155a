"""Static-shape extend and mixed steps (the extend CUDA-graph input path) against the eager runner.

``CudaGraphRunner`` replays batches of up to ``max_extend_tokens`` new tokens (extend chunks, chunk
tails, prefix-cache hits, decode tokens mixed with an extend) from graphs keyed by a token bucket
``T`` and a request bucket ``B``. On CPU it runs the padded static batch eagerly
(``use_graphs=False``), which checks exactly the inputs a graph replays: the logits of the real
requests and every KV / compressor-state row outside the reserved slot 0 / page 0 must equal those
of the plain eager runner (checked against HF transformers by ``test_model_parity.py``) on
identical weights. The steps complete CSA and HCA windows inside a chunk, end blocks (CSA resume
snapshots), cross window pages, start a request from another's resume snapshot (a prefix hit at a
block boundary), leave chunks without logits, and interleave all-padding forwards (the inputs of
graph warm-up and capture). Batches that need more than one logits row per request run eagerly.

The ``gpu`` variant captures every key at start-up and replays them on CUDA (bf16, with and
without the indexer on a second stream).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cuda_graph_testutil import _canonical_rows, _field, _replayed, _runner, _Seq, _states
from dsv4_testutil import CONFIGS
from sglang_v4.model_executor.cuda_graph_runner import (
    CudaGraphRunner,
    extend_req_buckets,
    extend_token_buckets,
    pick_bucket,
)
from sglang_v4.model_executor.forward_batch import PAD, ForwardBatchBuilder, ReqForwardInput
from sglang_v4.model_executor.model_runner import ModelRunner

MAX_CTX = 1024


class _Req:
    """One logical request, mirrored in the reference (eager) and the static-path runner."""

    def __init__(self, ref: ModelRunner, st: ModelRunner) -> None:
        self.seqs = {"ref": _Seq(ref), "st": _Seq(st)}

    @property
    def done(self) -> int:
        return self.seqs["ref"].done

    def inputs(self, ids: list[int], logits: bool) -> dict[str, ReqForwardInput]:
        out = {}
        for k, s in self.seqs.items():
            r = s.inp(ids)
            if not logits:
                r.logits_start = len(ids)  # a chunk in the middle of a prompt: no logits row
            out[k] = r
        return out

    def prefix_hit(self, donor: _Req, blocks: int) -> None:
        """Start from ``donor``'s first ``blocks`` block pages and the resume snapshot at their end
        (what the radix cache hands a request whose prompt shares them)."""
        for k, s in self.seqs.items():
            d = donor.seqs[k]
            end = blocks * 128
            s.blocks = d.blocks[:blocks]
            span = (end - 1) // 128
            s.wins = {span: d.wins[span]}
            s.done = end
            s.runner.pool.load_resume_state(s.slot, d.wins[span])

    def advance(self, n: int) -> None:
        for s in self.seqs.values():
            s.advance(n)


def _compare_extend(
    device: str, dtype: str, use_graphs: bool, two_stream: bool, atol: float, rtol: float
) -> tuple[CudaGraphRunner, dict[str, int]]:
    """Run the same mixed / extend / decode steps through the plain eager runner and the static
    (padded / graph) path of a second runner with identical weights; compare logits after each
    step and every pool tensor outside slot 0 / page 0 at the end. Returns the graph runner and
    the count of steps per path (``extend``, ``decode``, ``eager``)."""
    cfg = CONFIGS["sliding_first"]  # SL, CSA, HCA, CSA: both ratios, hash + top-k MoE
    ref = _runner(cfg, device, dtype, disable_cuda_graph=True, indexer_stream_max_bs=0)
    st = _runner(cfg, device, dtype, disable_cuda_graph=True, indexer_stream_max_bs=64 if two_stream else 0)
    gr = st.create_cuda_graph_runner(max_bs=8, max_ctx=MAX_CTX, use_graphs=use_graphs, max_extend_tokens=64)
    if use_graphs:  # start-up capture (all-padding inputs) before any request: no state change
        assert gr.capture_all() == len(gr.all_keys()) and not gr.failed
    captured = set(gr.graphs)
    rng = np.random.default_rng(7)
    paths = {"extend": 0, "decode": 0, "eager": 0}

    def ids(n: int) -> list[int]:
        return [int(x) for x in rng.integers(0, 1000, n)]

    def step(batch: list[tuple[_Req, int, bool]], expect: str | None = None) -> None:
        toks = [ids(n) for _, n, _ in batch]
        inp = [r.inputs(t, lg) for (r, _, lg), t in zip(batch, toks)]
        ref_in, st_in = [x["ref"] for x in inp], [x["st"] for x in inp]
        key = gr.key_for(st_in)
        kind = "eager" if key is None else ("extend" if len(key) == 3 else "decode")
        assert expect is None or kind == expect, (kind, [(r.done, n) for r, n, _ in batch])
        paths[kind] += 1
        fb_r, lr = ref.forward(ref_in)
        if key is None:
            fb_s, ls = st.forward(st_in)
        else:
            fb_s, ls = gr.replay(st_in)
        assert fb_s.logits_counts == fb_r.logits_counts and fb_s.extend_lens == fb_r.extend_lens
        assert ls.shape == lr.shape
        torch.testing.assert_close(ls.float().cpu(), lr.float().cpu(), rtol=rtol, atol=atol)
        for r, n, _ in batch:
            r.advance(n)

    reqs = [_Req(ref, st) for _ in range(5)]
    a, b, c, d, e = reqs
    step([(a, 100, False)], "eager")  # a long chunk: eager (> 64 tokens)
    step([(a, 26, True)], "extend")  # chunk tail 100..125: CSA windows inside the chunk
    step([(a, 1, True), (b, 40, True)], "extend")  # mixed: a's decode (126) + b's prompt
    step([(a, 1, True), (b, 1, True)], "decode")  # a at 127: HCA window 0, block end 128 (snapshot)
    c.prefix_hit(a, 1)  # c starts from a's first block and its resume snapshot (position 128)
    step([(c, 21, True), (b, 30, False), (a, 1, True)], "extend")  # prefix hit + mid chunk + decode
    step([(d, 60, True)], "extend")
    with torch.inference_mode():  # an all-padding forward (graph warm-up / capture input)
        gr._run_static(gr.dummy_inputs(gr.all_keys()[-1]))
    step([(d, 4, False), (e, 3, False)], "extend")  # 4 + 3 tokens: bucket T = 16
    step([(d, 64, True)], "extend")  # d 64 .. 127: HCA window and block end inside the chunk
    step([(d, 2, True), (e, 2, False), (c, 1, True)], "extend")
    # a batch asking for a prompt's logits rows (prompt logprobs): eager
    inp = e.inputs(ids(5), True)
    for k in inp:
        inp[k].logits_start = 0
    assert gr.key_for([inp["st"]]) is None
    _, lr = ref.forward([inp["ref"]])
    _, ls = st.forward([inp["st"]])
    torch.testing.assert_close(ls.float().cpu(), lr.float().cpu(), rtol=rtol, atol=atol)
    e.advance(5)
    # random mixed steps: decodes, chunk tails, block / window ends inside chunks
    for it in range(12):
        live = [r for r in reqs if r.done + 64 < MAX_CTX - 64]
        pick = rng.choice(len(live), size=int(rng.integers(1, len(live) + 1)), replace=False)
        batch, total = [], 0
        for i in sorted(pick.tolist()):
            r = live[i]
            to_block = 128 - r.done % 128
            n = int(rng.choice([1, 1, to_block, to_block + 1, int(rng.integers(2, 40))]))
            n = max(1, min(n, 64 - total - (len(pick) - len(batch) - 1)))
            batch.append((r, n, bool(rng.random() < 0.8)))
            total += n
        step(batch)
        if it == 5:
            with torch.inference_mode():
                gr._run_static(gr.dummy_inputs(gr.all_keys()[0]))
    sa, sb = _states(ref), _states(st)
    for name in sa:
        torch.testing.assert_close(sb[name], sa[name], rtol=rtol, atol=atol, msg=name)
    assert set(gr.graphs) == captured  # nothing captured after start-up
    return gr, paths


def test_static_padded_extend_matches_eager_cpu():
    """Padded static extend / mixed / decode steps == eager in float32 on the CPU (1e-4 relative:
    the padded batch's GEMMs reduce in another blocking, as for decode)."""
    gr, paths = _compare_extend("cpu", "float32", use_graphs=False, two_stream=False, atol=1e-5, rtol=1e-4)
    assert paths["extend"] >= 8 and paths["decode"] >= 1 and paths["eager"] >= 1
    assert gr.num_replays == paths["extend"] + paths["decode"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(
    "dtype,two_stream,atol,rtol",
    [
        # fp32: eager and replay differ only by the GEMM blocking of the padded token count
        ("float32", False, 2e-3, 2e-3),
        # bf16: as the decode graphs' test, bf16 rounding (2^-8 relative) of logits / KV entries
        ("bfloat16", False, 5e-2, 2e-2),
        ("bfloat16", True, 5e-2, 2e-2),
    ],
)
def test_cuda_graph_extend_matches_eager_gpu(dtype, two_stream, atol, rtol):
    """Every key captured at start-up, then extend / mixed / decode steps replayed from the graphs
    on CUDA: logits and pool state equal the eager runner's, and no graph is captured later."""
    gr, paths = _compare_extend("cuda", dtype, use_graphs=True, two_stream=two_stream, atol=atol, rtol=rtol)
    assert not gr.failed and len(gr.graphs) == len(gr.all_keys())
    assert paths["extend"] >= 8 and gr.num_replays == paths["extend"] + paths["decode"]


def test_extend_buckets_and_keys():
    assert extend_token_buckets(256) == [16, 32, 64, 128, 256]
    assert extend_token_buckets(100) == [16, 32, 64, 100]
    assert extend_token_buckets(1024) == [16, 32, 64, 128, 256, 512, 1024]
    assert extend_token_buckets(8) == [8]
    assert extend_token_buckets(0) == []
    with pytest.raises(ValueError, match="cuda_graph_max_extend_tokens"):
        extend_token_buckets(-1)
    assert extend_req_buckets(16, 128) == [4, 16]
    assert extend_req_buckets(256, 128) == [4, 16, 64, 128]
    assert extend_req_buckets(256, 8) == [4, 8]
    assert extend_req_buckets(8, 2) == [2]
    r = _runner(CONFIGS["sliding_first"], "cpu", "float32")
    gr = r.create_cuda_graph_runner(max_bs=8, max_ctx=1024, use_graphs=False, max_extend_tokens=64)
    assert gr.all_keys() == [
        (1, False), (2, False), (4, False), (8, False),
        (16, 4, False), (16, 8, False), (32, 4, False), (32, 8, False), (64, 4, False), (64, 8, False),
    ]  # fmt: skip

    def req(n: int, p: int = 300, ls: int | None = None) -> ReqForwardInput:
        return ReqForwardInput(1, [5] * n, p, [1] * 9, {k: 1 for k in range(9)}, n - 1 if ls is None else ls)

    assert gr.key_for([req(1)] * 3) == (4, False)  # decode keys unchanged
    assert gr.key_for([req(2)]) == (16, 4, False)
    assert gr.key_for([req(2)] * 5) == (16, 8, False)
    assert gr.key_for([req(1)] * 7 + [req(9)]) == (16, 8, False)  # mixed decode + extend
    assert gr.key_for([req(20), req(1)]) == (32, 4, False)
    assert gr.key_for([req(64)]) == (64, 4, False)
    assert gr.key_for([req(64, ls=64)]) == (64, 4, False)  # no logits row
    assert gr.key_for([req(65)]) is None  # above max_extend_tokens
    assert gr.key_for([req(2)] * 9) is None  # more requests than max_bs
    assert gr.key_for([req(8, ls=0)]) is None  # prompt logprobs: 8 logits rows
    assert gr.key_for([req(8, p=1017)]) is None  # context 1025 > max_ctx
    assert gr.key_for([req(8, p=1016)]) == (16, 4, False)
    off = r.create_cuda_graph_runner(max_bs=8, max_ctx=1024, use_graphs=False, max_extend_tokens=0)
    assert off.key_for([req(2)]) is None and off.key_for([req(1)]) == (1, False)


@pytest.mark.parametrize("page_size", [128, 256])
def test_extend_layout_holds_any_batch(page_size):
    """Random extend / mixed batches (positions at window, HCA-window, block and window-page ends,
    chunks completing many windows, one-token decodes among them) fit their key's static layout,
    whose buffers hold exactly the eager batch's metadata (row tables up to the row count they
    are computed for) and padding elsewhere; a batch reaches the CSA J bound exactly."""
    rng = np.random.default_rng(page_size)
    W = 128
    builder = ForwardBatchBuilder(page_size, W, 4, 128, "cpu")
    ratios = {"csa": 4, "hca": 128}
    tokens = extend_token_buckets(64)
    slots = iter(range(1, 10**6))
    special = [0, 1, 3, 125, 127, 128, 255, 256, 511, 1020]

    def req(p: int, n: int) -> ReqForwardInput:
        end = p + n
        blocks = [int(x) for x in rng.choice(np.arange(1, 500), size=-(-end // page_size), replace=False)]
        wins = {k: int(rng.integers(1, 300)) for k in range(max(0, (p - W + 1) // W), (end - 1) // W + 1)}
        ls = int(rng.choice([n - 1, n]))
        return ReqForwardInput(
            next(slots) % 50 + 1, [int(x) for x in rng.integers(0, 1000, n)], p, blocks, wins, ls
        )

    for _ in range(80):
        nreq = int(rng.integers(1, 9))
        lens = [int(rng.choice([1, 3, 4, 5, 9, 20])) for _ in range(nreq)]
        if sum(lens) > 64 or lens.count(1) == nreq:
            continue
        ps = [int(rng.choice(special)) if rng.random() < 0.6 else int(rng.integers(0, 1000)) for _ in lens]
        reqs = [req(p, n) for p, n in zip(ps, lens)]
        T = pick_bucket(sum(lens), tokens)
        B = pick_bucket(nreq, extend_req_buckets(T, 8))
        lay = builder.static_extend_layout(T, B, 2048)
        host = np.full(lay.size, 55, dtype=np.int64)
        meta = builder.metadata(reqs, num_req_rows=B)
        lay.write(host, meta)
        got = _replayed(lay, host, builder.sync_pages(reqs, meta))
        want = builder.build(reqs)
        for name, shape in lay.shapes.items():
            m = ratios.get(name.split(".")[0], 1)
            a, e = _field(got, name), _field(want, name)
            assert a.shape == shape, name
            real = tuple(slice(0, s) for s in e.shape)
            assert (_canonical_rows(name, a[real], B, m) == _canonical_rows(name, e, nreq, m)).all(), name
            rest = np.ones(shape, dtype=bool)
            rest[real] = False
            assert (a[rest] == PAD[name.rsplit(".", 1)[-1]]).all(), name
    # a batch reaching the CSA J bound of key (16, 4): 4 requests at p % 4 == 3 adding 5, 5, 5, 1
    lay = builder.static_extend_layout(16, 4, 2048)
    reqs = [req(3 + 8 * i, n) for i, n in enumerate([5, 5, 5, 1])]
    meta = builder.metadata(reqs, num_req_rows=4)
    assert meta.arrays["csa.win_rows"].shape == lay.shapes["csa.win_rows"] == (7, 4)
    lay.write(np.zeros(lay.size, dtype=np.int64), meta)
    with pytest.raises(ValueError, match="num_reqs"):
        builder.static_extend_layout(4, 5, 2048)
