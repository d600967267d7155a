"""``/tokenize`` and ``/detokenize`` (and their ``/v1/`` names), SGLang's tokenizer routes.

Found by hand: both answered FastAPI's 404 ``{"detail": "Not Found"}`` although SGLang (and vLLM)
serve them and clients call them to count a prompt's tokens. Oracles: the tokenizer itself
(``tok.encode`` / ``tok.decode``) and the documented DeepSeek-V4 chat format; the routes run
through FastAPI's TestClient over the fake tokenizer manager of ``test_openai_api``.
"""

from __future__ import annotations

import pytest
from openai_fake_tm import A, B, FakeTM, U
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from transformers import PreTrainedTokenizerFast


@pytest.mark.parametrize("prefix", ["", "/v1"])
def test_tokenize_prompt_text_and_batch(tok: PreTrainedTokenizerFast, prefix: str) -> None:
    c = _client(FakeTM(tok))
    r = c.post(f"{prefix}/tokenize", json={"model": "dsv4-test", "prompt": "The quick brown fox"})
    assert r.status_code == 200, r.text
    ids = tok.encode("The quick brown fox")
    assert r.json() == {"tokens": ids, "count": len(ids), "max_model_len": 4096}
    texts = ["a b", "hello world, 你好"]
    r = c.post(f"{prefix}/tokenize", json={"prompt": texts, "add_special_tokens": False})
    want = [tok.encode(t, add_special_tokens=False) for t in texts]
    assert r.json()["tokens"] == want and r.json()["count"] == [len(w) for w in want]


def test_tokenize_count_is_the_completion_prompt_tokens(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    count = c.post("/tokenize", json={"prompt": "Say hi"}).json()["count"]
    out = _oai(c).completions.create(model="dsv4-test", prompt="Say hi", max_tokens=1)
    assert count == out.usage.prompt_tokens == len(tok.encode("Say hi"))


def test_tokenize_messages_renders_as_the_chat_route(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok))
    msgs = [{"role": "system", "content": "Sys."}, {"role": "user", "content": "Hi"}]
    r = c.post("/tokenize", json={"messages": msgs})
    assert r.status_code == 200, r.text
    want = tok.encode(B + "Sys." + U + "Hi" + A + "</think>", add_special_tokens=False)
    assert r.json()["tokens"] == want and r.json()["count"] == len(want)
    think = {"chat_template_kwargs": {"thinking": True}}
    r = c.post("/tokenize", json={"messages": msgs, **think})
    assert r.json()["tokens"] == tok.encode(B + "Sys." + U + "Hi" + A + "<think>", add_special_tokens=False)
    tools = [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    ]
    count = c.post("/tokenize", json={"messages": msgs, "tools": tools, **think}).json()["count"]
    chat = _oai(c).chat.completions.create(
        model="dsv4-test", messages=msgs, tools=tools, max_tokens=1, extra_body=think
    )
    assert count == chat.usage.prompt_tokens > len(want)


@pytest.mark.parametrize("prefix", ["", "/v1"])
def test_detokenize(tok: PreTrainedTokenizerFast, prefix: str) -> None:
    c = _client(FakeTM(tok))
    ids = tok.encode("Hello there, 你好", add_special_tokens=False)
    r = c.post(f"{prefix}/detokenize", json={"tokens": ids})
    # SGLang's ``text`` and vLLM's ``prompt``: the same text under both names
    assert r.status_code == 200 and r.json() == {"text": "Hello there, 你好", "prompt": "Hello there, 你好"}
    eos = tok.convert_tokens_to_ids("<｜end▁of▁sentence｜>")
    r = c.post(f"{prefix}/detokenize", json={"tokens": [ids, [*ids, eos]], "skip_special_tokens": False})
    want = [tok.decode(ids), tok.decode([*ids, eos])]
    assert r.json() == {"text": want, "prompt": want}
    assert r.json()["text"][1].endswith("<｜end▁of▁sentence｜>")
    r = c.post(f"{prefix}/detokenize", json={"tokens": [*ids, eos]})
    assert r.json() == {"text": "Hello there, 你好", "prompt": "Hello there, 你好"}


@pytest.mark.parametrize(
    "path,body,status,param",
    [
        ("/tokenize", {}, 400, "prompt"),
        ("/tokenize", {"prompt": "x", "messages": [{"role": "user", "content": "x"}]}, 400, "prompt"),
        ("/tokenize", {"prompt": 5}, 400, "prompt"),
        ("/tokenize", {"model": "nope", "prompt": "x"}, 404, "model"),
        ("/tokenize", {"messages": []}, 400, "messages"),
        ("/tokenize", {"messages": [{"role": "bogus", "content": "x"}]}, 400, "messages.0.role"),
        ("/detokenize", {"tokens": [-1]}, 400, "tokens"),
        ("/detokenize", {"tokens": [[1], [10**9]]}, 400, "tokens"),
        ("/detokenize", {"tokens": "abc"}, 400, "tokens"),
        ("/detokenize", {}, 400, "tokens"),
    ],
)
def test_tokenize_errors(
    tok: PreTrainedTokenizerFast, path: str, body: dict, status: int, param: str
) -> None:
    r = _client(FakeTM(tok)).post(path, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["code"] == status and err["message"]


def test_tokenize_needs_the_api_key(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok), api_key="sk-test")
    for path, body in (("/tokenize", {"prompt": "x"}), ("/v1/detokenize", {"tokens": [5]})):
        assert c.post(path, json=body).status_code == 401
        ok = c.post(path, json=body, headers={"Authorization": "Bearer sk-test"})
        assert ok.status_code == 200, ok.text
