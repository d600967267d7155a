"""The DeepSeek-V4 model runs unchanged on fp8 / fp4-indexer KV storage through ``KVRowsView``.

``DSV4KVPool(kv_cache_dtype="fp8_e4m3", fp4_indexer=...)`` (uint8 page storage from
``KVCacheSpec.allocate``, ``pool.rows`` returning ``KVRowsView``: quantize on write, dequantize on
read) is compared with the fp32 pool on the tiny model (HF-initialised random weights) over a 260-token prefill (crossing a
256-token block, so CSA top-k selection and HCA entries are exercised) plus 3 decode steps.
Tolerance (stated; measured here: mean |dlogp| 0.0065 fp8 / 0.0079 fp8+fp4, max 0.18 / 0.17;
on 600 + 100 tokens: 0.0069 / 0.0098, max 0.22 / 0.25): mean |dlogp| < 0.05, max < 1.5. The fp8 run must also differ from
the fp32 one (the quantization really happened) and fill the uint8 pages.

Exactness (the test that catches plumbing bugs; on random weights a closeness bound is loose:
on the embedded default model a cache whose SWA reads are shifted by one slot, or whose CSA
entries read as zeros, moves the mean |dlogp| by only ~0.1, see benchmark/RESULTS.md): an fp32
pool that stores ``dequantize(quantize(x))`` (the ``sgl_kernel_v4.ref.kv_quant`` codecs, tested
against float64 in ``test_memory_kv_quant.py``) instead of ``x`` must give the same logits as the
fp8 pool to 1e-5: the uint8 page storage, the slot -> (page, row) mapping, the page padding and
the deduplicated gathers change nothing else.
"""

from __future__ import annotations

import pytest
import torch
from kv_roundtrip_testutil import round_trip_pool
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.configs.presets import get_preset
from sglang_v4.mem_cache.kv_spec import KVKind
from sglang_v4.mem_cache.memory_pool import DSV4KVPool
from sglang_v4.model_executor.forward_batch import ReqForwardInput, build_forward_batch
from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

PAGE = 256


@pytest.fixture(scope="module")
def tiny_model() -> tuple[ModelConfig, DeepseekV4ForCausalLM]:
    from transformers import DeepseekV4ForCausalLM as HFModel

    mc = ModelConfig.from_dict(get_preset("tiny"))
    torch.manual_seed(0)
    hf = HFModel(mc.hf).eval()
    model = DeepseekV4ForCausalLM(mc, torch.float32)
    missing, unexpected = model.load_state_dict(hf.state_dict(), strict=False)
    assert not missing and not unexpected
    return mc, model


def _run(mc: ModelConfig, model: DeepseekV4ForCausalLM, pool: DSV4KVPool, ids: list[int], n_prefill: int):
    slot = pool.req_slots.alloc()
    assert slot is not None
    pool.reset_req_state(slot)
    n_blocks = -(-len(ids) // PAGE)
    n_spans = -(-len(ids) // mc.sliding_window)
    bp = pool.block_alloc.alloc_or_raise(n_blocks)
    wp = dict(enumerate(pool.window_alloc.alloc_or_raise(n_spans)))
    outs = []
    steps = [(0, n_prefill)] + [(t, t + 1) for t in range(n_prefill, len(ids))]
    for start, end in steps:
        r = ReqForwardInput(slot, ids[start:end], start, bp, wp, 0 if start == 0 else end - start - 1)
        fb = build_forward_batch([r], PAGE, mc.sliding_window, mc.csa_ratio, mc.hca_ratio, "cpu")
        outs.append(model(fb, pool))
    return torch.cat(outs).log_softmax(-1)


def test_fp8_pool_runs_model_close_to_fp32(tiny_model: tuple[ModelConfig, DeepseekV4ForCausalLM]) -> None:
    mc, model = tiny_model
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, mc.vocab_size, (263,), generator=g).tolist()
    kw = dict(
        model_config=mc,
        page_size=PAGE,
        num_block_pages=4,
        num_window_pages=6,
        max_num_reqs=2,
        compute_dtype=torch.float32,
        device="cpu",
    )
    ref = _run(mc, model, DSV4KVPool(**kw), ids, 260)  # type: ignore[arg-type]
    for fp4 in (False, True):
        pool = DSV4KVPool(**kw, kv_cache_dtype="fp8_e4m3", fp4_indexer=fp4)  # type: ignore[arg-type]
        got = _run(mc, model, pool, ids, 260)
        assert got.shape == ref.shape
        oracle = _run(mc, model, round_trip_pool(True, fp4)(**kw), ids, 260)  # type: ignore[arg-type]
        exact = (got - oracle).abs().max().item()
        assert exact < 1e-5, (fp4, exact)
        d = (got - ref).abs()
        assert d.mean() < 0.05 and d.max() < 1.5, (fp4, d.mean().item(), d.max().item())
        assert d.max() > 0  # the quantized cache was really read
        csa = pool.storage(KVKind.CSA_MAIN)
        assert csa.dtype == torch.uint8 and csa.count_nonzero() > 0
        di = mc.index_head_dim
        assert pool.storage(KVKind.CSA_INDEXER).shape[-1] == (di // 2 + di // 32 if fp4 else di + 4)
        assert pool.storage(KVKind.HCA).count_nonzero() > 0 and pool.storage(KVKind.SWA).count_nonzero() > 0
