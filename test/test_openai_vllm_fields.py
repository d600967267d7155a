"""vLLM's extra request fields on the OpenAI routes (``docs/VLLM_FIELDS.md``), on the embedded
tiny model (CPU, random weights, greedy), each against an independent oracle:

* ``guided_json`` / ``structured_outputs.json``: the same output as ``response_format``
  ``json_schema`` (the OpenAI field) and valid under ``jsonschema``; ``guided_choice`` / ``choice``:
  one of the strings; ``guided_regex``: a full match of Python's ``re``; ``guided_grammar``: a
  string of the grammar's language; ``json_object``: a JSON object (``json.loads``);
* ``truncate_prompt_tokens=N``: what the last N prompt tokens (from ``/tokenize``) answer as the
  prompt, both runs cold (cache flushed);
* ``return_tokens_as_token_ids``: the logprob tokens are ``token_id:<id>`` of the ids the same
  answer reports in ``token_ids``; ``echo`` (chat): the last message's content, then the answer
  without echo; ``request_id``: the response id;
* refused fields: a 400 in OpenAI's error shape naming the field, the server still serving.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import requests
from sglang_v4.entrypoints.openai.request_errors import RequestError
from sglang_v4.entrypoints.openai.vllm_fields import special_token_edges, truncation_length

pytestmark = pytest.mark.timeout(300)

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
    "required": ["name", "n"],
    "additionalProperties": False,
}
MESSAGES = [{"role": "user", "content": "Describe a cat as JSON."}]
CHOICES = ['say "yes"', "nein\nno", "你好", "maybe"]


@pytest.fixture(scope="module")
def url(embedded_model_server) -> str:  # noqa: ANN001 - a server_fixture.ServerHandle
    return embedded_model_server.url


def _post(url: str, path: str, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    r = requests.post(url + path, json=body, timeout=120)
    assert r.status_code == status, r.text
    return r.json()


def _chat(url: str, status: int = 200, **kw: Any) -> dict[str, Any]:
    return _post(url, "/v1/chat/completions", {"messages": MESSAGES, "temperature": 0, **kw}, status)


def _comp(url: str, status: int = 200, **kw: Any) -> dict[str, Any]:
    body = {"prompt": "A cat as JSON:", "temperature": 0, "max_tokens": 12, **kw}
    return _post(url, "/v1/completions", body, status)


def _content(resp: dict[str, Any]) -> str:
    return resp["choices"][0]["message"]["content"]


def test_guided_json_is_response_format_json_schema(url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    rf = {"type": "json_schema", "json_schema": {"name": "cat", "schema": SCHEMA}}
    # response_format also puts DeepSeek's "## Response Format" section into the chat prompt
    # (chat_encoding_response_format), which vLLM's grammar fields do not: its chat answer is
    # checked against the schema, and the vLLM spellings against each other
    chat_kws: list[dict[str, Any]] = [
        {"guided_json": SCHEMA},  # the oracle of the other vLLM spellings
        {"guided_json": json.dumps(SCHEMA)},
        {"structured_outputs": {"json": SCHEMA}},
        {"response_format": rf},
    ]
    with ThreadPoolExecutor(8) as ex:  # sent together: greedy outputs do not depend on the batch
        chats = [ex.submit(_chat, url, max_tokens=120, **kw) for kw in chat_kws]
        comps = [
            ex.submit(_comp, url, max_tokens=120, **kw)
            for kw in ({"response_format": rf}, {"guided_json": SCHEMA})
        ]
        objs = [
            ex.submit(_chat, url, max_tokens=40, **kw)
            for kw in (
                {"structured_outputs": {"json_object": True}},
                {"response_format": {"type": "json_object"}},
            )
        ]
        oracle, *others = (f.result() for f in chats)
        comp_oracle, comp_guided = (f.result()["choices"][0]["text"] for f in comps)
        obj, obj_oracle = (f.result() for f in objs)
    *guided, by_format = others
    for got in (oracle, by_format):
        assert got["choices"][0]["finish_reason"] == "stop"
        jsonschema.validate(json.loads(_content(got)), SCHEMA)
    for kw, got in zip(chat_kws[1:-1], guided, strict=True):
        assert _content(got) == _content(oracle), kw
    assert comp_guided == comp_oracle  # no chat prompt: the same request
    for got in (obj, obj_oracle):
        assert _content(got).startswith("{")
        if got["choices"][0]["finish_reason"] == "stop":
            assert isinstance(json.loads(_content(got)), dict)


def test_choice_regex_grammar_constrain_the_output(url: str) -> None:
    for kw in ({"guided_choice": CHOICES}, {"structured_outputs": {"choice": CHOICES}}):
        assert _content(_chat(url, max_tokens=20, **kw)) in CHOICES
        sampled = _comp(url, max_tokens=20, temperature=1.0, n=3, seed=7, **kw)
        assert all(c["text"] in CHOICES for c in sampled["choices"])
    for kw in (
        {"guided_regex": r"[a-f]{2}-[0-9]{1,3}"},
        {"structured_outputs": {"regex": r"[a-f]{2}-[0-9]{1,3}"}},
    ):
        assert re.fullmatch(r"[a-f]{2}-[0-9]{1,3}", _comp(url, max_tokens=10, **kw)["choices"][0]["text"])
    grammar = 'root ::= "ab" | "c" item*\nitem ::= "x" | "y"'
    text = _chat(url, max_tokens=6, guided_grammar=grammar)
    assert re.fullmatch(r"ab|c[xy]*", _content(text))


def test_truncate_prompt_tokens_is_the_last_n_tokens(url: str) -> None:
    text = "The quick brown fox jumps over the lazy dog and keeps running far away."
    ids = _post(url, "/tokenize", {"prompt": text})["tokens"]
    chat_ids = _post(url, "/tokenize", {"messages": MESSAGES})["tokens"]
    n = 5
    cases = [
        ("/v1/completions", {"prompt": text}, {"prompt": ids[-n:]}),
        ("/v1/completions", {"prompt": [text, text]}, {"prompt": [ids[-n:], ids[-n:]]}),
        ("/v1/chat/completions", {"messages": MESSAGES}, {"prompt": chat_ids[-n:]}),
    ]
    for path, body, oracle_body in cases:
        common = {"temperature": 0, "max_tokens": 6, "return_token_ids": True, "ignore_eos": True}
        requests.post(url + "/flush_cache", timeout=30)
        got = _post(url, path, {**body, **common, "truncate_prompt_tokens": n})
        requests.post(url + "/flush_cache", timeout=30)
        want = _post(url, "/v1/completions", {**oracle_body, **common})
        key = "token_ids" if path == "/v1/completions" else "response_token_ids"
        assert [c[key] for c in got["choices"]] == [c["token_ids"] for c in want["choices"]]
        assert got["usage"]["prompt_tokens"] == want["usage"]["prompt_tokens"] == n * len(want["choices"])
    short = _post(url, "/tokenize", {"prompt": "A cat as JSON:"})["tokens"]  # -1: the context holds it all
    assert _comp(url, truncate_prompt_tokens=-1, max_tokens=2)["usage"]["prompt_tokens"] == len(short)


def test_truncate_prompt_tokens_minus_one_is_the_context_length(url: str) -> None:
    """vLLM's ``_validate_truncation_size``: -1 keeps the last ``max_model_len`` tokens (not
    ``max_model_len - max_tokens``: a prompt that then leaves no room for the completion is refused
    as any too-long prompt), and a value above ``max_model_len`` is a 400 naming the field."""
    assert truncation_length(-1, 4096) == 4096 and truncation_length(-1, None) is None
    assert truncation_length(7, 4096) == 7 and truncation_length(4096, 4096) == 4096
    with pytest.raises(RequestError) as ei:
        truncation_length(4097, 4096)
    assert ei.value.param == "truncate_prompt_tokens" and "4097" in ei.value.message
    ctx = int(requests.get(url + "/v1/models", timeout=30).json()["data"][0]["max_model_len"])
    for path, body in (
        ("/v1/completions", {"prompt": "x"}),
        ("/v1/chat/completions", {"messages": MESSAGES}),
    ):
        err = _post(url, path, {**body, "max_tokens": 1, "truncate_prompt_tokens": ctx + 1}, 400)
        assert err["error"]["param"] == "truncate_prompt_tokens" and str(ctx) in err["error"]["message"], path


def _hit_tokens(url: str) -> int:
    """The radix cache's running total of prompt tokens served from the cache."""
    return int(requests.get(url + "/server_info", timeout=30).json()["radix_cache"]["hit_tokens"])


def test_cache_salt_isolates_the_prefix_cache(url: str) -> None:
    """vLLM's ``cache_salt``: requests with different salts never share cached prompt blocks,
    requests with the same salt do (vLLM puts the salt into the first block's hash); every answer
    equals the cold run's. SGLang's ``extra_key`` on ``/generate`` is the same namespace
    (SGLang's OpenAI layer joins ``cache_salt`` + ``extra_key`` into it); an empty salt is vLLM's
    400 naming ``cache_salt``."""
    text = " ".join(["The cat sat on the mat while the dog slept by the warm door."] * 20)
    common = {"prompt": text, "temperature": 0, "max_tokens": 6, "return_token_ids": True, "ignore_eos": True}
    requests.post(url + "/flush_cache", timeout=30)
    cold = _comp(url, **common)["choices"][0]
    assert len(cold["prompt_token_ids"]) > 256  # at least one whole 256-token block
    requests.post(url + "/flush_cache", timeout=30)
    runs = [("a", 0), ("b", 0), ("a", 256), (None, 0)]  # (salt, least cached tokens)
    for salt, least in runs:
        before = _hit_tokens(url)
        got = _comp(url, **common, **({"cache_salt": salt} if salt else {}))["choices"][0]
        hit = _hit_tokens(url) - before
        assert (hit >= least) if least else hit == 0, (salt, hit)
        assert got["token_ids"] == cold["token_ids"], salt
    gen = {"input_ids": cold["prompt_token_ids"], "sampling_params": {"max_new_tokens": 6, "temperature": 0}}
    for extra, cached in (
        ({"extra_key": "a"}, True),
        ({"extra_key": "z"}, False),
        ({"cache_salt": "b"}, True),
    ):
        out = _post(url, "/generate", {**gen, **extra})
        assert (
            (out["meta_info"]["cached_tokens"] >= 256) if cached else out["meta_info"]["cached_tokens"] == 0
        )
        assert out["output_ids"] == cold["token_ids"], extra
    for path, body in (
        ("/v1/completions", {"prompt": "x", "max_tokens": 1}),
        ("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 1}),
        ("/v1/responses", {"input": "x", "max_output_tokens": 1}),
    ):
        err = _post(url, path, {**body, "cache_salt": ""}, 400)
        assert err["error"]["param"] == "cache_salt" and "non-empty" in err["error"]["message"], path


def test_return_tokens_as_token_ids(url: str) -> None:
    comp = _comp(url, logprobs=2, return_token_ids=True, return_tokens_as_token_ids=True)["choices"][0]
    plain = _comp(url, logprobs=2)["choices"][0]
    assert comp["logprobs"]["tokens"] == [f"token_id:{i}" for i in comp["token_ids"]]
    assert comp["logprobs"]["token_logprobs"] == plain["logprobs"]["token_logprobs"]
    assert all(all(k.startswith("token_id:") for k in top) for top in comp["logprobs"]["top_logprobs"])
    chat = _chat(
        url,
        max_tokens=5,
        logprobs=True,
        top_logprobs=2,
        return_token_ids=True,
        return_tokens_as_token_ids=True,
    )
    entries = chat["choices"][0]["logprobs"]["content"]
    assert [e["token"] for e in entries] == [
        f"token_id:{i}" for i in chat["choices"][0]["response_token_ids"]
    ]
    assert all(bytes(e["bytes"]).decode() == e["token"] for e in entries)


def test_chat_echo_request_id_include_reasoning(url: str) -> None:
    msgs = [*MESSAGES, {"role": "assistant", "content": "Sure: {"}]
    body = {"messages": msgs, "continue_final_message": True, "max_tokens": 6}
    plain = _content(_chat(url, **body))
    assert _content(_chat(url, echo=True, **body)) == "Sure: {" + plain
    r = requests.post(
        url + "/v1/chat/completions",
        json={**body, "echo": True, "stream": True, "temperature": 0},
        stream=True,
    )
    deltas = [
        json.loads(line[6:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data: {")
    ]
    assert (
        "".join(d["choices"][0]["delta"].get("content") or "" for d in deltas if d["choices"])
        == "Sure: {" + plain
    )
    assert _content(_chat(url, echo=True, max_tokens=4)) == _content(_chat(url, max_tokens=4))  # roles differ
    assert _chat(url, max_tokens=1, request_id="my-req-1")["id"] == "chatcmpl-my-req-1"
    assert _comp(url, max_tokens=1, request_id="my-req-2")["id"] == "cmpl-my-req-2"
    think = {"chat_template_kwargs": {"thinking": True}, "max_tokens": 8}
    with_r, without = _chat(url, **think), _chat(url, include_reasoning=False, **think)
    assert with_r["choices"][0]["message"]["reasoning_content"]  # the oracle has reasoning to drop
    assert without["choices"][0]["message"]["reasoning_content"] is None
    assert _content(without) == _content(with_r)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("use_beam_search", True),
        ("logits_processors", ["mod.Proc"]),
        ("guided_whitespace_pattern", " "),
        ("structured_outputs", {"json": SCHEMA, "disable_any_whitespace": True}),
        ("structured_outputs", {"json": SCHEMA, "regex": "a"}),
        ("kv_transfer_params", {"do_remote_decode": True}),
        ("vllm_xargs", {"k": 1}),
        ("max_repetition_pattern_size", 4),
        ("truncate_prompt_tokens", 0),
        ("guided_regex", "a"),  # with guided_choice below: two constraints
        ("chat_template", "{{ messages }}"),
    ],
)
def test_refused_fields_name_themselves(url: str, field: str, value: Any) -> None:
    extra = {"guided_choice": ["a"]} if field == "guided_regex" else {}
    err = _chat(url, 400, max_tokens=2, **{field: value}, **extra)
    param = "guided_choice" if field == "guided_regex" else field
    assert err["error"]["param"] == param and err["error"]["code"] == 400 and param in err["message"]
    if field != "chat_template":
        assert _comp(url, 400, **{field: value}, **extra)["param"] == param
    assert _comp(url, max_tokens=1)["choices"][0]["finish_reason"] == "length"  # still serving


class _BosTokenizer:
    """A tokenizer that adds BOS (7) and EOS (8) around the ids of each character."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [ord(c) for c in text]
        return [7, *ids, 8] if add_special_tokens else ids


def test_special_token_edges() -> None:
    assert special_token_edges(_BosTokenizer()) == ([7], [8])
