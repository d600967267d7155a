"""The dense shared-prefix path of HCA attention (``sgl_kernel_v4.triton.attention_prefix``) vs
the float64 oracle of the paged attention tests, and its host-side planning.

The kernel tests run on CUDA, or on the CPU under ``TRITON_INTERPRET=1`` (fp32, small shapes);
the planning tests run everywhere.
"""

from __future__ import annotations

import pytest
import torch
from kernel_testutil import DEVICE, INTERP, rel_err
from kernels_attention_testutil import W, make_case, oracle
from sgl_kernel_v4.dense_prefix import PrefixSegment, dense_prefix_segments


def test_segments_follow_the_definition() -> None:
    """Request b's tokens are rows [sum(extend[:b]), +extend[b]); the token at position p sees
    (p + 1) // ratio entries; a run qualifies with >= min_tokens tokens whose first sees
    >= min_entries; its entry count is the last token's."""
    ext, pre = [1, 300, 2048, 255, 512], [70_000, 65_535, 1_000_000, 90_000, 100]
    segs = dense_prefix_segments(ext, pre, 128, min_tokens=256, min_entries=512)
    # request 1: first token at 65,535 sees 65,536 // 128 = 512 (qualifies); last at 65,834 -> 514
    # request 2: 1,000,001 // 128 = 7,812 at the first; last at 1,002,047 -> 1,002,048 // 128 = 7,828
    assert segs == [PrefixSegment(1, 301, 1, 514), PrefixSegment(301, 2349, 2, 7828)]
    # one token less context: request 1's first token sees 511 entries
    assert dense_prefix_segments([300], [65_534], 128, 256, 512) == []
    with pytest.raises(ValueError, match="extend_lens"):
        dense_prefix_segments([1, 2], [0], 128)
    with pytest.raises(ValueError, match="ratio"):
        dense_prefix_segments([1], [0], 0)


CASES = [
    # T, H, D, n_comp, p_bytes (small budgets: several token blocks), block_n, block_k (0: queries
    # resident), logits ("gemm": cuBLAS Q Kᵀ + the softmax pass; tile options unused)
    (40, 8, 128, 300, 1 << 30, 64, 64, "triton"),
    (40, 8, 128, 300, 8 * 384 * 4 * 3, 32, 64, "triton"),  # three tokens per block
    (24, 16, 64, 1000, 1 << 30, 16, 64, "triton"),  # many key tiles per row (rescale across tiles)
    (40, 8, 128, 300, 8 * 384 * 4 * 3, 32, 0, "triton"),
    (24, 16, 64, 1000, 1 << 30, 16, 0, "triton"),
    (40, 8, 128, 300, 1 << 30, 64, 64, "gemm"),
    (40, 8, 128, 300, 8 * 384 * 4 * 3, 64, 64, "gemm"),  # three tokens per block (fp32 logits)
    (24, 16, 64, 1000, 1 << 30, 64, 64, "gemm"),  # 1,024 keys, one softmax pass
    (24, 16, 64, 1000, 1 << 30, 64, 64, "gemm-tiles"),  # the two-pass softmax over 512-key tiles
]


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE is None, reason="needs CUDA and triton")
@pytest.mark.parametrize("T,H,D,n_comp,p_bytes,block_n,block_k,logits", CASES)
def test_dense_prefix_matches_fp64(
    T: int,
    H: int,
    D: int,
    n_comp: int,
    p_bytes: int,
    block_n: int,
    block_k: int,
    logits: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both requests' tokens split into dense runs (request 1's page table has a missing page: its
    entries there are no keys) and paged tokens; every token's output against the float64
    attention over its window + visible entries + sink."""
    from sgl_kernel_v4.triton import attention_prefix_tiles
    from sgl_kernel_v4.triton.attention_prefix import sparse_attention_dense_prefix

    if logits == "gemm-tiles":  # rows longer than the one-pass bound
        monkeypatch.setattr(attention_prefix_tiles, "SOFTMAX_ROW", 256)
        logits = "gemm"
    dtype = torch.float32 if INTERP else torch.bfloat16
    gen = torch.Generator().manual_seed(T + n_comp + block_n)
    case = make_case(T, H, D, n_comp, "hca", dtype, gen)
    half = T // 2
    vis = case["visible"]
    vis[:] = torch.randint(n_comp // 2, n_comp + 1, (T,), generator=gen)
    vis[half - 1] = 0  # a dense-run token that sees no entry
    vis[-1] = 0  # make_case's dead row (no window page either)
    segs = [
        PrefixSegment(2, half, 0, int(vis[2:half].max())),  # rows 0-1 of request 0 stay paged
        PrefixSegment(half, T, 1, int(vis[half:].max()) + 5),  # gathers past the last visible entry
    ]
    ref = oracle(case, case["swa"].double(), case["comp"].double())
    d = {k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in case.items()}
    out = sparse_attention_dense_prefix(
        d["q"], d["swa"], d["swa_pages"], d["pos"], W, d["sinks"], case["scale"], d["comp"], d["visible"],
        d["req_to_page"], d["req_rows"], d["token_req"], case["e"], segs, p_bytes=p_bytes, block_n=block_n,
        block_k=block_k, logits=logits,
    )  # fmt: skip
    assert not torch.isnan(out).any()
    tol = 1.5e-2 if dtype == torch.bfloat16 else 3e-3
    for rows in (slice(0, 2), slice(2, half), slice(half, T)):
        err = rel_err(out[rows], ref[rows])
        assert err < tol, f"rows {rows}: rel err {err}"
    assert torch.all(out[-1] == 0)  # make_case's dead row: no window page and no entry


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE is None, reason="needs CUDA and triton")
@pytest.mark.parametrize("logits", ["triton", "gemm"])
def test_dense_prefix_fp8_pool(logits: str) -> None:
    """fp8 main entries (584-byte rows of flash-8l-32e on CUDA, the tiny preset's under the
    interpreter): the gathered tile is the reference codec's decode; against float64 attention
    over the decoded entries."""
    from sgl_kernel_v4.triton.attention_prefix import sparse_attention_dense_prefix

    T, H, n_comp = (12, 8, 200) if INTERP else (300, 64, 2000)
    case, views, ref = _fp8_case("hca", T, H, n_comp, 11)
    half = T // 2
    segs = [PrefixSegment(0, half, 0, int(case["visible"][:half].max())),
            PrefixSegment(half, T, 1, int(case["visible"][half:].max()))]  # fmt: skip
    d = {k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in case.items()}
    out = sparse_attention_dense_prefix(
        d["q"], views["swa"], d["swa_pages"], d["pos"], W, d["sinks"], case["scale"], views["comp"],
        d["visible"], d["req_to_page"], d["req_rows"], d["token_req"], case["e"], segs,
        block_k=min(64, case["q"].shape[-1]), logits=logits,
    )  # fmt: skip
    assert rel_err(out, ref) < (3e-3 if INTERP else 1.5e-2)


def _fp8_case(
    mode: str, T: int, H: int, n_comp: int, seed: int, extra_entries: tuple[slice, int] | None = None
) -> tuple[dict, dict, torch.Tensor]:
    """make_case over fp8 main-entry pools (the runtime's row views); the float64 oracle attends
    over the reference codec's decode of the same entries. ``extra_entries = (rows, w0)``: those
    tokens' first three selected entries become ``w0, w0 + 1, w0 + 2``."""
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.kv_format import KVRowsView, decode_entries, encode_entries
    from sglang_v4.mem_cache.kv_spec import KVKind, build_kv_layout

    mc = ModelConfig.from_dict(get_preset("tiny" if INTERP else "flash-8l-32e"))
    lay = build_kv_layout(mc, "fp8_e4m3", False, 256)
    dtype = torch.float32 if INTERP else torch.bfloat16
    case = make_case(T, H, mc.head_dim, n_comp, mode, dtype, torch.Generator().manual_seed(seed))
    if extra_entries is not None:
        rows, w0 = extra_entries
        case["entries"][rows, :3] = torch.arange(w0, w0 + 3)
    views = {}
    for name, src in (("swa", case["swa"]), ("comp", case["comp"])):
        spec = lay.kinds[KVKind.SWA if name == "swa" else (KVKind.HCA if mode == "hca" else KVKind.CSA_MAIN)]
        units = -(-src.shape[0] // spec.rows_per_unit)
        st = spec.allocate(units * spec.pages_per_unit, DEVICE)[0]
        view = KVRowsView(st, spec.entry, out_dtype=dtype)
        n = min(src.shape[0], len(view))
        view[torch.arange(n, device=DEVICE)] = src[:n].float().to(DEVICE)
        views[name] = view
        case[name + "64"] = decode_entries(encode_entries(src[:n].float(), spec.entry), spec.entry).double()
    return case, views, oracle(case, case["swa64"], case["comp64"])


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE is None, reason="needs CUDA and triton")
def test_decoded_csa_fp8_pool() -> None:
    """CSA over fp8 pools with two runs decoded once to bf16 (one per request; request 1's page
    table has a missing page, whose selected entries are no keys) and three paged token ranges
    around them: every token against the float64 oracle over its window + selected entries."""
    from sgl_kernel_v4.triton.attention_prefix import sparse_attention_decoded_csa

    T, H, n_comp = (12, 8, 64) if INTERP else (300, 64, 512)
    half = T // 2
    P, e = n_comp // 64 + 2, 64  # make_case's page-table width and entries per page
    # request 1 (page-table row 0, whose last page is missing) also selects entries on that page
    case, views, ref = _fp8_case("csa", T, H, n_comp, 13, extra_entries=(slice(half + 1, T - 1), (P - 1) * e))
    segs = [PrefixSegment(1, half, 0, n_comp), PrefixSegment(half + 1, T - 1, 1, P * e)]
    d = {k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in case.items()}
    out = sparse_attention_decoded_csa(
        d["q"], views["swa"], d["swa_pages"], d["pos"], W, d["sinks"], case["scale"], views["comp"],
        d["entries"], d["req_to_page"], d["req_rows"], d["token_req"], case["e"], segs,
    )  # fmt: skip
    tol = 3e-3 if INTERP else 1.5e-2
    for rows in (slice(0, 1), slice(1, half), slice(half, half + 1), slice(half + 1, T - 1)):
        assert rel_err(out[rows], ref[rows]) < tol, rows
    assert torch.all(out[-1] == 0)  # the dead row
