"""The runtime on HF transformers' own DeepSeek-V4 test config, against HF transformers (fp32, CPU).

``TESTER`` is the small config of ``DeepseekV4ModelTester`` in huggingface/transformers
(tests/models/deepseek_v4/test_modeling_deepseek_v4.py) with the ``CausalLMModelTester`` defaults it
inherits (vocabulary 99, pad/bos/eos 0/1/2): 2 layers (HCA, CSA), sliding window 8, head_dim 32 with
an 8-dim rope, mHC with 2 streams and 3 Sinkhorn iterations, 2 indexer heads of 16 dims, top-2. Two
values differ, each for a documented reason:

* ``hidden_act``: the tester inherits ``"gelu"`` from ``CausalLMModelTester``'s defaults; DeepSeek-V4
  is SiLU-gated and the runtime refuses any other activation by name (test_model_config_variants),
  so these twins use ``"silu"``, ``DeepseekV4Config``'s default.
* top-k ties: with 2 indexer heads many compressed entries score exactly 0 (both ReLUs off) and tie
  at the top-k boundary. HF's ``torch.topk`` breaks such ties in no documented order; the runtime
  picks the earlier entry (test_radix_indexer_ties). The oracle here is HF with that rule added to
  its scores (``-1e-30`` per entry index, which separates exact ties only); without it the two
  disagree by up to 2 nats from 16 tokens on.

What HF's tester checks that a serving runtime must also hold, with HF's single uncached forward
(or its own cached ``generate``) as the oracle: prefill logits at lengths around the window (8), the
CSA ratio (4) and the HCA ratio (128, 256); greedy decode over those boundaries; chunked prefill; a
batch of mixed lengths (HF's own batched forward with right padding and an ``attention_mask``, the
padding HF supports for this model; it skips left padding by design: the compressor pools pad
tokens); prefix-cache hits at the 256-token block boundary through the scheduler; the hash-routed
MoE layer and YaRN on the tester's shapes.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import torch
from dsv4_testutil import CSA, HCA, Driver, Twin, hf_greedy, hf_logprobs, make_twin, random_ids
from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
from sglang_v4.managers.scheduler import Scheduler
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.server_args import ServerArgs
from sglang_v4.tools.make_checkpoint import write_checkpoint

TOL = 1e-3  # |dlogprob|, as test_model_parity (we see ~3e-6)
VOCAB = 99

# DeepseekV4ModelTester in huggingface/transformers (see the module docstring for hidden_act)
TESTER: dict[str, Any] = dict(
    model_type="deepseek_v4",
    vocab_size=VOCAB,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=1,
    num_hidden_layers=2,
    num_experts_per_tok=2,
    moe_intermediate_size=64,
    max_position_embeddings=64,
    head_dim=32,
    partial_rotary_factor=8 / 32,
    q_lora_rank=32,
    o_groups=2,
    o_lora_rank=16,
    n_routed_experts=4,
    n_shared_experts=1,
    mlp_layer_types=["moe", "moe"],
    layer_types=[HCA, CSA],
    sliding_window=8,
    hc_mult=2,
    hc_sinkhorn_iters=3,
    hc_eps=1.0e-6,
    index_n_heads=2,
    index_head_dim=16,
    index_topk=2,
    num_nextn_predict_layers=0,
    scoring_func="sqrtsoftplus",
    routed_scaling_factor=1.5,
    swiglu_limit=10.0,
    rope_theta=10000.0,
    compress_rope_theta=160000.0,
    attention_bias=False,
    attention_dropout=0.0,
    hidden_act="silu",
    initializer_range=0.02,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)

VARIANTS: dict[str, dict[str, Any]] = {
    "tester": TESTER,
    # the tester's "dedicated test covers the hash path": a hash-routed first layer
    "tester_hash": dict(TESTER, mlp_layer_types=["hash_moe", "moe"]),
    # YaRN whose original length (16) the boundary lengths below outgrow
    "tester_yarn": dict(
        TESTER,
        rope_parameters={
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 16,
            "beta_fast": 32,
            "beta_slow": 1,
        },
    ),
}

# window 8, CSA ratio 4 and HCA ratio 128 (and the 256-token block) each straddled
BOUNDARY_LENGTHS = [1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 33, 64, 65, 127, 128, 129, 255, 256, 257]


def _break_ties_to_earlier_entry(scorer: torch.nn.Module, args: tuple, scores: torch.Tensor) -> torch.Tensor:
    """Forward hook on HF's ``DeepseekV4IndexerScorer``: ``[B, S, T]`` scores minus ``1e-30 * t``,
    so of exactly equal scores the earlier compressed entry ranks first (the runtime's rule)."""
    return scores - torch.arange(scores.shape[-1], dtype=scores.dtype) * 1e-30


def _add_tie_rule(hf: torch.nn.Module) -> int:
    n = 0
    for m in hf.modules():
        if type(m).__name__ == "DeepseekV4IndexerScorer":
            m.register_forward_hook(_break_ties_to_earlier_entry)
            n += 1
    return n


@functools.cache
def get_twin(name: str) -> Twin:
    twin = make_twin(name, seed=3, cfg=VARIANTS[name])
    assert _add_tie_rule(twin.hf) == sum(t == CSA for t in VARIANTS[name]["layer_types"])
    return twin


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return (a - b).abs().max().item()


@pytest.mark.parametrize("name", ["tester", "tester_hash", "tester_yarn"])
def test_one_batch_of_boundary_lengths_matches_hf(name: str) -> None:
    """Every boundary length as ONE mixed extend batch, each vs its own HF forward."""
    twin = get_twin(name)
    drv = Driver(twin)
    seqs = [random_ids(n, seed=n, vocab=VOCAB) for n in BOUNDARY_LENGTHS]
    outs = drv.step([(drv.new_req(), ids) for ids in seqs])
    for ids, out in zip(seqs, outs):
        err = _max_err(out, hf_logprobs(twin, ids))
        assert err <= TOL, f"{name} len {len(ids)}: max |dlogprob| {err}"


@pytest.mark.parametrize("name,chunk", [("tester", 3), ("tester", 8), ("tester", 129), ("tester_hash", 5)])
def test_chunked_prefill_matches_hf(name: str, chunk: int) -> None:
    """300 tokens in chunks off the ratio (3, 5), on the window (8) and across 128/256 (129)."""
    twin = get_twin(name)
    ids = random_ids(300, seed=chunk, vocab=VOCAB)
    err = _max_err(Driver(twin).run_chunked(ids, chunk), hf_logprobs(twin, ids))
    assert err <= TOL, f"chunk {chunk}: max |dlogprob| {err}"


@pytest.mark.parametrize("prompt_len", [5, 123, 251])
def test_greedy_decode_matches_hf_with_and_without_cache(prompt_len: int) -> None:
    """10 greedy tokens crossing the window, the ratio and the 128 / 256 boundaries: the runtime's
    decode equals HF's uncached argmax loop and HF's own cached ``generate``."""
    twin = get_twin("tester")
    ids = random_ids(prompt_len, seed=prompt_len + 11, vocab=VOCAB)
    ref = hf_greedy(twin, ids, 10)
    prompt = torch.tensor([ids])
    with torch.no_grad():  # an explicit all-ones mask: generate would mask the prompt's pad ids (0)
        gen = twin.hf.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=10,
            do_sample=False,
            use_cache=True,
            eos_token_id=None,
            pad_token_id=0,
        )
    assert gen[0, prompt_len:].tolist() == ref, "HF's cached generate differs from its uncached forward"
    assert Driver(twin).greedy(ids, 10, chunk=64) == ref


def test_mixed_batch_matches_hf_right_padded_batch() -> None:
    """HF's batched forward (right padding, ``attention_mask`` zero on the pads) and the runtime's
    ragged batch agree on every real position of every row."""
    twin = get_twin("tester")
    lens = [129, 9, 64, 257]
    seqs = [random_ids(n, seed=100 + n, vocab=VOCAB) for n in lens]
    width = max(lens)
    input_ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, ids in enumerate(seqs):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        mask[i, : len(ids)] = 1
    with torch.no_grad():
        ref = torch.log_softmax(twin.hf(input_ids, attention_mask=mask).logits.float(), dim=-1)
    drv = Driver(twin)
    outs = drv.step([(drv.new_req(), ids) for ids in seqs])
    for i, (ids, out) in enumerate(zip(seqs, outs)):
        err = _max_err(out, ref[i, : len(ids)])
        assert err <= TOL, f"row {i} (len {len(ids)}): max |dlogprob| {err}"


# ---------------------------------------------------------------- the scheduler (server path)


@pytest.fixture(scope="module")
def tester_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    """An fp32 HF-format checkpoint of ``TESTER`` with the twins' weights; its context length is
    raised to 4096 (``max_position_embeddings`` only bounds the served prompt: default rope)."""
    cfg = dict(copy.deepcopy(TESTER), max_position_embeddings=4096)
    d = tmp_path_factory.mktemp("hf_tester")
    return write_checkpoint(str(d), fmt="hf", weights="fp32", seed=3, config_dict=cfg)


@pytest.fixture(scope="module")
def tester_hf(tester_dir: str) -> Twin:
    """HF's model read by HF itself from ``tester_dir`` (tie rule added), in a ``Twin`` for the
    oracle helpers."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(tester_dir, dtype=torch.float32).eval()
    assert _add_tie_rule(hf) == 1
    return Twin(name="tester_dir", cfg=TESTER, mc=None, hf=hf, ours=None)  # type: ignore[arg-type]


def _sched(model_dir: str, **kw: Any) -> Scheduler:
    args: dict[str, Any] = dict(
        model_path=model_dir,
        device="cpu",
        dtype="float32",
        max_total_tokens=32 * 256,
        chunked_prefill_size=2048,
        skip_warmup=True,
    )
    args.update(kw)
    return Scheduler(ServerArgs(**args))


def _run(s: Scheduler, reqs: dict[str, list[int]], n: int, start: int = 0) -> dict[str, dict[str, Any]]:
    """Greedy ``n`` tokens for every ``rid -> prompt ids`` (added together); per rid the output
    ids, the prompt-token logprobs from position ``start`` (``logprob_start_len``; as in SGLang,
    no prefix-cache hit reaches past it) and ``cached_tokens``."""
    for rid, ids in reqs.items():
        sp = SamplingParams.from_dict({"max_new_tokens": n, "temperature": 0, "ignore_eos": True})
        sp.normalize(None)
        s.add_request(
            TokenizedGenerateReqInput(
                rid=rid,
                input_text=None,
                input_ids=ids,
                sampling_params=sp,
                return_logprob=True,
                logprob_start_len=start,
            )
        )
    res: dict[str, dict[str, Any]] = {rid: {"ids": [], "lp": [], "prompt_lp": []} for rid in reqs}
    for _ in range(10_000):
        if not s.has_work():
            return res
        out = s.step()
        if out is None:
            continue
        for i, rid in enumerate(out.rids):
            res[rid]["ids"] += out.output_ids[i]
            res[rid]["lp"] += out.output_token_logprobs_val[i]
            res[rid]["prompt_lp"] += out.input_token_logprobs_val[i]
            res[rid]["cached"] = out.cached_tokens[i]
    raise AssertionError("scheduler did not finish")


def _check_against_hf(twin: Twin, ids: list[int], got: dict[str, Any], n: int, start: int = 0) -> None:
    """``got`` (from ``_run``) has HF's greedy tokens and, within ``TOL``, HF's logprobs of the
    prompt tokens after ``start`` and of every output token."""
    assert got["ids"] == hf_greedy(twin, ids, n)
    seq = ids + got["ids"]
    lp = hf_logprobs(twin, seq)
    ref = [lp[i - 1, seq[i]].item() for i in range(start + 1, len(seq))]
    assert got["prompt_lp"][0] is None and len(got["prompt_lp"]) == len(ids) - start
    ours = got["prompt_lp"][1:] + got["lp"]
    assert len(ours) == len(ref)
    err = max(abs(a - b) for a, b in zip(ours, ref))
    assert err <= TOL, f"len {len(ids)}: max |dlogprob| {err}"


@pytest.mark.parametrize("suffix", [1, 2, 9])
def test_prefix_cache_hit_at_block_boundary_matches_hf(tester_dir: str, tester_hf: Twin, suffix: int) -> None:
    """A 256-token shared prefix served from the radix cache (prompts of 257 / 258 / 265 tokens,
    the window, the CSA entries and the HCA entry ending at 256 all restored) gives HF's greedy
    tokens and logprobs (prompt logprobs from 256: a hit never reaches past
    ``logprob_start_len``), as the cold run does."""
    s = _sched(tester_dir)
    base = random_ids(256, seed=suffix, vocab=VOCAB)
    warm = base + random_ids(suffix + 3, seed=suffix + 1, vocab=VOCAB)
    ids = base + random_ids(suffix, seed=suffix + 2, vocab=VOCAB)
    _run(s, {"warm": warm}, 2, start=256)
    hit = _run(s, {"hit": ids}, 6, start=256)["hit"]
    assert hit["cached"] == 256
    _check_against_hf(tester_hf, ids, hit, 6, start=256)
    assert s.flush_cache()
    cold = _run(s, {"cold": ids}, 6)["cold"]
    assert cold["cached"] == 0 and cold["ids"] == hit["ids"]
    _check_against_hf(tester_hf, ids, cold, 6)


def test_scheduler_batch_of_mixed_lengths_matches_hf(tester_dir: str, tester_hf: Twin) -> None:
    """Requests of 7 / 9 / 128 / 129 / 257 tokens scheduled together, prefilled in 100-token chunks
    (``chunked_prefill_size``) and decoded in one batch: each gives HF's prompt logprobs and greedy
    tokens."""
    s = _sched(tester_dir, chunked_prefill_size=100)
    reqs = {f"r{n}": random_ids(n, seed=200 + n, vocab=VOCAB) for n in (7, 9, 128, 129, 257)}
    got = _run(s, reqs, 5)
    for rid, ids in reqs.items():
        _check_against_hf(tester_hf, ids, got[rid], 5)
