"""Extend (several tokens per program) indexer scoring: the keys-major kernel
(``indexer_score_extend._score_extend_kernel``, forms ``keys`` and ``keys_split``) and the general
kernel (``form="general"``) against float64 oracles.

* scores vs a float64 einsum over the candidates listed by Python loops from the page table (the
  inputs rounded to the kernel's dtype first), and the int32 keys vs the order-preserving map
  computed in torch from those scores;
* exact top-k on small-integer inputs (scores exact in fp32 and float64, many ties) vs the torch
  reference ``sgl_kernel_v4.ref.attention.indexer_topk`` (tie rule: lower position wins), with
  short rows (at most ``topk`` entries) and long rows, and several requests inside one program's
  tokens;
* fp8 / fp4 indexer pools, decoded by the reference codec for the oracle.

Runs on CUDA or under ``TRITON_INTERPRET=1`` (fp16 / fp32 dots there: the interpreter's bf16 dot
is broken); bf16 cases are CUDA-only. Marked ``gpu`` as the other kernel tests.
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS
from kernels_indexer_testutil import _ref64, candidates, check_selection, paged_case

pytestmark = KERNEL_MARKS

SETTINGS = [
    # form, block_t, block_c, warps, stages
    ("keys", 2, 64, 4, 2),
    ("keys", 4, 32, 4, 3),
    ("keys", 4, 128, 8, 2),
    ("keys_split", 2, 32, 4, 2),
    ("keys_split", 4, 64, 4, 3),
    ("keys_split", 8, 32, 8, 2),
    ("keys_split", 8, 128, 8, 2),
    ("keys_split", 8, 128, 8, 2, 4),  # the default (indexer.EXTEND_SCORE): split for 4 waves
    ("keys_split", 2, 32, 4, 2, 8),  # many shares past the entries (empty programs)
    ("general", 4, 32, None, None),
    ("keys_fold", 4, 32, 4, 2),
    ("keys_wdot", 8, 128, 8, 2, 4),  # the sweep's candidate, split for 4 waves
    ("keys_wdot", 2, 64, 4, 2),
    ("keys_wdot16", 4, 32, 4, 2),
    ("keys_wdot_pairs", 8, 32, 8, 2),
    ("keys_wdot_pairs", 2, 64, 4, 2, 8),
]


def _setting(form: str, bt: int, bc: int, warps: int | None, stages: int | None, waves: int | None = None):
    from sgl_kernel_v4.triton.indexer_score_extend import ExtendScore

    return ExtendScore(form=form, block_t=bt, block_c=bc, num_warps=warps, num_stages=stages, waves=waves)


def _order_key(scores: torch.Tensor) -> torch.Tensor:
    """Order-preserving int32 key of fp32 scores (``-0.0`` as ``+0.0``), in torch."""
    s = torch.where(scores == 0, torch.zeros_like(scores), scores)
    i = s.view(torch.int32)
    return i ^ ((i >> 31) & 0x7FFFFFFF)


def _dev(case: dict) -> dict:
    return {n: case[n].to(DEVICE) for n in ("visible", "req_to_page", "req_rows", "token_req")}


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_extend_scores_match_fp64(setting: tuple, dtype: torch.dtype) -> None:
    """9 tokens of two requests (a program's tokens span both), 16 heads x 32, 300 entries in pages
    of 64 (one unmapped): scores within fp32 accumulation error of float64, keys = order map."""
    from sgl_kernel_v4.triton.indexer import indexer_scores

    gen = torch.Generator().manual_seed(5)
    T, HI, DI, C, N = 9, 16, 32, 300, 640
    q = torch.randn(T, HI, DI, generator=gen).to(dtype)
    w = torch.randn(T, HI, generator=gen) * HI**-0.5
    kv = torch.randn(N, DI, generator=gen).to(dtype)
    case = paged_case(T, C, N, gen)
    cand = candidates(case)
    ref = _ref64(q, w, kv.double(), cand, DI**-0.5)
    d = _dev(case)
    keys, sc = indexer_scores(q.to(DEVICE), w.to(DEVICE), kv.to(DEVICE), d["visible"], d["req_to_page"],
                              d["req_rows"], d["token_req"], case["e"], DI**-0.5, max_visible=C, block_t=2,
                              extend_score=_setting(*setting))  # fmt: skip
    sc, keys = sc.cpu(), keys.cpu()
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(sc), finite)
    err = (sc.double()[finite] - ref[finite]).abs().max() / ref[finite].abs().max()
    # fp16 products are exact in the fp32 accumulator; fp32 inputs on CUDA take TF32 tensor cores
    # (10-bit mantissas), the bound of the general kernel's tests on the GPU. "keys_wdot" rounds the
    # post-ReLU products and the weights to the input dtype for its second dot (fp16: 2^-11
    # relative each; fp32: exact in the interpreter, TF32 twice on CUDA), "keys_wdot16" to fp16
    bound = 3e-3 if dtype == torch.float32 and not INTERP else 1e-5
    if setting[0] in ("keys_wdot", "keys_wdot_pairs"):
        bound = 2e-3 if dtype == torch.float16 else 6e-3 if not INTERP else 1e-5
    if setting[0] == "keys_wdot16":
        bound = 2e-3 if dtype == torch.float16 or INTERP else 6e-3
    assert err < bound, err
    assert torch.equal(keys[finite], _order_key(sc)[finite])
    assert (keys[~finite] == -(2**31)).all()


def _int_problem(vis: list[int], reqs: list[int], seed: int, dtype: torch.dtype) -> dict:
    """Small-integer queries / keys / weights (every score exact in fp32 and float64, many equal):
    three requests over pages of 8 entries, request 1's second page unmapped."""
    gen = torch.Generator().manual_seed(seed)
    T, P, E, HI, DI = len(vis), 16, 8, 4, 16
    n_pages = 3 * P + 2
    kv = torch.randint(-1, 2, (20, DI), generator=gen).float()[
        torch.randint(0, 20, (n_pages * E,), generator=gen)
    ]
    r2p = torch.randperm(n_pages, generator=gen)[: 3 * P].view(3, P).int()
    r2p[0, 1] = -1
    return dict(
        q=torch.randint(-2, 3, (T, HI, DI), generator=gen).to(dtype),
        w=torch.tensor([-1.0, -0.5, 0.5, 1.0, 2.0])[torch.randint(0, 5, (T, HI), generator=gen)],
        kv=kv.to(dtype),
        visible=torch.tensor(vis, dtype=torch.int64),
        req_to_page=r2p,
        req_rows=torch.tensor([1, 0, 2]),
        token_req=torch.tensor(reqs, dtype=torch.int64),
        e=E,
    )


# visible counts (top-k 16: rows of at most 16 take the short path) and requests: runs of 3, 1, 5,
# 2 tokens, so programs of 2 / 4 / 8 tokens hold pieces of several runs, short and long rows mixed
VIS = [3, 40, 16, 0, 17, 100, 9, 120, 5, 64, 33]
REQS = [0, 0, 0, 1, 2, 2, 2, 2, 2, 0, 0]


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(map(str, s)))
@pytest.mark.parametrize("max_visible", [None, pytest.param(200, marks=pytest.mark.slow)])
def test_extend_topk_exact_with_short_rows(setting: tuple, max_visible: int | None) -> None:
    from sgl_kernel_v4.ref.attention import indexer_topk as ref_topk
    from sgl_kernel_v4.triton.indexer import indexer_topk

    dtype = torch.float16 if setting[1] == 4 else torch.float32
    p = _int_problem(VIS, REQS, 7, dtype)
    args = [p["visible"], p["req_to_page"], p["req_rows"], p["token_req"], p["e"], 16, 0.25]
    want = ref_topk(p["q"].float(), p["w"], p["kv"].float(), *args)
    dargs = [a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args]
    got = indexer_topk(p["q"].to(DEVICE), p["w"].to(DEVICE), p["kv"].to(DEVICE), *dargs, max_visible=max_visible,
                       block_t=2, extend_score=_setting(*setting))  # fmt: skip
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("form", ["keys", pytest.param("keys_split", marks=pytest.mark.slow)])
def test_extend_blocks_of_rows(form: str, monkeypatch) -> None:
    """A scratch of 5 rows at 120 candidates: blocks rounded to 4 rows (programs of 4 tokens), the
    last block partial; the same top-k as the reference."""
    from sgl_kernel_v4.ref.attention import indexer_topk as ref_topk
    from sgl_kernel_v4.triton import indexer
    from sgl_kernel_v4.triton.indexer_score_extend import ExtendScore

    monkeypatch.setattr(indexer, "SCRATCH_ELEMS", 3 * 120 * 5)
    assert indexer._block_rows(len(VIS), 120, 4) == 4
    p = _int_problem(VIS, REQS, 8, torch.float32)
    args = [p["visible"], p["req_to_page"], p["req_rows"], p["token_req"], p["e"], 16, 0.25]
    want = ref_topk(p["q"], p["w"], p["kv"], *args)
    dargs = [a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args]
    es = ExtendScore(form=form, block_t=4, block_c=32, num_warps=4)
    got = indexer.indexer_topk(p["q"].to(DEVICE), p["w"].to(DEVICE), p["kv"].to(DEVICE), *dargs, max_visible=120,
                               block_t=2, extend_score=es)  # fmt: skip
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("fp4", [False, "load_key", "rows"])
@pytest.mark.parametrize("form", ["keys", "keys_split", "keys_wdot", "keys_fold", "keys_wdot_pairs"])
def test_extend_quantized_keys(fp4: bool | str, form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """fp8 (e4m3 + fp32 scale) and fp4 (e2m1 + ue8m0 per 32; decoded per value by ``load_key`` or a
    whole key at a time, ``indexer.EXTEND_FP4_ROWS``) indexer pools: scores vs float64 of the
    reference codec's decode, selection vs its top-k."""
    from sgl_kernel_v4.triton import indexer
    from sgl_kernel_v4.triton.indexer import indexer_scores, indexer_topk

    monkeypatch.setattr(indexer, "EXTEND_FP4_ROWS", fp4 == "rows")
    fp4 = bool(fp4)
    from sgl_kernel_v4.triton.indexer_score_extend import ExtendScore
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    mc = ModelConfig.from_dict(get_preset("tiny"))
    spec = build_kv_layout(mc, "fp8_e4m3", fp4, 256).kinds[KVKind.CSA_INDEXER]
    gen = torch.Generator().manual_seed(21 + fp4)
    T, HI, DI, C, k = (5, 16, 128, 200, 16) if INTERP else (300, 64, 128, 5000, 512)
    st = spec.allocate(-(-C // 64) * 2 + 2, DEVICE)[0]
    pool = KVRowsView(st, spec.entry, out_dtype=torch.float32)
    pool[torch.arange(len(pool), device=DEVICE)] = torch.randn(len(pool), DI, generator=gen).to(DEVICE)
    keys64 = pool[torch.arange(len(pool), device=DEVICE)].double().cpu()
    dtype = torch.float32 if INTERP else torch.bfloat16
    q = torch.randn(T, HI, DI, generator=gen).to(dtype)
    w = torch.randn(T, HI, generator=gen) * HI**-0.5
    case = paged_case(T, C, len(pool), gen)
    ref = _ref64(q, w, keys64, candidates(case), DI**-0.5)
    es = ExtendScore(form=form, block_t=2, block_c=64)
    d = _dev(case)
    res = indexer_topk(q.to(DEVICE), w.to(DEVICE), pool, d["visible"], d["req_to_page"], d["req_rows"],
                       d["token_req"], case["e"], k, DI**-0.5, block_t=2, extend_score=es)  # fmt: skip
    spread = ref[torch.isfinite(ref)].abs().max().item()
    check_selection(res, ref, k, tol=(1e-5 if INTERP else 3e-3) * spread)
    _, sc = indexer_scores(q.to(DEVICE), w.to(DEVICE), pool, d["visible"], d["req_to_page"], d["req_rows"],
                           d["token_req"], case["e"], DI**-0.5, max_visible=C, block_t=2, extend_score=es)  # fmt: skip
    finite = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(sc.cpu()), finite)
    err = (sc.cpu().double()[finite] - ref[finite]).norm() / ref[finite].norm()
    assert err < (1e-6 if INTERP else 5e-3), err


@pytest.mark.skipif(INTERP, reason="bf16 dot: CUDA only")
@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: "-".join(map(str, s)))
def test_extend_bf16_prefill_chunk(setting: tuple) -> None:
    """bf16 queries and keys, 512 tokens of one request over 20,000 entries (64 heads x 128): the
    extend path without ``block_t`` (``T > 256``); scores within bf16 error of float64."""
    from sgl_kernel_v4.triton.indexer import indexer_scores, indexer_topk

    gen = torch.Generator().manual_seed(3)
    T, HI, DI, C, N, k = 512, 64, 128, 20000, 20480, 512
    q = torch.randn(T, HI, DI, generator=gen).to(torch.bfloat16)
    w = torch.randn(T, HI, generator=gen) * HI**-0.5
    kv = torch.randn(N, DI, generator=gen).to(torch.bfloat16)
    case = paged_case(T, C, N, gen)
    case["token_req"].zero_()
    cand = candidates(case)
    ref = _ref64(q, w, kv.double(), cand, DI**-0.5)
    d = _dev(case)
    es = _setting(*setting)
    res = indexer_topk(q.to(DEVICE), w.to(DEVICE), kv.to(DEVICE), d["visible"], d["req_to_page"], d["req_rows"],
                       d["token_req"], case["e"], k, DI**-0.5, max_visible=C, extend_score=es)  # fmt: skip
    spread = ref[torch.isfinite(ref)].abs().max().item()
    check_selection(res, ref, k, tol=3e-3 * spread)
    _, sc = indexer_scores(q.to(DEVICE), w.to(DEVICE), kv.to(DEVICE), d["visible"], d["req_to_page"],
                           d["req_rows"], d["token_req"], case["e"], DI**-0.5, max_visible=C, extend_score=es)  # fmt: skip
    finite = torch.isfinite(ref)
    err = (sc.cpu().double()[finite] - ref[finite]).norm() / ref[finite].norm()
    assert err < 5e-3, err


def test_extend_score_bad_fields() -> None:
    from sgl_kernel_v4.triton.indexer_score_extend import ExtendScore

    for kw, field in (
        ({"form": "rows"}, "form"),
        ({"block_t": 3}, "block_t"),
        ({"block_t": 1}, "block_t"),
        ({"block_c": 8}, "block_c"),
        ({"num_warps": 6}, "num_warps"),
        ({"num_stages": 0}, "num_stages"),
        ({"form": "keys_split", "block_t": 16}, "block_t"),
        ({"form": "keys", "block_t": 8}, "block_t"),
        ({"form": "keys_wdot", "block_t": 16}, "block_t"),
        ({"form": "keys_fold", "block_t": 16}, "block_t"),
        ({"form": "keys_wdot16", "block_t": 16}, "block_t"),
        ({"form": "keys_wdot_pairs", "block_t": 16}, "block_t"),
        ({"waves": 0}, "waves"),
    ):
        with pytest.raises(ValueError, match=field):
            ExtendScore(**kw)
    assert ExtendScore(form="keys", block_t=4).form_code == 0


@pytest.mark.parametrize("form", ["keys_fold", "keys_wdot", "keys_wdot16", "keys_wdot_pairs"])
def test_fold_forms_refuse_negative_scale(form: str) -> None:
    """The opt-in forms rewrite ``relu(scale x) w`` as ``relu(x) (scale w)``, true for ``scale >= 0``
    only: a negative scale is a ValueError naming it, raised before any launch (the output stays)."""
    from sgl_kernel_v4.triton.indexer import indexer_topk

    p = _int_problem(VIS, REQS, 7, torch.float32)
    args = [p["visible"], p["req_to_page"], p["req_rows"], p["token_req"], p["e"], 16, -0.25]
    dargs = [a.to(DEVICE) if isinstance(a, torch.Tensor) else a for a in args]
    out = torch.full((len(VIS), 16), 7, dtype=torch.int64, device=DEVICE)
    with pytest.raises(ValueError, match="scale"):
        indexer_topk(p["q"].to(DEVICE), p["w"].to(DEVICE), p["kv"].to(DEVICE), *dargs, block_t=2, out=out,
                     extend_score=_setting(form, 2, 32, 4, 2))  # fmt: skip
    assert (out.cpu() == 7).all()


def test_extend_splits_fill_the_waves() -> None:
    """The share count is the least power of two (at most 256) whose programs fill ``waves`` x SMs,
    checked against a search over every power of two; a 2,048-token chunk of 80-row blocks on the
    H200 (10 blocks of 8 tokens, 132 SMs) takes 64 shares at 4 waves (640 programs)."""
    from sgl_kernel_v4.triton.indexer_score_extend import extend_splits

    assert extend_splits(10, 132, 4) == 64
    for blocks in (1, 3, 10, 64, 300, 5000):
        for sms, waves in ((8, 1), (132, 2), (132, 4), (78, 8)):
            fits = [1 << i for i in range(9) if (1 << i) * blocks >= waves * sms]
            assert extend_splits(blocks, sms, waves) == (fits[0] if fits else 256)
    for bad in ((0, 132, 4, "blocks"), (10, 0, 4, "sms"), (10, 132, 0, "waves")):
        with pytest.raises(ValueError, match=bad[3]):
            extend_splits(*bad[:3])


@pytest.mark.skipif(not INTERP, reason="records the launches under the Triton interpreter")
@pytest.mark.parametrize("dtype,tokens", [(torch.float32, 4), (torch.float16, 8)])
def test_ieee_fp32_extend_runs_at_most_4_tokens_per_program(dtype: torch.dtype, tokens: int) -> None:
    """IEEE fp32 products (fp32 operands with TF32 off, torch's default) keep each token's
    ``[BLOCK_H, DI]`` query tile in shared memory: 8 tokens of 64 x 128 fp32 needed ~320 KB per block
    under the GPU's Triton 3.6 (> 227 KB), so an fp32 extend scores at most 4 tokens per program; fp16
    keeps the setting's 8. Checked on the launch the wrapper makes (recorded, not run)."""
    import kernel_launch_record as klr
    from sgl_kernel_v4.triton import indexer
    from sgl_kernel_v4.triton.indexer_score_extend import ExtendScore

    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    p = _int_problem(VIS, REQS, 8, dtype)
    args = [p["visible"], p["req_to_page"], p["req_rows"], p["token_req"], p["e"], 16, 0.25]
    es = ExtendScore(form="keys_split", block_t=8, block_c=32, num_warps=4)
    with klr.record_launches(dry=True) as recs:
        try:
            indexer.indexer_topk(p["q"], p["w"], p["kv"], *args, max_visible=120, block_t=8, extend_score=es)
        except (AssertionError, RuntimeError, ValueError):
            pass  # a dry run computes no scores; the launches are what counts
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32
    ext = [klr.named_constexprs(r) for r in recs if r["fn"].endswith("_score_extend_kernel")]
    assert ext, [r["fn"] for r in recs]
    assert all(c["BLOCK_T"] == tokens and c["IEEE"] == (dtype == torch.float32) for c in ext), ext
