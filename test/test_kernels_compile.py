"""The FP8 / FP4 Triton kernels compile for Hopper (sm_90) without a GPU, within its limits.

``TRITON_INTERPRET=1`` runs kernels as numpy and skips the compiler, so it misses what only the
compiler rejects or the GPU refuses at launch: a tile whose pipeline buffers exceed the 227 KiB of
shared memory a block may use (the H200 refused the weight-only kernel's 128-row fp32 tiles at
288-320 KiB with 4 stages), a kernel reading a non-constexpr global, an unsupported fp8 dot layout,
inline PTX that does not assemble. ``triton.compile`` with an explicit ``GPUTarget`` runs the whole
pipeline (TTIR -> TTGIR -> LLVM -> PTX -> cubin) on the CPU for the configs the wrappers pick, for
bf16 and fp32 activations; the bf16 (serving) kernels must also not spill registers to local
memory (``cuobjdump -res-usage``, shipped with Triton, where present).

``test_pipeline_buffers_fit_shared_memory`` (fast, no compiler) checks the same limit from the
configs' own arithmetic over many shapes.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import tempfile

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

SMEM_LIMIT = 227 * 1024  # H100 / H200, per block

_W8A16 = dict(
    x_ptr="*bf16", w_ptr="*fp8e4nv", s_ptr="*fp32", y_ptr="*bf16", part_ptr="*fp32", cnt_ptr="*i32", M="i32",
    N="i32", K="i32", stride_xm="i32", stride_xg="i32", stride_wn="i32", stride_sn="i32", stride_ym="i32",
    stride_part="i32", SPLIT_K="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr",
    SUB_K="constexpr", USE_ASM="constexpr", QUANT_A="constexpr", F16="constexpr", WORDS="constexpr",
    IEEE="constexpr",
)  # fmt: skip
_W8A8 = dict(
    q_ptr="*fp8e4nv", qs_ptr="*fp32", w_ptr="*fp8e4nv", s_ptr="*fp32", y_ptr="*bf16", M="i32", N="i32",
    K="i32", G="i32", stride_qm="i32", stride_qsm="i32", stride_wn="i32", stride_sn="i32", stride_ym="i32",
    BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", GROUP_M="constexpr", TILE_SCALE="constexpr",
)  # fmt: skip
_ACT = dict(
    x_ptr="*bf16", q_ptr="*u8", s_ptr="*fp32", M="i32", K="i32", stride_xm="i32", stride_qm="i32",
    stride_sm="i32", POW2="constexpr", BLOCK_M="constexpr", GROUP="constexpr",
)  # fmt: skip
_GATE_UP = dict(
    x_ptr="*bf16", stride_xt="i32", w_ptr="*u8", s_ptr="*u8", stride_we="i64", stride_wn="i32",
    stride_se="i32", stride_sn="i32", h_ptr="*bf16", ids_ptr="*i64", sorted_ptr="*i32", bexp_ptr="*i32",
    n_pairs="i32", E="i32", N_INTER="i32", D="i32", limit="fp32", TOPK="constexpr", BLOCK_M="constexpr",
    BLOCK_N="constexpr", BLOCK_K="constexpr", PAIR_MODE="constexpr", EVEN_K="constexpr", USE_ASM="constexpr",
    GU_FUSED="constexpr", FP8_MMA="constexpr",
)  # fmt: skip
_DOWN = dict(
    h_ptr="*bf16", w_ptr="*u8", s_ptr="*u8", stride_we="i64", stride_wn="i32", stride_se="i32",
    stride_sn="i32", y_ptr="*fp32", wt_ptr="*fp32", sorted_ptr="*i32", bexp_ptr="*i32", n_pairs="i32",
    N_INTER="i32", D="i32", TOPK="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr",
    EVEN_K="constexpr", USE_ASM="constexpr", FP8_MMA="constexpr",
)  # fmt: skip
_DOWN_TOKEN = dict(
    h_ptr="*bf16", w_ptr="*u8", s_ptr="*u8", stride_we="i64", stride_wn="i32", stride_se="i32",
    stride_sn="i32", y_ptr="*bf16", stride_yt="i32", ids_ptr="*i64", wt_ptr="*fp32", E="i32", N_INTER="i32",
    D="i32", TOPK="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr",
    EVEN_K="constexpr", USE_ASM="constexpr", FP8_MMA="constexpr",
)  # fmt: skip
_DOWN_SPLIT = dict(
    h_ptr="*bf16", w_ptr="*u8", s_ptr="*u8", stride_we="i64", stride_wn="i32", stride_se="i32",
    stride_sn="i32", part_ptr="*fp32", ids_ptr="*i64", wt_ptr="*fp32", E="i32", N_INTER="i32", D="i32",
    SPLIT="constexpr", BLOCK_M="constexpr", BLOCK_N="constexpr", BLOCK_K="constexpr", EVEN_K="constexpr",
    USE_ASM="constexpr", FP8_MMA="constexpr",
)  # fmt: skip
# indexer extend scoring (keys-major), bf16 queries; keys: bf16 (codec 0) or the fp4 pool (codec 3, uint8)
_SCORE_EXTEND = dict(
    q_ptr="*bf16", stride_qt="i32", stride_qh="i32", w_ptr="*fp32", stride_wt="i32", kv_ptr="*bf16", kv_rpp="i32",
    kv_ps="i32", kv_rs="i32", vis_ptr="*i64", r2p_ptr="*i32", stride_r2p="i32", req_rows_ptr="*i64",
    token_req_ptr="*i64", E="i32", keys_ptr="*i32", stride_k="i32", scores_ptr="*i32", hist_ptr="*i32",
    cnt_ptr="*i32", K="i32", t_base="i32", G="i32", HI="i32", scale="fp32", nsc="i32", DI="constexpr",
    CODEC="constexpr", BLOCK_T="constexpr", BLOCK_H="constexpr", BLOCK_C="constexpr", WRITE_SCORES="constexpr",
    SHORT="constexpr", HB="constexpr", FORM="constexpr", FP4_ROWS="constexpr", IEEE="constexpr",
)  # fmt: skip
# the opt-in extend scoring forms (indexer_score_fold): the same, plus the ReLU-and-round PTX flag
_SCORE_FOLD = dict(_SCORE_EXTEND, RELU_ASM="constexpr")
# the MoE pair layout (moe._align): one program up to 4,096 pairs, else the two chunked launches
_ALIGN_ONE = dict(
    ids_ptr="*i64", n="i32", E="i32", sorted_ptr="*i32", bexp_ptr="*i32", n_blocks="i32", bound="i32",
    BM="constexpr", BLOCK_P="constexpr", BLOCK_E="constexpr", BLOCK_B="constexpr",
)  # fmt: skip
_ALIGN_COUNT = dict(
    ids_ptr="*i64", n="i32", E="i32", table_ptr="*i32", sorted_ptr="*i32", bound="i32", n_chunks="i32",
    BLOCK_P="constexpr", BLOCK_E="constexpr",
)  # fmt: skip
_ALIGN_SCATTER = dict(
    ids_ptr="*i64", n="i32", E="i32", BM="i32", table_ptr="*i32", sorted_ptr="*i32", bexp_ptr="*i32",
    n_blocks="i32", n_chunks="i32", BLOCK_P="constexpr", BLOCK_E="constexpr", BLOCK_C="constexpr",
    BLOCK_B="constexpr",
)  # fmt: skip
_SUM_ROWS = dict(
    part_ptr="*fp32", y_ptr="*bf16", stride_yt="i32", D="i32", R="constexpr", R_POW2="constexpr", BLOCK="constexpr"
)  # fmt: skip


def _as(sig: dict, dtype: str) -> dict:
    """The signature with bf16 activation / output pointers switched to ``dtype``."""
    return {k: (f"*{dtype}" if v == "*bf16" else v) for k, v in sig.items()}


def _attrs(sig: dict) -> dict:
    """``tt.divisibility`` 16 for what Triton specializes so at launch for the real shapes: the
    pointers (allocations are 16-byte aligned) and the strides / feature sizes (multiples of 16);
    token counts and expert counts stay unspecialized."""
    names = list(sig)
    div = [
        i
        for i, (n, t) in enumerate(sig.items())
        if t != "constexpr"
        and (t.startswith("*") or n.startswith("stride") or n in ("N", "K", "D", "N_INTER"))
    ]
    return {(i,): [["tt.divisibility", 16]] for i in div if names[i] != "stride_xg"}


def _split(cfg: dict) -> tuple[dict, dict]:
    cfg = dict(cfg)
    return cfg, {"num_warps": cfg.pop("num_warps"), "num_stages": cfg.pop("num_stages")}


def _cases() -> list[tuple[str, str, dict, dict, dict, bool]]:
    """(module, kernel, signature, constexprs, options, serving) for the configs the wrappers choose;
    ``serving``: a bf16 kernel of the runtime (must not spill)."""
    from sgl_kernel_v4.triton.fp8_gemm import _w8a8_config, _w8a16_config
    from sgl_kernel_v4.triton.moe_fp4 import _config as moe_config

    out = []
    for dt in ("bf16", "fp32"):
        c = {"POW2": True, "BLOCK_M": 16, "GROUP": 128}
        out.append(("fp8_act_quant", "_act_quant_kernel", _as(_ACT, dt), c, {"num_warps": 4}, dt == "bf16"))
    w8a16 = [
        (1, 1024, 4096, "bf16"),
        (16, 32768, 1024, "bf16"),
        (2048, 2048, 4096, "bf16"),
        (300, 4096, 8192, "fp32"),
    ]
    for M, N, K, dt in w8a16:
        cfg, opts = _split(_w8a16_config(M, N, 1, K, 132, 2 if dt == "bf16" else 4))
        cfg.update(SUB_K=min(cfg["BLOCK_K"], 128), USE_ASM=dt == "bf16", QUANT_A=False)
        out.append(("fp8_gemm", "_w8a16_kernel", _as(_W8A16, dt), cfg, opts, dt == "bf16" and M <= 64))
    # w8a8_fused (QUANT_A: activations quantized in the kernel, e4m3 x e4m3 dot) at decode, bf16
    for M, N, K in ((1, 1536, 4096), (16, 32768, 1024), (33, 1024, 4096), (64, 4096, 8192)):
        cfg, opts = _split(_w8a16_config(M, N, 1, K, 132, 2))
        cfg.update(SUB_K=128, USE_ASM=False, QUANT_A=True)
        out.append(("fp8_gemm", "_w8a16_kernel", _W8A16, cfg, opts, True))
        # w8a16_f16 / w8a16_f16asm (F16: fp16 product, Triton's or the PTX e4m3 -> fp16 conversion)
        for f16 in (1, 2):
            out.append(("fp8_gemm", "_w8a16_kernel", _W8A16, dict(cfg, QUANT_A=False, F16=f16), opts, True))
    # the tile families of benchmark/fp8_linear_sweep.py (32-row tiles on 2 warps, 256-deep steps)
    for bm, bn, bk, warps, stages in (
        (16, 32, 128, 2, 4),
        (16, 64, 256, 4, 3),
        (16, 128, 128, 4, 4),
        (64, 128, 128, 8, 3),
    ):
        cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 2, "SUB_K": 128, "USE_ASM": True,
               "QUANT_A": False}  # fmt: skip
        out.append(
            ("fp8_gemm", "_w8a16_kernel", _W8A16, cfg, {"num_warps": warps, "num_stages": stages}, True)
        )
    for M in (128, 8192):
        cfg, opts = _split(_w8a8_config(M, 4096))
        cfg["TILE_SCALE"] = True
        out.append(("fp8_gemm", "_w8a8_kernel", _W8A8, cfg, opts, True))
    for n_pairs, E, dt in (
        (6, 32, "bf16"),
        (6 * 16, 32, "bf16"),
        (6 * 8192, 160, "bf16"),
        (6 * 64, 32, "fp32"),
    ):
        out += _moe_fp4_launches(moe_config(n_pairs, E, 6, 2 if dt == "bf16" else 4), dt, dt == "bf16")
    return out


def _moe_fp4_launches(
    cfg: dict, dt: str, use_asm: bool, k: int = 6
) -> list[tuple[str, str, dict, dict, dict, bool]]:
    """The launches ``moe_fp4.fused_moe_fp4`` makes for the tile config ``cfg`` (as ``_config`` or a
    ``DECODE_VARIANTS`` entry returns it; ``PAIR`` absent = pair mode) with ``dt`` activations and
    ``k`` experts per token, at shapes every K step divides (``EVEN_K``; ``FP4_WORDS``: the word
    decode, ``USE_ASM`` 3): the gate/up kernel
    (``GU_FUSED``), then the down kernel of the layout: K-split partials + their sum
    (``DOWN_SPLIT`` >= 1), per-token (pair mode), or per-expert block (expert mode), with the down
    tile / stages / warps keys (``DOWN_*``) applied as the wrapper applies them. bf16 launches
    are ``serving`` (must not spill)."""
    from sgl_kernel_v4.triton.moe_fp4 import _SUM_BLOCK

    cfg = dict(cfg)
    bm, bn, bk = cfg.pop("BLOCK_M"), cfg.pop("BLOCK_N"), cfg.pop("BLOCK_K")
    pair, fused, split = bool(cfg.pop("PAIR", 1)), bool(cfg.pop("GU_FUSED", 0)), int(cfg.pop("DOWN_SPLIT", 0))
    if cfg.pop("FP4_WORDS", 0) and use_asm:  # the word decode with its PTX scale multiply (moe_fp4._dot_fp4)
        use_asm = 3
    dbn, dbk = cfg.pop("DOWN_BLOCK_N", bn), cfg.pop("DOWN_BLOCK_K", bk)
    opts = {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]}
    down_opts = {"num_warps": cfg.get("DOWN_WARPS", cfg["num_warps"]),
                 "num_stages": cfg.get("DOWN_STAGES", cfg["num_stages"])}  # fmt: skip
    serving = dt == "bf16"
    common = {"BLOCK_M": bm, "EVEN_K": True, "USE_ASM": use_asm}
    gu = dict(common, BLOCK_N=bn, BLOCK_K=bk, TOPK=k, PAIR_MODE=pair, GU_FUSED=fused)
    down = dict(common, BLOCK_N=dbn, BLOCK_K=dbk)
    out = [("moe_fp4", "_gate_up_fp4_kernel", _as(_GATE_UP, dt), gu, opts, serving)]
    if pair and split:
        out.append(
            (
                "moe_fp4",
                "_down_fp4_split_kernel",
                _as(_DOWN_SPLIT, dt),
                dict(down, SPLIT=split),
                down_opts,
                serving,
            )
        )
        r = k * split
        sums = {"R": r, "R_POW2": 1 << (r - 1).bit_length(), "BLOCK": _SUM_BLOCK}
        out.append(("moe_fp4", "_sum_rows_kernel", _as(_SUM_ROWS, dt), sums, {"num_warps": 4}, serving))
    elif pair:
        out.append(
            (
                "moe_fp4",
                "_down_fp4_token_kernel",
                _as(_DOWN_TOKEN, dt),
                dict(down, TOPK=k),
                down_opts,
                serving,
            )
        )
    else:
        out.append(("moe_fp4", "_down_fp4_kernel", _as(_DOWN, dt), dict(down, TOPK=k), down_opts, serving))
    return out


def _local_memory_bytes(cubin: bytes) -> int | None:
    """Stack frame (register spills) of the kernel in ``cubin`` from ``cuobjdump -res-usage``, or
    None when the tool is not shipped with this Triton."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.access(tool, os.X_OK):
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    m = re.search(r"STACK:(\d+)", text)
    return int(m.group(1)) if m else None


def _registers(cubin: bytes) -> int | None:
    """Registers per thread of the kernel in ``cubin`` (``cuobjdump -res-usage``), or None when the
    tool is not shipped with this Triton."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.access(tool, os.X_OK):
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    m = re.search(r"REG:(\d+)", text)
    return int(m.group(1)) if m else None


def _align_cases(big_sort: bool = False) -> list[tuple[str, str, dict, dict, dict, bool]]:
    """The MoE pair-layout kernels as ``moe._align`` launches them for E = 160 and 384 (``BLOCK_E``
    256 / 512): the one-program kernel at the decode sort, the chunked count / scatter kernels at
    the serving chunk (``_CHUNK_P``), with ``_align_chunks``' tile rule; with ``big_sort`` only the
    one-program kernel's 4,096-pair sort for E = 384 (~10 s to compile)."""
    from sgl_kernel_v4.triton._utils import next_power_of_2
    from sgl_kernel_v4.triton.moe import _CHUNK_P

    out = []
    for E in (160, 384):
        block_e = next_power_of_2(E + 1)
        for block_p, bm in ((256, 16), (4096, 128))[: 2 if E == 384 else 1]:
            consts = {"BM": bm, "BLOCK_P": block_p, "BLOCK_E": block_e, "BLOCK_B": 64}
            if big_sort == (block_p == 4096):
                out.append(("moe", "_align_kernel", _ALIGN_ONE, consts, {"num_warps": 8}, True))
        if big_sort:
            continue
        consts = {"BLOCK_P": _CHUNK_P, "BLOCK_E": block_e}
        out.append(("moe", "_align_count_kernel", _ALIGN_COUNT, consts, {"num_warps": 4}, True))
        tile = max(1, 8192 // block_e)
        consts = {"BLOCK_P": _CHUNK_P, "BLOCK_E": block_e, "BLOCK_C": tile, "BLOCK_B": tile}
        out.append(("moe", "_align_scatter_kernel", _ALIGN_SCATTER, consts, {"num_warps": 8}, True))
    return out


def test_moe_align_kernels_compile_for_sm90() -> None:
    """The MoE pair-layout kernels (sort, histogram, gather) compile for sm_90 at the serving
    classes and spill no registers (fast: small kernels, a few seconds each)."""
    _compile_cases(_align_cases())


@pytest.mark.slow
def test_moe_align_big_sort_compiles_for_sm90() -> None:
    """The one-program sort at 4,096 pairs (E = 384) compiles for sm_90 without spilling (the
    same kernel as the fast tier's 256-pair sort, at its largest tile)."""
    _compile_cases(_align_cases(big_sort=True))


@pytest.mark.slow
def test_quantized_kernels_compile_for_sm90() -> None:
    _compile_cases(_cases())


def _w8a16_words_cases() -> list[tuple[str, str, dict, dict, dict, bool]]:
    """The weight-only kernel with the e4m3 word decode (``WORDS`` 1 and 2, bf16: serving) at the
    decode rule's tiles of the V4-Flash shapes at 1 and 16 tokens and at the tile families of
    ``benchmark/fp8_linear_sweep.py`` (256-deep steps, 32- and 128-row tiles)."""
    from sgl_kernel_v4.triton.fp8_gemm import _w8a16_config

    out = []
    tiles = {}
    for M, N, K in ((1, 1536, 4096), (1, 32768, 1024), (16, 4096, 8192)):
        cfg, opts = _split(_w8a16_config(M, N, 1, K, 132, 2))
        tiles[repr((cfg, opts))] = (cfg, opts)
    for bm, bn, bk, warps, stages in ((16, 32, 128, 2, 4), (16, 64, 256, 4, 3), (16, 128, 128, 4, 4)):
        cfg = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 2}
        tiles[repr((cfg, warps))] = (cfg, {"num_warps": warps, "num_stages": stages})
    for cfg, opts in tiles.values():
        for words in (1, 2):
            consts = dict(cfg, SUB_K=128, USE_ASM=False, QUANT_A=False, WORDS=words)
            out.append(("fp8_gemm", "_w8a16_kernel", _W8A16, consts, opts, True))
    return out


def _sass(cubin: bytes) -> str | None:
    """``cuobjdump -sass`` of ``cubin``, or None when the tool is not shipped with this Triton."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.access(tool, os.X_OK):
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
def test_w8a16_words_compile_for_sm90() -> None:
    """The word-decode settings compile for sm_90, fit shared memory, spill no registers, and read
    the weights as they were made to: 16-byte shared-memory loads, none of the default decode's
    2-byte ones (where ``cuobjdump`` ships)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    _compile_cases(_w8a16_words_cases())
    from sgl_kernel_v4.triton import fp8_gemm

    for _, name, sig, consts, opts, _ in _w8a16_words_cases()[:2]:
        src = ASTSource(fn=getattr(fp8_gemm, name), signature=sig, constexprs=consts, attrs=_attrs(sig))
        k = triton.compile(src, target=GPUTarget("cuda", 90, 64), options=opts)
        sass = _sass(k.asm["cubin"])
        if sass is not None:
            assert "LDS.128" in sass and "LDS.U16" not in sass, consts


def _decode_variant_cases() -> list[tuple[str, str, dict, dict, dict, bool]]:
    """The bf16 kernels of every named pair-mode configuration (``moe_fp4.DECODE_VARIANTS``), at the
    V4-Flash expert shapes (D = 4096, I = 2048 are multiples of every K step: EVEN_K)."""
    from sgl_kernel_v4.triton.moe_fp4 import DECODE_VARIANTS

    out, seen = [], set()
    for v in DECODE_VARIANTS.values():
        cases = _moe_fp4_launches(v, "bf16", True)
        for c in cases:
            key = repr(c)
            if key not in seen:
                seen.add(key)
                out.append(c)
    return out


@pytest.mark.slow
def test_fp4_decode_variants_compile_for_sm90() -> None:
    """Every named decode configuration compiles for sm_90 in its bf16 serving form, fits shared
    memory and spills no registers (any of them can be made the default in one line)."""
    _compile_cases(_decode_variant_cases())


def _fp8_product_cases() -> list[tuple[str, str, dict, dict, dict, bool]]:
    """The FP4 MoE kernels with the fp8 product (``moe_fp4`` ``FP8_MMA``): the pair-mode default
    (fused gate/up, K-split down, partial sum) with the ``shift``, ``table`` and ``fold`` decodes and
    the GPU's e4m3 conversion; ``baseline`` (split gate/up, per-token down) with ``shift``; expert mode with ``shift`` and ``fold``."""
    from sgl_kernel_v4.triton.moe_fp4 import DECODE_VARIANTS

    out = []
    common = {"BLOCK_M": 16, "EVEN_K": True, "USE_ASM": True}
    dflt = DECODE_VARIANTS["fused_dsplit1"]
    opts = {"num_warps": dflt["num_warps"], "num_stages": dflt["num_stages"]}
    down_opts = {"num_warps": dflt["num_warps"], "num_stages": dflt["DOWN_STAGES"]}
    for code in (1, 3, 5, 9):  # shift, table, fold, shift + the GPU's conversion
        gu = dict(common, BLOCK_N=64, BLOCK_K=256, TOPK=6, PAIR_MODE=True, GU_FUSED=True, FP8_MMA=code)
        out.append(("moe_fp4", "_gate_up_fp4_kernel", _GATE_UP, gu, opts, True))
        down = dict(common, BLOCK_N=64, BLOCK_K=256, SPLIT=1, FP8_MMA=code)
        out.append(("moe_fp4", "_down_fp4_split_kernel", _DOWN_SPLIT, down, down_opts, True))
    gu = dict(common, BLOCK_N=64, BLOCK_K=256, TOPK=6, PAIR_MODE=True, GU_FUSED=False, FP8_MMA=1)
    out.append(("moe_fp4", "_gate_up_fp4_kernel", _GATE_UP, gu, opts, True))
    down = dict(common, BLOCK_N=64, BLOCK_K=256, TOPK=6, FP8_MMA=1)
    out.append(("moe_fp4", "_down_fp4_token_kernel", _DOWN_TOKEN, down, down_opts, True))
    expert = {"num_warps": 4, "num_stages": 4}
    for code in (1, 5):  # shift, fold
        gu = dict(common, BLOCK_N=64, BLOCK_K=128, TOPK=6, PAIR_MODE=False, GU_FUSED=False, FP8_MMA=code)
        out.append(("moe_fp4", "_gate_up_fp4_kernel", _GATE_UP, gu, expert, True))
        down = dict(common, BLOCK_N=64, BLOCK_K=128, TOPK=6, FP8_MMA=code)
        out.append(("moe_fp4", "_down_fp4_kernel", _DOWN, down, expert, True))
    return out


@pytest.mark.slow
def test_fp4_fp8_product_compiles_for_sm90() -> None:
    """The fp8 product's kernels compile for sm_90 (the e4m3 decode's packed PTX assembles, the
    fp8 x fp8 dots lower), fit shared memory and spill no registers."""
    _compile_cases(_fp8_product_cases())


def _extend_score_cases() -> list[tuple[str, str, dict, dict, dict, bool]]:
    """The keys-major extend scoring kernel at the settings ``benchmark/indexer_extend_sweep.py``
    times (``indexer_score_extend.SWEEP_SETTINGS``; 64 heads x 128, bf16 queries), over bf16 and fp4
    keys, top-k path (``SHORT``, no scores). Not ``serving``: their spills are reported, not refused
    (a candidate setting that spills is one the sweep measures as slow)."""
    from sgl_kernel_v4.triton.indexer_score_extend import SWEEP_SETTINGS
    from sgl_kernel_v4.triton.indexer_score_fold import FOLD_FORMS
    from sgl_kernel_v4.triton.indexer_select import HB

    out = []
    for es in SWEEP_SETTINGS:
        fold = es.form in FOLD_FORMS
        for codec, kv in ((0, "*bf16"), (3, "*u8")):
            consts = dict(DI=128, CODEC=codec, BLOCK_T=es.block_t, BLOCK_H=64, BLOCK_C=es.block_c,
                          WRITE_SCORES=False, SHORT=True, HB=HB, FORM=es.form_code, FP4_ROWS=codec == 3)  # fmt: skip
            opts = {"num_warps": es.num_warps, "num_stages": es.num_stages}
            out.append(
                (
                    "indexer_score_fold" if fold else "indexer_score_extend",
                    "_score_fold_kernel" if fold else "_score_extend_kernel",
                    dict(_SCORE_FOLD if fold else _SCORE_EXTEND, kv_ptr=kv),
                    dict(consts, RELU_ASM=True) if fold else consts,
                    opts,
                    False,
                )
            )
    return out


@pytest.mark.slow
def test_extend_score_settings_compile_for_sm90() -> None:
    """Every extend scoring setting of the sweep compiles for sm_90 and fits shared memory; prints
    each one's register spill (``cuobjdump -res-usage`` stack bytes, where the tool ships)."""
    spills = _compile_cases(_extend_score_cases())
    for (_, _, _sig, consts, opts, _), spill in zip(_extend_score_cases(), spills):
        print(f"FORM {consts['FORM']} CODEC {consts['CODEC']} BLOCK_T {consts['BLOCK_T']} BLOCK_C "
              f"{consts['BLOCK_C']} {opts}: spill {spill} B")  # fmt: skip


def _compile_extend_launch(es, codec: int):
    """The keys-major extend scoring kernel of setting ``es`` compiled for sm_90 as
    ``indexer.indexer_topk`` launches it over a 2,048-token chunk (64 heads x 128, bf16 queries, the
    top-k path): bf16 keys (``codec`` 0) are a ``[N, 128]`` tensor, so ``rows_per_page`` is 1 (Triton
    specialises an integer argument equal to 1 as a constant) and the page stride 128; fp4 keys
    (``codec`` 3) are the pool's pages of 64 rows of 68 bytes. Integer arguments that are multiples
    of 16 at that launch get ``tt.divisibility`` 16 (``_attrs`` gives it to strides and pointers
    only). Returns ``(compiled kernel, spilled bytes or None)``."""
    import triton
    from sgl_kernel_v4.triton.indexer_score_fold import FOLD_FORMS
    from sgl_kernel_v4.triton.indexer_select import HB
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fold = es.form in FOLD_FORMS
    module, name = (
        ("indexer_score_fold", "_score_fold_kernel")
        if fold
        else ("indexer_score_extend", "_score_extend_kernel")
    )
    fn = getattr(importlib.import_module(f"sgl_kernel_v4.triton.{module}"), name)
    sig = dict(_SCORE_FOLD if fold else _SCORE_EXTEND, kv_ptr="*bf16" if codec == 0 else "*u8")
    consts = dict(DI=128, CODEC=codec, BLOCK_T=es.block_t, BLOCK_H=64, BLOCK_C=es.block_c, WRITE_SCORES=False,
                  SHORT=True, HB=HB, FORM=es.form_code, FP4_ROWS=False, IEEE=False)  # fmt: skip
    if fold:
        consts["RELU_ASM"] = True  # the GPU launch's (indexer_score_fold.relu_asm_ok)
    attrs = _attrs(sig)
    names = list(sig)
    for n in ("kv_ps", "HI", "stride_k") + (("kv_rs",) if codec == 0 else ("kv_rpp",)):
        attrs[(names.index(n),)] = [["tt.divisibility", 16]]
    if codec == 0:
        sig["kv_rpp"], consts["kv_rpp"] = "constexpr", 1
    kernel = triton.compile(
        ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": es.num_warps, "num_stages": es.num_stages},
    )
    return kernel, _local_memory_bytes(kernel.asm["cubin"])


#: opt-in extend scoring settings (``indexer_score_fold``) that compile without spills for sm_90 at
#: the launch's specialisation with Triton 3.6 (the GPU image's), bf16 keys
_FOLD_NO_SPILL = (
    ("keys_wdot", 4, 128, 8, 2),
    ("keys_wdot", 2, 256, 8, 2),
    ("keys_fold", 2, 256, 8, 2),
    ("keys_wdot_pairs", 8, 128, 8, 1),
    ("keys_wdot_pairs", 4, 128, 8, 2),
)


@pytest.mark.slow
def test_extend_fold_forms_compile_without_spills() -> None:
    """The opt-in scoring forms' settings of ``_FOLD_NO_SPILL`` compile for sm_90 at the real launch's
    specialisation within shared memory and spill no registers (bf16 keys); prints the default's
    and the two-stage 8-token ``keys_wdot`` / ``keys_wdot_pairs`` spills beside them (376, 8 and
    32 B with Triton 3.6; the last two outside the key loop)."""
    import triton
    from sgl_kernel_v4.triton.indexer import EXTEND_SCORE
    from sgl_kernel_v4.triton.indexer_score_extend import ExtendScore

    for f, t, c, w, st in _FOLD_NO_SPILL:
        es = ExtendScore(form=f, block_t=t, block_c=c, num_warps=w, num_stages=st)
        kernel, spill = _compile_extend_launch(es, 0)
        assert kernel.metadata.shared <= SMEM_LIMIT, (es.label(), kernel.metadata.shared)
        if triton.__version__.startswith("3.6"):  # register allocation is the compiler version's
            assert spill in (None, 0), (es.label(), f"{spill} B spilled")
        print(f"{es.label()}: spill {spill} B, shared {kernel.metadata.shared} B")
    for es in (
        EXTEND_SCORE,
        ExtendScore(form="keys_wdot", block_t=8, block_c=128, num_warps=8, num_stages=2),
        ExtendScore(form="keys_wdot_pairs", block_t=8, block_c=128, num_warps=8, num_stages=2),
    ):
        kernel, spill = _compile_extend_launch(es, 0)
        assert kernel.metadata.shared <= SMEM_LIMIT, (es.label(), kernel.metadata.shared)
        print(f"{es.label()}: spill {spill} B, shared {kernel.metadata.shared} B")


def _mhc_mix_cases() -> list[tuple[str, str, dict, dict, dict, bool]]:
    """The mHC projection at the prefill tiles of ``benchmark/mhc_mix_sweep.py --variants`` with
    both products (tf32x3 on fp32 weights, bf16x3 on the three bf16 terms), bf16 streams
    (n 4: 24 logits padded to 32). Not ``serving``: spills are reported, not refused."""
    out = []
    for (block_t, warps), bf16x3 in (((128, 8), False), ((128, 8), True), ((64, 4), True), ((32, 4), True)):
        sig = dict(x_ptr="*bf16", stride_xt="i32", fn_ptr="*bf16" if bf16x3 else "*fp32", part_ptr="*fp32",
                   sq_ptr="*fp32", T="i32", K="i32", NM="i32", chunk="i32", BLOCK_T="constexpr",
                   BLOCK_K="constexpr", NM_PAD="constexpr", BF16X3="constexpr")  # fmt: skip
        consts = dict(BLOCK_T=block_t, BLOCK_K=128, NM_PAD=32, BF16X3=bf16x3)
        out.append(("mhc", "_hc_mix_kernel", sig, consts, {"num_warps": warps}, False))
    return out


@pytest.mark.slow
def test_mhc_mix_variants_compile_for_sm90() -> None:
    """The mHC projection's prefill variants compile for sm_90 and fit shared memory; prints spills."""
    for (_, _, _sig, consts, opts, _), spill in zip(_mhc_mix_cases(), _compile_cases(_mhc_mix_cases())):
        print(f"BLOCK_T {consts['BLOCK_T']} BF16X3 {consts['BF16X3']} {opts}: spill {spill} B")


def _attention_dv_cases() -> list[tuple[str, str, dict, dict, dict, bool]]:
    """The sparse attention's prefill tile (64 heads x 32 keys of 512-d bf16 entries, CSA: window +
    selected entries) with one and two value-column programs (``DV_SPLIT``), at the warps / stages
    ``benchmark/attention_extend_sweep.py`` times them with. Not ``serving``: spills reported."""
    i64 = "i64"
    sig = dict(q_ptr="*bf16", stride_qt="i32", stride_qh="i32", swa_ptr="*bf16", swa_rpp="i32", swa_ps="i32",
               swa_rs="i32", swa_pages_ptr="*i32", pos_ptr="*i64", W="i32", comp_ptr="*bf16", c_rpp="i32",
               c_ps="i32", c_rs="i32", ent_ptr="*i32", stride_et=i64, K_ENT=i64, vis_ptr="*i64", r2p_ptr="*i32",
               stride_r2p=i64, req_rows_ptr="*i64", token_req_ptr="*i64", E=i64, sink_ptr="*fp32",
               out_ptr="*bf16", stride_ot="i32", stride_oh="i32", part_acc_ptr="*fp32", part_ml_ptr="*fp32",
               lse_ptr="*fp32", H="i32", scale_log2="fp32", num_splits=i64, D="constexpr", NOPE="constexpr",
               CODEC="constexpr", BLOCK_D="constexpr", BLOCK_H="constexpr", BLOCK_N="constexpr", SPLIT="constexpr",
               COMP_MODE="constexpr", ALIGN="constexpr", DV_SPLIT="constexpr", IEEE="constexpr",
               STORE_LSE="constexpr", COMP_CODEC="constexpr", KEYS_ON_M="constexpr")  # fmt: skip
    out = []
    for dv, bn, warps, stages in ((1, 32, 8, 2), (2, 32, 8, 2), (2, 64, 8, 2), (2, 32, 4, 2), (2, 64, 4, 3)):
        consts = dict(D=512, NOPE=448, CODEC=0, BLOCK_D=512, BLOCK_H=64, BLOCK_N=bn, SPLIT=False, COMP_MODE=1,
                      ALIGN=2, DV_SPLIT=dv)  # fmt: skip
        out.append(
            (
                "attention_kernels",
                "_paged_attn_kernel",
                sig,
                consts,
                {"num_warps": warps, "num_stages": stages},
                False,
            )
        )
    return out


@pytest.mark.slow
def test_attention_dv_split_compiles_for_sm90() -> None:
    """The sparse attention's prefill tile with ``DV_SPLIT`` 1 and 2 compiles for sm_90 and fits
    shared memory; prints each variant's spills."""
    for (_, _, _sig, consts, opts, _), spill in zip(
        _attention_dv_cases(), _compile_cases(_attention_dv_cases())
    ):
        print(f"DV_SPLIT {consts['DV_SPLIT']} BLOCK_N {consts['BLOCK_N']} {opts}: spill {spill} B")


#: (block_h, block_n, num_warps, num_stages, keys_on_m) of the sweep's ``--qk-once`` settings and the
#: prefill default (first), compiled as ``attention_extend_sweep.py`` launches them
ATTENTION_QK_ONCE = (
    (64, 32, 8, 2, 0),
    (64, 32, 8, 1, 0),
    (64, 128, 8, 1, 1),
    (64, 128, 8, 1, 2),
    (64, 128, 8, 1, 4),
    (32, 128, 8, 1, 1),
    (32, 128, 8, 1, 2),
    (32, 128, 8, 1, 4),
)


def _attention_launch(block_h: int, block_n: int, warps: int, stages: int, keys_on_m: int) -> dict:
    """``_paged_attn_kernel`` compiled for sm_90 as Triton specialises the CSA launch of
    ``benchmark/attention_extend_sweep.py`` (bf16 pool of 512-d rows: ``rows_per_page`` 1, so a
    constant; the other pool and head integers multiples of 16; the index tables int64 but the page
    table, counts and strides int32 scalars, unspecialised; one split). Returns ``regs``,
    ``stack`` (spilled bytes; None without ``cuobjdump``), ``shared`` bytes, ``ttgir`` and
    ``hgmma``: the HGMMA shapes of the entry loop's SASS with their counts."""
    import collections

    import triton
    from sgl_kernel_v4.triton import attention_kernels
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = dict(_attention_dv_cases()[0][2])
    sig.update(swa_pages_ptr="*i64", ent_ptr="*i64", stride_et="i32", K_ENT="i32", stride_r2p="i32", E="i32",
               num_splits="i32", swa_rpp="constexpr", c_rpp="constexpr")  # fmt: skip
    names = list(sig)
    attrs = _attrs(sig)
    for n in ("swa_ps", "swa_rs", "W", "c_ps", "c_rs", "H"):
        attrs[(names.index(n),)] = [["tt.divisibility", 16]]
    fn = attention_kernels._paged_attn_kernel
    consts = {p.name: p.default for p in fn.params if p.is_constexpr and p.has_default}
    consts.update(swa_rpp=1, c_rpp=1, D=512, NOPE=448, CODEC=0, BLOCK_D=512, BLOCK_H=block_h, BLOCK_N=block_n,
                  SPLIT=False, COMP_MODE=1, ALIGN=2, KEYS_ON_M=keys_on_m)  # fmt: skip
    k = triton.compile(
        ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": warps, "num_stages": stages},
    )
    sass = _sass(k.asm["cubin"])
    res = dict(regs=_registers(k.asm["cubin"]), stack=_local_memory_bytes(k.asm["cubin"]),
               shared=k.metadata.shared, ttgir=k.asm["ttgir"], hgmma=None)  # fmt: skip
    if sass is not None:  # the last loop (a branch back to a lower address): the entry loop
        ins = re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)
        loops = [
            (int(m.group(1), 16), int(a, 16))
            for a, t in ins
            if (m := re.search(r"BRA\s+(?:`\()?[^0-9]*0x([0-9a-f]+)", t)) and int(m.group(1), 16) < int(a, 16)
        ]
        lo, hi = loops[-1]
        res["hgmma"] = dict(
            collections.Counter(
                re.search(r"HGMMA\.(\d+x\d+x\d+)", t).group(1)
                for a, t in ins
                if lo <= int(a, 16) <= hi and "HGMMA." in t
            )
        )
    return res


@pytest.mark.slow
def test_attention_keys_on_m_compiles_for_sm90() -> None:
    """The sparse attention's ``keys_on_m`` forms compile for sm_90 within shared memory and, per
    128-key tile, issue 32 + 32 ``m64nHk16`` HGMMAs per warpgroup (``H`` = heads: the logits of
    the warpgroup's own 64 keys, then its share of the value rows), where the 64-head default issues
    64 ``m64n16k16`` per 32 keys (the whole ``[64, 32]`` logit tile in each warpgroup: TTGIR
    ``warpsPerCTA [8, 1]`` over 64 rows) and 2 ``m64n256k16``. Prints the module docstring's
    "compile statistics" (registers, spilled bytes, shared memory, HGMMA shapes)."""
    for st in ATTENTION_QK_ONCE:
        r = _attention_launch(*st)
        print(f"h{st[0]} n{st[1]} w{st[2]} s{st[3]} keys_on_m {st[4]}: {r['regs']} regs, stack {r['stack']} B, "
              f"shared {r['shared']} B, HGMMA {r['hgmma']}")  # fmt: skip
        assert r["shared"] <= SMEM_LIMIT, (st, r["shared"])
        if st[4] == 0:
            assert "warpsPerCTA = [8, 1], instrShape = [16, 16, 16]" in r["ttgir"], st
            if r["hgmma"] is not None:
                assert r["hgmma"] == {"64x16x16": 64, "64x256x16": 2}, (st, r["hgmma"])
        else:
            assert f"-> tensor<{st[1]}x{st[0]}xf32" in r["ttgir"], st  # the logits: keys x heads
            if r["hgmma"] is not None:
                assert r["hgmma"] == {f"64x{st[0]}x16": 64}, (st, r["hgmma"])


def _compile_cases(cases: list[tuple[str, str, dict, dict, dict, bool]]) -> list[int | None]:
    """Compiles each case for sm_90 and checks it fits shared memory (and, ``serving``, spills no
    registers); returns each case's spilled bytes (None where ``cuobjdump`` is not shipped)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    target = GPUTarget("cuda", 90, 32)
    spills: list[int | None] = []
    for module, name, sig, consts, opts, serving in cases:
        mod = importlib.import_module(f"sgl_kernel_v4.triton.{module}")
        kernel = getattr(mod, name)
        # constexprs left out take their defaults (FP8_MMA = 0: the bf16 product; F16 = 0)
        consts = {**{p.name: p.default for p in kernel.params if p.is_constexpr and p.has_default}, **consts}
        kernel = triton.compile(
            ASTSource(fn=getattr(mod, name), signature=sig, constexprs=consts, attrs=_attrs(sig)),
            target=target,
            options=opts,
        )
        label = (name, sig.get("x_ptr", sig.get("h_ptr")), consts, opts)
        assert "cubin" in kernel.asm, label
        assert kernel.metadata.shared <= SMEM_LIMIT, (label, kernel.metadata.shared)
        spill = _local_memory_bytes(kernel.asm["cubin"])
        spills.append(spill)
        if serving:
            assert spill in (None, 0), (label, f"{spill} B of registers spilled to local memory")
    return spills


def test_compile_cases_match_kernel_signatures() -> None:
    """Every case of the slow compile tests names its kernel's parameters in order, with the
    constexpr ones marked so, and gives a value to each constexpr parameter and to nothing else
    (a constexpr with a default, such as ``FP8_MMA`` or ``F16``, may be left to it): a kernel that gains, loses or renames a parameter
    fails here in a second instead of minutes into the compile tests."""
    for module, name, sig, consts, _, _ in (
        _cases()
        + _w8a16_words_cases()
        + _decode_variant_cases()
        + _fp8_product_cases()
        + _extend_score_cases()
        + _align_cases()
        + _align_cases(big_sort=True)
        + _mhc_mix_cases()
        + _attention_dv_cases()
    ):
        kernel = getattr(importlib.import_module(f"sgl_kernel_v4.triton.{module}"), name)
        params = [p.name for p in kernel.params]
        constexprs = [p.name for p in kernel.params if p.is_constexpr]
        assert list(sig) == params, (name, list(sig), params)
        assert [n for n, t in sig.items() if t == "constexpr"] == constexprs, (name, sig)
        assert set(consts) <= set(constexprs), (name, sorted(set(consts) - set(constexprs)))
        defaulted = {p.name for p in kernel.params if p.is_constexpr and p.has_default}
        assert set(constexprs) - set(consts) <= defaulted, (name, sorted(set(constexprs) - set(consts)))


def test_pipeline_buffers_fit_shared_memory() -> None:
    """The stage buffers each config implies (activation tile in its dtype + the packed weight tile)
    times its stages stay under the planning budget for every token count, shape and dtype; the
    budget leaves headroom under the 227 KiB a block may use."""
    from sgl_kernel_v4.triton.fp8_gemm import SMEM_BUDGET, _w8a8_config, _w8a16_config
    from sgl_kernel_v4.triton.moe_fp4 import _config as moe_config

    assert SMEM_BUDGET <= SMEM_LIMIT - 16 * 1024
    for eb in (2, 4):
        for M in (1, 7, 16, 33, 64, 65, 300, 2048, 8192):
            for N, K in ((512, 4096), (1024, 4096), (4096, 8192), (32768, 1024), (96, 200)):
                c = _w8a16_config(M, N, 1, K, 132, eb)
                stage = c["BLOCK_M"] * c["BLOCK_K"] * eb + c["BLOCK_N"] * c["BLOCK_K"]
                assert stage * c["num_stages"] <= SMEM_BUDGET, (M, N, K, eb, c)
                c = _w8a8_config(M, N)
                assert (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * c["num_stages"] <= SMEM_BUDGET, (
                    M,
                    N,
                    c,
                )
        for n_pairs in (1, 6, 36, 96, 600, 6000, 49152):
            for E in (8, 32, 160, 256):
                c = moe_config(n_pairs, E, 6, eb)
                gate_up = c["BLOCK_M"] * c["BLOCK_K"] * eb + 2 * c["BLOCK_N"] * (
                    c["BLOCK_K"] // 2 + c["BLOCK_K"] // 32
                )
                down = c["BLOCK_M"] * c["BLOCK_K"] * eb + c["BLOCK_N"] * (
                    c["BLOCK_K"] // 2 + c["BLOCK_K"] // 32
                )
                assert gate_up * c["num_stages"] <= SMEM_BUDGET, (n_pairs, E, eb, c)
                assert down * c["DOWN_STAGES"] <= SMEM_BUDGET, (n_pairs, E, eb, c)
