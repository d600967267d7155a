"""The runtime DeepSeek-V4 model on paged KV vs HF transformers (fp32, CPU).

Every prompt position's log-probabilities must agree within 1e-3 (we see ~1e-5) whether the
sequence is computed as one prefill, in chunks of 1/3/7/64/100/256 tokens, or as part of a mixed
batch of requests of different lengths; greedy decoding must produce the oracle's tokens.

Fast tier: the many-lengths batch, token-by-token decode and the mixed batch on sliding_first (its
schedule has all three attention kinds); every config's 100-token chunks and decode past 256; the
slow tier repeats those three tests on the other configs.
"""

from __future__ import annotations

import functools

import pytest
import torch
from dsv4_testutil import (
    CONFIGS,
    Driver,
    Twin,
    hf_greedy,
    hf_logprobs,
    hf_logprobs_memo,
    make_twin,
    random_ids,
)

TOL = 1e-3
LENGTHS = [*range(1, 10), 127, 128, 129, 130, 255, 256, 257, 258, 511, 512, 513, 514, 1100]


ALL = sorted(CONFIGS)


@functools.cache
def get_twin(name: str):
    return make_twin(name, seed=7)


def one_config_fast(keep: str, *rest: object) -> list:
    """Parameters ``(config, *rest)`` for every config in ``ALL``, all but ``keep`` in the slow tier
    (CPU time); every config stays in the fast tier through the other tests."""
    return [pytest.param(n, *rest, marks=() if n == keep else pytest.mark.slow) for n in ALL]


@pytest.mark.parametrize("name", one_config_fast("sliding_first"))
def test_one_batch_of_many_lengths(name):
    """All boundary-straddling lengths as ONE mixed extend batch, each vs its own HF forward."""
    twin = get_twin(name)
    drv = Driver(twin)
    seqs = [random_ids(n, seed=n) for n in LENGTHS]
    slots = [drv.new_req() for _ in seqs]
    outs = drv.step(list(zip(slots, seqs)))
    for ids, out in zip(seqs, outs):
        ref = hf_logprobs(twin, ids)
        assert out.shape == ref.shape
        err = (out - ref).abs().max().item()
        assert err <= TOL, f"len {len(ids)}: max |dlogprob| {err}"


# every chunk size on one config, chunk 100 on the others (CPU time)
@pytest.mark.parametrize(
    "name,chunk",
    [("sliding_first", c) for c in (7, 64, 100, 256)] + [(n, 100) for n in ALL if n != "sliding_first"],
)
def test_chunked_prefill(name, chunk):
    twin = get_twin(name)
    ids = random_ids(1100, seed=1)
    ref = hf_logprobs_memo(twin, ids)  # one HF forward for the four chunk sizes on sliding_first
    # 7-token chunks over the first 530 tokens (CPU time): past the 512 page and HCA boundary, chunks
    # straddling every boundary below it; the other chunk sizes run all 1100 (the oracle is causal:
    # the rows of a prefix are the prefix's own)
    n = 530 if chunk < 64 else len(ids)
    out = Driver(twin).run_chunked(ids[:n], chunk)
    ref = ref[:n]
    err = (out - ref).abs().max().item()
    assert err <= TOL, f"chunk {chunk}: max |dlogprob| {err}"


# 3-token chunks in the slow tier: the fast tier's small extends are test_chunked_prefill's 7-token
# chunks (sliding_first) and its 100-token chunks crossing the boundaries on every config. Token by
# token on sliding_first only in the fast tier (its schedule has all three attention kinds, top-k
# below the entries); decode across 256 on the other configs is test_greedy_decode_matches_hf's.
@pytest.mark.parametrize(
    "name,chunk",
    one_config_fast("sliding_first", 1) + [pytest.param(n, 3, marks=pytest.mark.slow) for n in ALL],
)
def test_small_chunks(name, chunk):
    """Token-by-token (pure decode) and 3-token chunks across the 128 / 256 boundaries."""
    twin = get_twin(name)
    ids = random_ids(270, seed=2)
    ref = hf_logprobs(twin, ids)
    out = Driver(twin).run_chunked(ids, chunk)
    assert (out - ref).abs().max().item() <= TOL


@pytest.mark.parametrize("name", one_config_fast("sliding_first"))
def test_mixed_prefill_and_decode_batch(name):
    """A batch mixing decode steps of some requests with prefill chunks of others."""
    twin = get_twin(name)
    drv = Driver(twin)
    a, b, c = random_ids(600, 3), random_ids(300, 4), random_ids(530, 5)
    sa, sb, sc = drv.new_req(), drv.new_req(), drv.new_req()
    got = {sa: [], sb: [], sc: []}
    # a: prefill 590 then decode; b: chunks of 100; c: prefill 257 then chunk 273
    o = drv.step([(sa, a[:590]), (sb, b[:100]), (sc, c[:257])])
    for s, x in zip((sa, sb, sc), o):
        got[s].append(x)
    pos = {sa: 590, sb: 100, sc: 257}
    while pos[sa] < 600 or pos[sb] < 300 or pos[sc] < 530:
        work = []
        if pos[sa] < 600:
            work.append((sa, a[pos[sa] : pos[sa] + 1]))
        if pos[sb] < 300:
            work.append((sb, b[pos[sb] : pos[sb] + 100]))
        if pos[sc] < 530:
            work.append((sc, c[pos[sc] :]))
        for (s, ids), x in zip(work, drv.step(work)):
            got[s].append(x)
            pos[s] += len(ids)
    for s, ids in ((sa, a), (sb, b), (sc, c)):
        err = (torch.cat(got[s]) - hf_logprobs(twin, ids)).abs().max().item()
        assert err <= TOL


# decode from 250 past the 256 boundary on the two other configs (sliding_first's token-by-token
# decode across it is test_small_chunks')
@pytest.mark.parametrize(
    "name,prompt_len",
    [("sliding_first", 5)]
    + [pytest.param(n, 250, marks=pytest.mark.slow if n == "sliding_first" else ()) for n in ALL],
)
def test_greedy_decode_matches_hf(name, prompt_len):
    twin = get_twin(name)
    ids = random_ids(prompt_len, seed=prompt_len + 11)
    ref = hf_greedy(twin, ids, 32)
    assert Driver(twin).greedy(ids, 32, chunk=100) == ref


# topk_large in the slow tier: sliding_first has the same attention kinds (block and window pages)
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow if n == "topk_large" else ()) for n in ALL]
)
def test_pages_return_to_free(name):
    drv = Driver(get_twin(name))
    drv.run_chunked(random_ids(700, 9), 300)
    assert drv.pool.block_alloc.used == 0 and drv.pool.window_alloc.used == 0
    assert drv.pool.req_slots.available == drv.pool.req_slots.size


@pytest.mark.parametrize("fmt,weights", [("official", "fp8"), ("hf", "bf16")])
def test_runtime_loads_real_checkpoint_formats(tmp_path, fmt, weights):
    """The runtime model loaded from an official FP8 (FP4 experts) or HF bf16 checkpoint gives HF's
    log-probabilities on the dequantized weights (HF loads them through our loader's state dict,
    whose dequantization test_loader_* checks against a float64 reference)."""
    import copy

    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.model_loader.loader import load_state_dict, load_weights_into
    from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM
    from sglang_v4.tools.make_checkpoint import write_checkpoint
    from transformers import DeepseekV4Config
    from transformers import DeepseekV4ForCausalLM as HFModel

    cfg = copy.deepcopy(CONFIGS["sliding_first"])
    full = ModelConfig.from_dict(copy.deepcopy(cfg)).to_dict()  # HF dialect with nested rope_parameters
    path = write_checkpoint(str(tmp_path), fmt=fmt, weights=weights, seed=5, config_dict=full)
    mc = ModelConfig.from_pretrained(path)
    ours = DeepseekV4ForCausalLM(mc)
    load_weights_into(ours, path, progress=False)
    hf = HFModel(DeepseekV4Config(**{k: v for k, v in cfg.items() if k != "model_type"})).eval()
    hf.load_state_dict(
        {k: v.float() if v.is_floating_point() else v for k, v in load_state_dict(path).items()}
    )
    twin = Twin(name=fmt, cfg=cfg, mc=mc, hf=hf, ours=ours)
    ids = random_ids(300, seed=77)
    out = Driver(twin).run_chunked(ids, 128)
    assert (out - hf_logprobs(twin, ids)).abs().max().item() <= TOL
