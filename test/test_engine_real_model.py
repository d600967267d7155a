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


def test_skip_tokenizer_init_matches_the_normal_engine(engine):
    """``Engine(skip_tokenizer_init=True)`` on the same model: the HF tokenizer's ids of each
    prompt (checked against the ids the normal engine scored) give the normal engine's greedy
    output ids, without ``text``; ``stop_token_ids`` still stop; a text prompt is refused; every
    page comes back."""
    from sglang_v4 import Engine
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(engine.server_args.model_path)
    prompts = ["Hello, my name is", "1, 2, 3, 4,"]
    sp = {"temperature": 0, "max_new_tokens": 6}
    normal = [
        engine.generate(prompt=p, sampling_params=sp, return_logprob=True, logprob_start_len=0)
        for p in prompts
    ]
    ids = [tok.encode(p) for p in prompts]
    assert [[e[1] for e in n["meta_info"]["input_token_logprobs"]] for n in normal] == ids

    old = os.environ.pop("SGLANG_V4_SCHEDULER_CLASS", None)
    try:
        skip = Engine(model_path=engine.server_args.model_path, skip_tokenizer_init=True, skip_warmup=True)
    finally:
        if old is not None:
            os.environ["SGLANG_V4_SCHEDULER_CLASS"] = old
    with skip:
        idle = skip.get_server_info()["kv_pool"]
        # one at a time, as the normal engine ran them (same batch shapes: exact on every device)
        outs = [skip.generate(input_ids=i, sampling_params=sp) for i in ids]
        assert [o["output_ids"] for o in outs] == [n["output_ids"] for n in normal]
        assert all("text" not in o for o in outs)
        assert [tok.decode(o["output_ids"], skip_special_tokens=True) for o in outs] == [
            n["text"] for n in normal
        ]
        want = normal[0]["output_ids"]
        stop = want[2]
        out = skip.generate(input_ids=ids[0], sampling_params={**sp, "stop_token_ids": [stop]})
        assert out["output_ids"] == want[: want.index(stop) + 1]
        assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
        chunks = list(skip.generate(input_ids=ids[1], sampling_params=sp, stream=True))
        assert chunks[-1]["output_ids"] == normal[1]["output_ids"] and all("text" not in c for c in chunks)
        with pytest.raises(ValueError, match="input_ids"):
            skip.generate(prompt=prompts[0], sampling_params=sp)
        assert skip.flush_cache()
        assert skip.get_server_info()["kv_pool"] == idle
