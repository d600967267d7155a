"""A twenty-seventh set of public bug reports, replayed against the legacy ``POST /v1/completions``
route: empty prompt lists, ``best_of`` validation, a prompt plus ``max_tokens`` past the context
length, ``logprobs`` filled (not ``null``) on streamed and whole answers, and echo with logprobs
covering every prompt and completion token on the real tokenizer manager.

Every report passed as-is; the tests are regression guards.

Two fixtures: the route in process over ``openai_fake_tm.FakeTM`` (a fixed reply; the engine
requests it receives are kept, so a refusal is seen to reach no engine), and ``plain_fake_server``
(``server_fixture.FakeScheduler`` behind the real tokenizer manager and detokenizer, context
``FAKE_CONTEXT_LEN`` tokens, writing ``FAKE_TEXT``'s tokens; fake logprobs ``-0.25`` for output
tokens). Oracles: the DeepSeek-V4 tokenizer loaded by ``transformers`` on its own (``tok``: ids,
per-token texts), the ``openai`` client's types and errors, the OpenAI API reference (legacy
completions) and the reports' stated expected values.
"""

from __future__ import annotations

from typing import Any

import pytest
from openai_fake_tm import FakeTM
from openai_fake_tm import app_client as _app
from openai_fake_tm import oai_client as _oai
from public_bugs_testutil import post, sse
from server_fixture import FAKE_CONTEXT_LEN, ServerHandle, fake_output_ids

openai = pytest.importorskip("openai")

from openai.types import Completion  # noqa: E402

COMPLETIONS = "/v1/completions"
FAKE_MODEL = "dsv4-test"  # app_client's served name
SERVER_MODEL = "qa-model"  # plain_fake_server's served name


def _refused(call: Any, param: str) -> str:
    """The message of the ``openai.BadRequestError`` that ``call()`` raises; asserts its ``param``."""
    with pytest.raises(openai.BadRequestError) as ei:
        call()
    assert ei.value.status_code == 400
    assert ei.value.body["param"] == param, ei.value.body
    return ei.value.message


def _server_ok(server: ServerHandle, body: dict[str, Any]) -> Completion:
    """The answer of ``body`` (model added) on ``server`` as the ``openai`` client's ``Completion``."""
    r = post(server, COMPLETIONS, {"model": SERVER_MODEL, **body})
    assert r.status_code == 200, r.text
    return Completion.model_validate(r.json())


def _pieces(tok: Any, ids: list[int]) -> list[str]:
    """Each id's own text as the tokenizer decodes it alone."""
    return [tok.decode([i]) for i in ids]


# --------------------------------------------------------------------------- prompt shapes


@pytest.mark.parametrize(
    "prompt", [[], [[]], [""]], ids=["empty-list", "empty-id-list", "empty-string-in-list"]
)
def test_vllm_55391_empty_prompt_list_is_a_400_naming_prompt(tok: Any, prompt: list[Any]) -> None:
    """vllm-project/vllm#55391 and NVIDIA/TensorRT-LLM#17737: ``"prompt": []`` passed validation
    (vLLM) or reached ``request.prompt[0]`` (an opaque ``list index out of range``, TensorRT-LLM).
    Expected (both fixes): an HTTP 400 whose error names ``prompt`` and says it must not be empty,
    raised by the ``openai`` client as ``BadRequestError``, before any engine request; an empty
    member of a batch (``[[]]``, ``[""]``) likewise. A non-empty list still answers."""
    tm = FakeTM(tok)
    comp = _oai(_app(tm)).completions.create
    msg = _refused(lambda: comp(model=FAKE_MODEL, prompt=prompt, max_tokens=2), "prompt")
    assert "empty" in msg
    assert tm.received == []
    out = comp(model=FAKE_MODEL, prompt=["Hi"], max_tokens=2)
    assert len(out.choices) == 1 and len(tm.received) == 1


# --------------------------------------------------------------------------- best_of


@pytest.mark.parametrize(
    ("best_of", "n"), [(0, 1), (-1, 1), (1, 2), (2, 3)], ids=["zero", "negative", "below-n", "below-n-3"]
)
def test_vllm_18555_best_of_below_one_or_n_is_a_400_naming_best_of(tok: Any, best_of: int, n: int) -> None:
    """vllm-project/vllm#18555: ``best_of`` lacked its own checks (an integer, at least 1, at least
    ``n``). Expected (vLLM's rules, OpenAI's reference: "best_of must be greater than n"): each
    such request is an HTTP 400 whose ``param`` is ``best_of`` and whose message gives the value,
    and no engine request is made."""
    tm = FakeTM(tok)
    comp = _oai(_app(tm)).completions.create
    msg = _refused(lambda: comp(model=FAKE_MODEL, prompt="Hi", max_tokens=2, n=n, best_of=best_of), "best_of")
    assert str(best_of) in msg
    assert tm.received == []


def test_vllm_18555_best_of_not_an_integer_is_a_400_and_equal_to_n_answers(tok: Any) -> None:
    """vllm-project/vllm#18555: a ``best_of`` that is not an integer was not checked. Expected: a
    fractional ``best_of`` is an HTTP 400 naming ``best_of`` (no engine request); ``best_of == n``
    is valid and answers ``n`` choices with indexes ``0 .. n-1`` (OpenAI's reference)."""
    tm = FakeTM(tok)
    r = _app(tm).post(COMPLETIONS, json={"model": FAKE_MODEL, "prompt": "Hi", "best_of": 1.5})
    assert r.status_code == 400 and r.json()["error"]["param"] == "best_of", r.text
    assert tm.received == []
    out = _oai(_app(tm)).completions.create(model=FAKE_MODEL, prompt="Hi", max_tokens=3, n=2, best_of=2)
    assert sorted(c.index for c in out.choices) == [0, 1]


# --------------------------------------------------------------------------- context length


def test_helm_94_prompt_plus_completion_past_the_context_is_a_400_with_the_counts(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """stanford-crfm/helm#94: a prompt and completion that together exceed the context come back
    as "This model's maximum context length is 2049 tokens, however you requested 2054 tokens
    (2049 in your prompt, 5 for the completion)". Expected (OpenAI's and vLLM's shape): an HTTP
    400 (the ``openai`` client's ``BadRequestError``) whose message names the context length, the
    total requested and the prompt's token count (the tokenizer's own count); a prompt alone past
    the context likewise names its count; the same prompt with a ``max_tokens`` that fits answers,
    its ``usage`` giving the same prompt count and ``max_tokens`` completion tokens."""
    prompt = "hello " * 300
    n_prompt = len(tok.encode(prompt))
    assert n_prompt < FAKE_CONTEXT_LEN
    max_tokens = FAKE_CONTEXT_LEN - n_prompt + 5
    client = openai.OpenAI(base_url=plain_fake_server.url + "/v1", api_key="none", max_retries=0)
    with pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=SERVER_MODEL, prompt=prompt, max_tokens=max_tokens)
    msg = ei.value.message
    assert f"maximum context length is {FAKE_CONTEXT_LEN} tokens" in msg
    assert str(n_prompt + max_tokens) in msg and str(n_prompt) in msg and str(max_tokens) in msg
    long_prompt = "hello " * (FAKE_CONTEXT_LEN + 50)
    n_long = len(tok.encode(long_prompt))
    r = post(plain_fake_server, COMPLETIONS, {"model": SERVER_MODEL, "prompt": long_prompt, "max_tokens": 2})
    assert r.status_code == 400, r.text
    assert str(n_long) in r.json()["error"]["message"]
    fits = FAKE_CONTEXT_LEN - n_prompt - 1
    out = _server_ok(plain_fake_server, {"prompt": prompt, "max_tokens": fits, "ignore_eos": True})
    assert out.usage is not None
    assert out.usage.prompt_tokens == n_prompt and out.usage.completion_tokens == fits


# --------------------------------------------------------------------------- logprobs


def test_modular_6676_logprobs_are_filled_streamed_and_whole(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """modular/modular#6676 and ggml-org/llama.cpp#11346: with ``"logprobs": 1`` the legacy
    ``logprobs`` object came back ``null``, or with ``tokens`` and ``token_logprobs`` ``null``.
    Expected (OpenAI's legacy shape): whole and streamed, ``tokens`` are the output tokens' own
    texts (the tokenizer's decode of each output id) and join to the choice's text,
    ``token_logprobs`` one number per token, ``top_logprobs`` one dict per token holding the
    sampled token with its logprob, ``text_offset`` each token's start in the text."""
    k = 5
    ids = fake_output_ids(tok, k)
    want = _pieces(tok, ids)
    body = {"prompt": "Hi", "max_tokens": k, "logprobs": 1, "ignore_eos": True}
    out = _server_ok(plain_fake_server, body)
    lp = out.choices[0].logprobs
    assert lp is not None and lp.tokens == want and "".join(want) == out.choices[0].text
    assert lp.token_logprobs is not None and len(lp.token_logprobs) == k
    assert all(isinstance(v, float) for v in lp.token_logprobs)
    assert lp.top_logprobs is not None and all(
        d is not None and d[t] == v for d, t, v in zip(lp.top_logprobs, want, lp.token_logprobs)
    )
    assert lp.text_offset == [sum(len(t) for t in want[:i]) for i in range(k)]
    chunks = [c for c in sse(plain_fake_server, COMPLETIONS, {"model": SERVER_MODEL, **body, "stream": True})]
    toks: list[str] = []
    vals: list[Any] = []
    for c in chunks:
        for ch in c["choices"]:
            got = ch.get("logprobs")
            if ch.get("text"):
                assert got is not None, c
            toks += (got or {}).get("tokens") or []
            vals += (got or {}).get("token_logprobs") or []
    assert toks == want and len(vals) == k and all(isinstance(v, float) for v in vals)


def test_pegainfer_64_echo_logprobs_cover_every_prompt_and_completion_token(
    plain_fake_server: ServerHandle, tok: Any
) -> None:
    """pegainfer-project/pegainfer#64 (echo and logprobs on ``/v1/completions``, for lm-eval's
    loglikelihood): with ``echo`` the ``logprobs`` lists must cover the prompt's tokens, then the
    completion's. Expected (OpenAI's legacy shape): ``usage.prompt_tokens + usage.completion_tokens``
    entries; the first ``prompt_tokens`` tokens are the prompt's own pieces (the tokenizer's ids,
    each decoded alone), the first logprob is ``null`` (nothing precedes it) and every other a
    number; the text is the prompt followed by the completion."""
    prompt = "The capital of France is"
    p_ids = tok.encode(prompt)
    k = 3
    body = {
        "model": SERVER_MODEL,
        "prompt": prompt,
        "max_tokens": k,
        "logprobs": 0,
        "echo": True,
        "ignore_eos": True,
    }
    r = post(plain_fake_server, COMPLETIONS, body)
    assert r.status_code == 200, r.text
    # read as JSON: the ``openai`` client's ``Completion`` types ``token_logprobs`` as numbers only
    out = r.json()
    (choice,) = out["choices"]
    usage = out["usage"]
    assert usage["prompt_tokens"] == len(p_ids)
    lp = choice["logprobs"]
    tokens, values = lp["tokens"], lp["token_logprobs"]
    assert len(tokens) == len(values) == usage["prompt_tokens"] + usage["completion_tokens"]
    assert tokens[: len(p_ids)] == _pieces(tok, p_ids)
    assert tokens[len(p_ids) :] == _pieces(tok, fake_output_ids(tok, k))
    assert values[0] is None and all(isinstance(v, float) for v in values[1:])
    assert choice["text"] == "".join(tokens) and choice["text"].startswith(prompt)
