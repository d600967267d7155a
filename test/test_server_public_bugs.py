"""On the embedded model: public bug reports of peer servers that failed here, as a new user
would send them (seeded ``n > 1`` is in ``test_sampling_seeds.py``, ``save_pretrained``
checkpoints in ``test_loader_hf_variants.py``).

* Prompt scoring: ``max_tokens: 0`` with ``echo`` + ``logprobs`` on ``/v1/completions`` returns
  the prompt, logprobs for the prompt tokens only (the first ``null``) and no completion token;
  the values match HF transformers' log-softmax of the same model (the oracle). Native
  ``max_new_tokens: 0`` likewise. Streaming and non-streaming agree.
* A stream of stray bytes (token 225, the lone continuation byte 0x80, forced with ``logit_bias``)
  sends its text as it is produced instead of empty text until the end.
* A bounded fuzz of sampling parameters through the real sampler and scheduler: a 200 or a 400 in
  SGLang's shape, never a 5xx, the server healthy after.
* ``null`` for an optional OpenAI request field (``"stream": null``, ``"logprobs": null``...)
  means the field's default, as vLLM accepts it (sgl-project/sglang#4802).
* Chat logprobs' ``bytes`` are each token's own bytes, also for a token that holds part of a
  multi-byte character, so that they concatenate to the text (vllm-project/vllm#6626).
* ``add_generation_prompt: false`` (vLLM's chat extension) renders the conversation without the
  assistant turn's opening (vllm-project/router#65).
* ``min_tokens`` / ``min_new_tokens`` hold back stop strings too: a stop string in the text of the
  first ``min_tokens`` tokens does not end the request (vllm-project/vllm#21987).
* The server log carries no traceback, no transformers warning and no carriage-return progress
  updates (stdout / stderr are a file here, not a terminal).
"""

from __future__ import annotations

from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_fixture import ServerHandle, real_env, sse_events, start_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PROMPT = "The capital of France is Paris, and the capital of Italy is"
STRAY = 225
FFFD = "\ufffd"


@pytest.fixture(scope="module")
def server(default_model_dir: str, tmp_path_factory: pytest.TempPathFactory):
    env = real_env()
    h = start_server([], env, tmp_path_factory.mktemp("qa") / "server.log", timeout_s=600)
    yield h
    assert h.stop() == 0, h.log()[-3000:]
    log = h.log()
    assert "Traceback" not in log, log[-5000:]
    assert "\r" not in log  # no tqdm carriage-return updates in a non-terminal log
    assert "[transformers]" not in log and "does not match the ratio" not in log


@pytest.fixture(scope="module")
def hf_logprobs(default_model_dir: str):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(default_model_dir, dtype=torch.float32).eval()

    def run(ids: list[int]) -> Any:
        with torch.no_grad():
            return torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)

    return run


def _post(server: ServerHandle, path: str, body: dict[str, Any]) -> Any:
    r = requests.post(server.url + path, json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_prompt_scoring_with_max_tokens_0(server, hf_logprobs, default_model_dir) -> None:
    from sglang_v4.utils import get_tokenizer

    tok = get_tokenizer(default_model_dir)
    ids = tok.encode(PROMPT)
    body = {"model": "default", "prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 2}
    resp = _post(server, "/v1/completions", body)
    choice = resp["choices"][0]
    assert choice["text"] == PROMPT and choice["finish_reason"] == "length"
    assert resp["usage"]["completion_tokens"] == 0 and resp["usage"]["prompt_tokens"] == len(ids)
    lp = choice["logprobs"]
    assert len(lp["tokens"]) == len(ids) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert "".join(lp["tokens"]) == tok.decode(ids)
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    ref = hf_logprobs(ids)
    for k in range(1, len(ids)):
        assert lp["token_logprobs"][k] == pytest.approx(ref[k - 1, ids[k]].item(), abs=2e-3)
        # OpenAI's legacy format as vLLM returns it: the 2 most likely tokens plus the prompt token
        # itself when it is not among them
        top = lp["top_logprobs"][k]
        assert len(top) in (2, 3)
        assert top[lp["tokens"][k]] == lp["token_logprobs"][k]
        best = sorted(ref[k - 1].tolist(), reverse=True)[:2]
        assert sorted(top.values(), reverse=True)[:2] == pytest.approx(best, abs=2e-3)
    offsets = [0]
    for t in lp["tokens"][:-1]:
        offsets.append(offsets[-1] + len(t))
    assert lp["text_offset"] == offsets

    # streamed: the same text and logprobs, then [DONE]
    with requests.post(
        server.url + "/v1/completions", json={**body, "stream": True}, stream=True, timeout=300
    ) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    chunks = [e["choices"][0] for e in events[:-1] if e["choices"]]
    assert "".join(c["text"] for c in chunks) == PROMPT
    assert [t for c in chunks if c["logprobs"] for t in c["logprobs"]["token_logprobs"]] == lp[
        "token_logprobs"
    ]

    # without echo: nothing at all
    plain = _post(server, "/v1/completions", {"model": "default", "prompt": PROMPT, "max_tokens": 0})
    assert plain["choices"][0]["text"] == "" and plain["usage"]["completion_tokens"] == 0

    # native: max_new_tokens 0 with prompt logprobs
    native = _post(
        server,
        "/generate",
        {
            "text": PROMPT,
            "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True,
            "logprob_start_len": 0,
        },
    )
    assert native["output_ids"] == [] and native["text"] == ""
    assert native["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
    got = native["meta_info"]["input_token_logprobs"]
    assert [e[1] for e in got] == ids and native["meta_info"]["output_token_logprobs"] == []
    assert [e[0] for e in got] == lp["token_logprobs"]


def test_stray_byte_stream_is_sent_as_produced(server, default_model_dir) -> None:
    n = 12
    body = {
        "text": "Hi",
        "sampling_params": {
            "max_new_tokens": n,
            "temperature": 0,
            "logit_bias": {str(STRAY): 100},
            "ignore_eos": True,
        },
        "stream": True,
    }
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=300) as r:
        events = sse_events(r)
    outs = events[:-1]
    assert outs[-1]["output_ids"] == [STRAY] * n
    for e in outs[:-1]:
        k = e["meta_info"]["completion_tokens"]
        assert e["text"] == FFFD * (k - 1), (k, e["text"])  # one token behind, not empty until the end
    assert outs[-1]["text"] == FFFD * n

    oai = {
        "model": "default",
        "prompt": "Hi",
        "max_tokens": n,
        "temperature": 0,
        "logit_bias": {str(STRAY): 100},
        "stream": True,
    }
    with requests.post(server.url + "/v1/completions", json=oai, stream=True, timeout=300) as r:
        chunks = [e["choices"][0] for e in sse_events(r)[:-1] if e["choices"]]
    texts = [c["text"] for c in chunks]
    assert "".join(texts) == FFFD * n
    assert sum(1 for t in texts if t) >= n - 2  # text in (almost) every chunk, not one at the end


SAMPLING = st.fixed_dictionaries(
    {"max_new_tokens": st.integers(0, 3)},
    optional={
        "temperature": st.sampled_from([0.0, 1e-7, 0.7, 2.0, 1e6, -1.0]),
        "top_p": st.sampled_from([1e-9, 0.3, 1.0, 0.0]),
        "top_k": st.sampled_from([-1, 1, 7, 10**9, 0]),
        "min_p": st.sampled_from([0.0, 0.9, 1.0]),
        "frequency_penalty": st.sampled_from([-2.0, 0.0, 2.0, 3.0]),
        "presence_penalty": st.sampled_from([-2.0, 2.0]),
        "repetition_penalty": st.sampled_from([1e-3, 1.0, 2.0]),
        "min_new_tokens": st.integers(0, 4),
        "n": st.integers(1, 3),
        "logit_bias": st.dictionaries(
            st.sampled_from(["0", "1", "225", "129279", "129280"]),
            st.sampled_from([-100, 100, 50]),
            max_size=2,
        ),
        "sampling_seed": st.integers(-(2**63), 2**63 - 1),
        "stop": st.lists(st.text(max_size=3), max_size=2),
        "stop_token_ids": st.lists(st.integers(0, 129_279), max_size=2),
        "ignore_eos": st.booleans(),
        "skip_special_tokens": st.booleans(),
    },
)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(sp=SAMPLING, stream=st.booleans(), logprobs=st.booleans())
def test_fuzz_sampling_on_the_real_model(server, sp: dict[str, Any], stream: bool, logprobs: bool) -> None:
    body = {"text": "Fuzz", "sampling_params": sp, "stream": stream, "return_logprob": logprobs}
    r = requests.post(server.url + "/generate", json=body, timeout=300)
    assert r.status_code in (200, 400), (r.status_code, r.text[:500])
    if r.status_code == 400:
        assert isinstance(r.json()["error"]["message"], str)
    elif stream:
        assert r.text.rstrip().endswith("data: [DONE]")
    assert requests.get(server.url + "/health", timeout=60).status_code == 200


CHAT = "/v1/chat/completions"
MSGS = [{"role": "user", "content": "Say hi"}]


def test_null_optional_fields_mean_their_default(server) -> None:
    """sgl-project/sglang#4802: an evaluation client sent ``"stream": null`` and got a
    ``ValidationError`` for ``stream``; vLLM's request fields are optional and clients that
    serialise every parameter send ``null``. Oracle: the same request with the fields left out."""
    nulls = {
        k: None
        for k in (
            "stream",
            "logprobs",
            "top_logprobs",
            "n",
            "top_p",
            "stop",
            "seed",
            "user",
            "tools",
            "tool_choice",
            "response_format",
            "stream_options",
            "presence_penalty",
            "frequency_penalty",
            "ignore_eos",
            "skip_special_tokens",
            "continue_final_message",
            "parallel_tool_calls",
            "separate_reasoning",
        )
    }
    base = {"model": "default", "messages": MSGS, "max_tokens": 4, "temperature": 0}
    want = _post(server, CHAT, base)
    got = _post(server, CHAT, {**base, **nulls})
    assert got["choices"][0]["message"] == want["choices"][0]["message"]
    assert got["usage"] == want["usage"]

    base = {"model": "default", "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
    want = _post(server, "/v1/completions", base)
    nulls = {
        k: None for k in ("stream", "echo", "logprobs", "n", "stop", "no_stop_trim", "suffix", "best_of")
    }
    got = _post(server, "/v1/completions", {**base, **nulls})
    assert [c["text"] for c in got["choices"]] == [c["text"] for c in want["choices"]]
    assert got["choices"][0]["logprobs"] is None

    # a required field stays required: 400 in OpenAI's shape, naming it
    r = requests.post(server.url + CHAT, json={"model": "default", "messages": None}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = requests.post(server.url + CHAT, json={"messages": [{"role": None, "content": "x"}]}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == 400


def _forced_token_logprob(server: ServerHandle, tid: int, stream: bool) -> dict[str, Any]:
    body = {
        "model": "default",
        "messages": MSGS,
        "max_tokens": 1,
        "logprobs": True,
        "top_logprobs": 2,
        "logit_bias": {str(tid): 100},
        "stream": stream,
    }
    if not stream:
        (entry,) = _post(server, CHAT, body)["choices"][0]["logprobs"]["content"]
        return entry
    with requests.post(server.url + CHAT, json=body, stream=True, timeout=300) as r:
        events = sse_events(r)
    entries = [
        x for e in events[:-1] for c in e["choices"] if c["logprobs"] for x in c["logprobs"]["content"]
    ]
    (entry,) = entries
    return entry


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprob_bytes_of_split_characters(server, default_model_dir, stream: bool) -> None:
    """vllm-project/vllm#6626 (and the same report against ollama, ollama/ollama#13497): a token
    holding part of a multi-byte character (an emoji split by the byte-level BPE) had ``bytes``
    ``[239, 191, 189]`` (the UTF-8 of U+FFFD) instead of its own bytes, so clients could not
    rebuild the text from ``bytes`` as OpenAI documents the field. Oracle: Python's UTF-8
    encoding of the characters, cut where the tokenizer cuts them."""
    from sglang_v4.utils import get_tokenizer

    tok = get_tokenizer(default_model_dir)
    for text in ("\U0001f60a", "\u9f98", "\U0001d518"):
        ids = tok.encode(text, add_special_tokens=False)
        assert len(ids) >= 2  # split across tokens: each piece decodes to U+FFFD on its own
        pieces = [_forced_token_logprob(server, tid, stream) for tid in ids]
        assert all(p["token"] == tok.decode([tid]) for p, tid in zip(pieces, ids))
        assert b"".join(bytes(p["bytes"]) for p in pieces) == text.encode("utf-8")
        for p in pieces:  # the forced token is its own top alternative, with the same bytes
            assert p["top_logprobs"][0]["bytes"] == p["bytes"]

    # whole tokens: the concatenated bytes are the content's UTF-8
    body = {"model": "default", "messages": MSGS, "max_tokens": 12, "temperature": 0, "logprobs": True}
    choice = _post(server, CHAT, body)["choices"][0]
    joined = b"".join(bytes(e["bytes"]) for e in choice["logprobs"]["content"])
    assert joined.decode("utf-8", errors="replace") == choice["message"]["content"]


def test_add_generation_prompt_false(server, default_model_dir) -> None:
    """vllm-project/router#65: ``add_generation_prompt`` (vLLM's chat request extension, default
    true) could not be set by the client and the assistant opening was always appended. Oracle:
    the DeepSeek-V4 prompt format written out by hand (BOS, ``<｜User｜>`` + text, and with the
    generation prompt ``<｜Assistant｜></think>`` in chat mode), tokenized by the tokenizer and
    generated greedily on the native ``/generate`` route."""
    from sglang_v4.utils import get_tokenizer

    tok = get_tokenizer(default_model_dir)
    bare = "<｜begin▁of▁sentence｜><｜User｜>Say hi"
    for flag, prompt in ((False, bare), (True, bare + "<｜Assistant｜></think>")):
        body = {"model": "default", "messages": MSGS, "max_tokens": 5, "temperature": 0}
        if not flag:
            body["add_generation_prompt"] = False
        chat = _post(server, CHAT, body)
        ids = tok.encode(prompt, add_special_tokens=False)
        assert chat["usage"]["prompt_tokens"] == len(ids)
        cold = _post(
            server,
            "/generate",
            {"input_ids": ids, "sampling_params": {"max_new_tokens": 5, "temperature": 0}},
        )
        assert chat["choices"][0]["message"]["content"] == cold["text"]


def test_min_tokens_holds_back_stop_strings(server, default_model_dir) -> None:
    """vllm-project/vllm#21987: ``min_tokens`` with a stop string the model writes early. The
    stop string matches only after the text of the first ``min_tokens`` tokens; the oracle is the
    cold greedy run without stop strings, cut with plain string operations."""
    from sglang_v4.utils import get_tokenizer

    tok = get_tokenizer(default_model_dir)
    sp = {"max_new_tokens": 12, "temperature": 0}
    cold = _post(server, "/generate", {"text": PROMPT, "sampling_params": sp})
    text, ids = cold["text"], cold["output_ids"]
    stop = text[0]  # in the first token's text
    base = {"model": "default", "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "stop": [stop]}
    early = _post(server, "/v1/completions", base)["choices"][0]
    assert early["text"] == "" and early["finish_reason"] == "stop"
    body = dict(base, min_tokens=3)
    late = _post(server, "/v1/completions", body)
    head = tok.decode(ids[:3])
    assert text.startswith(head)
    pos = text.find(stop, len(head))
    choice = late["choices"][0]
    if pos < 0:
        assert (choice["text"], choice["finish_reason"]) == (text, "length")
    else:
        assert (choice["text"], choice["finish_reason"]) == (text[:pos], "stop")
    assert late["usage"]["completion_tokens"] > 3
    native = _post(
        server, "/generate", {"text": PROMPT, "sampling_params": dict(sp, stop=[stop], min_new_tokens=3)}
    )
    assert native["text"] == choice["text"]
