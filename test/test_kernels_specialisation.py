"""Serving shapes reuse compiled kernels: the attention and indexer launches of every decode batch
size and context length (and of long extends) compile to a handful of variants, not one per
batch size, split count, candidate count or scratch-block offset.

A Triton kernel compiles once per specialisation (its constexprs and, per integer argument,
whether it is 1 or a multiple of 16). Before split counts became runtime arguments and the
indexer's scratch rows were padded, a server on the H200 compiled 29 kernel variants after its
start-up warm-up (the first requests waited seconds). The launches are recorded without running
them (``kernel_launch_record``, Triton's own launch binder for sm_90) in a subprocess under
``TRITON_INTERPRET=1``; the distinct compile keys per kernel are counted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")

HERE = os.path.dirname(os.path.abspath(__file__))

_SWEEP = r"""
import json, sys, torch
from collections import Counter
import kernel_launch_record as klr
from sgl_kernel_v4.triton.attention import sparse_attention
from sgl_kernel_v4.triton.indexer import indexer_topk
from sgl_kernel_v4.triton.mhc import hc_pre
from sgl_kernel_v4.triton.moe import fused_moe
from sgl_kernel_v4.triton.moe_fp4 import fused_moe_fp4
from sgl_kernel_v4.triton.moe_router import moe_route
from sgl_kernel_v4.triton.activation import swiglu_clamped
from sgl_kernel_v4.triton.compressor_state import compress_windows_and_insert, advance_compressor_state
import sgl_kernel_v4.triton.attention as _a, sgl_kernel_v4.triton.indexer_select as _i, sgl_kernel_v4.triton.mhc as _m

for _mod in (_a, _i, _m):  # the H200's 132 SMs (the interpreter reports 8): the grids the GPU sees
    _mod.num_sms = lambda device: 132

def idx(T, C):
    Hi, di, e = 64, 128, 64
    P = -(-C // e) + 1
    kv = torch.empty(P * e, di, dtype=torch.bfloat16)
    r2p = torch.zeros(1, P, dtype=torch.int32)
    rows = torch.zeros(1, dtype=torch.int64)
    indexer_topk(torch.empty(T, Hi, di, dtype=torch.bfloat16), torch.empty(T, Hi), kv,
                 torch.full((T,), C, dtype=torch.int64), r2p, rows, torch.zeros(T, dtype=torch.int64),
                 e, 512, 0.1, max_visible=C)

def attn(T, n):
    H, D, W, e = 64, 512, 128, 64
    P = -(-n // e) + 1
    q = torch.empty(T, H, D, dtype=torch.bfloat16)
    swa = torch.empty(4 * W, D, dtype=torch.bfloat16)
    comp = torch.empty(P * e, D, dtype=torch.bfloat16)
    pages = torch.zeros(T, 2, dtype=torch.int64)
    pos = torch.full((T,), 4 * n, dtype=torch.int64)
    sparse_attention(q, swa, pages, pos, W, torch.zeros(H), 0.1, comp,
                     comp_visible=torch.full((T,), n, dtype=torch.int64),
                     req_to_page=torch.zeros(1, P, dtype=torch.int32), req_rows=torch.zeros(1, dtype=torch.int64),
                     token_req=torch.zeros(T, dtype=torch.int64), entries_per_page=e)

def idx_server(T, C, off, width):
    # as a server calls it: T requests of one token, a page table of `width` columns, the index
    # tensors slices of larger buffers starting `off` elements in (any alignment)
    Hi, di, e = 64, 128, 64
    P = max(-(-C // e) + 1, width)
    kv = torch.empty(P * e, di, dtype=torch.bfloat16)
    r2p = torch.zeros(T + 1, P + off, dtype=torch.int32)[:, off:]
    rows = torch.arange(T + off, dtype=torch.int64)[off:] - off
    treq = torch.arange(T + off, dtype=torch.int64)[off:] - off
    vis = torch.full((T + off,), C, dtype=torch.int64)[off:]
    indexer_topk(torch.empty(T, Hi, di, dtype=torch.bfloat16), torch.empty(T, Hi), kv, vis, r2p, rows, treq,
                 e, 512, 0.1, max_visible=C)

def attn_server(T, n, off, width):
    H, D, W, e = 64, 512, 128, 64
    P = max(-(-n // e) + 1, width)
    q = torch.empty(T, H, D, dtype=torch.bfloat16)
    swa = torch.empty(4 * W * T, D, dtype=torch.bfloat16)
    comp = torch.empty(P * e * T, D, dtype=torch.bfloat16)
    pages = torch.zeros(T + off, 2, dtype=torch.int64)[off:]
    pos = torch.full((T + off,), 4 * n, dtype=torch.int64)[off:]
    sparse_attention(q, swa, pages, pos, W, torch.zeros(H), 0.1, comp,
                     comp_visible=torch.full((T + off,), n, dtype=torch.int64)[off:],
                     req_to_page=torch.zeros(T + 1, P + off, dtype=torch.int32)[:, off:],
                     req_rows=torch.arange(T + off, dtype=torch.int64)[off:] - off,
                     token_req=torch.arange(T + off, dtype=torch.int64)[off:] - off, entries_per_page=e)

def mhc(T):
    n, D = 4, 1024
    hc_pre(torch.empty(T, n, D, dtype=torch.bfloat16), torch.empty((2 + n) * n, n * D), torch.empty((2 + n) * n),
           torch.empty(3), 20, 1e-6, 1e-6)

def moe(T):
    E, D, I, k = 32, 512, 256, 6
    fused_moe(torch.empty(T, D, dtype=torch.bfloat16), torch.empty(E, 2 * I, D, dtype=torch.bfloat16),
              torch.empty(E, D, I, dtype=torch.bfloat16), torch.zeros(T, k, dtype=torch.int64),
              torch.empty(T, k), 10.0)
    logits = torch.empty(T, 256, dtype=torch.bfloat16)
    moe_route(logits, torch.empty(256), None, None, 6, 2.5)
    moe_route(logits, None, torch.zeros(100, 6, dtype=torch.int64), torch.zeros(T, dtype=torch.int64), 6, 2.5)
    swiglu_clamped(torch.empty(T, 2 * 2048, dtype=torch.bfloat16), 10.0)

def ix(*shape, off):
    # an index table as a slice of the metadata buffer starting `off` elements in
    n = 1
    for k in shape:
        n *= k
    return torch.zeros(n + off, dtype=torch.int64)[off:].view(*shape)

def comp(bs, off, m, d, overlap):
    # one compressor call of a decode graph of bs requests (CSA: J = S = bs; HCA: J = bs, S = 0)
    X, s = (2 * d if overlap else d), (bs if overlap else 0)
    kv, gate = torch.empty(bs, X, dtype=torch.bfloat16), torch.empty(bs, X, dtype=torch.bfloat16)
    bias, w = torch.empty(m, X), torch.ones(d)
    st = [torch.empty(64, m, X), torch.empty(64, m, X)]  # recorded, never run: contents unread
    st += [torch.empty(64, m, d) if overlap else None for _ in range(2)]
    snap = [torch.empty(64, m, d) if overlap else None for _ in range(2)]
    head = (kv, gate, bias, ix(bs, off=off), ix(bs, off=off), *st)
    compress_windows_and_insert(*head, ix(bs, m, off=off), ix(s, m, off=off), w,
                                torch.empty(bs, 32), torch.empty(bs, 32),
                                torch.empty(4096, d, dtype=torch.bfloat16), ix(bs, off=off), 1e-6)
    advance_compressor_state(*head, *snap, ix(bs, m, off=off), ix(bs, m, off=off), ix(s, m, off=off),
                             ix(s, off=off))

out = {}
with klr.record_launches(dry=True) as recs:
    for bs in (1, 2, 3, 5, 8, 12, 16, 24, 33):
        for off in (0, 1, 3):
            for m, d, overlap in ((4, 512, True), (4, 128, True), (128, 512, False)):
                comp(bs, off, m, d, overlap)
out["compressor_decode"] = Counter(r["fn"].split(":")[1] for r in klr.distinct(recs))
for name, Ts in (("mhc_moe_decode", (1, 2, 3, 5, 8, 12, 16, 24, 33)),):
    with klr.record_launches(dry=True) as recs:
        for T in Ts:
            mhc(T)
            moe(T)
    out[name] = Counter(r["fn"].split(":")[1] for r in klr.distinct(recs))
def moe_fp4(T):
    # flash-43l's 160 experts: 854..2,560 tokens all take the 64-row tile class
    E, D, I, k = 160, 256, 128, 6
    u8 = dict(dtype=torch.uint8)
    fused_moe_fp4(torch.empty(T, D, dtype=torch.bfloat16), torch.empty(E, 2 * I, D // 2, **u8),
                  torch.empty(E, 2 * I, D // 32, **u8), torch.empty(E, D, I // 2, **u8),
                  torch.empty(E, D, I // 32, **u8), torch.zeros(T, k, dtype=torch.int64), torch.empty(T, k), 10.0)

with klr.record_launches(dry=True) as recs:
    for T in (854, 900, 1024, 1032, 1100, 2560):
        moe_fp4(T)
out["moe_fp4_class"] = Counter(r["fn"].split(":")[1] for r in klr.distinct(recs))
with klr.record_launches(dry=True) as recs:
    for T in (300, 777, 1500, 2048):
        mhc(T)
out["mhc_extend"] = Counter(r["fn"].split(":")[1] for r in klr.distinct(recs))
for name, shapes in (
    ("decode", [(T, C) for T in (1, 2, 3, 5, 8, 12, 16, 24, 33, 64, 100, 256) for C in (100, 1000, 4097, 65536, 262144)]),
    ("extend", [(T, C) for T in (300, 777, 2048) for C in (1000, 8191, 32768, 131072)]),
):
    with klr.record_launches(dry=True) as recs:
        for T, C in shapes:
            idx(T, C)
            attn(T, C // 32)
    out[name] = Counter(r["fn"].split(":")[1] for r in klr.distinct(recs))
with klr.record_launches(dry=True) as recs:
    for T in (1, 3, 8, 16, 33):
        for C in (1000, 65536):
            for off in (0, 1, 3):
                for width in (17, 32, 257):
                    idx_server(T, C, off, width)
                    attn_server(T, C // 32, off, width)
out["server_layouts"] = Counter(r["fn"].split(":")[1] for r in klr.distinct(recs))
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, int]]:
    path = str(tmp_path_factory.mktemp("spec") / "variants.json")
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join([HERE, *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-c", _SWEEP, path], cwd=HERE, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(path, encoding="utf-8") as f:
        return json.load(f)


#: variants a decode kernel may compile: the attention's key tile (16 / 64) x split or not; the
#: histogram's two levels (coarse, fine)
_ALLOWED = {"_paged_attn_kernel": 4, "_hist_kernel": 2}


def test_decode_batches_and_contexts_reuse_a_few_variants(variants: dict[str, dict[str, int]]) -> None:
    """12 batch sizes x 5 contexts (60 decode shapes): each indexer kernel compiles one variant,
    the attention at most 4 (key tile 16 for up to 4 tokens or 64 above, x one split or several)."""
    got = variants["decode"]
    assert set(got) >= {
        "_score_decode_kernel",
        "_hist_kernel",
        "_filter_kernel",
        "_final_kernel",
        "_paged_attn_kernel",
    }
    too_many = {k: v for k, v in got.items() if v > _ALLOWED.get(k, 1)}
    assert not too_many, f"kernels compiling a variant per batch size / context: {too_many}"


def test_server_index_layouts_reuse_the_decode_variants(variants: dict[str, dict[str, int]]) -> None:
    """Decode launches whose index tables (visible counts, page table, request rows, window pages,
    positions) are slices at any element offset, page tables of 17 to 257 columns, up to 33
    requests: no more variants than plain decode. Before the index tables were exempt from
    specialisation, their alignment and unit values compiled 15 attention and indexer variants
    after a server's warm-up on the H200."""
    got = variants["server_layouts"]
    assert set(got) >= {
        "_score_decode_kernel",
        "_hist_kernel",
        "_filter_kernel",
        "_final_kernel",
        "_paged_attn_kernel",
    }
    too_many = {k: v for k, v in got.items() if v > _ALLOWED.get(k, 1)}
    assert not too_many, f"kernels compiling a variant per index-table layout: {too_many}"


def test_mhc_and_moe_reuse_a_few_variants_over_decode_batches(variants: dict[str, dict[str, int]]) -> None:
    """Decode batches of 1 to 33 requests: the mHC finish kernel and the MoE align / grouped GEMM
    kernels compile at most 3 variants (their split or pair counts are runtime arguments; the
    rows-per-tile classes of the MoE tiles stay); the router (top-k and hash) and the shared
    expert's SwiGLU at most 2 and 1 (the token count is a runtime argument)."""
    got = variants["mhc_moe_decode"]
    assert set(got) >= {"_hc_finish_kernel", "_align_kernel", "_gate_up_kernel", "_down_kernel"}
    assert got["_moe_route_kernel"] <= 2 and got["_swiglu_clamped_kernel"] == 1, got
    too_many = {k: v for k, v in got.items() if v > 3}
    assert not too_many, f"kernels compiling a variant per batch size: {too_many}"


def test_mhc_reuses_a_few_variants_over_extend_lengths(variants: dict[str, dict[str, int]]) -> None:
    """Extends of 300 to 2,048 tokens: the mHC split count changes with the length (32 down to 3),
    the finish kernel compiles at most 2 variants (the token count as a multiple of 16 or not), the
    projection one per tile (16 tokens per program below ``PREFILL_MIX_MIN_T``, 128 from it)."""
    too_many = {k: v for k, v in variants["mhc_extend"].items() if v > 2}
    assert not too_many, f"kernels compiling a variant per extend length: {too_many}"


def test_long_extends_reuse_a_few_variants(variants: dict[str, dict[str, int]]) -> None:
    """3 extend lengths x 4 contexts (several scratch blocks per call at long contexts)."""
    too_many = {k: v for k, v in variants["extend"].items() if v > 2}
    assert not too_many, f"kernels compiling a variant per extend length / context: {too_many}"


def test_compressor_state_kernels_reuse_a_variant_per_compressor(variants: dict[str, dict[str, int]]) -> None:
    """Decode graphs of 1 to 33 requests whose plan tables are slices of the metadata buffer at any
    offset: the compressor's in-place window / state kernels compile one variant per compressor
    shape (CSA main d 512, CSA indexer d 128, HCA d 512), not one per batch size or offset."""
    got = variants["compressor_decode"]
    bound = {"_compress_tab_kernel": 2, "_snapshot_kernel": 2, "_advance_kernel": 3}
    bound |= {"_pool_tab_chunk_kernel": 1, "_norm_rope_write_kernel": 1}
    assert set(got) == set(bound), got
    too_many = {k: v for k, v in got.items() if v > bound[k]}
    assert not too_many, f"kernels compiling a variant per batch size / table offset: {too_many}"


def test_fp4_moe_reuses_one_variant_within_a_tile_class(variants: dict[str, dict[str, int]]) -> None:
    """Extends of 854 to 2,560 tokens over 160 FP4 experts (``flash-43l``): one tile class, so one
    variant of each grouped GEMM. Before the pair count was a runtime argument, a pair count that is
    a multiple of 16 (1,024 tokens, the warm-up's) and one that is not (1,032 tokens, a mixed step
    under load) compiled twice: on the H200 the second compile came after ready (a 1.2 s stall)."""
    got = variants["moe_fp4_class"]
    assert {"_gate_up_fp4_kernel", "_down_fp4_kernel"} <= set(got), got
    assert got["_gate_up_fp4_kernel"] == 1 and got["_down_fp4_kernel"] == 1, got
