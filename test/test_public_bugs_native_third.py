"""A third set of public bug reports of SGLang's native API, its offline ``Engine`` and the
server's reliability, replayed against sglang-v4.

The server and the engine run the real processes over the model-free FakeScheduler
(``server_fixture``, conftest's session ``held_fake_server`` / ``shared_fake_engine``): it emits
``FAKE_TEXT``'s tokens, and a prompt holding ``[hold]`` runs until it is aborted. Expected texts
come from the tokenizer file through ``transformers`` (independent of the runtime's tokenizer
wrapper); expected shapes, orders and error wordings from each report and SGLang 0.5's own code
(its ``TokenizerManager._validate_one_request`` and ``_handle_batch_request``), read in the
installed ``sglang`` package where it is present.
"""

from __future__ import annotations

import asyncio
import inspect
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
from fake_prompt_tm import MODEL
from server_fixture import (
    FAKE_CONTEXT_LEN,
    fake_output_text,
    in_background,
    sse_events,
    used_pages,
    wait_running_reqs,
    wait_used_pages,
)

pytestmark = pytest.mark.timeout(240)
HOLD = "[hold]"  # FakeScheduler's FAKE_HOLD_ON_TEXT: such a request runs until it is aborted


@pytest.fixture(scope="module")
def server(held_fake_server: Any) -> Any:
    """conftest's session fake-model server (``[hold]`` prompts held until aborted)."""
    return held_fake_server


@pytest.fixture(scope="module")
def engine(shared_fake_engine: Any) -> Any:
    """conftest's session ``Engine`` on the fake model (``[hold]`` prompts held)."""
    return shared_fake_engine


def post(server: Any, path: str, body: Any = None, **kw: Any) -> requests.Response:
    return requests.post(server.url + path, json=body, timeout=60, **kw)


def gen(server: Any, body: dict[str, Any]) -> Any:
    r = post(server, "/generate", body)
    assert r.status_code == 200, r.text
    return r.json()


def _serves(server: Any, tok: Any) -> None:
    """The server still answers an ordinary request with the fake model's text."""
    out = gen(server, {"text": "still there?", "sampling_params": {"max_new_tokens": 3}})
    assert out["text"] == fake_output_text(tok, 3)


def _error_message(r: requests.Response) -> str:
    assert r.headers["content-type"].startswith("application/json"), r.text
    return r.json()["error"]["message"]


# ----------------------------------------------------------------------------- malformed bodies
def test_sglang_3805_malformed_json_body_is_a_json_400(server: Any, tok: Any) -> None:
    """sgl-project/sglang#3805 (an illegal JSON body got a bare ``500 Internal Server Error``
    instead of a JSON error): on the native and the OpenAI routes a body that is not JSON, not
    UTF-8, empty, or not an object is a 400 with a JSON error object, and the server serves on."""
    cases = [b'{"text": "hi", x}', b'{"text": "\xff\xfe"}', b"", b"[1, 2]"]
    for path in ("/generate", "/v1/chat/completions", "/v1/completions"):
        for body in cases:
            r = post(server, path, data=body, headers={"Content-Type": "application/json"})
            assert r.status_code == 400, (path, body, r.text)
            assert _error_message(r), (path, body)
    _serves(server, tok)


# ----------------------------------------------------------------------------- limits
def test_sglang_772_max_new_tokens_zero(server: Any, engine: Any, tok: Any) -> None:
    """sgl-project/sglang#772 (``max_new_tokens: 0`` broke after a scheduler change): such a
    request answers at once with no text, no ids, ``finish_reason`` ``length`` 0 and the prompt's
    token count (the tokenizer's own count, BOS included), on the route and the ``Engine``."""
    prompt = "Count my tokens."
    n_prompt = len(tok.encode(prompt))
    sp = {"max_new_tokens": 0}
    for out in (
        gen(server, {"text": prompt, "sampling_params": sp}),
        engine.generate(prompt=prompt, sampling_params=sp),
    ):
        assert (out["text"], out["output_ids"]) == ("", [])
        m = out["meta_info"]
        assert m["finish_reason"] == {"type": "length", "length": 0}
        assert (m["prompt_tokens"], m["completion_tokens"]) == (n_prompt, 0)


def _sglang_context_checks() -> str | None:
    """The source of SGLang's ``TokenizerManager._validate_one_request`` (``None`` without the
    ``sglang`` package)."""
    try:
        from sglang.srt.managers.tokenizer_manager import TokenizerManager
    except Exception:  # noqa: BLE001 - any import failure means "not installed here"
        return None
    return inspect.getsource(TokenizerManager._validate_one_request)


def test_openclaw_129352_a_prompt_over_the_context_gets_sglangs_input_wording(
    server: Any, engine: Any, tok: Any
) -> None:
    """openclaw/openclaw#129352 (SGLang's two context 400s: a prompt that alone fills the window
    gets ``The input (N tokens) is longer than the model's context length (M tokens).``, one
    whose ``max_tokens`` pushes it over gets ``Requested token count exceeds the model's maximum
    context length of M tokens``; clients tell them apart) and QwenLM/Qwen3#1321 (the first as
    SGLang sends it). A prompt longer than the context was answered with the second wording
    whenever the request set ``max_new_tokens`` / ``max_tokens``; SGLang checks the prompt alone
    first. Both requests leave no page behind."""
    src = _sglang_context_checks()
    if src is not None:  # SGLang's own order: the input alone, then input + max_new_tokens
        assert src.index("is longer than the") < src.index("Requested token count exceeds")
    over = [100] * (FAKE_CONTEXT_LEN + 40)
    b1 = f"The input ({len(over)} tokens) is longer than the model's context length ({FAKE_CONTEXT_LEN} tokens)."
    for sp in ({}, {"max_new_tokens": 8}):
        r = post(server, "/generate", {"input_ids": over, "sampling_params": sp})
        assert r.status_code == 400 and _error_message(r).startswith(b1), r.text
        with pytest.raises(ValueError) as e:
            engine.generate(input_ids=over, sampling_params=sp)
        assert str(e.value).startswith(b1), str(e.value)
    long_text = "hello " * (FAKE_CONTEXT_LEN + 40)
    chat = {"model": MODEL, "messages": [{"role": "user", "content": long_text}], "max_tokens": 8}
    r = post(server, "/v1/chat/completions", chat)
    assert r.status_code == 400 and "is longer than the model's context length" in _error_message(r), r.text
    # a prompt that fits, with a max_new_tokens over the rest: the second wording and the counts
    fits = [100] * (FAKE_CONTEXT_LEN - 4)
    r = post(server, "/generate", {"input_ids": fits, "sampling_params": {"max_new_tokens": 8}})
    msg = _error_message(r)
    assert r.status_code == 400 and msg.startswith(
        f"Requested token count exceeds the model's maximum context length of {FAKE_CONTEXT_LEN} tokens."
    ), msg
    assert f"{len(fits)} in the messages, 8 in the completion" in msg, msg
    assert used_pages(server) == 0
    _serves(server, tok)


def test_sglang_7447_7642_lora_path_on_a_server_without_lora(server: Any, engine: Any, tok: Any) -> None:
    """sgl-project/sglang#7447 and #7642 (a request naming a LoRA adapter the server had not
    loaded crashed the server on an assertion; fixed to a 400 / ``ValueError`` naming the
    adapter problem, the server serving on): this server loads no adapters, so a ``lora_path``
    (one, or one per batch item) is a 400 naming ``lora_path``; ``null`` means none."""
    for lp, text in (("my-adapter", "a"), (["a1", None], ["a", "b"])):
        r = post(
            server, "/generate", {"text": text, "lora_path": lp, "sampling_params": {"max_new_tokens": 2}}
        )
        assert r.status_code == 400 and "lora_path" in _error_message(r), r.text
    with pytest.raises(ValueError, match="lora_path"):
        engine.generate(prompt="a", lora_path="my-adapter", sampling_params={"max_new_tokens": 2})
    out = gen(server, {"text": "a", "lora_path": None, "sampling_params": {"max_new_tokens": 2}})
    assert out["text"] == fake_output_text(tok, 2)
    assert used_pages(server) == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("return_hidden_states", True),
        ("input_embeds", [[0.0, 0.1]]),
        ("custom_logit_processor", "{}"),
        ("image_data", "data:image/png;base64,AAAA"),
    ],
)
def test_sglang_4997_7807_unsupported_native_fields_are_refused(server: Any, field: str, value: Any) -> None:
    """sgl-project/sglang#4997 and #8066 (``return_hidden_states`` results silently missing or
    misassigned in a batch) and #7807 (``input_embeds`` with ``n > 1`` failed inside the server):
    a native field this runtime does not implement is a 400 naming it, for one prompt, a batch
    and ``n: 2`` alike, never an answer that silently lacks what was asked."""
    for text, n in (("a", 1), (["a", "b"], 1), ("a", 2)):
        body = {"text": text, field: value, "sampling_params": {"max_new_tokens": 2, "n": n}}
        r = post(server, "/generate", body)
        assert r.status_code == 400 and field in _error_message(r), (text, n, r.text)
    assert used_pages(server) == 0


# ----------------------------------------------------------------------------- batches and n
def test_sglang_1134_batch_with_n_orders_prompt_major(server: Any, tok: Any) -> None:
    """sgl-project/sglang#1134 (streaming with several prompts and ``n > 1``; output ``i * n + j``
    is prompt ``i``'s sample ``j``, as SGLang's ``_handle_batch_request`` expands the batch): with
    per-prompt ``sampling_params`` of 1 and 3 tokens and ``n: 2``, the answer lists prompt 0's two
    samples, then prompt 1's; streamed, indexes 0..3 each end on their sample's whole text."""
    sps = [{"max_new_tokens": 1, "n": 2}, {"max_new_tokens": 3, "n": 2}]
    outs = gen(server, {"text": ["first", "second"], "sampling_params": sps})
    assert [o["text"] for o in outs] == [fake_output_text(tok, k) for k in (1, 1, 3, 3)]
    body = {"text": ["first", "second"], "sampling_params": sps, "stream": True}
    with requests.post(server.url + "/generate", json=body, stream=True, timeout=60) as r:
        assert r.status_code == 200
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    last: dict[int, str] = {}
    for e in events[:-1]:
        last[e["index"]] = e["text"]
    assert last == {i: fake_output_text(tok, k) for i, k in enumerate((1, 1, 3, 3))}


def test_sglang_1365_logprob_start_len_per_batch_item(server: Any) -> None:
    """sgl-project/sglang#1365 and #193 (prompt logprobs not returned from the position asked /
    wrong with ``logprob_start_len > 0``): in a batch each item's ``logprob_start_len`` applies to
    it: ``input_token_logprobs`` lists the prompt's ids from that position on, the first without
    a value; a start past the prompt is a 400 naming the field."""
    ids = [[11, 12, 13, 14, 15], [21, 22, 23]]
    body = {
        "input_ids": ids,
        "return_logprob": True,
        "logprob_start_len": [2, 0],
        "sampling_params": {"max_new_tokens": 1},
    }
    outs = gen(server, body)
    for o, prompt, start in zip(outs, ids, (2, 0), strict=True):
        got = o["meta_info"]["input_token_logprobs"]
        assert [t[1] for t in got] == prompt[start:]
        assert got[0][0] is None and all(isinstance(t[0], float) for t in got[1:])
    r = post(server, "/generate", {**body, "logprob_start_len": [9, 0]})
    assert r.status_code == 400 and "logprob_start_len" in _error_message(r), r.text


# ----------------------------------------------------------------------------- aborts
def test_sglang_6855_abort_all_ends_every_request(server: Any, tok: Any) -> None:
    """sgl-project/sglang#6855 (``/abort_request`` for every request at once, the ``/generate``
    calls answering instead of hanging): a held batch of two and a held single request all end
    with SGLang's abort ``finish_reason``, their pages come back, and the server serves on."""
    t1, box1 = in_background(gen, server, {"text": [HOLD + " a", HOLD + " b"], "sampling_params": {}})
    t2, box2 = in_background(gen, server, {"text": HOLD + " c", "sampling_params": {}})
    wait_running_reqs(server, 3)
    assert post(server, "/abort_request", {"abort_all": True}).status_code == 200
    t1.join(30)
    t2.join(30)
    outs = [*box1["out"], box2["out"]]
    assert [o["meta_info"]["finish_reason"]["type"] for o in outs] == ["abort"] * 3
    wait_used_pages(server, 0)
    _serves(server, tok)


def test_sglang_8786_many_concurrent_aborts(server: Any, tok: Any) -> None:
    """sgl-project/sglang#8786 (an RL loop aborting many in-flight requests at once; each abort
    must end its request once, whatever the interleaving): 16 held requests, each aborted twice
    by concurrent ``/abort_request`` calls, all answer ``abort``; no page stays in use."""
    rids = [f"many-abort-{i}" for i in range(16)]
    with ThreadPoolExecutor(len(rids)) as pool, ThreadPoolExecutor(len(rids)) as abort_pool:
        futs = [
            pool.submit(gen, server, {"text": f"{HOLD} {i}", "rid": rid, "sampling_params": {}})
            for i, rid in enumerate(rids)
        ]
        wait_running_reqs(server, len(rids))
        aborts = [abort_pool.submit(post, server, "/abort_request", {"rid": rid}) for rid in rids + rids]
        assert {a.result().status_code for a in aborts} == {200}
        outs = [f.result(timeout=30) for f in futs]
    assert [o["meta_info"]["id"] for o in outs] == rids
    assert {o["meta_info"]["finish_reason"]["type"] for o in outs} == {"abort"}
    wait_used_pages(server, 0)
    _serves(server, tok)


# ----------------------------------------------------------------------------- busy server
def test_sglang_4191_info_routes_answer_while_requests_run(server: Any, tok: Any) -> None:
    """sgl-project/sglang#4191 (while requests were in flight ``/get_server_info`` hung although
    ``/health`` and ``/get_model_info`` answered): with requests running, ``/health``,
    ``/health_generate``, ``/get_server_info`` (counting them) and ``/get_model_info`` all answer
    promptly; ``/flush_cache`` refuses (SGLang's 400) and flushes once they have ended."""
    t, box = in_background(gen, server, {"text": [HOLD + " x", HOLD + " y"], "sampling_params": {}})
    try:
        wait_running_reqs(server, 2)
        for path in ("/health", "/health_generate"):
            assert requests.get(server.url + path, timeout=15).status_code == 200, path
        info = requests.get(server.url + "/get_server_info", timeout=5)
        assert info.status_code == 200 and info.json()["num_running_reqs"] == 2
        mi = requests.get(server.url + "/get_model_info", timeout=5).json()
        assert mi["is_generation"] is True and mi["served_model_name"] == MODEL
        assert post(server, "/flush_cache").status_code == 400
    finally:
        post(server, "/abort_request", {"abort_all": True})
        t.join(30)
    assert [o["meta_info"]["finish_reason"]["type"] for o in box["out"]] == ["abort", "abort"]
    wait_used_pages(server, 0)
    assert post(server, "/flush_cache").status_code == 200


def test_sglang_2322_11289_failed_weight_update_leaves_the_server_serving(
    server: Any, tok: Any, tmp_path: Path
) -> None:
    """sgl-project/sglang#2322 (``/update_weights_from_disk`` with a checkpoint of another size
    corrupted the runtime) and #11289 (the update answered ``Internal Server Error`` and took the
    server down): a checkpoint this server cannot load (another size; a missing directory; no
    ``model_path``) is answered ``success: false`` with a message in SGLang's shape (not a 500),
    the model and ``weight_version`` stay as they were, and generation is unchanged."""
    before = requests.get(server.url + "/get_model_info", timeout=10).json()
    other = tmp_path / "other-size"
    other.mkdir()
    (other / "config.json").write_text(
        '{"model_type": "deepseek_v4", "hidden_size": 8192, "vocab_size": 1000}'
    )
    for body in ({"model_path": str(other)}, {"model_path": str(tmp_path / "missing")}, {}):
        r = post(server, "/update_weights_from_disk", body)
        assert 400 <= r.status_code < 500, r.text
        j = r.json()
        assert j["success"] is False and isinstance(j["message"], str) and j["message"], j
    after = requests.get(server.url + "/get_model_info", timeout=10).json()
    assert (after["model_path"], after["weight_version"]) == (before["model_path"], before["weight_version"])
    _serves(server, tok)


# ----------------------------------------------------------------------------- Engine
def test_sglang_1614_engine_async_stream_with_n_and_batches(engine: Any, tok: Any) -> None:
    """sgl-project/sglang#1614 (``Engine.async_generate`` streaming) and #259 (streaming a batch):
    an ``async_generate(stream=True)`` with ``n: 2`` yields chunks tagged ``index`` 0 and 1 whose
    last texts are each sample's whole output; a streamed batch of prompts through the sync
    ``generate`` ends each ``index`` on its prompt's output; a non-streamed async batch answers
    in prompt order. Nothing is left running."""

    async def stream_n() -> dict[int, str]:
        last: dict[int, str] = {}
        it = await engine.async_generate(
            prompt="a", sampling_params={"max_new_tokens": 3, "n": 2}, stream=True
        )
        async for chunk in it:
            last[chunk["index"]] = chunk["text"]
        return last

    assert asyncio.run(stream_n()) == {0: fake_output_text(tok, 3), 1: fake_output_text(tok, 3)}
    last: dict[int, str] = {}
    sps = [{"max_new_tokens": 2}, {"max_new_tokens": 4}]
    for chunk in engine.generate(prompt=["p", "q"], sampling_params=sps, stream=True):
        last[chunk["index"]] = chunk["text"]
    assert last == {0: fake_output_text(tok, 2), 1: fake_output_text(tok, 4)}

    async def batch() -> list[Any]:
        return await engine.async_generate(
            prompt=["p", "q", "r"], sampling_params=[{"max_new_tokens": k} for k in (3, 1, 2)]
        )

    assert [o["text"] for o in asyncio.run(batch())] == [fake_output_text(tok, k) for k in (3, 1, 2)]
    assert engine.get_server_info()["num_running_reqs"] == 0


def test_sglang_7830_engine_batch_argument_mismatches_are_value_errors(engine: Any, tok: Any) -> None:
    """sgl-project/sglang#7830 (the batch ``rid`` validation fixed with #7807: a batch whose
    per-item lists do not match it failed deep inside the server): an ``Engine`` batch whose ``sampling_params`` / ``rid`` lists are not one
    per prompt, or whose ``rid`` values repeat, is a ``ValueError`` naming the field, and the
    engine then serves a well-formed batch with one ``rid`` per prompt."""
    with pytest.raises(ValueError, match="sampling_params"):
        engine.generate(prompt=["a", "b"], sampling_params=[{"max_new_tokens": 1}])
    with pytest.raises(ValueError, match="rid"):
        engine.generate(prompt=["a", "b"], rid=["only-one"], sampling_params={"max_new_tokens": 1})
    with pytest.raises(ValueError, match="rid"):
        engine.generate(prompt=["a", "b"], rid=["same", "same"], sampling_params={"max_new_tokens": 1})
    outs = engine.generate(prompt=["a", "b"], rid=["eng-r1", "eng-r2"], sampling_params={"max_new_tokens": 2})
    assert [o["meta_info"]["id"] for o in outs] == ["eng-r1", "eng-r2"]
    assert [o["text"] for o in outs] == [fake_output_text(tok, 2)] * 2
