"""SGLang's native-endpoint and parser tests, their model-independent assertions replayed on the
embedded DeepSeek-V4 model's ``more_bugs_server`` (``--context-length 1024 --enable-cache-report``)
and on the output parsers in process.

Each test names the SGLang test it comes from (``sgl-project/sglang:path::test_name``); assertions
that already had a test here are not repeated.

Fault found and fixed: ``/generate`` (and ``Engine.generate``) refused ``data_parallel_rank: 0``
(and ``routed_dp_rank: 0``) as an unsupported feature, while the OpenAI routes silently ignored
any rank. SGLang dispatches a pinned request to rank ``k`` of its ``dp_size`` ranks and refuses
only a rank outside ``[0, dp_size)``; a server here is one rank, so ``0`` is now accepted on every
route and any other rank is refused with SGLang's messages.

Deliberately not matched: ``/detokenize`` of an id outside the vocabulary is a 400 naming the
position (SGLang's test expects its 500); the text parts of one message are joined by a blank
line, as DeepSeek's own request converter joins them (SGLang's string content format joins with a
space); a flush refused while requests run is a 400 saying so (SGLang's 400 body repeats its
success text).

Oracles: the SGLang tests' stated expectations, the ``transformers`` tokenizer of the model, a
cold (cache-flushed) run of the same request, and the request's own ``token_ids_logprob`` probes
against the ``input_token_logprobs`` computed for the same positions.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests
from public_bugs_testutil import MODEL, generate, post, sse
from server_fixture import ServerHandle
from sglang_v4.entrypoints.openai.reasoning_parser import ReasoningParser, reasoning_spec, split_reasoning

pytestmark = pytest.mark.timeout(300)


def test_top1_is_the_chosen_token_and_token_id_probes_agree(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:test/registered/core/test_srt_endpoint.py::test_logprob_with_chunked_prefill
    and ::test_logprob_token_ids_chunked: with ``logprob_start_len: -1`` and ``temperature: 0``
    each output position has 5 top logprobs whose first is the chosen token's entry; with
    ``token_ids_logprob`` over a prompt of consecutive ids, ``input_token_ids_logprobs`` has one
    entry per input logprob and, where the probed id is the prompt's token, its logprob equals that
    position's ``input_token_logprobs`` value."""
    r = generate(
        more_bugs_server,
        {
            "text": "I have a very good idea on this. " * 8,
            "sampling_params": {"temperature": 0, "max_new_tokens": 4},
            "return_logprob": True,
            "logprob_start_len": -1,
            "top_logprobs_num": 5,
        },
    )
    m = r["meta_info"]
    assert m["completion_tokens"] == len(m["output_token_logprobs"]) == len(m["output_top_logprobs"]) == 4
    for chosen, top in zip(m["output_token_logprobs"], m["output_top_logprobs"]):
        assert len(top) == 5 and top[0] == chosen, (chosen, top)

    prompt_ids, probe_ids = list(range(5, 200)), list(range(5, 200, 37))
    m = generate(
        more_bugs_server,
        {
            "input_ids": prompt_ids,
            "sampling_params": {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True},
            "return_logprob": True,
            "logprob_start_len": 0,
            "token_ids_logprob": probe_ids,
        },
    )["meta_info"]
    assert len(m["input_token_ids_logprobs"]) == len(m["input_token_logprobs"]) == len(prompt_ids)
    assert len(m["output_token_ids_logprobs"]) == 4
    checked = 0
    for (logprob, token_id, _), probes in zip(m["input_token_logprobs"], m["input_token_ids_logprobs"]):
        if logprob is None or token_id not in probe_ids:
            continue
        assert [p[1] for p in probes] == probe_ids
        assert {tid: lp for lp, tid, _ in probes}[token_id] == pytest.approx(logprob, abs=1e-4)
        checked += 1
    assert checked == len(probe_ids) - 1  # every probe but the first id (position 0 has no logprob)


def test_logit_bias_forces_forbids_and_stays_per_request(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:test/registered/core/test_srt_endpoint.py::test_logit_bias,
    ::test_forbidden_token and ::test_logit_bias_isolation: a +100 bias at temperature 1 makes
    every sampled token the biased id; a -100 bias keeps an id out of a greedy answer that chose it
    unbiased; in concurrent requests, only the biased ones are forced. A bias key outside the
    vocabulary is a 400."""
    base = {"text": "The capital of France is", "return_logprob": True}
    greedy = generate(more_bugs_server, {**base, "sampling_params": {"temperature": 0, "max_new_tokens": 8}})
    forbidden = greedy["meta_info"]["output_token_logprobs"][0][1]

    def run(bias: dict[str, float] | None) -> list[int]:
        sp: dict[str, Any] = {"temperature": 1.0, "max_new_tokens": 4}
        if bias is not None:
            sp["logit_bias"] = bias
        out = generate(more_bugs_server, {**base, "sampling_params": sp})
        return [x[1] for x in out["meta_info"]["output_token_logprobs"]]

    with ThreadPoolExecutor(4) as ex:
        biased = list(ex.map(run, [{"4000": 100.0}, None, {"4000": 100.0}, None]))
    assert biased[0] == biased[2] == [4000] * 4, biased
    assert any(t != 4000 for t in biased[1] + biased[3]), biased
    out = generate(
        more_bugs_server,
        {
            **base,
            "sampling_params": {
                "temperature": 0,
                "max_new_tokens": 8,
                "logit_bias": {str(forbidden): -100.0},
            },
        },
    )
    assert forbidden not in [x[1] for x in out["meta_info"]["output_token_logprobs"]]
    bad = post(
        more_bugs_server,
        "/generate",
        {"text": "x", "sampling_params": {"max_new_tokens": 2, "logit_bias": {"99999999": 5.0}}},
    )
    assert bad.status_code == 400 and "logit_bias" in bad.json()["error"]["message"], bad.text[:300]


def test_server_info_concurrent_and_custom_logit_processor_refused(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:test/registered/core/test_srt_endpoint.py::test_get_server_info,
    ::test_get_server_info_concurrent and ::test_custom_logit_processor (a feature not served
    here: a clean 400 naming it): concurrent ``/server_info`` calls all answer, with an integer
    ``max_total_num_tokens`` and a string ``version``."""
    with ThreadPoolExecutor(8) as ex:
        infos = list(
            ex.map(lambda _: requests.get(more_bugs_server.url + "/server_info", timeout=30), range(8))
        )
    for r in infos:
        assert r.status_code == 200
        j = r.json()
        assert type(j["max_total_num_tokens"]) is int and isinstance(j["version"], str)
    r = post(
        more_bugs_server,
        "/generate",
        {
            "text": "x",
            "custom_logit_processor": "{}",
            "sampling_params": {"max_new_tokens": 2, "custom_params": {}},
        },
    )
    assert r.status_code == 400 and "custom_logit_processor" in r.json()["error"]["message"], r.text[:300]


def test_tokenize_detokenize_round_trips(more_bugs_server: ServerHandle, mtok: Any) -> None:
    """sgl-project/sglang:test/registered/core/test_srt_endpoint.py::test_tokenize_various_inputs,
    ::test_tokenize_invalid_type, ::test_detokenize_roundtrip and ::test_detokenize_invalid_tokens:
    ``/tokenize`` gives the tokenizer's ids with a matching ``count`` (a list per prompt for a
    batch, 0 for ""), a non-string prompt is a 400; ``/detokenize`` of either tokenization with
    ``skip_special_tokens`` gives the text back, ``[]`` gives ""; non-integer tokens are a 400 (an
    out-of-vocabulary id too: SGLang's test expects its 500)."""
    url = more_bugs_server.url
    text = "Verify detokenization round trip. यह डिटोकेनाइजेशन है 😊"
    ids = {}
    for special in (False, True):
        r = post(
            more_bugs_server, "/tokenize", {"model": MODEL, "prompt": text, "add_special_tokens": special}
        ).json()
        assert r["tokens"] == mtok.encode(text, add_special_tokens=special) and r["count"] == len(r["tokens"])
        ids[special] = r["tokens"]
    multi = ["First sentence.", "Second, with 中文."]
    r = post(
        more_bugs_server, "/tokenize", {"model": MODEL, "prompt": multi, "add_special_tokens": False}
    ).json()
    assert r["tokens"] == [mtok.encode(t, add_special_tokens=False) for t in multi]
    assert r["count"] == [len(t) for t in r["tokens"]]
    assert post(more_bugs_server, "/tokenize", {"model": MODEL, "prompt": ""}).json()["count"] == 0
    assert (
        requests.post(url + "/tokenize", json={"model": MODEL, "prompt": 12345}, timeout=30).status_code
        == 400
    )
    for tokens in (ids[False], ids[True]):
        r = post(
            more_bugs_server, "/detokenize", {"model": MODEL, "tokens": tokens, "skip_special_tokens": True}
        )
        assert r.json()["text"] == text
    assert isinstance(
        post(more_bugs_server, "/detokenize", {"tokens": ids[True], "skip_special_tokens": False}).json()[
            "text"
        ],
        str,
    )
    assert post(more_bugs_server, "/detokenize", {"tokens": []}).json()["text"] == ""
    for bad in (["a", "b"], [1, -1, 2]):
        assert post(more_bugs_server, "/detokenize", {"model": MODEL, "tokens": bad}).status_code == 400


def test_run_decode_shapes_n_stream_batch(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:test/registered/core/test_srt_endpoint.py::test_logprob (``run_decode``
    over n / stream / batch): a single prompt answers an object, a batch of one a list; ``n: 2``
    answers a list of 2 (streamed: chunks with ``index`` 0 and 1); every final answer has 6
    tokens, one output logprob each and 5 top logprobs per position."""
    base = {
        "return_logprob": True,
        "top_logprobs_num": 5,
        "return_text_in_logprobs": True,
        "logprob_start_len": 0,
    }
    for n in (1, 2):
        sp = {"temperature": 0 if n == 1 else 0.5, "max_new_tokens": 6, "n": n, "ignore_eos": True}
        for batch in (False, True):
            text: Any = ["The capital of France is"] if batch else "The capital of France is"
            out = generate(more_bugs_server, {**base, "text": text, "sampling_params": sp})
            items = out if isinstance(out, list) else [out]
            assert isinstance(out, list) == (batch or n > 1) and len(items) == n, out
            events = [
                e
                for e in sse(
                    more_bugs_server,
                    "/generate",
                    {**base, "text": text, "sampling_params": sp, "stream": True},
                )
                if isinstance(e, dict)
            ]
            last: dict[Any, dict[str, Any]] = {}
            for e in events:
                last[e.get("index", 0)] = e
            assert sorted(last) == list(range(n)), sorted(last)
            for item in items + list(last.values()):
                m = item["meta_info"]
                assert m["completion_tokens"] == len(m["output_token_logprobs"]) == 6
                assert all(len(t) == 5 for t in m["output_top_logprobs"])
                assert len(m["input_token_logprobs"]) == m["prompt_tokens"]


def test_flush_health_and_abort_semantics(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang:test/registered/core/test_srt_endpoint.py::test_cache_tokens (``/flush_cache``
    is 200 when idle, GET and POST) and SGLang's abort / health routes: while requests run a flush
    is refused with a 400 (the server runs one of them and queues the other) and ``/health_generate`` still answers 200; ``/abort_request`` of one rid
    and then ``abort_all`` end both running requests with ``finish_reason.type == "abort"`` and
    fewer tokens than asked; an unknown rid is a 200 no-op; a non-string rid is a 400; afterwards
    the same prompt runs to its length (nothing left held)."""
    url = more_bugs_server.url
    for method in (requests.get, requests.post):
        assert method(url + "/flush_cache", timeout=30).status_code == 200
    results: dict[int, Any] = {}

    def long(i: int) -> None:
        body = {
            "text": f"abort me {i}",
            "rid": f"sgl20-abort-{i}",
            "sampling_params": {"max_new_tokens": 600, "ignore_eos": True, "temperature": 0},
        }
        results[i] = post(more_bugs_server, "/generate", body).json()

    threads = [threading.Thread(target=long, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    deadline = time.time() + 60
    while time.time() < deadline:
        info = requests.get(url + "/server_info", timeout=30).json()
        if info["num_running_reqs"] >= 1 and info["num_running_reqs"] + info["num_queue_reqs"] >= 2:
            break
        time.sleep(0.05)
    time.sleep(0.2)
    assert requests.post(url + "/flush_cache", timeout=30).status_code == 400
    assert requests.get(url + "/health_generate", timeout=60).status_code == 200
    assert post(more_bugs_server, "/abort_request", {"rid": "sgl20-abort-0"}).status_code == 200
    assert post(more_bugs_server, "/abort_request", {"abort_all": True}).status_code == 200
    for t in threads:
        t.join(timeout=120)
    for i in range(2):
        m = results[i]["meta_info"]
        assert m["finish_reason"]["type"] == "abort" and m["completion_tokens"] < 600, m
    assert post(more_bugs_server, "/abort_request", {"rid": "no-such-rid"}).status_code == 200
    assert post(more_bugs_server, "/abort_request", {"rid": 5}).status_code == 400
    done = generate(
        more_bugs_server, {"text": "abort me 0", "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}}
    )
    assert done["meta_info"]["finish_reason"]["type"] == "length"
    assert requests.post(url + "/flush_cache", timeout=30).status_code == 200


def test_data_parallel_rank_zero_is_this_server(more_bugs_server: ServerHandle) -> None:
    """SGLang's ``data_parallel_rank`` / ``routed_dp_rank`` (``GenerateReqInput``; SGLang's
    ``Engine.generate`` refuses a rank ``< 0`` or ``>= dp_size``): a server here is one rank, so
    rank 0 is served like an unpinned request (same greedy tokens), rank 1 and -1 are 400s in
    SGLang's words, a non-integer a 400 naming the field; the OpenAI routes check the pin the same
    way (``param`` the field). (Before: even rank 0 was a 400 on ``/generate``, and any rank was
    silently ignored on the OpenAI routes.)"""
    base = {"text": "pin me", "sampling_params": {"temperature": 0, "max_new_tokens": 4, "ignore_eos": True}}
    plain = generate(more_bugs_server, base)
    for field in ("data_parallel_rank", "routed_dp_rank"):
        pinned = post(more_bugs_server, "/generate", {**base, field: 0})
        assert pinned.status_code == 200, pinned.text[:300]
        assert pinned.json()["output_ids"] == plain["output_ids"]
        for value, needle in ((1, "less than dp_size: 1"), (-1, "non-negative"), ("0", "integer")):
            r = post(more_bugs_server, "/generate", {**base, field: value})
            assert r.status_code == 400, (field, value, r.text[:300])
            msg = r.json()["error"]["message"]
            assert field in msg and needle in msg, msg
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "pin me"}], "max_tokens": 1}
    for path, body in (
        ("/v1/chat/completions", chat),
        ("/v1/completions", {"model": MODEL, "prompt": "pin me", "max_tokens": 1}),
    ):
        for field in ("data_parallel_rank", "routed_dp_rank"):
            assert post(more_bugs_server, path, {**body, field: 0}).status_code == 200
            r = post(more_bugs_server, path, {**body, field: 3})
            assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text[:300]
            assert "less than dp_size: 1" in r.json()["error"]["message"]


def test_engine_data_parallel_rank(shared_fake_engine: Any) -> None:
    """SGLang's ``Engine.generate(..., data_parallel_rank=k)`` (its Engine raises ``ValueError``
    for ``k < 0`` or ``k >= dp_size``): rank 0 is served, rank 1 raises ``ValueError`` naming the
    field."""
    out = shared_fake_engine.generate("hi", {"max_new_tokens": 2}, data_parallel_rank=0)
    assert out["meta_info"]["completion_tokens"] == 2
    with pytest.raises(ValueError, match="data_parallel_rank must be less than dp_size"):
        shared_fake_engine.generate("hi", {"max_new_tokens": 2}, data_parallel_rank=1)


# --- the output parsers (in process) ----------------------------------------------------------


@pytest.mark.parametrize(
    "text, reasoning, content",
    [
        (
            "I need to think about this. The answer is 42.",
            "I need to think about this. The answer is 42.",
            "",
        ),
        (
            "I think this is the answer</think>The final answer is 42.",
            "I think this is the answer",
            "The final answer is 42.",
        ),
        (
            "<think>I need to think about this.</think>The answer is 42.",
            "I need to think about this.",
            "The answer is 42.",
        ),
        ("<think>This is reasoning", "This is reasoning", ""),
    ],
)
def test_deepseek_r1_detector_force_reasoning(text: str, reasoning: str, content: str) -> None:
    """sgl-project/sglang:test/registered/unit/parser/test_reasoning_parser.py::TestDeepSeekR1Detector
    (test_detect_and_parse_r1_format, _with_end_token, _with_start_token) and
    TestBaseReasoningFormatDetector::test_detect_and_parse_with_start_token: ``deepseek-r1`` always
    starts inside the reasoning (chat mode too), so a text without ``</think>`` is all reasoning;
    a leading ``<think>`` is dropped. The split is the same fed one character at a time."""
    spec = reasoning_spec("deepseek-r1", thinking=False)
    assert spec.separate
    assert split_reasoning(text) == (reasoning or None, content)
    p, r_all, c_all = ReasoningParser(), "", ""
    for ch in text:
        r, c = p.feed(ch)
        r_all, c_all = r_all + r, c_all + c
    r, c = p.flush()
    assert (r_all + r, c_all + c) == (reasoning, content)


def test_reasoning_streaming_increments() -> None:
    """sgl-project/sglang:test/registered/unit/parser/test_reasoning_parser.py::
    TestBaseReasoningFormatDetector (test_parse_streaming_increment_partial_token, _complete_start,
    _reasoning_content, _end_token, _no_stream_reasoning, _mixed_content) and
    TestQwen3ForcedReasoningDetector::test_streaming_qwen3_forced_reasoning_format: a partial
    ``<thi`` / ``</thi`` yields nothing yet; ``<think>`` alone yields nothing; reasoning deltas come
    out as fed; ``</think>normal text`` yields only the content; without streamed reasoning the
    reasoning comes in one piece when it ends; one chunk may hold all three parts."""
    p = ReasoningParser()
    assert p.feed("<thi") == ("", "")
    p = ReasoningParser()
    assert p.feed("<think>") == ("", "")
    assert p.feed("reasoning content") == ("reasoning content", "")
    assert p.feed("</thi") == ("", "")
    assert p.feed("nk>normal text") == ("", "normal text")
    assert not p.in_reasoning
    p = ReasoningParser(stream_reasoning=False)
    assert p.feed("<think>") == ("", "") and p.feed("reasoning content") == ("", "")
    assert p.feed("</think>x") == ("reasoning content", "x")
    assert ReasoningParser().feed("<think>reasoning</think>normal") == ("reasoning", "normal")
    p = ReasoningParser()
    got = [p.feed(d) for d in ("I need to", " think about this.", "</think>The answer is 42.")]
    assert got == [("I need to", ""), (" think about this.", ""), ("", "The answer is 42.")]


@pytest.mark.parametrize("parser", ["deepseek-v3", "deepseek-v4"])
def test_chat_mode_parsers_leave_text_alone_thinking_mode_splits(parser: str) -> None:
    """sgl-project/sglang:test/registered/unit/parser/test_reasoning_parser.py::TestQwen3Detector
    (test_detect_and_parse_without_thinking / _qwen3_format; SGLang runs that detector for
    ``deepseek-v3``): outside thinking mode the output is not split; in thinking mode the first
    ``</think>`` ends the reasoning. Without ``</think>`` both keep a finished text as reasoning
    (SGLang's detectors do)."""
    assert not reasoning_spec(parser, thinking=False).separate
    spec = reasoning_spec(parser, thinking=True)
    assert spec.separate
    assert split_reasoning("Let me think</think>The answer is 42.") == ("Let me think", "The answer is 42.")
    assert split_reasoning("Direct answer.", spec.implicit_end) == ("Direct answer.", "")
