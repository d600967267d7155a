"""``sglang_v4.Engine()`` on the embedded default model with the real scheduler, against HF
transformers' ``DeepseekV4ForCausalLM`` greedy generation on the same checkpoint."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("sglang_v4.managers.scheduler")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def engine():
    from sglang_v4 import Engine

    old = os.environ.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    try:
        eng = Engine()  # no model_path: the embedded default model
    finally:
        if old is not None:
            os.environ["SGLANG_V4_SCHEDULER_CLASS"] = old
    with eng:
        yield eng


def test_engine_greedy_matches_hf_and_api_shapes(engine):
    import torch
    from transformers import AutoModelForCausalLM

    prompt = "Hello, my name is"
    out = engine.generate(
        prompt=prompt,
        sampling_params={"temperature": 0, "max_new_tokens": 4, "ignore_eos": True},
        return_logprob=True,
        logprob_start_len=0,
    )
    model = AutoModelForCausalLM.from_pretrained(engine.server_args.model_path, dtype=torch.float32).eval()
    in_ids = [e[1] for e in out["meta_info"]["input_token_logprobs"]]
    assert len(in_ids) == out["meta_info"]["prompt_tokens"]
    with torch.no_grad():
        ref = model.generate(torch.tensor([in_ids]), max_new_tokens=4, do_sample=False)[0].tolist()
    assert out["output_ids"] == ref[len(in_ids) :]
    assert [e[1] for e in out["meta_info"]["output_token_logprobs"]] == out["output_ids"]
    assert all(e[0] <= 0.0 for e in out["meta_info"]["output_token_logprobs"])

    chunks = list(
        engine.generate(
            prompt=prompt,
            sampling_params={"temperature": 0, "max_new_tokens": 4, "ignore_eos": True},
            stream=True,
        )
    )
    assert chunks[-1]["output_ids"] == out["output_ids"] and chunks[-1]["text"] == out["text"]
    info = engine.get_server_info()
    assert "kv_pool" in info and info["max_total_num_tokens"] > 0
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.generate(input_ids=[info["max_total_num_tokens"] * 1000])


def test_engine_max_new_tokens_zero_scores_the_prompt_only(engine):
    """``max_new_tokens: 0`` through the Engine: no token, finish reason length 0, completion 0,
    and the prompt logprobs equal those of an independent run with ``max_new_tokens: 1`` (the
    prompt is shorter than a block, so neither run can hit the prefix cache)."""
    prompt = "The capital of France is"
    kw = dict(return_logprob=True, logprob_start_len=0)
    zero = engine.generate(prompt=prompt, sampling_params={"temperature": 0, "max_new_tokens": 0}, **kw)
    one = engine.generate(prompt=prompt, sampling_params={"temperature": 0, "max_new_tokens": 1}, **kw)
    m0, m1 = zero["meta_info"], one["meta_info"]
    assert zero["output_ids"] == [] and zero["text"] == ""
    assert m0["finish_reason"] == {"type": "length", "length": 0}
    assert m0["completion_tokens"] == 0 and m0["output_token_logprobs"] == []
    assert m1["completion_tokens"] == 1 and m0["prompt_tokens"] == m1["prompt_tokens"]
    assert [e[1] for e in m0["input_token_logprobs"]] == [e[1] for e in m1["input_token_logprobs"]]
    assert len(m0["input_token_logprobs"]) == m0["prompt_tokens"]
    assert m0["input_token_logprobs"][0][0] is None and m1["input_token_logprobs"][0][0] is None
    got = [e[0] for e in m0["input_token_logprobs"][1:]]
    assert got == pytest.approx([e[0] for e in m1["input_token_logprobs"][1:]], abs=1e-5)
