"""Resume exactness on other layer schedules, and the cold run itself against HF transformers.

``test_resume_exactness.py`` crosses every resume boundary on ``sliding_first``. Here the same
kinds of resume run on ``hca_first_yarn`` (three HCA layers, two hash-routed MoE layers, YaRN on
the compress rope) and on the ``tiny`` preset (the embedded default model: the real 129,280-token
vocabulary, two CSA layers with ``index_topk`` 16 below the compressed entries of these prompts),
in fp32, fp8 and fp8 + fp4-indexer KV: a hit with a 1-token extend, a prompt prefilled in 3- and
129-token chunks, retraction and re-admission on a tight pool, and two concurrent prompts parting
inside a 4-token compression group. Oracle: the cold, unchunked, uncached run in the same format
(tolerances in ``resume_testutil``). That cold run is itself checked against HF transformers'
``DeepseekV4ForCausalLM`` on the same weights, for these two models and ``sliding_first`` (fp32
KV; every prompt logprob within 1e-3, as in ``test_model_parity.py``, measured ~1e-5; greedy
tokens equal). Fast tier: the two cold-run checks of the test-config models and one chunked
prefill (``hca_first_yarn``, fp8 + fp4, 3-token chunks); the rest is slow.
"""

from __future__ import annotations

import copy

import pytest
from dsv4_testutil import CONFIGS, hf_greedy, hf_logprobs, make_twin, random_ids
from resume_testutil import (
    RESUME_MODEL_SEED,
    assert_matches,
    batch_invariant_gemms,
    cells,
    cold_oracle,
    expected_hit,
    make_sched,
    run_req,
    submit_lp,
)
from scheduler_testutil import assert_idle, drain
from sglang_v4.configs.presets import get_preset

HF_TOL = 1e-3
SEED = RESUME_MODEL_SEED  # weights of the test-config checkpoints (the tiny preset's: the default model's, 0)


@pytest.fixture(scope="module")
def model_dirs(
    tmp_path_factory: pytest.TempPathFactory, default_model_dir: str, resume_model_dir: str
) -> dict[str, str]:
    from sglang_v4.tools.make_checkpoint import write_checkpoint

    d = tmp_path_factory.mktemp("hca_first_yarn")
    cfg = copy.deepcopy(CONFIGS["hca_first_yarn"])
    return {
        "hca_first_yarn": write_checkpoint(str(d), fmt="hf", weights="fp32", seed=SEED, config_dict=cfg),
        "tiny": default_model_dir,
        "sliding_first": resume_model_dir,  # the model of test_resume_exactness.py
    }


def vocab(name: str) -> int:
    return 129280 if name == "tiny" else 1000


GRID = [(n, f) for n in ("hca_first_yarn", "tiny") for f in ("fp32", "fp8", "fp8_fp4")]


@pytest.mark.parametrize(
    "name", ["sliding_first", "hca_first_yarn", pytest.param("tiny", marks=pytest.mark.slow)]
)
def test_cold_run_equals_hf(model_dirs: dict[str, str], name: str) -> None:
    """The oracle of every resume test, the cold scheduler run, against HF transformers."""
    cfg = copy.deepcopy(get_preset("tiny") if name == "tiny" else CONFIGS[name])
    twin = make_twin(name, seed=0 if name == "tiny" else SEED, cfg=cfg)
    ids = random_ids(300, seed=11, vocab=vocab(name))
    cold = cold_oracle(model_dirs[name], "fp32")(ids, 4, prompt_logprobs=True)
    ref = hf_logprobs(twin, ids)
    want = [float(ref[i - 1, ids[i]]) for i in range(1, len(ids))]
    gap = max(abs(a - b) for a, b in zip(cold["in_lp"][1:], want))
    assert gap <= HF_TOL, gap
    assert cold["ids"] == hf_greedy(twin, ids, 4)


@pytest.mark.parametrize("name,fmt", cells(GRID, set()))
def test_hit_then_one_token_extend(model_dirs: dict[str, str], name: str, fmt: str) -> None:
    s = make_sched(model_dirs[name], fmt)
    base = random_ids(600, seed=21, vocab=vocab(name))
    run_req(s, "a", base, 2)
    for shared in (256, 512):
        ids = base[:shared] + [base[shared] ^ 1]
        got = run_req(s, f"b{shared}", ids)
        assert got["cached"] == expected_hit(shared, len(ids))
        assert_matches(got, cold_oracle(model_dirs[name], fmt)(ids), fmt, f"hit {shared} + 1")
    assert_idle(s)


@pytest.mark.parametrize(
    "name,fmt,chunk",
    cells([(*g, c) for g in GRID for c in (3, 129)], {("hca_first_yarn", "fp8_fp4", 3)}),
)
def test_chunked_prefill_equals_unchunked(
    model_dirs: dict[str, str], name: str, fmt: str, chunk: int
) -> None:
    ids = random_ids(385, seed=22, vocab=vocab(name))
    s = make_sched(model_dirs[name], fmt, chunked_prefill_size=chunk, disable_radix_cache=True)
    got = run_req(s, "x", ids, 4, prompt_logprobs=True)
    assert_matches(
        got, cold_oracle(model_dirs[name], fmt)(ids, 4, prompt_logprobs=True), fmt, f"chunk {chunk}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["fp8", "fp8_fp4"])
def test_quantized_gap_is_gemm_rounding(model_dirs: dict[str, str], fmt: str) -> None:
    """The tiny preset's 3-token-chunk cells (prompt logprob gaps 0.055 in fp8, 0.049 with fp4
    indexer keys) match their cold run within the fp32 tolerance once the CPU forward is
    batch-invariant (every fp32 GEMM in float64): their gaps are fp32 GEMM rounding that the
    codecs amplify, not KV or compressor state."""
    ids = random_ids(385, seed=22, vocab=vocab("tiny"))
    with batch_invariant_gemms():
        s = make_sched(model_dirs["tiny"], fmt, chunked_prefill_size=3, disable_radix_cache=True)
        got = run_req(s, "x", ids, 4, prompt_logprobs=True)
        cold_s = make_sched(model_dirs["tiny"], fmt, disable_radix_cache=True)
        cold = run_req(cold_s, "cold", ids, 4, prompt_logprobs=True)
    assert cold["cached"] == 0 and len(got["in_lp"]) == len(ids)
    assert_matches(got, cold, "fp32", f"tiny, {fmt}, chunk 3, float64 GEMMs")


@pytest.mark.parametrize("name,fmt", cells(GRID, set()))
def test_retracted_requests_equal_cold(model_dirs: dict[str, str], name: str, fmt: str) -> None:
    s = make_sched(model_dirs[name], fmt, max_total_tokens=5 * 256)
    prompts = [random_ids(490, seed=30 + i, vocab=vocab(name)) for i in range(3)]
    for i, p in enumerate(prompts):
        submit_lp(s, f"r{i}", p, 40)
    got = drain(s)
    assert s.num_retractions > 0
    for i, p in enumerate(prompts):
        assert_matches(got[f"r{i}"], cold_oracle(model_dirs[name], fmt)(p, 40), fmt, f"r{i}")
    assert_idle(s)


@pytest.mark.parametrize("name,fmt", cells(GRID, set()))
def test_concurrent_prompts_diverging_inside_a_group(model_dirs: dict[str, str], name: str, fmt: str) -> None:
    s = make_sched(model_dirs[name], fmt)
    base = random_ids(298, seed=40, vocab=vocab(name))  # parts at 298, inside group 296..299
    a = base + random_ids(20, seed=41, vocab=vocab(name))
    b = base + random_ids(21, seed=42, vocab=vocab(name))
    assert a[298] != b[298]
    submit_lp(s, "a", a)
    submit_lp(s, "b", b)
    got = drain(s)
    assert got["b"]["cached"] == 256
    for rid, ids in (("a", a), ("b", b)):
        assert_matches(got[rid], cold_oracle(model_dirs[name], fmt)(ids), fmt, rid)
    assert_idle(s)
