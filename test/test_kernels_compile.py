"""The FP8 / FP4 Triton kernels compile for Hopper (sm_90) without a GPU.

``TRITON_INTERPRET=1`` runs kernels as numpy and skips the compiler, so it misses what only the
compiler rejects (a kernel reading a non-constexpr global, a tile that does not fit shared memory,
an unsupported fp8 dot layout). ``triton.compile`` with an explicit ``GPUTarget`` runs the whole
pipeline (TTIR -> TTGIR -> LLVM -> PTX -> cubin) on the CPU, for the configs the wrappers pick at
decode and at prefill sizes.
"""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
]

_FP8_LINEAR = dict(
    x_ptr="*bf16", w_ptr="*fp8e4nv", s_ptr="*fp32", y_ptr="*bf16", M="i32", N="i32", K="i32",
    stride_xm="i32", stride_xg="i32", stride_wn="i32", stride_sn="i32", stride_ym="i32",
    SPLIT_K="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", ATOMIC="constexpr",
)  # fmt: skip
_W8A8 = dict(
    q_ptr="*fp8e4nv", qs_ptr="*fp32", w_ptr="*fp8e4nv", s_ptr="*fp32", y_ptr="*bf16", M="i32", N="i32",
    K="i32", G="i32", stride_qm="i32", stride_qsm="i32", stride_wn="i32", stride_sn="i32", stride_ym="i32",
    BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr",
)  # fmt: skip
_ACT = dict(
    x_ptr="*bf16", q_ptr="*fp8e4nv", s_ptr="*fp32", M="i32", K="i32", stride_xm="i32", stride_qm="i32",
    stride_sm="i32", POW2="constexpr", BLOCK_M="constexpr", GROUP="constexpr",
)  # fmt: skip
_GATE_UP = dict(
    x_ptr="*bf16", stride_xt="i32", w_ptr="*u8", s_ptr="*u8", stride_we="i64", stride_wn="i32",
    stride_se="i32", stride_sn="i32", h_ptr="*bf16", sorted_ptr="*i32", bexp_ptr="*i32", n_pairs="i32",
    N_INTER="i32", D="i32", limit="fp32", TOPK="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr",
    BLOCK_K="constexpr",
)  # fmt: skip
_DOWN = dict(
    h_ptr="*bf16", w_ptr="*u8", s_ptr="*u8", stride_we="i64", stride_wn="i32", stride_se="i32",
    stride_sn="i32", y_ptr="*fp32", wt_ptr="*fp32", sorted_ptr="*i32", bexp_ptr="*i32", n_pairs="i32",
    N_INTER="i32", D="i32", TOPK="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr",
)  # fmt: skip


def _cases() -> list[tuple[str, str, dict, dict, dict]]:
    """(module, kernel, signature, constexprs, options) for the configs the wrappers choose."""
    from sgl_kernel_v4.triton.fp8_gemm import _w8a8_config, _w8a16_config
    from sgl_kernel_v4.triton.moe_fp4 import _config as moe_config

    out = [
        ("fp8_gemm", "_act_quant_kernel", _ACT, {"POW2": True, "BLOCK_M": 16, "GROUP": 128}, {"num_warps": 4})
    ]
    for M, N, K in ((1, 1024, 4096), (1, 32768, 1024), (64, 4096, 8192), (8192, 4096, 8192)):
        cfg = _w8a16_config(M, N, 1, K, 132)
        opts = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
        cfg["ATOMIC"] = cfg["SPLIT_K"] > 1
        sig = dict(_FP8_LINEAR, y_ptr="*fp32") if cfg["ATOMIC"] else _FP8_LINEAR
        out.append(("fp8_gemm", "_w8a16_kernel", sig, cfg, opts))
    for M in (128, 8192):
        cfg = _w8a8_config(M, 4096)
        opts = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
        out.append(("fp8_gemm", "_w8a8_kernel", _W8A8, cfg, opts))
    for n_pairs, E in ((6, 32), (6 * 64, 32), (6 * 8192, 160)):
        cfg = moe_config(n_pairs, E, 2)
        opts = {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}
        cfg["TOPK"] = 6
        out.append(("moe_fp4", "_gate_up_fp4_kernel", _GATE_UP, cfg, opts))
        out.append(("moe_fp4", "_down_fp4_kernel", _DOWN, cfg, opts))
    return out


def test_quantized_kernels_compile_for_sm90() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", 90, 32)
    for module, name, sig, consts, opts in _cases():
        mod = importlib.import_module(f"sgl_kernel_v4.triton.{module}")
        kernel = triton.compile(
            ASTSource(fn=getattr(mod, name), signature=sig, constexprs=consts), target=target, options=opts
        )
        assert "cubin" in kernel.asm, (name, consts)
        assert kernel.metadata.shared <= 227 * 1024, (
            name,
            consts,
            kernel.metadata.shared,
        )  # H100/H200 per block
