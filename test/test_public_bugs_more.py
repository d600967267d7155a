"""More public bug reports of SGLang and vLLM servers, replayed on one real CPU server (embedded
model, ``--context-length 1024 --enable-cache-report``); each test names its report.

Faults found here, fixed:

* ``max_completion_tokens`` on ``/v1/completions`` was silently ignored (the request ran with the
  default 16 tokens; vllm-project/vllm-ascend#15931). It is chat's name of the same limit, which
  guides and clients send to the completions route too; it is now honoured there as on chat (it
  wins over ``max_tokens`` when both are set, a negative one is a 400 naming it).
* Streamed chat with ``stream_options.continuous_usage_stats`` reported ``reasoning_tokens: 0`` on
  every running usage chunk of a thinking request (vllm-project/vllm-ascend#10777 reports the
  same zero on the final usage); only the usage chunk after the finish counted them. Each
  running usage now counts the reasoning tokens generated so far, as the final one does.
* ``matched_stop`` named a stop string when EOS ended the generation (sgl-project/sglang#1684 added
  ``matched_stop`` so that a client can tell the two apart): stop strings were checked before
  stop tokens, on a text that holds the EOS token's own text (``<｜end▁of▁sentence｜>``), so a
  stop string such as ``"e"`` or ``"sentence"`` "matched" the EOS. Stop tokens (EOS,
  ``stop_token_ids``) are now checked first, as SGLang's ``Req.check_finished`` and vLLM do.
* ``parallel_tool_calls: false`` still gave every call the model wrote (sgl-project/sglang#9696)
  where no tool grammar bounded the decoding (next to the request's own grammar, or without a
  grammar backend); the answer's reader now keeps the first call, on chat, Responses and
  Anthropic Messages (``disable_parallel_tool_use``), streamed or not.
* ``/tokenize`` ignored vLLM's ``return_token_strs`` (vllm-project/vllm#18928): it now answers
  ``token_strs``, the tokenizer's token strings of the ids, as vLLM does.

Reports replayed that showed no fault here (the tests keep them so): ``max_completion_tokens``
counts the reasoning tokens (vllm-project/vllm#28266, vllm-project/vllm#19861); a
``stop_token_ids`` token is not in the text unless ``include_stop_str_in_output``
(vllm-project/vllm#2538); no spaces around added tokens such as ``</think>``
(vllm-project/vllm#33457); an empty regex is a 400, not a hang (sgl-project/sglang#276); a regex
of Chinese characters (sgl-project/sglang#377); ``top_logprobs_num`` on ``/generate``
(sgl-project/sglang#12418); streamed top logprobs per token, one token or several per chunk
(sgl-project/sglang#5761, sgl-project/sglang#39260); a batch of ``input_ids`` lists
(sgl-project/sglang#19435); no usage for ``stream_options: {}`` (vllm-project/vllm#36379);
cumulative per-choice continuous usage and the final usage over all choices
(vllm-project/vllm#9357); Anthropic ``cache_read_input_tokens`` apart from ``input_tokens``
(sgl-project/sglang#25876); ``/v1/embeddings`` on a generation model is a 400 and the server keeps
serving (sgl-project/sglang#8256); legacy completions ``logprobs: 0`` (xorbitsai/inference#5270);
``json_schema`` with thinking on and ``include_reasoning: false`` (vllm-project/vllm#48863), with
thinking off (sgl-project/sglang#14821) and on the Responses API (vllm-project/vllm#44012): the
answer is schema-valid JSON in ``content``; malformed grammars (a Lark grammar, an EBNF without
``root``) are a 400 naming the field, not an engine error (vllm-project/vllm#16911); a grammar
request whose biased token is a special one stays within the grammar (sgl-project/sglang#3108);
the finish chunk's shape (vllm-project/vllm#19650, vllm-project/vllm#35705); a Responses turn
on ``previous_response_id`` does not inherit the earlier ``instructions`` (vllm-project/vllm#37697).

Oracles: the served model's tokenizer (ids, decode, counts), ``re.fullmatch``, ``jsonschema``, the non-streamed
answer of the same greedy request, single requests for a batch, the chat route's counts for the
Anthropic route, the ``openai`` / ``anthropic`` clients' parsers, the reports' stated expectations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from server_fixture import ServerHandle, real_env, start_server

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

pytestmark = pytest.mark.timeout(300)

MODEL = "default"
USER = [{"role": "user", "content": "Hi"}]
THINK_END = "</think>"


@pytest.fixture(scope="module")
def server(default_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    args = ["--device", "cpu", "--context-length", "1024", "--enable-cache-report"]
    h = start_server(args, real_env(), tmp_path_factory.mktemp("more_bugs") / "server.log", timeout_s=300)
    yield h
    assert h.stop() == 0, h.log()[-3000:]
    assert "Traceback" not in h.log(), h.log()[-5000:]


@pytest.fixture(scope="module")
def client(server: ServerHandle) -> Any:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def mtok(default_model_dir: str) -> Any:
    """The served model's tokenizer (ids, decode and count oracle)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(default_model_dir)


def _post(server: ServerHandle, path: str, body: dict[str, Any]) -> requests.Response:
    return requests.post(server.url + path, json=body, timeout=120)


def _generate(server: ServerHandle, body: dict[str, Any]) -> Any:
    r = _post(server, "/generate", body)
    assert r.status_code == 200, r.text
    return r.json()


def _sse(server: ServerHandle, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = requests.post(server.url + path, json={**body, "stream": True}, stream=True, timeout=120)
    assert r.status_code == 200, r.text
    return [json.loads(line[6:]) for line in r.iter_lines() if line.startswith(b"data: {")]


def _think_end_id(mtok: Any) -> int:
    tid = mtok.convert_tokens_to_ids(THINK_END)
    assert isinstance(tid, int) and mtok.decode([tid]) == THINK_END
    return tid


# --------------------------------------------------------------------------- output limits


def test_vllm_ascend_15931_max_completion_tokens_on_completions(server: ServerHandle, client: Any) -> None:
    """vllm-project/vllm-ascend#15931: ``max_completion_tokens`` sent to ``/v1/completions`` was
    ignored (16 tokens whatever its value). It limits the output there as on chat, and wins over
    ``max_tokens``; a negative one is a 400 naming it."""
    for limit in (3, 20):
        r = client.completions.create(
            model=MODEL,
            prompt="Hi",
            temperature=0,
            extra_body={"max_completion_tokens": limit, "ignore_eos": True},
        )
        assert r.usage.completion_tokens == limit and r.choices[0].finish_reason == "length"
    r = client.completions.create(
        model=MODEL, prompt="Hi", max_tokens=9, extra_body={"max_completion_tokens": 4, "ignore_eos": True}
    )
    assert r.usage.completion_tokens == 4
    bad = _post(server, "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_completion_tokens": -1})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "max_completion_tokens", bad.text


def test_vllm_28266_max_completion_tokens_counts_the_reasoning(client: Any, mtok: Any) -> None:
    """vllm-project/vllm#28266 / vllm-project/vllm#19861: OpenAI's ``max_completion_tokens`` bounds
    reasoning and answer together. A thinking request whose reasoning never ends (``</think>``
    banned) stops at the limit with every token counted as reasoning."""
    ban = {str(_think_end_id(mtok)): -100}
    r = client.chat.completions.create(
        model=MODEL,
        messages=USER,
        max_completion_tokens=5,
        temperature=0,
        logit_bias=ban,
        extra_body={"chat_template_kwargs": {"thinking": True}},
    )
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 5
    assert r.usage.completion_tokens_details.reasoning_tokens == 5
    assert len(mtok.encode(r.choices[0].message.reasoning_content, add_special_tokens=False)) <= 5 + 1


def test_vllm_ascend_10777_reasoning_tokens_in_every_usage(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm-ascend#10777 (``reasoning_tokens`` 0 for thinking requests): the final
    usage counts them, streamed or not, and so does every running usage chunk of
    ``continuous_usage_stats`` (they said 0 until the finish). Reasoning never ends here
    (``</think>`` banned), so every generated token so far is a reasoning token."""
    body = {
        "model": MODEL,
        "messages": USER,
        "max_tokens": 6,
        "temperature": 0,
        "logit_bias": {str(_think_end_id(mtok)): -100},
        "chat_template_kwargs": {"thinking": True},
    }
    usage = _post(server, "/v1/chat/completions", body).json()["usage"]
    assert usage["completion_tokens"] == 6 and usage["completion_tokens_details"]["reasoning_tokens"] == 6
    opts = {"include_usage": True, "continuous_usage_stats": True}
    chunks = _sse(server, "/v1/chat/completions", {**body, "stream_options": opts})
    running = [c["usage"] for c in chunks]
    assert running[-1]["completion_tokens_details"]["reasoning_tokens"] == 6
    assert max(u["completion_tokens"] for u in running) == 6
    for u in running:
        assert u["reasoning_tokens"] == u["completion_tokens"], running


# --------------------------------------------------------------------------- stop tokens, decoding


def test_vllm_2538_stop_token_ids_text_left_out(server: ServerHandle, client: Any, mtok: Any) -> None:
    """vllm-project/vllm#2538: the token of ``stop_token_ids`` that ended the generation came back
    in the text. It is left out (the finish is ``stop``, ``matched_stop`` its id) unless
    ``include_stop_str_in_output``; the count still includes it."""
    (hello,) = mtok.encode("hello", add_special_tokens=False)
    kw: dict[str, Any] = dict(model=MODEL, max_tokens=5, temperature=0, logit_bias={str(hello): 100})
    plain = client.completions.create(prompt="Hi", **kw, extra_body={"stop_token_ids": [hello]})
    choice = plain.choices[0]
    assert (choice.text, choice.finish_reason, choice.model_extra["matched_stop"]) == ("", "stop", hello)
    assert plain.usage.completion_tokens == 1
    kept = client.completions.create(
        prompt="Hi", **kw, extra_body={"stop_token_ids": [hello], "include_stop_str_in_output": True}
    )
    assert kept.choices[0].text == mtok.decode([hello])
    chat = client.chat.completions.create(messages=USER, **kw, extra_body={"stop_token_ids": [hello]})
    assert chat.choices[0].message.content == "" and chat.choices[0].finish_reason == "stop"
    native = _generate(
        server,
        {
            "text": "Hi",
            "sampling_params": {
                "max_new_tokens": 5,
                "temperature": 0,
                "logit_bias": {str(hello): 100},
                "stop_token_ids": [hello],
            },
        },
    )
    assert native["text"] == "" and native["output_ids"] == [hello]


def test_vllm_33457_no_spaces_around_added_tokens(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#33457 (vllm-project/vllm#1347): ``spaces_between_special_tokens`` put
    spaces around added tokens (``</think>1`` came back as ``</think> 1``). The text is the
    tokenizer's own decode of the ids, with and without ``skip_special_tokens``."""
    end = _think_end_id(mtok)
    for skip in (True, False):
        sp = {
            "max_new_tokens": 4,
            "temperature": 0,
            "logit_bias": {str(end): 100},
            "regex": "</think>1",
            "skip_special_tokens": skip,
            "spaces_between_special_tokens": True,
        }
        out = _generate(server, {"text": "Hi", "sampling_params": sp})
        ids = out["output_ids"]
        assert ids[0] == end, out
        if out["meta_info"]["finish_reason"].get("matched") == ids[-1]:
            ids = ids[:-1]  # the matched stop token (EOS) is trimmed from the text
        assert out["text"] == mtok.decode(ids, skip_special_tokens=skip) == "</think>1"


# --------------------------------------------------------------------------- grammars


def test_sglang_276_empty_regex_is_a_400(server: ServerHandle) -> None:
    """sgl-project/sglang#276: an empty regex hung the server. It is a 400 naming ``regex``, on
    ``/generate`` and the OpenAI route, and the server answers the next request."""
    r = _post(server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 4, "regex": ""}})
    assert r.status_code == 400 and "regex" in r.json()["error"]["message"], r.text
    r = _post(server, "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 4, "regex": ""})
    assert r.status_code == 400 and "regex" in r.text, r.text
    assert (
        _generate(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})["meta_info"][
            "completion_tokens"
        ]
        == 2
    )


def test_sglang_377_regex_with_chinese_characters(server: ServerHandle, client: Any) -> None:
    """sgl-project/sglang#377: a regex holding Chinese characters raised a KeyError. The output
    matches it (``re.fullmatch``), sampled or greedy, natively and on chat."""
    pattern = "(是|否|可能是)，因为[一二三]"
    for temperature in (0.0, 1.0):
        out = _generate(
            server,
            {
                "text": "Hi",
                "sampling_params": {"max_new_tokens": 16, "regex": pattern, "temperature": temperature},
            },
        )
        assert re.fullmatch(pattern, out["text"]), out["text"]
    r = client.chat.completions.create(
        model=MODEL, messages=USER, max_tokens=16, extra_body={"regex": pattern}
    )
    assert re.fullmatch(pattern, r.choices[0].message.content), r.choices[0].message.content


# --------------------------------------------------------------------------- logprobs


def test_sglang_12418_generate_top_logprobs_num(server: ServerHandle) -> None:
    """sgl-project/sglang#12418: ``/generate`` with ``top_logprobs_num`` gave no top-k lists.
    Each step has ``k`` ``(logprob, id, text)`` entries in descending order; at temperature 0 the
    chosen token is the first of them with the same logprob; texts with
    ``return_text_in_logprobs``."""
    k = 4
    body = {
        "text": "Hi",
        "sampling_params": {"max_new_tokens": 5, "temperature": 0},
        "return_logprob": True,
        "top_logprobs_num": k,
        "return_text_in_logprobs": True,
    }
    meta = _generate(server, body)["meta_info"]
    chosen, tops = meta["output_token_logprobs"], meta["output_top_logprobs"]
    assert len(chosen) == len(tops) == 5
    for (lp, tid, _), top in zip(chosen, tops):
        assert len(top) == k and len({t[1] for t in top}) == k
        assert [t[0] for t in top] == sorted((t[0] for t in top), reverse=True)
        assert top[0][1] == tid and top[0][0] == pytest.approx(lp)
        assert all(isinstance(t[2], str) for t in top)


def _chat_top(choice_lp: Any) -> list[tuple[str, float, list[tuple[str, float]]]]:
    return [(t.token, t.logprob, [(x.token, x.logprob) for x in t.top_logprobs]) for t in choice_lp.content]


@pytest.mark.parametrize("interval", [1, 3])
def test_sglang_5761_39260_streamed_top_logprobs_per_token(client: Any, interval: int) -> None:
    """sgl-project/sglang#5761 (every streamed token carried the same top logprobs, with
    ``-3.4e38`` entries) and sgl-project/sglang#39260 (a chunk of several tokens repeated the
    first token's alternatives): streamed, one token per chunk or three (``stream_interval``),
    the per-token entries equal the non-streamed answer's, and differ from token to token."""
    kw: dict[str, Any] = dict(
        model=MODEL, messages=USER, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3
    )
    want = _chat_top(client.chat.completions.create(**kw).choices[0].logprobs)
    got: list[Any] = []
    stream = client.chat.completions.create(**kw, stream=True, extra_body={"stream_interval": interval})
    for ch in stream:
        if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
            got += _chat_top(ch.choices[0].logprobs)
    assert got == want
    assert len({tuple(t[2]) for t in got}) == len(got)
    assert all(-1e4 < lp <= 0 for t in got for _, lp in t[2])
    legacy = dict(model=MODEL, prompt="Hi", max_tokens=6, temperature=0, logprobs=3)
    lp = client.completions.create(**legacy).choices[0].logprobs
    seen: list[Any] = []
    for ch in client.completions.create(**legacy, stream=True, extra_body={"stream_interval": interval}):
        if ch.choices and ch.choices[0].logprobs:
            s = ch.choices[0].logprobs
            seen += list(zip(s.tokens, s.token_logprobs, s.top_logprobs))
    assert seen == list(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs))


def test_xorbits_5270_completions_logprobs_zero(client: Any) -> None:
    """xorbitsai/inference#5270 (review): legacy completions ``logprobs: 0`` asks for the chosen
    tokens' logprobs with no alternatives; it must not read as "off"."""
    r = client.completions.create(model=MODEL, prompt="Hi", max_tokens=3, temperature=0, logprobs=0)
    lp = r.choices[0].logprobs
    assert lp is not None and len(lp.tokens) == len(lp.token_logprobs) == 3
    assert all(x is not None and x <= 0 for x in lp.token_logprobs)
    assert "".join(lp.tokens) == r.choices[0].text


# --------------------------------------------------------------------------- batches, usage


def test_sglang_19435_generate_batch_of_input_ids(server: ServerHandle) -> None:
    """sgl-project/sglang#19435 (``input_ids should be a list of lists for batch processing``): a
    batch of id lists runs as a batch, each answer the one its ids get alone (greedy)."""
    batch = [[19923, 2058, 33310], [4, 5]]
    sp = {"max_new_tokens": 4, "temperature": 0}
    outs = _generate(server, {"input_ids": batch, "sampling_params": sp})
    assert isinstance(outs, list) and len(outs) == 2
    for ids, out in zip(batch, outs):
        alone = _generate(server, {"input_ids": ids, "sampling_params": sp})
        assert out["output_ids"] == alone["output_ids"] and out["meta_info"]["prompt_tokens"] == len(ids)


def test_vllm_36379_empty_stream_options_sends_no_usage(server: ServerHandle) -> None:
    """vllm-project/vllm#36379: ``stream_options: {}`` sent usage chunks. Usage comes only with
    ``include_usage: true``, on either route."""
    for path, body in (
        ("/v1/chat/completions", {"messages": USER}),
        ("/v1/completions", {"prompt": "Hi"}),
    ):
        chunks = _sse(server, path, {"model": MODEL, **body, "max_tokens": 3, "stream_options": {}})
        assert chunks and all(c.get("usage") is None for c in chunks), chunks


def test_vllm_9357_continuous_usage_is_cumulative_per_choice(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#9357: continuous usage stats must be cumulative, and the final usage the
    total over all choices. With ``n: 2`` each choice's running ``completion_tokens`` grows by
    the tokens it streamed, the last usage sums both choices, ``prompt_tokens`` is the prompt's."""
    prompt = "The capital of France is"
    opts = {"include_usage": True, "continuous_usage_stats": True}
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 4, "n": 2, "temperature": 1, "ignore_eos": True}
    chunks = _sse(server, "/v1/completions", {**body, "stream_options": opts})
    per_choice: dict[int, list[int]] = {}
    for c in chunks[:-1]:
        per_choice.setdefault(c["choices"][0]["index"], []).append(c["usage"]["completion_tokens"])
    assert sorted(per_choice) == [0, 1]
    for counts in per_choice.values():
        assert counts == sorted(counts) and counts[-1] == 4
    final = chunks[-1]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 8
    assert final["usage"]["prompt_tokens"] == len(mtok.encode(prompt))


def test_sglang_25876_anthropic_cache_read_tokens(server: ServerHandle) -> None:
    """sgl-project/sglang#25876: Anthropic usage counted cached prompt tokens twice. On a repeated
    long prompt ``cache_read_input_tokens`` is the chat route's ``cached_tokens`` and
    ``input_tokens`` the rest of its ``prompt_tokens``, streamed or not."""
    claude = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    text = "DeepSeek-V4 caches compressed KV. " * 40 + "Anthropic?"
    msgs = [{"role": "user", "content": text}]
    claude.messages.create(model=MODEL, max_tokens=2, messages=msgs)  # fills the cache
    chat = _post(server, "/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_tokens": 2}).json()
    prompt, cached = chat["usage"]["prompt_tokens"], chat["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0
    m = claude.messages.create(model=MODEL, max_tokens=2, messages=msgs)
    assert (m.usage.cache_read_input_tokens, m.usage.input_tokens) == (cached, prompt - cached)
    with claude.messages.stream(model=MODEL, max_tokens=2, messages=msgs) as s:
        final = s.get_final_message()
    assert (final.usage.cache_read_input_tokens, final.usage.input_tokens) == (cached, prompt - cached)


def test_sglang_8256_embeddings_on_a_generation_model(server: ServerHandle) -> None:
    """sgl-project/sglang#8256 (an embedding request on a model that does not embed hit an
    assertion in the scheduler): ``/v1/embeddings`` on this generation model is a 4xx in OpenAI's
    error shape and the server keeps serving."""
    r = _post(server, "/v1/embeddings", {"model": MODEL, "input": "Hi"})
    assert 400 <= r.status_code < 500 and r.json()["error"]["message"], r.text
    assert (
        _generate(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})["meta_info"][
            "completion_tokens"
        ]
        == 2
    )


# --------------------------------------------------------------------------- stop reasons


def test_sglang_1684_eos_is_not_reported_as_a_stop_string(
    server: ServerHandle, client: Any, mtok: Any
) -> None:
    """sgl-project/sglang#1684 (``matched_stop`` tells an EOS finish from a stop string): the
    EOS token's text ``<｜end▁of▁sentence｜>`` holds ``e`` and ``sentence``; a generation ended by
    EOS reported such a stop string as matched. EOS (forced by ``logit_bias``) is reported as
    itself on every route, with and without a grammar, and so is a ``stop_token_ids`` entry;
    a stop string the text does hold is still reported as itself."""
    eos = mtok.eos_token_id
    assert "sentence" in mtok.decode([eos]) and "e" in mtok.decode([eos])
    force_eos = {str(eos): 100}
    for stop in (["sentence"], ["e"]):
        out = _generate(
            server,
            {"text": "Hi", "sampling_params": {"max_new_tokens": 4, "logit_bias": force_eos, "stop": stop}},
        )
        assert (out["text"], out["meta_info"]["finish_reason"]) == ("", {"type": "stop", "matched": eos})
        out = _generate(
            server,
            {"text": "Hi", "sampling_params": {"max_new_tokens": 8, "regex": "(yes|no)", "stop": stop}},
        )
        # the grammar ends with EOS after "yes" / "no"; "e" in "yes" is a true match of its own
        want = {"yes": eos, "no": eos} if stop == ["sentence"] else {"y": "e", "no": eos}
        assert out["text"] in want and out["meta_info"]["finish_reason"]["matched"] == want[out["text"]], out
        kw: dict[str, Any] = dict(model=MODEL, max_tokens=4, logit_bias=force_eos, stop=stop)
        c = client.completions.create(prompt="Hi", **kw).choices[0]
        assert (c.text, c.finish_reason, c.model_extra["matched_stop"]) == ("", "stop", eos)
        m = client.chat.completions.create(messages=USER, **kw).choices[0]
        assert (m.message.content, m.model_extra["matched_stop"]) == ("", eos)
    regex = _generate(
        server,
        {
            "text": "Hi",
            "sampling_params": {"max_new_tokens": 4, "logit_bias": force_eos, "stop_regex": ["sent"]},
        },
    )
    assert regex["meta_info"]["finish_reason"] == {"type": "stop", "matched": eos}
    (hello,) = mtok.encode("hello", add_special_tokens=False)
    sp = {"max_new_tokens": 4, "logit_bias": {str(hello): 100}, "stop_token_ids": [hello], "stop": ["hel"]}
    assert (
        _generate(server, {"text": "Hi", "sampling_params": sp})["meta_info"]["finish_reason"]["matched"]
        == hello
    )
    sp = {"max_new_tokens": 4, "temperature": 0, "logit_bias": {str(hello): 100}, "stop": ["llo"]}
    out = _generate(server, {"text": "Hi", "sampling_params": sp})
    assert (out["text"], out["meta_info"]["finish_reason"]["matched"]) == ("he", "llo")


# --------------------------------------------------------------------------- structured outputs

SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "string", "maxLength": 6}},
    "required": ["x"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}


def _valid(text: str | None) -> Any:
    import jsonschema

    value = json.loads(text or "")
    jsonschema.validate(value, SCHEMA)
    return value


def test_vllm_48863_sglang_14821_json_schema_answer_in_content(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#48863 (thinking on, ``include_reasoning: false`` and a ``json_schema``:
    ``content`` came back null) and sgl-project/sglang#14821 (thinking off: the grammar's JSON
    landed in ``reasoning_content``): the answer is schema-valid JSON in ``content``, streamed or
    not, and no reasoning is returned. The reasoning is ended at once (``</think>`` forced) so the
    answer's grammar is reached."""
    end = {str(_think_end_id(mtok)): 100}
    cases = [
        {"chat_template_kwargs": {"thinking": True}, "include_reasoning": False, "logit_bias": end},
        {"chat_template_kwargs": {"thinking": True}, "logit_bias": end},
        {"chat_template_kwargs": {"thinking": False}},
        {"chat_template_kwargs": {"enable_thinking": False}},
    ]
    for k, extra in enumerate(cases):
        body = {
            "model": MODEL,
            "messages": USER,
            "max_tokens": 80,
            "temperature": 0,
            "response_format": RESPONSE_FORMAT,
            **extra,
        }
        r = _post(server, "/v1/chat/completions", body).json()
        msg = r["choices"][0]["message"]
        _valid(msg["content"])
        assert not msg.get("reasoning_content") and r["choices"][0]["finish_reason"] == "stop", (extra, r)
        if k % 2:
            continue  # streamed: one case with thinking, one without
        content = "".join(
            (c["choices"][0]["delta"].get("content") or "")
            for c in _sse(server, "/v1/chat/completions", body)
            if c["choices"]
        )
        assert content == msg["content"]


def test_vllm_44012_responses_text_format_is_constrained(server: ServerHandle) -> None:
    """vllm-project/vllm#44012: the Responses API's ``text.format`` ``json_schema`` was not
    applied. The output text is schema-valid JSON."""
    body = {
        "model": MODEL,
        "input": "Hi",
        "max_output_tokens": 80,
        "temperature": 0,
        "text": {"format": {"type": "json_schema", "name": "t", "schema": SCHEMA}},
    }
    r = _post(server, "/v1/responses", body).json()
    texts = [c["text"] for item in r["output"] if item["type"] == "message" for c in item["content"]]
    assert len(texts) == 1 and r["status"] == "completed", r
    _valid(texts[0])


def test_vllm_16911_malformed_grammars_are_a_400(server: ServerHandle) -> None:
    """vllm-project/vllm#16911: a ``guided_grammar`` in Lark's syntax (the docs' example) raised
    inside the engine. Malformed grammars of every kind are a 400 naming the field, and the
    server keeps serving."""
    lark = '?start: select\n?select: "SELECT " column\n?column: "a" | "b"'
    r = _post(
        server, "/v1/completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 4, "guided_grammar": lark}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "guided_grammar", r.text
    for field, value in (
        ("ebnf", 'start ::= "a"'),
        ("ebnf", "root ::= ("),
        ("regex", "(a"),
        ("json_schema", "{not json"),
    ):
        r = _post(server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 4, field: value}})
        assert r.status_code == 400 and r.json()["error"]["message"].startswith(field), r.text
    assert (
        _generate(server, {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})["meta_info"][
            "completion_tokens"
        ]
        == 2
    )


def test_sglang_3108_grammar_with_a_biased_special_token(server: ServerHandle, mtok: Any) -> None:
    """sgl-project/sglang#3108: an EBNF request whose model emitted a reserved special token
    crashed the scheduler. With such tokens pushed to the top (``logit_bias`` +100: BOS, the
    ``<｜User｜>`` marker, ``</think>``), the output is still one of the grammar's strings."""
    grammar = 'root ::= "yes" | "no"'
    for token in ("<｜begin▁of▁sentence｜>", "<｜User｜>", THINK_END):
        tid = mtok.convert_tokens_to_ids(token)
        assert isinstance(tid, int) and tid != mtok.unk_token_id
        sp = {"max_new_tokens": 8, "ebnf": grammar, "logit_bias": {str(tid): 100}}
        out = _generate(server, {"text": "Hi", "sampling_params": sp})
        assert out["text"] in ("yes", "no") and tid not in out["output_ids"], out


# --------------------------------------------------------------------------- stream framing


def test_vllm_19650_35705_finish_chunk_shape(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#19650 (streamed chat chunks lost their ``"finish_reason": null``) and
    vllm-project/vllm#35705 (the last content came in the chunk that carried the finish reason):
    every chunk has the ``finish_reason`` key, ``null`` until the last chunk of the choice, which
    has an empty delta; for a length cut, an EOS stop and a thinking request alike."""
    bodies = [
        {"max_tokens": 3},
        {"max_tokens": 3, "logit_bias": {str(mtok.eos_token_id): 100}},
        {"max_tokens": 3, "chat_template_kwargs": {"thinking": True}},
    ]
    for extra, want in zip(bodies, ("length", "stop", "length")):
        chunks = _sse(server, "/v1/chat/completions", {"model": MODEL, "messages": USER, **extra})
        choices = [c["choices"][0] for c in chunks]
        assert all("finish_reason" in ch for ch in choices), choices
        assert [ch["finish_reason"] for ch in choices[:-1]] == [None] * (len(choices) - 1)
        last = choices[-1]
        assert last["finish_reason"] == want
        assert not any(last["delta"].get(k) for k in ("content", "reasoning_content", "tool_calls")), last


# --------------------------------------------------------------------------- parallel_tool_calls

D = "｜DSML｜"
WEATHER_PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}}]


def _two_calls(cities: tuple[str, ...] = ("Paris", "Oslo")) -> str:
    invokes = [
        f'<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">{c}</{D}parameter>\n</{D}invoke>'
        for c in cities
    ]
    return f"\n\n<{D}tool_calls>\n" + "\n".join(invokes) + f"\n</{D}tool_calls>"


def test_sglang_9696_parallel_tool_calls_false_is_one_call(server: ServerHandle) -> None:
    """sgl-project/sglang#9696: with ``parallel_tool_calls: false`` the answer still held several
    calls. The tool grammar bounds the decoding where it applies, but not next to the request's
    own grammar (here a ``regex`` that spells out a block of two calls) nor without a grammar
    backend: the answer keeps the first call, streamed or not, and its finish is ``tool_calls``;
    ``true`` (the default) keeps both."""
    body = {
        "model": MODEL,
        "messages": USER,
        "tools": CHAT_TOOLS,
        "max_tokens": 200,
        "temperature": 0,
        "regex": re.escape(_two_calls()),
    }
    for parallel, want in ((False, ['{"city": "Paris"}']), (True, ['{"city": "Paris"}', '{"city": "Oslo"}'])):
        r = _post(server, "/v1/chat/completions", {**body, "parallel_tool_calls": parallel}).json()
        ch = r["choices"][0]
        assert [c["function"]["arguments"] for c in ch["message"]["tool_calls"]] == want, r
        assert ch["finish_reason"] == "tool_calls" and not ch["message"]["content"]
        streamed: dict[int, str] = {}
        chunks = _sse(server, "/v1/chat/completions", {**body, "parallel_tool_calls": parallel})
        for c in chunks:
            for tc in c["choices"][0]["delta"].get("tool_calls") or []:
                streamed[tc["index"]] = streamed.get(tc["index"], "") + (
                    tc["function"].get("arguments") or ""
                )
        assert list(streamed.values()) == want and chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_sglang_9696_one_call_on_responses_and_messages(tok: Any) -> None:
    """sgl-project/sglang#9696 on the other routes (model output written by hand, no grammar
    backend): Responses ``parallel_tool_calls: false`` and Anthropic
    ``disable_parallel_tool_use`` give the first call only, streamed or not."""
    from test_chat_tool_stream_agreement import ChunkTM
    from test_dsv4_public_bugs import _anthropic_client
    from test_openai_tools import client_for

    reply = "Checking." + _two_calls()
    client, _ = client_for(ChunkTM(tok, reply))
    rkw: dict[str, Any] = dict(
        model="m",
        input="Weather?",
        tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER_PARAMS}],
        parallel_tool_calls=False,
    )
    done = client.responses.create(**rkw)
    with client.responses.stream(**rkw) as stream:
        folded = stream.get_final_response()
    for r in (done, folded):
        assert [o.arguments for o in r.output if o.type == "function_call"] == ['{"city": "Paris"}']
        assert r.output_text == "Checking."
    aclient = _anthropic_client(ChunkTM(tok, reply))
    mkw: dict[str, Any] = dict(
        model="m",
        max_tokens=200,
        messages=[{"role": "user", "content": "Weather?"}],
        tools=[{"name": "get_weather", "input_schema": WEATHER_PARAMS}],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    )
    msg = aclient.messages.create(**mkw)
    with aclient.messages.stream(**mkw) as mstream:
        mfolded = mstream.get_final_message()
    for m in (msg, mfolded):
        assert [b.input for b in m.content if b.type == "tool_use"] == [{"city": "Paris"}]
        assert m.stop_reason == "tool_use"


# --------------------------------------------------------------------------- tokenizer, Responses


def test_vllm_18928_tokenize_return_token_strs(server: ServerHandle, mtok: Any) -> None:
    """vllm-project/vllm#18928 (vllm-project/vllm#18941 added it): ``/tokenize`` with
    ``return_token_strs`` also answers ``token_strs``, the tokenizer's token strings of the ids
    (``convert_ids_to_tokens``), for a text, a list of texts and messages; without the flag the
    field is left out."""
    for path in ("/tokenize", "/v1/tokenize"):
        r = _post(server, path, {"prompt": "Hello world! 上海", "return_token_strs": True}).json()
        assert r["tokens"] == mtok.encode("Hello world! 上海")
        assert r["token_strs"] == mtok.convert_ids_to_tokens(r["tokens"]) and r["count"] == len(
            r["token_strs"]
        )
    r = _post(server, "/tokenize", {"prompt": ["Hello world!", "Bye"], "return_token_strs": True}).json()
    assert r["token_strs"] == [mtok.convert_ids_to_tokens(ids) for ids in r["tokens"]]
    r = _post(server, "/tokenize", {"messages": USER, "return_token_strs": True}).json()
    assert r["token_strs"] == mtok.convert_ids_to_tokens(r["tokens"]) and "<｜User｜>" in r["token_strs"]
    assert "token_strs" not in _post(server, "/tokenize", {"prompt": "Hello"}).json()


def test_vllm_37697_instructions_do_not_carry_over(server: ServerHandle) -> None:
    """vllm-project/vllm#37697: with ``previous_response_id`` the earlier response's
    ``instructions`` were kept in the prompt (OpenAI: they are not carried over). The next turn's
    prompt counts as the chat conversation without that system message (with the new
    ``instructions`` as the system message when given)."""
    first = _post(
        server,
        "/v1/responses",
        {
            "model": MODEL,
            "input": "Hi",
            "instructions": "You are a pirate who rhymes.",
            "max_output_tokens": 4,
            "temperature": 0,
        },
    ).json()
    said = first["output"][-1]["content"][0]["text"]
    convo = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": said},
        {"role": "user", "content": "Again"},
    ]
    for instructions in (None, "Be brief."):
        body = {"model": MODEL, "input": "Again", "previous_response_id": first["id"], "max_output_tokens": 1}
        if instructions:
            body["instructions"] = instructions
        got = _post(server, "/v1/responses", body).json()["usage"]["input_tokens"]
        msgs = ([{"role": "system", "content": instructions}] if instructions else []) + convo
        chat = _post(
            server, "/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_tokens": 1}
        ).json()
        assert got == chat["usage"]["prompt_tokens"], (instructions, got, chat["usage"])
