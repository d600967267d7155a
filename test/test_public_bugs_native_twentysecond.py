"""The twenty-second set of public bug reports on SGLang's native ``/generate`` API, replayed
against sglang-v4.

Fixture: conftest's session ``plain_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over). Oracles: the prompts through the DeepSeek-V4
tokenizer (``transformers``, independent of the runtime's wrapper), SGLang 0.5.23's own
``SamplingParams.verify`` (installed in the venv) for which parameters are valid, and single
requests (cold runs) for the entries of a batch.
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
from server_fixture import ServerHandle

pytestmark = pytest.mark.timeout(240)


def _gen(server: ServerHandle, body: dict[str, Any]) -> Any:
    """The JSON answer of ``/generate``; asserts HTTP 200."""
    r = requests.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_vllm_9336_zero_new_tokens_returns_only_prompt_logprobs(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """vllm-project/vllm#9336 (``max_tokens = 0`` refused, though scoring a prompt needs no
    generated token). SGLang 0.5.23's ``SamplingParams.verify`` accepts ``max_new_tokens == 0``
    (checked here: the oracle). Expected: no text, ``completion_tokens`` 0, one prompt logprob
    entry per prompt token from ``logprob_start_len`` 0 (count from the tokenizer), no output
    entries, and a ``length`` finish."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    SamplingParams(max_new_tokens=0).verify(vocab_size=1000)
    prompt = "The capital of France is"
    ids = tok.encode(prompt)
    out = _gen(
        plain_fake_server,
        {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
        },
    )
    meta = out["meta_info"]
    assert out["text"] == ""
    assert meta["completion_tokens"] == 0
    assert meta["prompt_tokens"] == len(ids)
    assert [e[1] for e in meta["input_token_logprobs"]] == ids
    assert meta["output_token_logprobs"] == []
    assert meta["finish_reason"]["type"] == "length"


def test_sglang_1820_batch_of_input_ids_equals_single_requests(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#1820 (``generate(input_ids=[[...], [...]])``, a batch of token-id
    prompts sharing one ``sampling_params`` dict). Expected: one answer per prompt, in order,
    each equal (text, ``prompt_tokens``, ``completion_tokens``) to the same prompt sent alone."""
    prompts = ["Hello, my name is", "The president of the United States is", "AI"]
    ids = [tok.encode(p) for p in prompts]
    sp = {"max_new_tokens": 5, "temperature": 0}
    batch = _gen(plain_fake_server, {"input_ids": ids, "sampling_params": sp})
    assert isinstance(batch, list) and len(batch) == len(ids)
    for one_ids, got in zip(ids, batch):
        single = _gen(plain_fake_server, {"input_ids": one_ids, "sampling_params": sp})
        assert got["text"] == single["text"]
        assert got["meta_info"]["prompt_tokens"] == len(one_ids)
        assert got["meta_info"]["completion_tokens"] == single["meta_info"]["completion_tokens"] == 5


def test_sglang_189_text_in_logprobs_is_each_tokens_own_text(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """sgl-project/sglang#189 (``return_text_in_logprobs`` turned ``/generate``'s logprob entries
    into ``(logprob, id, text)``). Expected: for prompt and output entries alike, the text is the
    tokenizer's decoding of that one id (oracle: ``transformers``), the ids are the prompt's and
    the fake model's, and the top-k entries carry their own ids' text."""
    from server_fixture import fake_output_ids

    prompt = "Hello, 世界 and friends"
    ids = tok.encode(prompt)
    out = _gen(
        plain_fake_server,
        {
            "text": prompt,
            "sampling_params": {"max_new_tokens": 4, "temperature": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
            "top_logprobs_num": 2,
            "return_text_in_logprobs": True,
        },
    )
    meta = out["meta_info"]
    assert [e[1] for e in meta["input_token_logprobs"]] == ids
    assert [e[2] for e in meta["input_token_logprobs"]] == [tok.decode([i]) for i in ids]
    want = fake_output_ids(tok, 4)
    assert [e[1] for e in meta["output_token_logprobs"]] == want
    assert [e[2] for e in meta["output_token_logprobs"]] == [tok.decode([i]) for i in want]
    for pos in meta["output_top_logprobs"]:
        assert [t[2] for t in pos] == [tok.decode([t[1]]) for t in pos]


@pytest.mark.parametrize("no_stop_trim", [False, True])
def test_sglang_1661_no_stop_trim_keeps_the_matched_stop_string(
    plain_fake_server: ServerHandle, tok: Any, no_stop_trim: bool
) -> None:
    """sgl-project/sglang#1661 (``no_eos_trim`` renamed ``no_stop_trim``: with it the matched stop
    string stays in the output text). Oracle: the fake model's text (``FAKE_TEXT`` through the
    tokenizer), cut at the first ``"Stop"`` (kept through the end of the token that completes it
    when ``no_stop_trim``); ``matched_stop`` names the string either way."""
    from server_fixture import FAKE_TEXT

    out = _gen(
        plain_fake_server,
        {
            "text": "Go:",
            "sampling_params": {
                "max_new_tokens": 40,
                "temperature": 0,
                "stop": ["Stop"],
                "no_stop_trim": no_stop_trim,
            },
        },
    )
    cut = FAKE_TEXT.index("Stop")
    if no_stop_trim:
        ids = tok.encode(FAKE_TEXT)
        n = next(k for k in range(1, len(ids) + 1) if "Stop" in tok.decode(ids[:k]))
        assert out["text"] == tok.decode(ids[:n])
        assert out["text"].endswith("Stop") or "Stop" in out["text"][cut:]
    else:
        assert out["text"] == FAKE_TEXT[:cut]
    fr = out["meta_info"]["finish_reason"]
    assert fr["type"] == "stop" and fr["matched"] == "Stop"


def test_sglang_4391_null_stop_fields_mean_their_defaults(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#4391 (the sampling-parameter reference corrected ``stop_token_ids``'
    default to ``None``; SGLang 0.5.23's ``SamplingParams`` takes ``None`` for ``stop``,
    ``stop_token_ids`` and ``stop_regex``, checked here). Expected: a request that sends them as
    JSON ``null`` is answered as the request that leaves them out (a cold run)."""
    from sglang.srt.sampling.sampling_params import SamplingParams

    SamplingParams(max_new_tokens=6, stop=None, stop_token_ids=None, stop_regex=None).verify(vocab_size=1000)
    sp = {"max_new_tokens": 6, "temperature": 0}
    plain = _gen(plain_fake_server, {"text": "Go:", "sampling_params": sp})
    nulls = _gen(
        plain_fake_server,
        {"text": "Go:", "sampling_params": {**sp, "stop": None, "stop_token_ids": None, "stop_regex": None}},
    )
    assert nulls["text"] == plain["text"]
    assert nulls["output_ids"] == plain["output_ids"]
    assert (
        nulls["meta_info"]["finish_reason"]
        == plain["meta_info"]["finish_reason"]
        == {"type": "length", "length": 6}
    )
