"""No Triton compile after ready at long context: every kernel variant the long-prefill paths
launch at 131,072 .. 1,048,576-token contexts is launched by the start-up warm-up.

On the H200 (``flash-8l-32e``, bf16 KV, one 1,000,000-token request then one of 1,048,575) seven
variants compiled after ready: the dense HCA path's rescale / softmax tiles for entry counts the
warm-up's contexts (at most :data:`~sglang_v4.model_executor.warmup.WARMUP_MAX_CONTEXT`) never
reach, and variants that differed only by the alignment of an index slice or a count's divisibility
(the visible counts' slice, the request row, the entry count).

The launches are recorded without running them (``kernel_launch_record``: Triton's own launch
binder for sm_90, ``TRITON_INTERPRET=1``, dry) in a subprocess, on the real pool formats of
``flash-8l-32e`` (bf16 KV; fp8 KV with fp4 indexer keys) and the H200's 132 SMs, with the CUDA
dispatch of ``sgl_kernel_v4.ops`` (the layers' calls: ``ops.sparse_attention`` /
``ops.indexer_topk`` with ``dense_prefix`` from ``dense_prefix_segments``) and fp32 logits from
16-bit queries (what cuBLAS gives on the GPU; the products are not computed in a dry run).

* serving: chunks of 2,048 tokens (and the last chunks of the two requests) at prefixes from
  131,072 to the end of a 1,048,576-token context, alone and behind three decode tokens, with the
  batch's index tables at several offsets of the metadata buffer;
* warm-up: the dummy grid's prefill points that take these paths (``warmup_grid``, contexts up to
  65,541) through the same calls, plus :func:`warmup_long_context`.

Serving's variants must be a subset of the warm-up's.
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

# the recording set-up: launches as on the H200 (132 SMs, the CUDA dispatch of ops, fp32 logits)
_PRELUDE = r"""
import importlib, json, pkgutil, sys, torch
import kernel_launch_record as klr
import sgl_kernel_v4.ops as ops
import sgl_kernel_v4.triton as _triton_pkg
from sgl_kernel_v4.triton import attention_prefix as ap
from sgl_kernel_v4.dense_prefix import dense_prefix_segments
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.mem_cache.kv_spec import KVKind
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.warmup import WARMUP_MAX_CONTEXT, warmup_grid
from sglang_v4.model_executor.warmup_long_context import warmup_long_context

for info in pkgutil.iter_modules(_triton_pkg.__path__):  # the H200's 132 SMs (the interpreter reports 8)
    mod = importlib.import_module(f"sgl_kernel_v4.triton.{info.name}")
    if hasattr(mod, "num_sms"):
        mod.num_sms = lambda device: 132
# the CUDA dispatch of ops (the Triton kernels), and cuBLAS's fp32 logits from 16-bit queries
ops.get_op = lambda name, device, supported=True: ops._load("triton", ops._TRITON_MODULES[name], name)
ap.fp32_logits_available = lambda dtype, device: True
ap._mm_f32 = lambda a, b: torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32)

mc = ModelConfig.from_dict(get_preset("flash-8l-32e"))
"""

_RECORD = (
    _PRELUDE
    + r"""
CONTEXT, CHUNK, PAGE = 1 << 20, 2048, 256
H, D, W = mc.hf.num_attention_heads, mc.head_dim, mc.sliding_window
HI, DI, TOPK = mc.hf.index_n_heads, mc.hf.index_head_dim, mc.hf.index_topk
HCA_LAYER, CSA_LAYER = mc.hca_layers[0], mc.csa_layers[0]


def meta(values, off):
    # an int64 index table as a slice of a metadata buffer, `off` elements in
    v = torch.as_tensor(values, dtype=torch.int64)
    return torch.cat([torch.zeros(off, dtype=torch.int64), v.flatten()])[off:].view(v.shape)


def forward(pool, ext, pre, off=0):
    # the attention calls of one forward (requests laid out one after another), as the layers
    # make them on CUDA: HCA, CSA (with its indexer) over the pool
    T = sum(ext)
    pos = torch.cat([torch.arange(p, p + n) for n, p in zip(ext, pre)])
    treq = torch.cat([torch.full((n,), b) for b, n in enumerate(ext)])
    rows = meta(range(len(ext)), off + 1)
    common = dict(req_to_page=pool.req_to_page.table, req_rows=rows, token_req=meta(treq, off + 2))
    q = torch.empty(T, H, D, dtype=torch.bfloat16)
    sinks = torch.zeros(H)
    swa_pages = meta(torch.zeros(T, 2, dtype=torch.int64), off + 3)
    positions = meta(pos, off)
    for layer, r in ((HCA_LAYER, mc.hca_ratio), (CSA_LAYER, mc.csa_ratio)):
        vis = meta((pos + 1) // r, off + 5)
        e = PAGE // r
        swa = pool.rows(KVKind.SWA, layer)
        if r == mc.hca_ratio:
            ops.sparse_attention(q, swa, swa_pages, positions, W, sinks, D**-0.5, pool.rows(KVKind.HCA, layer),
                                 comp_visible=vis, entries_per_page=e, **common,
                                 dense_prefix=dense_prefix_segments(ext, pre, r))
            continue
        segs = dense_prefix_segments(ext, pre, r, 256, 0)
        sel = ops.indexer_topk(torch.empty(T, HI, DI, dtype=torch.bfloat16), torch.empty(T, HI),
                               pool.rows(KVKind.CSA_INDEXER, layer), vis, common["req_to_page"], rows,
                               common["token_req"], e, TOPK, DI**-0.5, int(vis.max()), dense_prefix=segs)
        ops.sparse_attention(q, swa, swa_pages, positions, W, sinks, D**-0.5, pool.rows(KVKind.CSA_MAIN, layer),
                             comp_entries=sel, entries_per_page=e, **common, dense_prefix=segs)


def serving_points():
    # chunks of a 1,000,000- and a 1,048,575-token request from 131,072 tokens on, alone or behind
    # three decode tokens (the run then starts at row 3)
    out = []
    for total in (1_000_000, CONTEXT - 1):
        prefixes = {total - total % CHUNK}  # the last chunk
        c = 1 << 17
        while c < total:
            prefixes |= {c - CHUNK, c, c + 7 * CHUNK}
            c *= 2
        prefixes |= {p for p in range(1 << 17, total, 97 * CHUNK)}
        for p in sorted(prefixes):
            n = min(CHUNK, total - p)
            if n > 0:
                out.append(([n], [p], 0))
                out.append(([1, 1, 1, n], [5000, 7001, 9000, p], 1 + p % 3))
    return out


def record(pool, calls):
    with klr.record_launches(dry=True) as recs:
        calls()
    return {klr.record_key(r): r for r in recs}


res = {}
for fmt, fp4 in (("bf16", False), ("fp8_e4m3", True)):
    pool = DSV4KVPool(mc, PAGE, 4, 4, 4, torch.bfloat16, "cpu", fmt, fp4, max_pages_per_req=CONTEXT // PAGE)

    def grid():
        pts = warmup_grid(CHUNK, min(CONTEXT, WARMUP_MAX_CONTEXT) - 1, W)
        for bs, t, ctx in pts:  # its prefill runs and decode batches from 16K contexts on
            if ctx >= 1 << 14 and (t >= 256 or bs > 1):
                forward(pool, [t] * bs, [ctx - t] * bs)
        forward(pool, [256, 1, 1, 1], [768, 1023, 1023, 1023])  # its mixed batch

    warm = record(pool, grid)
    grid_only = set(warm)
    long_keys = record(pool, lambda: warmup_long_context(pool, H, CONTEXT))
    warm.update(long_keys)
    serve = record(pool, lambda: [forward(pool, *pt) for pt in serving_points()])
    desc = lambda r: f"{r['fn'].split(':')[1]} {klr.named_constexprs(r)} {r['options']} {sorted(r['attrs'])}"
    res[fmt] = {
        "missing": sorted(desc(serve[k]) for k in set(serve) - set(warm)),
        "serve_prefix": sorted({desc(r) for r in serve.values() if "attention_prefix" in r["fn"]}),
        "long_only": sorted(desc(long_keys[k]) for k in set(long_keys) - grid_only),
        "n_serve": len(serve),
        "n_warm": len(warm),
    }
json.dump(res, open(sys.argv[1], "w"))
"""
)


# the long-context warm-up alone, for a 2M-token context (the two-pass softmax too), both formats
_WARM = (
    _PRELUDE
    + r"""
for fmt, fp4 in (("bf16", False), ("fp8_e4m3", True)):
    pool = DSV4KVPool(mc, 256, 4, 4, 2, torch.bfloat16, "cpu", fmt, fp4, max_pages_per_req=(1 << 21) // 256)
    with klr.record_launches(dry=True) as recs:
        warmup_long_context(pool, mc.hf.num_attention_heads, 1 << 21)
    klr.dump(recs, sys.argv[1])
"""
)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    path = str(tmp_path_factory.mktemp("longctx") / "variants.json")
    env = dict(os.environ, TRITON_INTERPRET="1")
    root = os.path.dirname(HERE)
    own = [HERE, os.path.join(root, "python"), os.path.join(root, "sgl-kernel-v4")]
    env["PYTHONPATH"] = os.pathsep.join([*own, *filter(None, [env.get("PYTHONPATH")])])
    proc = subprocess.run(
        [sys.executable, "-c", _RECORD, path], cwd=HERE, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("fmt", ["bf16", "fp8_e4m3"])
def test_long_context_variants_are_warmed_up(recorded: dict[str, dict], fmt: str) -> None:
    """Every kernel variant (kernel, signature, constexprs, divisibility, options) that the long
    prefill chunks launch is launched by the warm-up grid's calls or the long-context warm-up."""
    got = recorded[fmt]
    assert got["n_serve"] > 10 and got["serve_prefix"], got  # the dense path was taken
    assert not got["missing"], f"{len(got['missing'])} variants would compile after ready: {got['missing']}"


def test_long_context_warmup_adds_the_dense_path_tiles(recorded: dict[str, dict]) -> None:
    """What the grid (contexts up to 65,541) misses and the long-context warm-up compiles, as on the
    H200: the rescale tiles of 16 and 32 key tiles, the one-pass softmax over 2,048 / 4,096 /
    8,192 keys (a 1M context), and nothing else."""
    for fmt in ("bf16", "fp8_e4m3"):
        names = [d.split(" ")[0] for d in recorded[fmt]["long_only"]]
        assert sorted(names) == ["_prefix_rescale_kernel"] * 2 + ["_prefix_softmax_kernel"] * 3, recorded[fmt]
        text = " ".join(recorded[fmt]["long_only"])
        for tile in (
            "'BLOCK_T': 16",
            "'BLOCK_T': 32",
            "'BLOCK_N': 2048",
            "'BLOCK_N': 4096",
            "'BLOCK_N': 8192",
        ):
            assert tile in text, (tile, recorded[fmt]["long_only"])


def test_entry_counts_reach_every_dense_tile_class() -> None:
    """The dense path's tile classes by hand (module docstring of ``attention_prefix``): a segment
    has at least 257 entries (256 visible to its first token, 256 tokens); NK = entries rounded up
    to 128. With fp32 logits (the GPU) up to 8,192 entries (a 1M context): the Triton logits below
    2,048 keys, rescaling ``next_pow2(NK / 64)`` tiles (8 for NK 384-512, 16 for 640-1,024, 32 for
    1,152-1,920), then cuBLAS logits with one softmax pass over ``next_pow2(NK)`` keys (2,048;
    4,096 from NK 2,176; 8,192 from NK 4,224); the two-pass softmax beyond 8,192 keys (a 2M
    context); without fp32 logits the Triton path throughout (64 and 128 tiles too)."""
    from sgl_kernel_v4.triton.attention_prefix_tiles import prefix_tile_class, prefix_warmup_entry_counts

    counts = prefix_warmup_entry_counts(8192, True, "auto", min_entries=257)
    assert counts == [257, 513, 1025, 1921, 2049, 4097]
    assert [prefix_tile_class(n, True, "auto") for n in counts] == [
        ("triton", (32, 8)),
        ("triton", (32, 16)),
        ("triton", (32, 32)),
        ("gemm", (1, 2048, True, 8)),
        ("gemm", (1, 4096, True, 8)),
        ("gemm", (1, 8192, True, 8)),
    ]
    assert prefix_warmup_entry_counts(16384, True, "auto", min_entries=257)[-1] == 8193
    assert prefix_tile_class(8193, True, "auto") == ("gemm", (4, 512, False, 4))
    assert prefix_warmup_entry_counts(8192, False, "auto", min_entries=257) == [257, 513, 1025, 2049, 4097]
    assert prefix_warmup_entry_counts(256, True, "auto", min_entries=257) == []


@pytest.mark.parametrize("fmt,fp4", [("bf16", False), ("fp8_e4m3", True)])
def test_plan_follows_the_context_and_the_pool_formats(fmt: str, fp4: bool) -> None:
    """Which calls the long-context warm-up makes: the dense HCA path from a 33,023-token context
    (its last chunk's 257 entries; none at 33,022), every class up to the context (the CPU has no
    fp32 logits from bf16: the Triton tiles); the decoded CSA and indexer paths on fp8 main entries
    and fp4 indexer keys only; bad arguments refused."""
    import torch
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.mem_cache.memory_pool import DSV4KVPool
    from sglang_v4.model_executor.warmup_long_context import long_context_plan

    mc = ModelConfig.from_dict(get_preset("flash-8l-32e"))
    pool = DSV4KVPool(mc, 256, 2, 2, 1, torch.bfloat16, "cpu", fmt, fp4, max_pages_per_req=4)
    plan = long_context_plan(pool, 64, 1 << 20)
    assert plan.tokens == 257 and plan.max_csa_entries == 1 << 18
    assert plan.hca_entry_counts == (257, 513, 1025, 2049, 4097)
    assert plan.csa_decoded is fp4 and plan.indexer_decoded is fp4
    assert long_context_plan(pool, 64, 33_023).hca_entry_counts == (257,)
    assert long_context_plan(pool, 64, 33_022).hca_entry_counts == ()
    with pytest.raises(ValueError, match="heads"):
        long_context_plan(pool, 0, 1 << 20)


@pytest.mark.slow
def test_long_context_warmup_launches_compile_for_sm90(tmp_path) -> None:
    """Every launch of the long-context warm-up (2M-token context, both KV formats) compiles for
    Hopper (``triton.compile`` for sm_90 without the interpreter, within the shared memory limit)."""
    import kernel_launch_record as klr
    from kernels_compile_testutil import compile_log, record_script

    log = str(tmp_path / "launches.pkl")
    record_script(_WARM, log)
    passes = {klr.named_constexprs(r).get("ONE_PASS") for r in klr.load(log) if "softmax" in r["fn"]}
    assert passes == {True, False}  # one and two passes
    rc, report = compile_log(log)
    assert rc == 0, report
