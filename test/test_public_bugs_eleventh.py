"""An eleventh set of public bug reports of SGLang, vLLM and transformers, replayed here: FP4
weight quantization of DeepSeek-V4's routed experts (ties); the detokenizer's incremental decode
(runs of real U+FFFD, CJK characters completed mid-stream) directly, a CJK stop string written
as byte-fragment tokens on the stop checker, and through the model-free ``plain_fake_server``
(no U+FFFD in streamed Chinese, skipped special tokens, a stop holdback beside ``</think>``);
structured outputs (unsupported string formats, ``minItems`` / ``maxItems``, ``regex`` and
``ebnf`` through the OpenAI API, JSON mode), a re-sent prompt's prefix-cache hit and
``/v1/models``' ``max_model_len`` on the embedded DeepSeek-V4 model's ``more_bugs_server``;
``/health_generate`` beside a running and an aborted request and ``/flush_cache?timeout=T``
(``held_fake_server``); the offline ``Engine`` called again and again (``shared_fake_engine``).
Each test names its report.

One report showed a fault here: FP4 (e2m1) weight quantization rounded a value exactly halfway
between two e2m1 magnitudes up in magnitude (vllm-project/vllm#41985: it must round to nearest,
ties to even, as IEEE 754 and the OCP MX spec say); ``quantize_fp4`` now rounds ties to the even
code. The other reports (sgl-project/sglang#34852, sgl-project/sglang#95,
sgl-project/sglang#580, sgl-project/sglang#1776, sgl-project/sglang#3295,
sgl-project/sglang#4733, sgl-project/sglang#3695, sgl-project/sglang#1606,
sgl-project/sglang#33527, vllm-project/vllm#45636, vllm-project/vllm#12201, vllm-project/vllm#42948,
vllm-project/vllm#4643, huggingface/transformers#24511, huggingface/transformers#46519) are kept
as regression tests.

Oracles: a float64 round-to-nearest-even over the e2m1 grid, the served tokenizer's own decode
(HF ``transformers``) of the same ids, the same request unstreamed, Python's ``re`` and
``json``, ``jsonschema``, the ``openai`` client's ``Model`` type, the launch's
``--context-length``, the fake model's fixed text and script, and the reports' stated
expectations.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid
from typing import Any

import pytest
import requests
import torch
from control_testutil import hold_stream
from detokenizer_testutil import feed_each_token
from public_bugs_testutil import MODEL, USER, post, sse
from server_fixture import (
    FAKE_ANSWER,
    FAKE_REASONING,
    FAKE_SCRIPT_TAG,
    FAKE_TEXT,
    ServerHandle,
    hf_auto_tokenizer,
)
from sglang_v4.managers.detokenizer_manager import MAX_HELD_TOKENS, DetokenizerManager
from sglang_v4.model_loader.quant import dequantize_fp4, quantize_fp4
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.sampling.stop_checker import check_stop
from sglang_v4.utils import FastTokenizer

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FAKE_MODEL = "qa-model"  # plain_fake_server's --served-model-name
FFFD = "\ufffd"
STRAY = 225  # byte-level token of the lone UTF-8 continuation byte 0x80 (decodes to U+FFFD)


# --------------------------------------------------------------------------- FP4 weights


def _rne_e2m1(x: torch.Tensor) -> torch.Tensor:
    """float64 reference: each of ``x`` (already divided by its scale, |x| <= 6) rounded to the
    nearest e2m1 value, ties to the value with the even 3-bit code (IEEE roundTiesToEven)."""
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    d = (x.abs()[..., None] - grid).abs()
    best = d.min(-1, keepdim=True).values
    cand = d == best  # one or two (a tie) nearest codes
    odd = torch.arange(8) % 2 == 1
    code = torch.where(cand & ~odd, torch.arange(8), 99).min(-1).values  # the even one if any
    code = torch.where(code == 99, cand.to(torch.int64).argmax(-1), code)
    return torch.sign(x) * grid[code]


def test_vllm_41985_fp4_weight_quantization_rounds_ties_to_even() -> None:
    """vllm-project/vllm#41985: DeepSeek-V4-Pro's FP4 (e2m1) quantizer compared against the
    midpoints with ``<=`` instead of rounding to nearest, ties to even, which biased every value
    exactly halfway between two e2m1 magnitudes. Expected: IEEE round-to-nearest-even (as the OCP
    MX spec prescribes): 0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4
    (times the group's power-of-two scale, either sign), and values just off a midpoint round to
    the nearer side."""
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    off = [m + 1 / 64 for m in mids] + [m - 1 / 64 for m in mids]
    row = torch.tensor([6.0, *mids, *[-m for m in mids], *off, 0.0, 0.0, 0.0], dtype=torch.float32)
    assert row.numel() == 32
    w = torch.stack([row, row * 8, row / 4])  # three scales: 1, 8, 1/4
    packed, scale = quantize_fp4(w)
    got = dequantize_fp4(packed, scale).double()
    sf = torch.tensor([1.0, 8.0, 0.25], dtype=torch.float64)[:, None]
    want = _rne_e2m1(w.double() / sf) * sf
    assert torch.equal(got, want), (got - want).nonzero().tolist()
    assert got[0, 1:8].tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0]

    # random weights: never further from the value than the nearest e2m1 point, and ties to even
    g = torch.Generator().manual_seed(41985)
    w = torch.randn(4, 8, 64, generator=g)
    w[0, 0, :32] = torch.tensor(mids * 4 + [6.0, -6.0, 0.0, 0.0])  # exact ties in one group
    packed, scale = quantize_fp4(w)
    sf = scale.to(torch.float64).repeat_interleave(32, -1)
    assert torch.equal(dequantize_fp4(packed, scale).double(), _rne_e2m1(w.double() / sf) * sf)


# --------------------------------------------------------------------------- detokenizer


def test_sglang_34852_a_run_of_replacement_characters_still_streams(fast: FastTokenizer, hf) -> None:
    """sgl-project/sglang#34852 (the detokenizer half of sgl-project/sglang#34740): incremental
    detokenization only committed text not ending in U+FFFD, so output made of real U+FFFD
    (byte tokens that never form a character) was never committed: the client received nothing
    while the re-decoded window grew with the output (O(n^2)). Expected: such text streams as it
    is produced (at most the last byte held, since it could still start a character), the decode
    window stays bounded, and the final text is the tokenizer's decode of all the ids."""
    head = hf.encode("ab", add_special_tokens=False)
    tail = hf.encode(" ok", add_special_tokens=False)
    ids = head + [STRAY] * 60 + tail
    seen = feed_each_token(DetokenizerManager(fast), ids)
    full = hf.decode(ids)
    assert full == "ab" + FFFD * 60 + " ok"
    for k, sent, window in seen[:-1]:
        assert full.startswith(sent), k
        assert window is not None and window <= 2 * (MAX_HELD_TOKENS + 1), (k, window)
        n_stray = min(max(k - len(head), 0), 60)
        if n_stray >= 2:  # every stray byte but the newest one has reached the client
            assert sent.startswith("ab" + FFFD * (n_stray - 1)), (k, sent)
    assert seen[-1][1] == full


def test_sglang_95_a_completed_cjk_character_streams_at_once(fast: FastTokenizer, hf) -> None:
    """sgl-project/sglang#95: when a stream's last character was half a Chinese character, the
    stream held back the characters before it too, sometimes for three chunks or more.
    Expected: after every token, the client has exactly the complete characters so far -- the
    tokenizer's decode of the ids up to that token without its trailing incomplete character."""
    text = "你好，世界！深度求索🙂。龘靐齉"
    ids = hf.encode(text, add_special_tokens=False)
    assert len(ids) > len(text) // 2  # some characters span several tokens
    seen = feed_each_token(DetokenizerManager(fast), ids)
    split = 0
    for k, sent, _ in seen:
        done = hf.decode(ids[:k])
        complete = done.rstrip(FFFD)
        split += done != complete
        assert sent == complete, (k, sent, done)
    assert split > 0  # the text does split characters across tokens
    assert seen[-1][1] == text


def test_transformers_46519_cjk_stop_string_split_into_byte_tokens(fast: FastTokenizer, hf) -> None:
    """huggingface/transformers#46519: on a byte-level tokenizer a CJK stop string whose
    characters the model writes as byte-fragment tokens (each decoding to U+FFFD alone) never
    matched, so generation ran on. Expected: the request stops at the first token after which
    the decoded output contains the stop string -- not before, not later -- for rare
    characters written as several byte tokens, and the matched string is reported."""
    text = "好的，龘靐齉是三个字。"
    ids = hf.encode(text, add_special_tokens=False)
    for stop in ("靐", "龘靐", "齉是"):
        assert len(hf.encode(stop, add_special_tokens=False)) >= 1
        sp = SamplingParams(stop=[stop], max_new_tokens=len(ids))
        sp.normalize(fast)
        first = next(k for k in range(1, len(ids) + 1) if stop in hf.decode(ids[:k]))
        assert FFFD in hf.decode(ids[first - 1 : first]) or len(stop) > 1  # a fragment ends it
        for k in range(1, len(ids) + 1):
            reason = check_stop(ids[:k], sp, {1}, fast, k >= len(ids))
            if k < first:
                assert reason is None or reason["type"] == "length", (stop, k, reason)
            else:
                assert reason == {"type": "stop", "matched": stop}, (stop, k, reason)
                break


def test_sglang_580_streamed_chinese_has_no_replacement_characters(plain_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#580: streaming Chinese text from the srt server, chunks ended in
    corrupted characters (U+FFFD) where one character spans several tokens. Expected: no chunk
    of ``/generate`` (cumulative text) or ``/v1/completions`` (deltas) carries U+FFFD, and the
    streamed text equals the unstreamed answer (the fake model's fixed text, which holds
    ``你好，世界！``)."""
    n = len(hf_auto_tokenizer().encode(FAKE_TEXT, add_special_tokens=False))
    sp = {"max_new_tokens": n, "temperature": 0}
    whole = post(plain_fake_server, "/generate", {"text": "Hi", "sampling_params": sp}).json()["text"]
    assert whole == FAKE_TEXT and "世界" in whole
    chunks = sse(plain_fake_server, "/generate", {"text": "Hi", "sampling_params": sp})
    assert chunks and all(FFFD not in c["text"] for c in chunks), [c["text"] for c in chunks]
    assert chunks[-1]["text"] == whole
    body = {"model": FAKE_MODEL, "prompt": "Hi", "max_tokens": n, "temperature": 0}
    deltas = [c["choices"][0]["text"] for c in sse(plain_fake_server, COMPLETIONS, body) if c["choices"]]
    assert all(FFFD not in d for d in deltas), deltas
    assert "".join(deltas) == whole


def test_transformers_24511_skipped_special_tokens_add_no_spaces(plain_fake_server: ServerHandle, hf) -> None:
    """huggingface/transformers#24511: decoding with ``skip_special_tokens=True`` and
    ``spaces_between_special_tokens=True`` put spaces where the skipped special tokens had been.
    Expected: the text of ``/generate`` with both flags set is the served tokenizer's own decode
    of the returned ids (less the matched EOS) with special tokens skipped (no added spaces), and
    with ``skip_special_tokens: false`` its decode keeping them -- streamed or not."""
    for skip in (True, False):
        sp = {
            "max_new_tokens": 80,
            "temperature": 0,
            "skip_special_tokens": skip,
            "spaces_between_special_tokens": True,
        }
        body = {"text": f"{FAKE_SCRIPT_TAG} hi", "sampling_params": sp}
        r = post(plain_fake_server, "/generate", body)
        assert r.status_code == 200, r.text
        out = r.json()
        ids = out["output_ids"]
        if isinstance(out["meta_info"]["finish_reason"].get("matched"), int):
            ids = ids[:-1]  # a matched stop token (EOS) is not part of the text (SGLang)
        want = hf.decode(ids, skip_special_tokens=skip)
        assert out["text"] == want, (skip, out["text"], want)
        assert sse(plain_fake_server, "/generate", body)[-1]["text"] == want
    assert "</think>" in want  # the script holds a special token, kept when not skipped


def test_vllm_45636_stop_holdback_does_not_split_the_think_end(plain_fake_server: ServerHandle) -> None:
    """vllm-project/vllm#45636: to keep a possible stop string out of a stream, the detokenizer
    held back characters, and that cut tokens apart -- ``</think>`` reached the client as
    ``</thin`` + ``k>``, so the reasoning and the answer were no longer separated. Expected:
    with stop strings that share a prefix with ``</think>`` (and never match), the streamed
    reasoning and answer are exactly the unstreamed ones (the fake model's script), and no
    piece of ``</think>`` leaks into either."""
    for stop in (["</thinking-never>"], ["</th", "k>\n\nNever"], ["</think>XYZ"]):
        body = {
            "model": FAKE_MODEL,
            "messages": [{"role": "user", "content": f"{FAKE_SCRIPT_TAG} What is 6*7?"}],
            "max_tokens": 100,
            "stop": stop,
            "chat_template_kwargs": {"thinking": True},
        }
        msg = post(plain_fake_server, CHAT, body).json()["choices"][0]["message"]
        assert msg["reasoning_content"] == FAKE_REASONING, (stop, msg)
        assert msg["content"] == FAKE_ANSWER, (stop, msg)
        deltas = [c["delta"] for k in sse(plain_fake_server, CHAT, body) for c in k["choices"]]
        assert "".join(d.get("reasoning_content") or "" for d in deltas) == FAKE_REASONING, stop
        assert "".join(d.get("content") or "" for d in deltas) == FAKE_ANSWER, stop


# --------------------------------------------------------------------------- structured outputs


def test_sglang_1776_unsupported_string_format_does_not_kill_the_scheduler(
    more_bugs_server: ServerHandle,
) -> None:
    """sgl-project/sglang#1776: a ``json_schema`` using string ``format`` values the grammar
    backend did not implement (``email``, ``uuid``, ``date``) raised in the scheduler and took
    the whole server down. Expected: the request is answered (constrained, or refused with a 400
    naming the problem), never a 5xx, and the server keeps serving other requests."""
    schema = {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "email": {"type": "string", "format": "email"},
            "joined": {"type": "string", "format": "date"},
            "role": {"type": "string", "enum": ["admin", "user", "guest"]},
        },
        "required": ["id", "email", "joined", "role"],
        "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#",
    }
    sp = {"max_new_tokens": 8, "temperature": 0, "json_schema": json.dumps(schema)}
    r = post(more_bugs_server, "/generate", {"text": "Hi", "sampling_params": sp})
    assert r.status_code in (200, 400), r.text
    if r.status_code == 400:
        assert "error" in r.json()
    else:
        assert r.json()["text"].startswith("{"), r.text
    assert requests.get(more_bugs_server.url + "/health_generate", timeout=120).status_code == 200
    plain = post(more_bugs_server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})
    assert plain.status_code == 200 and len(plain.json()["output_ids"]) == 2, plain.text


def test_vllm_12201_min_and_max_items_are_enforced(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#12201 (and vllm-project/vllm#17865): with xgrammar, a schema's
    ``minItems`` / ``maxItems`` on an array were not enforced (asked for exactly 2 names, got
    4). Expected: the constrained array has between ``minItems`` and ``maxItems`` items, for an
    exact count and for a range, and validates against the schema."""
    jsonschema = pytest.importorskip("jsonschema")
    for lo, hi in ((2, 2), (3, 4)):
        schema = {
            "type": "object",
            "properties": {
                "names": {
                    "type": "array",
                    "items": {"type": "string", "enum": ["Ann", "Bo", "Cy"]},
                    "minItems": lo,
                    "maxItems": hi,
                }
            },
            "required": ["names"],
            "additionalProperties": False,
        }
        rf = {"type": "json_schema", "json_schema": {"name": "people", "schema": schema, "strict": True}}
        body = {"model": MODEL, "messages": USER, "max_tokens": 80, "temperature": 0, "response_format": rf}
        choice = post(more_bugs_server, CHAT, body).json()["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        value = json.loads(choice["message"]["content"])
        jsonschema.validate(value, schema)
        assert lo <= len(value["names"]) <= hi, value


def test_sglang_3295_regex_and_ebnf_through_the_openai_api(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#3295: following the structured-outputs docs, only the JSON examples
    were constrained; ``regex`` and ``ebnf`` given to the OpenAI-compatible chat API (extra body
    fields) produced free text. Expected: the chat answer matches the regex whole, and is a
    sentence of the EBNF grammar, streamed or not."""
    cases = [
        ("regex", r"(Paris|London|Tokyo) is (big|small)", r"(Paris|London|Tokyo) is (big|small)"),
        (
            "ebnf",
            'root ::= city " - " answer\ncity ::= "Paris" | "Rome"\nanswer ::= "yes" | "no"',
            r"(Paris|Rome) - (yes|no)",
        ),
    ]
    for field, grammar, pattern in cases:
        body = {"model": MODEL, "messages": USER, "max_tokens": 30, "temperature": 0, field: grammar}
        choice = post(more_bugs_server, CHAT, body).json()["choices"][0]
        text = choice["message"]["content"]
        assert re.fullmatch(pattern, text) and choice["finish_reason"] == "stop", (field, choice)
        chunks = sse(more_bugs_server, CHAT, body)
        streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        assert streamed == text, (field, streamed, text)


def test_sglang_4733_json_object_mode_answers_a_json_object(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#4733: ``response_format: {"type": "json_object"}`` (OpenAI's JSON
    mode) was not honoured, so without a system prompt asking for JSON the answer was free
    text. Expected: the answer is a JSON object (Python's ``json`` parses it to a ``dict``) when
    the model ends it, and in any case starts as one."""
    body = {
        "model": MODEL,
        "messages": USER,
        "max_tokens": 80,
        "temperature": 0,
        "response_format": {"type": "json_object"},
    }
    choice = post(more_bugs_server, CHAT, body).json()["choices"][0]
    text = choice["message"]["content"]
    assert text.lstrip().startswith("{"), choice
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict), choice


# --------------------------------------------------------------------------- prefix cache


def test_vllm_42948_a_resent_request_hits_the_prefix_cache(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#42948: on DeepSeek-V4-Flash a request re-sent byte for byte reported
    0 ``cached_tokens`` (its hybrid KV groups lost their first-block cache keys). Expected: the
    first send of a new prompt has nothing cached; the identical second send has its whole
    prefix cached except the last, partly filled 256-token block (SGLang's radix cache reuses
    whole pages and always computes the last token), in ``usage.prompt_tokens_details``."""
    system = f"[{uuid.uuid4().hex}] " + "DeepSeek-V4 caches compressed KV in radix blocks. " * 50
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Summarise."}]
    body = {"model": MODEL, "messages": messages, "max_tokens": 2, "temperature": 0}
    usages = [post(more_bugs_server, CHAT, body).json()["usage"] for _ in range(2)]
    n = usages[0]["prompt_tokens"]
    assert usages[1]["prompt_tokens"] == n and 512 < n < 1000, usages
    cached = [(u.get("prompt_tokens_details") or {}).get("cached_tokens", 0) for u in usages]
    assert cached[0] == 0, usages
    assert cached[1] == (n - 1) // 256 * 256, usages


# --------------------------------------------------------------------------- offline Engine


def test_sglang_1606_engine_generate_again_and_again(shared_fake_engine: Any) -> None:
    """sgl-project/sglang#1606: ``Engine.generate`` hung forever on its second call (the first
    call's ``asyncio.run`` closed the event loop the tokenizer manager's receive loop lived on).
    Expected: repeated ``generate`` calls, an ``async_generate`` run by ``asyncio.run`` between
    them, and ``generate`` again afterwards all return the same answer (the fake model's fixed
    text, greedy)."""
    sp = {"max_new_tokens": 6, "temperature": 0}
    tok = hf_auto_tokenizer()
    want = tok.decode(tok.encode(FAKE_TEXT, add_special_tokens=False)[:6])
    texts = [shared_fake_engine.generate(prompt="Hello", sampling_params=sp)["text"] for _ in range(3)]
    texts.append(asyncio.run(shared_fake_engine.async_generate(prompt="Hello", sampling_params=sp))["text"])
    texts.append(asyncio.run(shared_fake_engine.async_generate(prompt="Hello", sampling_params=sp))["text"])
    texts += [shared_fake_engine.generate(prompt="Hello", sampling_params=sp)["text"] for _ in range(2)]
    assert texts == [want] * 7, texts


# --------------------------------------------------------------------------- models, health


def test_vllm_4643_models_list_the_max_model_len(more_bugs_server: ServerHandle) -> None:
    """vllm-project/vllm#4643 (requested in vllm-project/vllm#5959): clients configure their
    context window from ``/v1/models``, so each card should carry ``max_model_len`` -- the most
    prompt plus output tokens the model serves. Expected: ``/v1/models`` and
    ``/v1/models/{id}`` give the launch's ``--context-length`` (1024 here) as an integer next to
    OpenAI's ``id`` / ``object`` / ``created`` / ``owned_by``, and the ``openai`` client's
    ``Model`` type parses the card, keeping the extra field."""
    from openai.types import Model

    listed = requests.get(more_bugs_server.url + "/v1/models", timeout=30).json()
    assert listed["object"] == "list" and listed["data"], listed
    for card in listed["data"]:
        model = Model.model_validate(card)
        assert model.object == "model" and isinstance(model.created, int) and model.owned_by
        assert card["max_model_len"] == 1024 and (model.model_extra or {}).get("max_model_len") == 1024
        one = requests.get(f"{more_bugs_server.url}/v1/models/{card['id']}", timeout=30).json()
        assert one["id"] == card["id"] and one["max_model_len"] == 1024, one
    # the limit is the one enforced: a prompt plus max_tokens beyond it is refused
    body = {"model": MODEL, "prompt": "Hi", "max_tokens": 1024, "temperature": 0}
    assert post(more_bugs_server, COMPLETIONS, body).status_code == 400


def test_sglang_3695_health_generate_beside_a_running_and_an_aborted_request(
    held_fake_server: ServerHandle,
) -> None:
    """sgl-project/sglang#3695: with ``/health_generate`` as a probe, the server crashed after
    a while when a request was aborted around a health check. Expected: while a request runs,
    ``/health_generate`` answers 200 (its own probe request finishes beside it); after that
    request is aborted the probe still answers 200, repeatedly, and ``/generate`` serves."""
    rid, t, lines = hold_stream(held_fake_server)
    health = held_fake_server.url + "/health_generate"
    assert requests.get(health, timeout=60).status_code == 200
    assert post(held_fake_server, "/abort_request", {"rid": rid}).status_code == 200
    t.join(timeout=30)
    assert not t.is_alive()
    assert json.loads(lines[-1][6:])["meta_info"]["finish_reason"]["type"] == "abort"
    for _ in range(5):
        assert requests.get(health, timeout=60).status_code == 200
    r = post(held_fake_server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 3}})
    assert r.status_code == 200 and len(r.json()["output_ids"]) == 3, r.text


def test_sglang_33527_flush_cache_with_a_timeout_waits_for_idle(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#33527 (sgl-project/sglang#33368): right after a benchmark's warmup the
    server was not idle yet, so ``/flush_cache`` answered 400; the fix passes SGLang's
    ``timeout`` so the server waits for idle before flushing. Expected: while a request runs, a
    plain flush is a 400 at once and one whose ``timeout`` runs out is a 400 after about that
    long; one with room to wait returns 200 once the request has ended (here: is aborted)."""
    rid, t, lines = hold_stream(held_fake_server, "[hold] warmup")
    flush = held_fake_server.url + "/flush_cache"
    assert requests.post(flush, timeout=30).status_code == 400
    t0 = time.monotonic()
    r = requests.post(flush, params={"timeout": 0.5}, timeout=30)
    assert r.status_code == 400 and time.monotonic() - t0 >= 0.4, r.text
    waited: dict[str, Any] = {}

    def flush_waiting() -> None:
        waited["r"] = requests.post(flush, params={"timeout": 30}, timeout=60)

    f = threading.Thread(target=flush_waiting)
    f.start()
    time.sleep(0.3)
    assert f.is_alive() and "r" not in waited  # still waiting for the running request
    assert post(held_fake_server, "/abort_request", {"rid": rid}).status_code == 200
    f.join(timeout=40)
    t.join(timeout=30)
    assert not f.is_alive() and not t.is_alive()
    assert waited["r"].status_code == 200, waited["r"].text
