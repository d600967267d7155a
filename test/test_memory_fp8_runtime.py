"""``--kv-cache-dtype fp8_e4m3`` / ``--enable-fp4-indexer`` through the whole runtime (CPU).

The in-process :class:`~sglang_v4.managers.scheduler.Scheduler` runs the embedded default model
(tiny preset, seed-0 random weights) on two prompts (270 and 520 tokens: they cross the 256- and
512-token block ends, so CSA top-k selection, HCA entries and chunked window pages are all used)
with prompt logprobs and 4 greedy tokens each, once with the fp32 KV pool (the model's own dtype:
the reference) and once each with fp8 and fp8 + fp4-indexer pools.

Tolerance (stated): over all prompt positions ``|logprob_fp8 - logprob_fp32|`` has mean < 0.06
and max < 3.0. Measured (benchmark/RESULTS.md, "KV cache formats: accuracy"): fp8 mean 0.020-0.029,
fp8+fp4 0.034-0.041 on 520-4096-token prompts; the max is set by rare single positions where a
top-k choice of the indexer flips, and bf16 KV (no fp8 at all) shows the same size of outliers
(1.64 on 4096 tokens, fp8 1.66), so it is bounded loosely. The mean bound has ~1.5x headroom.
This closeness check is weak on random weights (a one-slot shift of the SWA reads gives ~0.1);
the exact check that the fp8 pool equals an fp32 pool storing the quantize/dequantize round trip is
``test_memory_fp8_model.py``. The fp8 run must differ from fp32 (the cache was quantized).

Memory: after every request has ended the block / window pages still in use are exactly the
ones the radix cache holds, every request slot is free, and after ``flush_cache()`` every
allocator is all-free. ``get_server_info()["kv_plan"]`` reports the planner's numbers and the
padding really allocated; the CPU default (no ``--max-total-tokens``) stays well under 1 GiB.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from sglang_v4.managers import scheduler as scheduler_mod
from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
from sglang_v4.mem_cache.kv_spec import KVKind
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.server_args import ServerArgs

PROMPT_LENS = (270, 520)
NEW_TOKENS = 4
MEAN_TOL, MAX_TOL = 0.06, 3.0


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(123)
    return [torch.randint(2, 129000, (n,), generator=g).tolist() for n in PROMPT_LENS]


def _run(**sa_kw: Any) -> dict[str, Any]:
    sa = ServerArgs(random_seed=0, **sa_kw)
    sch = scheduler_mod.Scheduler(sa)  # the ModelRunner reads the KV format from ``sa``
    lps: dict[str, list[float]] = {}
    outs: dict[str, list[int]] = {}
    for i, ids in enumerate(_prompts()):
        sp = SamplingParams(max_new_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True)
        sp.normalize(None)
        sch.add_request(
            TokenizedGenerateReqInput(
                rid=f"r{i}",
                input_text=None,
                input_ids=ids,
                sampling_params=sp,
                return_logprob=True,
                logprob_start_len=0,
            )
        )
        lps[f"r{i}"], outs[f"r{i}"] = [], []
    finished: set[str] = set()
    for _ in range(500):
        if not sch.has_work():
            break
        o = sch.step()
        if o is None:
            continue
        for j, rid in enumerate(o.rids):
            lps[rid].extend(v for v in o.input_token_logprobs_val[j] if v is not None)
            outs[rid].extend(o.output_ids[j])
            if o.finished_reasons[j] is not None:
                assert o.finished_reasons[j]["type"] == "length", o.finished_reasons[j]
                finished.add(rid)
    assert finished == set(lps), "not every request finished"
    pool, tree = sch.pool, sch.tree_cache
    st = tree.stats()
    # after every request ended: only the radix cache holds pages, no slot is taken
    mem = {
        "blocks_used": pool.block_alloc.used,
        "tree_blocks": st["cached_blocks"],
        "windows_used": pool.window_alloc.used,
        "tree_windows": st["resume_states"],
        "slots_free": pool.req_slots.available,
    }
    info = sch.get_server_info()
    assert sch.flush_cache()
    mem["free_after_flush"] = (
        pool.block_alloc.available == pool.block_alloc.num_pages
        and pool.window_alloc.available == pool.window_alloc.num_pages
        and pool.req_slots.available == pool.req_slots.size
    )
    return {"lps": lps, "outs": outs, "mem": mem, "info": info, "pool": pool, "sch": sch}


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, Any]]:
    res = {"fp32": _run()}  # CPU defaults: model dtype float32, kv "auto", default pool size
    small = dict(max_total_tokens=4096, max_running_requests=4)
    res["fp8"] = _run(kv_cache_dtype="fp8_e4m3", **small)
    res["fp8_fp4"] = _run(kv_cache_dtype="fp8_e4m3", enable_fp4_indexer=True, **small)
    return res


@pytest.mark.parametrize("name", ["fp8", "fp8_fp4"])
def test_fp8_logprobs_close_to_fp32(runs: dict[str, dict[str, Any]], name: str) -> None:
    ref, got = runs["fp32"], runs[name]
    diffs = []
    for rid, ref_lp in ref["lps"].items():
        assert len(ref_lp) == len(got["lps"][rid]) == PROMPT_LENS[int(rid[1:])] - 1
        diffs.append((torch.tensor(got["lps"][rid]) - torch.tensor(ref_lp)).abs())
        assert len(got["outs"][rid]) == NEW_TOKENS
    d = torch.cat(diffs)
    print(f"{name}: mean |dlogp| {d.mean().item():.4f}, max {d.max().item():.4f}")
    assert d.mean().item() < MEAN_TOL and d.max().item() < MAX_TOL
    assert d.max().item() > 0, "fp8 KV gave bit-identical logprobs: the cache was not quantized"
    pool = got["pool"]
    assert (
        pool.storage(KVKind.CSA_MAIN).dtype == torch.uint8 and pool.storage(KVKind.SWA).dtype == torch.uint8
    )
    di = pool.model_config.index_head_dim
    assert pool.storage(KVKind.CSA_INDEXER).shape[-1] == (di // 2 + di // 32 if name == "fp8_fp4" else di + 4)


@pytest.mark.parametrize("name", ["fp32", "fp8", "fp8_fp4"])
def test_pages_return_to_free(runs: dict[str, dict[str, Any]], name: str) -> None:
    m = runs[name]["mem"]
    assert m["blocks_used"] == m["tree_blocks"] > 0
    assert m["windows_used"] == m["tree_windows"]
    assert m["slots_free"] == runs[name]["pool"].req_slots.size
    assert m["free_after_flush"]


def test_server_info_kv_plan(runs: dict[str, dict[str, Any]]) -> None:
    for name in ("fp32", "fp8", "fp8_fp4"):
        plan = runs[name]["info"]["kv_plan"]
        pool = runs[name]["pool"]
        assert plan["kv_cache_dtype"] == ("fp32" if name == "fp32" else "fp8_e4m3")
        assert plan["fp4_indexer"] == (name == "fp8_fp4")
        assert plan["pool_bytes"] == pool.memory_bytes() == runs[name]["info"]["kv_pool_bytes"]
        assert plan["fragmentation_bytes"] == pool.fragmentation_bytes()
        assert plan["num_block_pages"] == pool.num_block_pages
        assert plan["kv_capacity_tokens"] == runs[name]["sch"].max_total_num_tokens
        for key in ("max_context", "max_concurrency", "classes"):
            assert key in plan
    fp8 = runs["fp8"]["info"]["kv_plan"]
    lay = runs["fp8"]["pool"].layout
    # padding of the planned pages plus that of the reserved dummy block / window page
    assert fp8["fragmentation_bytes"] == (
        fp8["planned_fragmentation_bytes"] + lay.block_padding_bytes + lay.window_padding_bytes
    )
    assert fp8["fragmentation_bytes"] > 0 and runs["fp32"]["info"]["kv_plan"]["fragmentation_bytes"] == 0
    # CPU default: capacity = the model context (65,536 tokens), well under 1 GiB of KV
    d = runs["fp32"]["info"]["kv_plan"]
    assert d["kv_capacity_tokens"] == 65536 and d["pool_bytes"] < 2**30
