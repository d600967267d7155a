"""Static-shape decode (the CUDA-graph input path) against the eager runner.

``CudaGraphRunner`` pads a decode batch to a batch-size bucket with padding rows (slot 0, no KV
writes, ``swa_pages = -1``, nothing visible), pads completed windows / snapshots to ``bs``, syncs
the pool's device page table, and runs the model on views of one static int64 buffer (one layout
per batch size, whatever the context). On CPU it runs that
padded batch eagerly (``use_graphs=False``), which checks exactly the inputs a graph replays: the
logits of the real requests and every real KV / compressor state row must equal those of the
plain eager runner (the runtime path that ``test_model_parity.py`` checks against HF
transformers) on identical weights. Decodes cross CSA window ends, an HCA window end, a block end
(CSA resume snapshot) and a sliding-window page boundary, with all-padding forwards (the inputs of
graph warm-up and capture) in between.

The ``gpu`` variant does the same on CUDA with real graph capture, bf16, and the indexer on a
second stream.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from cuda_graph_testutil import PAGE, _canonical_rows, _field, _replayed, _runner, _Seq, _states
from dsv4_testutil import CONFIGS
from sgl_kernel_v4.paged import entry_slots, window_slots
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.model_executor.cuda_graph_runner import bs_buckets, pick_bucket
from sglang_v4.model_executor.forward_batch import (
    PAD,
    ForwardBatch,
    ForwardBatchBuilder,
    ReqForwardInput,
)


def _compare_decode(
    device: str, dtype: str, use_graphs: bool, two_stream: bool, atol: float, rtol: float = 0.0, **runner_kw
) -> int:
    """Prefill 3 requests eagerly in two runners with identical weights, then decode them with
    the plain eager path in one and the static (padded / graph) path in the other. Returns the
    number of static-path replays. ``runner_kw`` go to both runners (e.g. ``quantization``)."""
    cfg = CONFIGS["sliding_first"]  # SL, CSA, HCA, CSA: both ratios, hash + top-k MoE
    ref = _runner(cfg, device, dtype, disable_cuda_graph=True, indexer_stream_max_bs=0, **runner_kw)
    st = _runner(
        cfg, device, dtype, disable_cuda_graph=True, indexer_stream_max_bs=4 if two_stream else 0, **runner_kw
    )
    gr = st.create_cuda_graph_runner(max_bs=4, max_ctx=1024, use_graphs=use_graphs)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 1000, (n,), generator=g).tolist() for n in (120, 250, 5)]
    seqs = {k: [_Seq(r) for _ in prompts] for k, r in (("ref", ref), ("st", st))}
    last = []
    for i, ids in enumerate(prompts):
        outs = {}
        for k, r in (("ref", ref), ("st", st)):
            _, lg = r.forward([seqs[k][i].inp(ids)])
            seqs[k][i].advance(len(ids))
            outs[k] = lg
        torch.testing.assert_close(outs["st"], outs["ref"], rtol=rtol, atol=atol)
        last.append(int(outs["ref"][-1].argmax()))
    if use_graphs:  # start-up capture (all-padding inputs) between prefill and decode: no state change
        assert gr.capture_all() == len(gr.bs_list) and not gr.failed  # one graph per batch size
    # 14 decode steps: req 0 crosses 128 (HCA window, CSA block-end snapshot, window page),
    # req 1 crosses 256 (a new block page, synced into the device page table); batch of 3 pads to
    # bucket 4; the last two steps drop request 2 (batch 2, no padding).
    for step in range(14):
        active = [0, 1, 2] if step < 12 else [0, 1]
        inputs_ref = [seqs["ref"][i].inp([last[i]]) for i in active]
        inputs_st = [seqs["st"][i].inp([last[i]]) for i in active]
        assert gr.can_run(inputs_st)
        if step in (4, 9):  # an all-padding forward (graph warm-up / capture input) in between
            with torch.inference_mode():
                gr._run_static(gr.dummy_inputs((4, two_stream)))
        _, lr = ref.forward(inputs_ref)
        fb_s, ls = gr.replay(inputs_st)
        assert fb_s.logits_counts == [1] * len(active)
        assert ls.shape == lr.shape
        torch.testing.assert_close(ls.float().cpu(), lr.float().cpu(), rtol=rtol, atol=atol)
        for j, i in enumerate(active):
            seqs["ref"][i].advance(1)
            seqs["st"][i].advance(1)
            last[i] = int(lr[j].argmax())
    a, b = _states(ref), _states(st)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=rtol, atol=atol, msg=name)
    return gr.num_replays


def test_static_padded_decode_matches_eager_cpu():
    """Padded static decode == eager decode in float32 on the CPU (1e-4 relative: the padded batch's
    GEMMs reduce in another blocking; seen 1.05e-5 absolute on logits of ~1.4)."""
    assert _compare_decode("cpu", "float32", use_graphs=False, two_stream=False, atol=1e-5, rtol=1e-4) == 14


def test_buckets_and_keys():
    assert bs_buckets(1) == [1]
    assert bs_buckets(10) == [1, 2, 4, 8, 10]
    assert bs_buckets(32)[-3:] == [16, 24, 32]
    with pytest.raises(ValueError, match="cuda_graph_max_bs"):
        bs_buckets(0)
    assert pick_bucket(3, [1, 2, 4]) == 4
    assert pick_bucket(5, [1, 2, 4]) is None
    r = _runner(CONFIGS["sliding_first"], "cpu", "float32")
    assert r.cuda_graph_runner is None and r.indexer_streams.stream is None  # CPU: eager only
    gr = r.create_cuda_graph_runner(max_bs=4, max_ctx=1024, use_graphs=False)
    assert gr.max_ctx == 1024
    one = ReqForwardInput(1, [5], 300, [1, 2, 3], {1: 1, 2: 2}, 0)
    assert gr.key_for([one]) == (1, False)  # one key per batch size, whatever the context
    assert gr.key_for([one] * 3) == (4, False)
    assert gr.key_for([ReqForwardInput(1, [5], 1023, [1] * 8, {6: 1, 7: 2}, 0)]) == (1, False)
    assert gr.key_for([one] * 5) is None  # above max_bs
    assert gr.key_for([ReqForwardInput(1, [5, 6], 300, [1, 2, 3], {1: 1, 2: 2}, 1)]) is None  # extend
    assert gr.key_for([ReqForwardInput(1, [5], 1024, [1] * 9, {7: 1, 8: 2}, 0)]) is None  # ctx 1025


def _dense(fb: ForwardBatch, width: dict[str, int] | None = None) -> dict[str, torch.Tensor]:
    """Each token's key slots as the kernels compute them (:mod:`sgl_kernel_v4.paged`): the
    window slots ``[T, window]`` and per ratio the visible entries' slots ``[T, C]`` (-1 padded)."""
    out = {"swa_idx": window_slots(fb.positions, fb.swa_pages, fb.window)}
    rows = fb.req_pool_indices[fb.token_req][:, None]
    for name in ("csa", "hca"):
        plan = getattr(fb, name)
        C = width[name] if width else int(plan.visible.max())
        col = torch.arange(C)[None, :]
        ent = torch.where(col < plan.visible[:, None], col, -1)
        out[name] = entry_slots(fb.req_to_page, rows, ent, fb.page_size // plan.ratio)
    return out


def test_layout_fill_pads_and_rejects_oversize():
    mc = ModelConfig.from_dict(copy.deepcopy(CONFIGS["sliding_first"]))
    builder = ForwardBatchBuilder(PAGE, mc.sliding_window, 4, 128, "cpu")
    lay = builder.static_layout(4, 256)
    reqs = [ReqForwardInput(1, [7], 127, [1], {0: 1}, 0)]
    meta = builder.metadata(reqs, num_req_rows=4)
    host = np.full(lay.size, 99, dtype=np.int64)
    lay.write(host, meta)
    v = _replayed(lay, host, builder.sync_pages(reqs, meta))
    d = _dense(v, {"csa": 64, "hca": 2})
    assert (v.swa_write[1:] == -1).all() and (d["swa_idx"][1:] == -1).all()
    assert v.swa_write[0] == 1 * 128 + 127
    assert v.req_pool_indices.tolist() == [1, 0, 0, 0]
    # position 127 completes CSA window 31 and HCA window 0 (one each), the rest is padding
    assert v.csa.win_out.tolist() == [1 * 32 + 31, -1, -1, -1]
    assert v.hca.win_out.tolist() == [1 * 1 + 0, -1, -1, -1]
    assert v.csa.snap_pages.tolist() == [1, 0, 0, 0]  # block end at 128: snapshot + padding
    cand = d["csa"]
    assert lay.max_visible["csa"] == 64 and (cand[0, :32] == torch.arange(32) + 32).all()
    assert (cand[0, 32:] == -1).all() and (cand[1:] == -1).all()
    assert v.logits_indices.tolist() == [0, 1, 2, 3]
    small = builder.static_layout(4, 64)  # bound of 16 visible entries < 32
    with pytest.raises(ValueError, match="csa.visible"):
        small.write(np.zeros(small.size, dtype=np.int64), meta)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("two_stream", [False, True])
def test_cuda_graph_decode_matches_eager_gpu(two_stream):
    # bf16: eager and replay run the same kernels on the same data except for the padded batch
    # size (GEMM / kernel tiles chosen by batch size) and fp32 atomics in the MoE, so they differ
    # by bf16 rounding (2^-8 relative) of the logits / KV entries, not by wrong rows
    n = _compare_decode("cuda", "bfloat16", use_graphs=True, two_stream=two_stream, atol=5e-2, rtol=2e-2)
    assert n == 14


def test_static_padded_decode_matches_eager_cpu_fp8_fp4():
    """The same with FP8 linears + FP4 experts (dummy weights; the layers' torch references).

    Tolerance: the dequantized float32 GEMMs of a padded batch reduce in a different blocking
    than the eager batch, so logits of magnitude ~1 may differ by a few float32 ulps summed over
    the layers (seen: 1.06e-5 absolute, 2.3e-5 relative); 1e-4 relative is still four orders
    below a wrong row or a wrong KV slot."""
    assert _compare_decode("cpu", "float32", False, False, atol=1e-5, rtol=1e-4, quantization="fp8") == 14


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graph_decode_matches_eager_gpu_fp8_fp4():
    """FP8 / FP4 Triton GEMMs (weight-only FP8 at decode, split-K atomics, FP4 MoE) under graph
    capture: replay equals eager within bf16 rounding."""
    n = _compare_decode("cuda", "bfloat16", True, True, atol=5e-2, rtol=2e-2, quantization="fp8")
    assert n == 14


@pytest.mark.parametrize("page_size", [128, 256])
def test_graph_path_equals_eager_path(page_size):
    """Random decode batches hitting every boundary (CSA window end, HCA window end, block end,
    window-page end, position 0): the padded static buffers a graph replays hold exactly the eager
    batch's metadata (row tables up to the row count they are computed for), padding elsewhere;
    the key slots the kernels compute for the real rows (through the synced page table) equal the
    eager ones and the per-token definition; batches that do not fit are refused."""
    rng = np.random.default_rng(page_size)
    W = 128
    builder = ForwardBatchBuilder(page_size, W, 4, 128, "cpu")
    ratios = {"csa": 4, "hca": 128}
    special = [0, 1, 3, 126, 127, 128, 255, 256, 511, 767, 1023, 1024, 2046, 2047]
    hosts: dict[tuple[int, int], np.ndarray] = {}  # one buffer per key, reused as the runner does

    slots = iter(range(1, 10**6))  # a request slot holds one request: distinct in a batch

    def req(p: int) -> ReqForwardInput:
        nblk = -(-(p + 1) // page_size)
        blocks = [int(x) for x in rng.choice(np.arange(1, 500), size=nblk, replace=False)]
        lo, hi = max(0, (p - W + 1) // W), p // W
        wins = {k: int(rng.integers(1, 300)) for k in range(lo, hi + 1)}
        return ReqForwardInput(next(slots) % 50 + 1, [int(rng.integers(0, 1000))], p, blocks, wins, 0)

    def check(reqs: list[ReqForwardInput], bs: int, ctx: int) -> None:
        n_real = len(reqs)
        lay = builder.static_layout(bs, ctx)
        host = hosts.setdefault((bs, ctx), np.full(lay.size, 55, dtype=np.int64))
        meta = builder.metadata(reqs, num_req_rows=bs)
        lay.write(host, meta)
        got = _replayed(lay, host, builder.sync_pages(reqs, meta))
        want = builder.build(reqs)
        for name, shape in lay.shapes.items():
            m = ratios.get(name.split(".")[0], 1)
            a, e = _field(got, name), _field(want, name)
            assert a.shape == shape, name
            if name == "logits_indices":
                assert (a == np.arange(bs)).all()  # a graph computes every row's logits
                continue
            real = tuple(slice(0, s) for s in e.shape)
            assert (_canonical_rows(name, a[real], bs, m) == _canonical_rows(name, e, n_real, m)).all(), name
            rest = np.ones(shape, dtype=bool)
            rest[real] = False
            assert (a[rest] == PAD[name.rsplit(".", 1)[-1]]).all(), name
        dg = _dense(got, {n: ctx // m for n, m in ratios.items()})
        dw = _dense(want)
        for name in dg:
            a, e = dg[name], dw[name]
            assert (a[:n_real, : e.shape[1]] == e).all() and (a[:n_real, e.shape[1] :] == -1).all(), name
            assert (a[n_real:] == -1).all(), name
        for b, r in enumerate(reqs):  # the per-token definition (module docstring)
            for name, m in ratios.items():
                e = page_size // m
                row = [r.block_pages[w // e] * e + w % e for w in range((r.prefix_len + 1) // m)]
                cand = dg[name][b].tolist()
                assert cand == row + [-1] * (ctx // m - len(row)), name

    for _ in range(60):
        n_real = int(rng.integers(1, 9))
        ps = [
            int(rng.choice(special)) if rng.random() < 0.5 else int(rng.integers(0, 2048))
            for _ in range(n_real)
        ]
        check([req(p) for p in ps], pick_bucket(n_real, bs_buckets(12)), int(rng.choice([2048, 4096])))
    # batches that fill every static shape (no padding anywhere: a window, an HCA window and a
    # block all end at position 511 of a 512 context), over the stale buffers of the batches above
    for bs in (1, 2):
        check([req(511) for _ in range(bs)], bs, 512)
        check([req(3)] * bs, bs, 512)
    lay = builder.static_layout(2, 512)
    host = hosts[(2, 512)]
    lay.write(host, None)  # all padding: graph warm-up and capture
    for name, shape in lay.shapes.items():
        pad = np.arange(2) if name == "logits_indices" else PAD[name.rsplit(".", 1)[-1]]
        assert (host[lay.offsets[name] : lay.offsets[name] + int(np.prod(shape))].reshape(shape) == pad).all()
    lay = builder.static_layout(1, 256)
    buf = np.zeros(lay.size, dtype=np.int64)
    with pytest.raises(ValueError, match="window page"):  # no span 1
        builder.metadata([ReqForwardInput(1, [3], 300, [1, 2, 3], {2: 5}, 0)], num_req_rows=1)
    with pytest.raises(ValueError, match="block pages"):
        builder.metadata([ReqForwardInput(1, [3], 300, [], {1: 4, 2: 5}, 0)], num_req_rows=1)
    with pytest.raises(ValueError, match="csa.visible"):
        lay.write(buf, builder.metadata([ReqForwardInput(1, [3], 300, [1, 2, 3], {1: 4, 2: 5}, 0)], 1))
    two = builder.static_layout(2, 512)
    with pytest.raises(ValueError, match="row tables"):  # Tab rows computed for B = 1, not 2
        two.write(
            np.zeros(two.size, dtype=np.int64),
            builder.metadata([ReqForwardInput(1, [3], 100, [1], {0: 4}, 0)]),
        )


class _FakeStream:
    """Records the fork / join calls the attention layer makes on the indexer stream."""

    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: _FakeStream) -> None:
        self.log.append(("wait", self.name, other.name))


def test_indexer_stream_branch_cpu(monkeypatch):
    """The second-stream branch of CSA attention (CUDA only in production) run on CPU with fake
    streams: same logits as the inline indexer, and per CSA layer one fork (indexer waits on
    main), one join (main waits on indexer) and one ``record_stream`` of the selection."""
    import contextlib

    log: list = []
    main, ix = _FakeStream("main", log), _FakeStream("ix", log)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: main)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, s: log.append(("record", s.name)))
    cfg = CONFIGS["sliding_first"]
    ref = _runner(cfg, "cpu", "float32")
    two = _runner(cfg, "cpu", "float32")
    two.indexer_streams.stream = ix  # type: ignore[assignment]
    two.indexer_streams.max_tokens = 1 << 30  # a 300-token prefill: on only past the default bound
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 1000, (300,), generator=g).tolist()
    sr, st = _Seq(ref), _Seq(two)
    _, a = ref.forward([sr.inp(ids)])
    _, b = two.forward([st.inp(ids)])
    torch.testing.assert_close(b, a, rtol=0, atol=0)
    n_csa = len(two.mc.csa_layers)
    assert n_csa == 2
    assert log == [("wait", "ix", "main"), ("wait", "main", "ix"), ("record", "main")] * n_csa


def test_indexer_stream_bound_cpu():
    """``--indexer-stream-max-bs``: the stream is handed to forwards of at most that many tokens
    (decode batch sizes; the bound is measured in benchmark/RESULTS.md), never above, never when
    the stream is off; the graph runner keys a bucket by the same rule."""
    r = _runner(CONFIGS["sliding_first"], "cpu", "float32", indexer_stream_max_bs=4)
    ix = r.indexer_streams
    assert ix.stream is None and ix.for_tokens(1) is None  # no stream on CPU
    fake = object()
    ix.stream = fake  # type: ignore[assignment]
    assert [ix.for_tokens(n) is fake for n in (1, 4, 5, 300)] == [True, True, False, False]
    seq = _Seq(r)
    fb = r.build_batch([seq.inp([5, 6, 7])])
    assert fb.indexer_stream is fake
    fb = r.build_batch([seq.inp(list(range(5)))])
    assert fb.indexer_stream is None
    ix.max_tokens = 0
    assert ix.for_tokens(1) is None
