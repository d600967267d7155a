"""Public bug reports on sampling parameters, usage accounting and streamed stop strings of peer
servers, replayed on one real CPU server (embedded model, ``--context-length 512 --page-size 128
--enable-cache-report``). None of them reproduced here; each test pins the right value against an
independent oracle.

* Penalties (sgl-project/sglang#2177) and ``top_k=1`` vs ``temperature=0`` (vllm-project/vllm#5404):
  greedy ids equal a float64 reference over HF transformers' logits of the same checkpoint.
* A seeded request does not depend on the unseeded requests batched with it nor on the batch order
  (vllm-project/vllm#51226, vllm-project/vllm#17524). Oracle: the same request alone.
* ``logit_bias`` on the OpenAI routes (sgl-project/sglang#6171, sgl-project/sglang#3059); ``{}`` and
  ``stop: []`` as the defaults (vllm-project/vllm#1045). Oracle: the tokenizer's ids and a cold run.
* Streamed stop strings never leak a prefix (sgl-project/sglang#11446), with
  ``include_stop_str_in_output`` (vllm-project/vllm#1973). Oracle: the cold text cut with ``str.find``.
* ``stream_options``: usage on the last chunk only, ``continuous_usage_stats`` running counts
  (vllm-project/vllm#7262); ``prompt_tokens_details.cached_tokens`` (vllm-project/vllm#18062).
  Oracle: the openai client's parser, the tokenizer's prompt count, the page size.
* ``max_tokens: null`` runs to the context end instead of a 500 (vllm-project/vllm#19862); an
  empty prompt is a 400 that leaves the server serving (vllm-project/vllm#7283); a request past
  the context is a 400 naming the counts (vllm-project/vllm#5700). Oracle: the tokenizer's counts.
* ``ignore_eos`` generates past EOS (vllm-project/vllm#4589); ``skip_special_tokens: false`` keeps
  special tokens' text (vllm-project/vllm#893). Oracle: the tokenizer's decode.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from server_fixture import ServerHandle, real_env, start_server

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(300)

CONTEXT = 512
PAGE = 128
PROMPT = "The capital of France is Paris, and the capital of Italy is"
MODEL = "default"
EOS = 1
BOS = 0


@pytest.fixture(scope="module")
def server(
    default_model_dir: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[ServerHandle]:
    """The CPU server of this module, without the start-up warm-up (no assertion here reads it).
    It starts in a thread while the HF oracle (``hf_default_model``) loads in this process."""
    args = ["--device", "cpu", "--context-length", str(CONTEXT), "--page-size", str(PAGE)]
    args += ["--enable-cache-report", "--skip-server-warmup"]
    log = tmp_path_factory.mktemp("sampling") / "server.log"
    with ThreadPoolExecutor(1) as pool:
        fut = pool.submit(start_server, args, real_env(), log, timeout_s=300)
        try:
            request.getfixturevalue("hf_default_model")
        finally:
            h = fut.result()
    yield h
    assert h.stop() == 0, h.log()[-3000:]
    assert "Traceback" not in h.log(), h.log()[-5000:]


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def hf_next_logits(server: ServerHandle, request: pytest.FixtureRequest) -> Any:
    """``ids -> [V] float64`` next-token logits of HF transformers on the same checkpoint (a fresh
    copy per call: callers penalize it in place). Memoized per id sequence: the references of
    several cases walk the same prefixes."""
    import torch

    model = request.getfixturevalue("hf_default_model")  # loaded while ``server`` started
    seen: dict[tuple[int, ...], Any] = {}

    def run(ids: list[int]) -> Any:
        key = tuple(ids)
        if key not in seen:
            with torch.no_grad():
                seen[key] = model(torch.tensor([ids])).logits[0, -1].double()
        return seen[key].clone()

    return run


def _generate(server: ServerHandle, body: dict[str, Any]) -> Any:
    r = requests.post(server.url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def _cold_text(client: Any, n: int = 40) -> str:
    return client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=n, temperature=0).choices[0].text


# --------------------------------------------------------------------------- penalties, greedy


def _reference_greedy(logits_of: Any, prompt: list[int], n: int, f: float, p: float, r: float) -> list[int]:
    """Greedy ids with OpenAI's frequency/presence penalties (output tokens) and CTRL's repetition
    penalty (prompt + output tokens) applied in float64 to HF's logits."""
    out: list[int] = []
    for _ in range(n):
        z = logits_of(prompt + out)
        for t in set(prompt + out) if r != 1.0 else ():
            z[t] = z[t] / r if z[t] > 0 else z[t] * r
        for t in set(out):
            z[t] -= f * out.count(t) + p
        out.append(int(z.argmax()))
    return out


#: (frequency, presence, repetition) penalties, and a contrast setting without the part under test
#: whose greedy ids differ (the random model never repeats on its own, so a positive penalty is
#: exercised against a negative one that makes it repeat).
_PENALTY_CASES = [
    ((-2.0, 0.0, 1.0), (0.0, 0.0, 1.0)),
    ((0.0, -2.0, 1.0), (0.0, 0.0, 1.0)),
    ((0.0, 0.0, 0.5), (0.0, 0.0, 1.0)),
    ((2.0, -2.0, 1.0), (0.0, -2.0, 1.0)),
    ((-2.0, 1.0, 1.0), (-2.0, 0.0, 1.0)),
    ((0.0, -2.0, 1.5), (0.0, -2.0, 1.0)),
]


@pytest.mark.parametrize("case,contrast", _PENALTY_CASES)
def test_penalties_match_a_float64_reference(server, hf_next_logits, mtok, case, contrast) -> None:
    """sglang#2177 (frequency penalty implementation in question): greedy ids under each penalty
    equal the float64 reference (which differs from the contrast setting's, so the penalty shows)."""
    prompt = mtok.encode(PROMPT)
    f, p, r = case
    want = _reference_greedy(hf_next_logits, prompt, 16, f, p, r)
    assert want != _reference_greedy(hf_next_logits, prompt, 16, *contrast)
    sp = {"max_new_tokens": 16, "temperature": 0, "frequency_penalty": f, "presence_penalty": p}
    got = _generate(server, {"input_ids": prompt, "sampling_params": {**sp, "repetition_penalty": r}})
    assert got["output_ids"] == want


def test_top_k_1_is_greedy(server, hf_next_logits, mtok) -> None:
    """vllm#5404 (``top_k=1`` and ``temperature=0`` answered differently): both, at any
    temperature, give HF's argmax ids."""
    prompt = mtok.encode(PROMPT)
    want = _reference_greedy(hf_next_logits, prompt, 16, 0.0, 0.0, 1.0)
    for extra in ({"temperature": 0}, {"top_k": 1, "temperature": 0.8}, {"top_k": 1}):
        body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 16, **extra}}
        assert _generate(server, body)["output_ids"] == want, extra


# --------------------------------------------------------------------------- seeds in a batch


def test_seeded_request_ignores_its_batch(server) -> None:
    """vllm#51226 (seed ignored when an unseeded request shares the batch) and vllm#17524 (batch
    order changes seeded results): a seeded prompt's ids are the same alone, first or second in a
    batch with an unseeded one, and while unseeded requests run concurrently."""
    other = "Hello world, this is"
    seeded = {"max_new_tokens": 12, "temperature": 1.0, "sampling_seed": 42}
    free = {"max_new_tokens": 12, "temperature": 1.0}
    alone = _generate(server, {"text": PROMPT, "sampling_params": seeded})["output_ids"]
    first = _generate(server, {"text": [PROMPT, other], "sampling_params": [seeded, free]})
    second = _generate(server, {"text": [other, PROMPT], "sampling_params": [free, seeded]})
    assert first[0]["output_ids"] == alone and second[1]["output_ids"] == alone

    def noise() -> None:
        _generate(server, {"text": other, "sampling_params": {**free, "max_new_tokens": 40}})

    threads = [threading.Thread(target=noise) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        assert _generate(server, {"text": PROMPT, "sampling_params": seeded})["output_ids"] == alone
    finally:
        for t in threads:
            t.join()


# --------------------------------------------------------------------------- logit_bias, defaults


def test_logit_bias_applies_on_the_openai_routes(server, client, mtok) -> None:
    """sglang#6171 / sglang#3059 (``logit_bias`` had no effect through the OpenAI API): +100 forces
    the token, greedy or sampled, on both routes; -100 bans the cold greedy run's first token."""
    (banana,) = mtok.encode(" banana", add_special_tokens=False)
    want = mtok.decode([banana] * 4)
    for temperature in (0.0, 1.0):
        kw = {"max_tokens": 4, "temperature": temperature, "seed": 3, "logit_bias": {str(banana): 100}}
        assert client.completions.create(model=MODEL, prompt=PROMPT, **kw).choices[0].text == want
        msgs = [{"role": "user", "content": "hello there"}]
        assert (
            client.chat.completions.create(model=MODEL, messages=msgs, **kw).choices[0].message.content
            == want
        )
    first = _generate(server, {"text": PROMPT, "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
    banned = first["output_ids"][0]
    body = {
        "text": PROMPT,
        "sampling_params": {"max_new_tokens": 1, "temperature": 0, "logit_bias": {str(banned): -100}},
    }
    assert _generate(server, body)["output_ids"][0] != banned


def test_empty_logit_bias_and_stop_list_are_the_defaults(client) -> None:
    """vllm#1045 (clients always send ``logit_bias: {}``; it was refused): ``{}``, ``stop: []`` and
    ``stop_token_ids: []`` answer the cold run's text."""
    cold = _cold_text(client, 12)
    extra = {"logit_bias": {}, "stop": [], "extra_body": {"stop_token_ids": []}}
    got = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0, **extra)
    assert got.choices[0].text == cold


# --------------------------------------------------------------------------- stop strings, streamed


def test_stop_strings_never_stream_a_prefix(client) -> None:
    """sglang#11446 (a stop string's first tokens were streamed before it matched) and vllm#1973
    (``include_stop_str_in_output``): streamed and whole texts equal the cold text cut at the stop
    string's first occurrence (kept when asked), for stops inside a token, across several tokens,
    at the start, holding a replacement character, and never matching. The requests are sent
    together (greedy outputs do not depend on the batch: ``test_flag_matrix``)."""
    from concurrent.futures import ThreadPoolExecutor

    cold = _cold_text(client)
    stops = [cold[3:9], cold[5:30], cold[4:6], cold[2:60], cold[1:2], cold[:3], "zzz" + cold[:5]]

    def send(stop: str, keep: bool, stream: bool) -> tuple[str, str | None]:
        kw = {"max_tokens": 40, "temperature": 0, "stop": [stop]}
        kw["extra_body"] = {"include_stop_str_in_output": keep}
        if not stream:
            whole = client.completions.create(model=MODEL, prompt=PROMPT, **kw).choices[0]
            return whole.text, whole.finish_reason
        chunks = client.completions.create(model=MODEL, prompt=PROMPT, stream=True, **kw)
        return "".join(c.choices[0].text for c in chunks if c.choices), None

    cases = [(stop, keep, stream) for stop in stops for keep in (False, True) for stream in (False, True)]
    with ThreadPoolExecutor(8) as ex:
        got = list(ex.map(lambda c: send(*c), cases))
    for (stop, keep, stream), (text, finish_reason) in zip(cases, got, strict=True):
        i = cold.find(stop)
        want = cold if i < 0 else cold[: i + len(stop)] if keep else cold[:i]
        assert text == want, (stop, keep, stream)
        if not stream:
            assert finish_reason == ("length" if i < 0 else "stop"), (stop, keep)


# --------------------------------------------------------------------------- usage


def test_stream_usage_only_on_the_last_chunk(client, mtok) -> None:
    """vllm#7262 (with ``include_usage`` every chunk carried usage): only the final chunk, whose
    ``choices`` is empty, has usage, equal to the whole response's; ``continuous_usage_stats`` adds
    running counts whose prompt part is the tokenizer's count."""
    msgs = [{"role": "user", "content": "hello there"}]
    for route, kw in (
        (client.completions, {"prompt": PROMPT}),
        (client.chat.completions, {"messages": msgs}),
    ):
        whole = route.create(model=MODEL, max_tokens=5, temperature=0, **kw).usage
        chunks = list(
            route.create(
                model=MODEL,
                max_tokens=5,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                **kw,
            )
        )
        assert all(c.usage is None for c in chunks[:-1])
        assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == whole.model_dump()
        plain = list(route.create(model=MODEL, max_tokens=5, temperature=0, stream=True, **kw))
        assert all(c.usage is None for c in plain)
    running = list(
        client.completions.create(
            model=MODEL,
            prompt=PROMPT,
            max_tokens=5,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},  # type: ignore[typeddict-unknown-key]
        )
    )
    counts = [c.usage.completion_tokens for c in running]
    assert all(c.usage.prompt_tokens == len(mtok.encode(PROMPT)) for c in running)
    assert counts == sorted(counts) and counts[-1] == 5 and running[-1].choices == []


def test_cached_tokens_count_the_reused_prefix_pages(client, mtok) -> None:
    """vllm#18062 (``prompt_tokens_details.cached_tokens`` missing): a cold prompt reports 0; its
    repeat reports the prompt's whole pages (the last token is always computed), streamed or not."""
    prompt = "Once upon a time in a land far away there lived a king who had three daughters. " * 8
    n = len(mtok.encode(prompt))
    assert n > PAGE
    cold = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, temperature=0).usage
    assert cold.prompt_tokens == n and cold.prompt_tokens_details.cached_tokens == 0
    warm = client.completions.create(model=MODEL, prompt=prompt, max_tokens=2, temperature=0).usage
    assert warm.prompt_tokens_details.cached_tokens == (n - 1) // PAGE * PAGE
    chunks = list(
        client.completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=2,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens == (n - 1) // PAGE * PAGE


# --------------------------------------------------------------------------- lengths and prompts


def test_null_max_tokens_runs_to_the_context_end(client, mtok) -> None:
    """vllm#19862 (``max_tokens: null`` on ``/v1/completions`` was a 500): it means no own limit,
    so generation fills the context (prompt counted by the tokenizer)."""
    prompt = "one two three four five six seven eight nine ten " * 48
    n = len(mtok.encode(prompt))
    assert CONTEXT - 40 < n < CONTEXT
    got = client.completions.create(model=MODEL, prompt=prompt, max_tokens=None, temperature=0)
    assert got.usage.prompt_tokens == n and got.usage.completion_tokens == CONTEXT - n
    assert got.choices[0].finish_reason == "length"


def test_empty_prompt_is_a_400_and_the_server_keeps_serving(client) -> None:
    """vllm#7283 (an empty prompt killed the engine): ``""``, ``[""]`` and ``[[]]`` are 400s in the
    OpenAI error shape; the next request is served."""
    for prompt in ("", [""], [[]]):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=MODEL, prompt=prompt, max_tokens=3)
        assert e.value.status_code == 400 and "prompt" in str(e.value)
    assert client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2).usage.completion_tokens == 2


def test_context_overflow_is_a_400_naming_the_counts(client, mtok) -> None:
    """vllm#5700 (``max_tokens must be at least 1, got -160`` for a prompt near the context): a
    request past the context is a 400 that names the context, the prompt's tokenizer count and the
    requested completion."""
    n = len(mtok.encode(PROMPT))
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=CONTEXT)
    msg = str(e.value)
    assert str(CONTEXT) in msg and f"{n} in the messages" in msg and f"{CONTEXT} in the completion" in msg


# --------------------------------------------------------------------------- EOS and special tokens


def test_ignore_eos_generates_past_eos(client) -> None:
    """vllm#4589 (``ignore_eos`` still stopped at the model's EOS ids): with EOS forced by
    ``logit_bias``, ``ignore_eos`` runs to ``max_tokens``; without it the first token ends."""
    kw = {"max_tokens": 5, "temperature": 0, "logit_bias": {str(EOS): 100}}
    stopped = client.completions.create(model=MODEL, prompt=PROMPT, **kw)
    assert stopped.choices[0].finish_reason == "stop" and stopped.usage.completion_tokens == 1
    full = client.completions.create(model=MODEL, prompt=PROMPT, extra_body={"ignore_eos": True}, **kw)
    assert full.choices[0].finish_reason == "length" and full.usage.completion_tokens == 5


def test_skip_special_tokens_false_keeps_their_text(client, mtok) -> None:
    """vllm#893 (special tokens were always dropped from the text): with BOS forced three times,
    ``skip_special_tokens: false`` answers the tokenizer's decode with special tokens, streamed or
    not, on both routes; the default drops them."""
    kw = {"max_tokens": 3, "temperature": 0, "logit_bias": {str(BOS): 100}}
    want = mtok.decode([BOS] * 3, skip_special_tokens=False)
    assert want and client.completions.create(model=MODEL, prompt=PROMPT, **kw).choices[0].text == ""
    keep = {"skip_special_tokens": False}
    got = client.completions.create(model=MODEL, prompt=PROMPT, extra_body=keep, **kw)
    assert got.choices[0].text == want
    chunks = client.completions.create(model=MODEL, prompt=PROMPT, stream=True, extra_body=keep, **kw)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want
    msgs = [{"role": "user", "content": "hello there"}]
    chat = client.chat.completions.create(model=MODEL, messages=msgs, extra_body=keep, **kw)
    assert chat.choices[0].message.content == want
