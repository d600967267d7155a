"""GPU tests: Triton paged sparse shared-KV attention vs a float64 reference (op table entry 5).

The kernel finds each token's keys through the page tables (its window pages and position, its
request's row of ``req_to_page`` with the CSA top-k entries or the HCA visible count); the oracle
lists every token's key slots with Python loops from the definitions and attends in float64. Pools
in bf16 / fp32 and in the fp8 entry format (584 B for 512-d entries; decoded by the reference
codec for the oracle).

Marked ``gpu``; skipped without CUDA + Triton. (For kernel development on a CPU box they also run
under ``TRITON_INTERPRET=1``, small shapes, fp32.)
"""

from __future__ import annotations

import math

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, KERNEL_MARKS, dtypes, rel_err
from kernels_attention_testutil import W, make_case, oracle, run, slot_lists

pytestmark = KERNEL_MARKS


def lse_oracle(case: dict) -> torch.Tensor:
    """float64 ``[T, H]`` base-2 log-sum-exp of each token's scaled logits with the sink (what
    ``sparse_attention(lse=...)`` documents: ``log2(2**sink' + sum_j 2**(scale' q.k_j))``)."""
    q = case["q"].double().cpu()
    swa64 = case["swa"].double()
    comp64 = case["comp"].double() if case.get("comp") is not None else None
    sinks = case["sinks"].double().cpu()
    out = torch.empty(q.shape[:2], dtype=torch.float64)
    for t in range(q.shape[0]):
        ks = [swa64[s] if src == "swa" else comp64[s] for src, s in slot_lists(case, t)]  # type: ignore[index]
        logits = sinks[:, None]
        if ks:
            logits = torch.cat([q[t] @ torch.stack(ks).T * case["scale"], logits], 1)
        out[t] = torch.logsumexp(logits, 1) / math.log(2)
    return out


CASES = [
    # T, H, D, n_comp, mode
    (1, 64, 512, 512, "csa"),  # decode bs1, CSA: window + top-k
    (8, 64, 512, 512, "csa"),
    (33, 16, 512, 0, "swa"),  # sliding-only
    (1, 64, 512, 8192, "hca"),  # decode at a 1M context, HCA: every visible entry
    (256, 8, 512, 96, "hca"),
    (300, 64, 512, 512, "csa"),  # prefill-ish
    (5, 12, 128, 45, "csa"),  # odd sizes, H not a power of 2
]


@pytest.mark.parametrize("T,H,D,n_comp,mode", CASES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_paged_attention_matches_fp64(
    T: int, H: int, D: int, n_comp: int, mode: str, dtype: torch.dtype
) -> None:
    if INTERP and (T * H * D * (W + n_comp) > 4e7 or dtype != torch.float32):
        pytest.skip("interpreter: too slow / no bf16 dot")
    gen = torch.Generator().manual_seed(T * 1000 + H + n_comp)
    case = make_case(T, H, D, n_comp, mode, dtype, gen)
    swa = case["swa"].to(DEVICE)
    comp = case["comp"].to(DEVICE) if case["comp"] is not None else None
    ref = oracle(case, case["swa"].double(), case["comp"].double() if comp is not None else None)
    for splits in (None, 1, 4):
        out = torch.full(case["q"].shape, float("nan"), dtype=dtype, device=DEVICE)
        res = run(case, swa, comp, out=out, num_splits=splits)
        assert res.data_ptr() == out.data_ptr()
        assert not torch.isnan(out).any(), f"unwritten output (splits={splits})"
        tol = 1.5e-2 if dtype == torch.bfloat16 else 3e-3
        err = rel_err(out, ref)
        assert err < tol, f"rel err {err} (splits={splits})"
        if T > 1:  # the dead row attends to nothing: exactly zero
            assert torch.all(out[-1] == 0)


@pytest.mark.parametrize(
    "T,H,D,n_comp,mode",
    [(5, 12, 128, 45, "csa"), (33, 16, 512, 0, "swa"), (256, 8, 512, 96, "hca"), (300, 64, 512, 512, "csa")],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_paged_attention_dv_split(T: int, H: int, D: int, n_comp: int, mode: str, dtype: torch.dtype) -> None:
    """Two programs per (token, head block, split), each with half the value columns
    (``dv_split=2``), with one split and with several (whose partial rows each program writes in
    part): the float64 oracle's bounds; a bad ``dv_split`` is refused."""
    if INTERP and (T * H * D * (W + n_comp) > 4e7 or dtype != torch.float32):
        pytest.skip("interpreter: too slow / no bf16 dot")
    gen = torch.Generator().manual_seed(T * 1000 + H + n_comp + 7)
    case = make_case(T, H, D, n_comp, mode, dtype, gen)
    swa = case["swa"].to(DEVICE)
    comp = case["comp"].to(DEVICE) if case["comp"] is not None else None
    ref = oracle(case, case["swa"].double(), case["comp"].double() if comp is not None else None)
    for splits in (1, 4):
        out = torch.full(case["q"].shape, float("nan"), dtype=dtype, device=DEVICE)
        run(case, swa, comp, out=out, num_splits=splits, dv_split=2)
        assert not torch.isnan(out).any(), f"unwritten output (splits={splits})"
        err = rel_err(out, ref)
        assert err < (1.5e-2 if dtype == torch.bfloat16 else 3e-3), f"rel err {err} (splits={splits})"
    for bad in (0, 3, 4):
        with pytest.raises(ValueError, match="dv_split"):
            run(case, swa, comp, dv_split=bad)


@pytest.mark.parametrize(
    "T,H,D,n_comp,mode",
    [(5, 12, 128, 45, "csa"), (3, 16, 64, 0, "swa"), (4, 8, 128, 96, "hca"), (300, 64, 512, 512, "csa")],
)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_paged_attention_keys_on_m(
    T: int, H: int, D: int, n_comp: int, mode: str, dtype: torch.dtype
) -> None:
    """The key rows on the MMA's M (``keys_on_m`` 1: logits ``k·qᵀ``, accumulator ``[D, heads]``;
    2, 4: the entry rows in that many chunks of ``D``), at the 128-key tile they are compiled for
    and at the wrapper's tile, one split and several, with ``dv_split`` 2 (mode 1): the float64
    oracle's bounds; a bad ``keys_on_m`` (or 2, 4 with ``dv_split`` 2) is refused."""
    if INTERP and (T * H * D * (W + n_comp) > 4e7 or dtype != torch.float32):
        pytest.skip("interpreter: too slow / no bf16 dot")
    gen = torch.Generator().manual_seed(T * 1000 + H + n_comp + 11)
    case = make_case(T, H, D, n_comp, mode, dtype, gen)
    swa = case["swa"].to(DEVICE)
    comp = case["comp"].to(DEVICE) if case["comp"] is not None else None
    ref = oracle(case, case["swa"].double(), case["comp"].double() if comp is not None else None)
    tol = 1.5e-2 if dtype == torch.bfloat16 else 3e-3
    settings = [
        (1, 1, None, 1),
        (2, 1, None, 1),
        (4, 1, None, 1),
        (1, 4, None, 1),
        (4, 4, None, 1),
        (1, 1, None, 2),
    ]
    if not INTERP:  # the prefill tiles of the sweep (the interpreter's fp32 tiles are clamped)
        settings += [(1, 1, 128, 1), (2, 1, 128, 1), (4, 1, 128, 1), (4, 4, 128, 1)]
    for km, splits, block_n, dv in settings:
        out = torch.full(case["q"].shape, float("nan"), dtype=dtype, device=DEVICE)
        kw = dict(num_splits=splits, keys_on_m=km, dv_split=dv)
        if block_n is not None:
            kw.update(block_n=block_n, block_h=64, num_warps=8, num_stages=1)
        run(case, swa, comp, out=out, **kw)
        assert not torch.isnan(out).any(), f"unwritten output {kw}"
        err = rel_err(out, ref)
        assert err < tol, f"rel err {err} {kw}"
        if T > 1:  # the dead row attends to nothing: exactly zero
            assert torch.all(out[-1] == 0), kw
    for bad, dv in ((3, 1), (-1, 1), (2, 2), (4, 2)):
        with pytest.raises(ValueError, match="keys_on_m"):
            run(case, swa, comp, keys_on_m=bad, dv_split=dv)


@pytest.mark.parametrize("mode", ["csa", "hca"])
def test_paged_attention_extend_tile_default(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default tile of a bf16 extend (``T >= 128``, 64 heads: ``EXTEND_TILE``, the key rows on
    the MMA's M) and the heads-on-M tile it replaced (``SGLANG_V4_ATTN_EXTEND_KEYS_ON_M=0``) both
    stay within the float64 oracle's bounds, with one split or the default splits, and with the
    log-sum-exp output the prefix merge reads (checked against the oracle's logits)."""
    from sgl_kernel_v4.triton import attention as attn

    if INTERP:
        pytest.skip("interpreter: no bf16 dot (the tile applies to bf16 / fp16 queries only)")
    gen = torch.Generator().manual_seed(41 if mode == "csa" else 43)
    case = make_case(160, 64, 512, 512 if mode == "csa" else 1500, mode, torch.bfloat16, gen)
    swa, comp = case["swa"].to(DEVICE), case["comp"].to(DEVICE)
    ref = oracle(case, case["swa"].double(), case["comp"].double())
    want = lse_oracle(case)
    outs = {}
    for km in ("", "0"):
        monkeypatch.setenv(attn.EXTEND_KEYS_ON_M_ENV, km)
        attn.extend_keys_on_m.cache_clear()
        try:
            for splits in (None, 1):
                out = run(case, swa, comp, num_splits=splits)
                assert rel_err(out, ref) < 1.5e-2, (km, splits)
            lse = torch.empty((160, 64), dtype=torch.float32, device=DEVICE)
            outs[km] = run(case, swa, comp, lse=lse)
            assert rel_err(outs[km], ref) < 1.5e-2, km
            assert (lse.double().cpu() - want).abs().max() < 1e-2, km
        finally:
            attn.extend_keys_on_m.cache_clear()
    assert rel_err(outs[""], outs["0"].double()) < 1.5e-2


@pytest.mark.parametrize("mode", ["csa", "hca"])
@pytest.mark.parametrize("keys_on_m", [0, 1, 2, 4])
def test_paged_attention_lse_vs_float64(mode: str, keys_on_m: int) -> None:
    """The log-sum-exp output (what the dense-prefix merge reads) in every tile orientation, the
    dead row's (the sink alone) included, against the float64 oracle's."""
    dtype = dtypes()[0]
    gen = torch.Generator().manual_seed(5 + keys_on_m)
    case = make_case(6, 16, 64, 96, mode, dtype, gen)
    swa, comp = case["swa"].to(DEVICE), case["comp"].to(DEVICE)
    lse = torch.empty((6, 16), dtype=torch.float32, device=DEVICE)
    out = run(case, swa, comp, lse=lse, keys_on_m=keys_on_m, dv_split=1)
    tol = 1.5e-2 if dtype == torch.bfloat16 else 3e-3
    assert rel_err(out, oracle(case, case["swa"].double(), case["comp"].double())) < tol
    assert (lse.double().cpu() - lse_oracle(case)).abs().max() < (1e-2 if dtype == torch.bfloat16 else 1e-4)


@pytest.mark.parametrize("mode", ["csa", "hca"])
def test_paged_attention_fp8_pools(mode: str) -> None:
    """fp8 entries (448 e4m3 nope + 64 bf16 rope + 7 ue8m0 scales, in class-strided pages): the
    kernel dequantizes in registers; the oracle attends over the reference codec's decode."""
    from sgl_kernel_v4.paged import entry_align
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView, decode_entries, encode_entries
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    small = INTERP
    mc = ModelConfig.from_dict(get_preset("tiny" if small else "flash-8l-32e"))
    D = mc.head_dim
    lay = build_kv_layout(mc, "fp8_e4m3", False, 256)
    gen = torch.Generator().manual_seed(5)
    T, H, n_comp = (3, 16, 48) if small else (9, 64, 512 if mode == "csa" else 2000)
    dtype = torch.float32 if small else torch.bfloat16
    case = make_case(T, H, D, n_comp, mode, dtype, gen)
    views = {}
    for name, kind, src in (("swa", KVKind.SWA, case["swa"]), ("comp", KVKind.CSA_MAIN, case["comp"])):
        spec = lay.kinds[kind]
        rpu = spec.rows_per_unit
        units = -(-src.shape[0] // rpu)
        st = spec.allocate(units * spec.pages_per_unit, DEVICE)[0]
        view = KVRowsView(st, spec.entry, out_dtype=dtype)
        n = min(src.shape[0], len(view))
        view[torch.arange(n, device=DEVICE)] = src[:n].float().to(DEVICE)
        views[name] = view
        case[name + "64"] = decode_entries(encode_entries(src[:n].float(), spec.entry), spec.entry).double()
    ref = oracle(case, case["swa64"], case["comp64"])
    out = run(case, views["swa"], views["comp"])
    assert rel_err(out, ref) < (3e-3 if small else 1.5e-2)
    # half the value columns per program (each re-reads and dequantizes its half of the entries)
    assert rel_err(run(case, views["swa"], views["comp"], dv_split=2), ref) < (3e-3 if small else 1.5e-2)
    # the key rows on the MMA's M, the entry rows in 4 chunks of D (each dequantized apart; the
    # whole-row form reads them as the default does)
    assert rel_err(run(case, views["swa"], views["comp"], keys_on_m=4), ref) < (3e-3 if small else 1.5e-2)
    # 8-byte loads need 8-byte aligned rows: the default follows the entry size (584-byte entries of
    # flash-8l-32e: 8; the tiny preset's 194-byte entries: 2) and a wider explicit value is refused
    row_align = 8 if entry_align("fp8_main", D, mc.rope_dim) >= 8 else 2
    assert rel_err(run(case, views["swa"], views["comp"], fp8_align=row_align), ref) < (
        3e-3 if small else 1.5e-2
    )
    if row_align < 8:
        with pytest.raises(ValueError, match="fp8_align"):
            run(case, views["swa"], views["comp"], fp8_align=8)
    with pytest.raises(ValueError, match="fp8_align"):
        run(case, views["swa"], views["comp"], fp8_align=4)


def test_paged_attention_empty_and_bad_input() -> None:
    from sgl_kernel_v4.triton.attention import sparse_attention

    gen = torch.Generator().manual_seed(7)
    dt = torch.float32 if INTERP else torch.bfloat16
    case = make_case(4, 16, 128, 40, "csa", dt, gen)
    swa, comp = case["swa"].to(DEVICE), case["comp"].to(DEVICE)
    d = {k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in case.items()}
    empty = sparse_attention(d["q"][:0], swa, d["swa_pages"][:0], d["pos"][:0], W, d["sinks"], 0.1)
    assert empty.shape == (0, 16, 128)
    with pytest.raises(ValueError, match="sinks"):
        sparse_attention(d["q"], swa, d["swa_pages"], d["pos"], W, d["sinks"][:3], 0.1)
    with pytest.raises(ValueError, match="swa_kv"):
        sparse_attention(d["q"], swa[:, :64], d["swa_pages"], d["pos"], W, d["sinks"], 0.1)
    with pytest.raises(ValueError, match="swa_pages"):
        sparse_attention(d["q"], swa, d["swa_pages"][:, :1], d["pos"], W, d["sinks"], 0.1)
    with pytest.raises(ValueError, match="comp_kv"):
        sparse_attention(d["q"], swa, d["swa_pages"], d["pos"], W, d["sinks"], 0.1, comp,
                         req_to_page=d["req_to_page"], req_rows=d["req_rows"], token_req=d["token_req"])  # fmt: skip
