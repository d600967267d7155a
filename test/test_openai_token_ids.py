"""SGLang's token-id fields of the OpenAI routes, and its fields of missing features.

Found by hand: ``return_token_ids`` / ``return_prompt_token_ids`` (used by RL clients to train on
exactly the sampled ids) and chat's ``input_ids`` (a pre-tokenized prompt) were silently ignored,
and so were ``lora_path``, ``return_hidden_states``, ``custom_logit_processor``... -- a request for
a LoRA adapter was answered by the base model with a 200, while ``/generate`` refuses the same
field with a 400. Oracles: the tokenizer's own ids of the prompt and of the fake reply, the ids
the fake tokenizer manager received, and the ``openai`` client's parser.
"""

from __future__ import annotations

import json

import pytest
from openai_fake_tm import A, B, FakeTM, U
from openai_fake_tm import app_client as _client
from openai_fake_tm import oai_client as _oai
from openai_fake_tm import sse_data_events as _sse_events
from transformers import PreTrainedTokenizerFast

REPLY = "Hello there, general Kenobi."


def test_completion_return_token_ids(tok: PreTrainedTokenizerFast) -> None:
    tm = FakeTM(tok, reply=REPLY)
    c = _client(tm)
    out = _oai(c).completions.create(
        model="dsv4-test", prompt=["Say hi", "Bye"], n=2, max_tokens=3, extra_body={"return_token_ids": True}
    )
    reply_ids = tok.encode(REPLY, add_special_tokens=False)
    prompts = [tok.encode("Say hi"), tok.encode("Bye")]
    for i, ch in enumerate(out.choices):
        assert ch.model_extra["prompt_token_ids"] == prompts[i // 2]
        assert ch.model_extra["token_ids"] == reply_ids[:3]
        assert tok.decode(ch.model_extra["token_ids"]) == ch.text
    plain = _oai(c).completions.create(model="dsv4-test", prompt="Say hi", max_tokens=3)
    assert "token_ids" not in plain.choices[0].model_extra
    assert "prompt_token_ids" not in plain.choices[0].model_extra


def test_completion_return_token_ids_streamed(tok: PreTrainedTokenizerFast) -> None:
    c = _client(FakeTM(tok, reply=REPLY))
    r = c.post(
        "/v1/completions",
        json={
            "model": "dsv4-test",
            "prompt": [[5, 6, 7]],
            "max_tokens": 4,
            "stream": True,
            "return_token_ids": True,
        },
    )
    chunks = [e for e in _sse_events(r) if e != "[DONE]"]
    got = [t for e in chunks for ch in e["choices"] for t in ch.get("token_ids") or []]
    assert got == tok.encode(REPLY, add_special_tokens=False)[:4]
    firsts = [ch.get("prompt_token_ids") for e in chunks for ch in e["choices"]]
    assert firsts[0] == [5, 6, 7] and all(f is None for f in firsts[1:])


def test_chat_return_token_ids_and_input_ids(tok: PreTrainedTokenizerFast) -> None:
    tm = FakeTM(tok, reply=REPLY)
    c = _client(tm)
    msgs = [{"role": "user", "content": "Hi"}]
    out = _oai(c).chat.completions.create(
        model="dsv4-test", messages=msgs, max_tokens=4, extra_body={"return_token_ids": True}
    )
    prompt = tok.encode(B + U + "Hi" + A + "</think>", add_special_tokens=False)
    extra = out.choices[0].model_extra
    assert extra["prompt_token_ids"] == prompt
    assert extra["response_token_ids"] == tok.encode(REPLY, add_special_tokens=False)[:4]
    only = _oai(c).chat.completions.create(
        model="dsv4-test", messages=msgs, max_tokens=1, extra_body={"return_prompt_token_ids": True}
    )
    assert only.choices[0].model_extra["prompt_token_ids"] == prompt
    assert "response_token_ids" not in only.choices[0].model_extra
    _oai(c).chat.completions.create(
        model="dsv4-test", messages=msgs, max_tokens=1, extra_body={"input_ids": [9, 8, 7]}
    )
    assert tm.received[-1].input_ids == [9, 8, 7]


@pytest.mark.parametrize(
    "path,extra,param",
    [
        ("/v1/chat/completions", {"lora_path": "adapter"}, "lora_path"),
        ("/v1/chat/completions", {"return_hidden_states": True}, "return_hidden_states"),
        ("/v1/completions", {"custom_logit_processor": "x"}, "custom_logit_processor"),
        ("/v1/completions", {"session_params": {"id": "s"}}, "session_params"),
        ("/v1/completions", {"bootstrap_host": "h"}, "bootstrap_host"),
        ("/v1/chat/completions", {"input_ids": []}, "input_ids"),
    ],
)
def test_unsupported_fields_are_400(tok: PreTrainedTokenizerFast, path: str, extra: dict, param: str) -> None:
    tm = FakeTM(tok)
    base = {"model": "dsv4-test", "max_tokens": 1}
    base |= {"messages": [{"role": "user", "content": "x"}]} if "chat" in path else {"prompt": "x"}
    r = _client(tm).post(path, content=json.dumps(base | extra))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert tm.received == []  # nothing was generated


@pytest.mark.parametrize("extra", [{"lora_path": None}, {"return_hidden_states": False}])
def test_unset_unsupported_fields_pass(tok: PreTrainedTokenizerFast, extra: dict) -> None:
    body = {"model": "dsv4-test", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}], **extra}
    assert _client(FakeTM(tok)).post("/v1/chat/completions", json=body).status_code == 200
