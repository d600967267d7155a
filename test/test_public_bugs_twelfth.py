"""A twelfth set of public bug reports of SGLang servers, replayed here: SGLang's native control
routes (``/server_info`` and its deprecated alias, ``/v1/loads`` beside a running request,
``/flush_cache`` while busy, the ``/get_server_info`` fields sglang-router registers a worker
from), ``/v1/tokenize`` / ``/v1/detokenize``, the embedding and rerank
routes on a generation model, SGLang request fields of features this runtime lacks
(``lora_path``, ``return_hidden_states``, ``custom_logit_processor``) and the Batch API's cancel
on the model-free ``held_fake_server``; ``--enable-cache-report``'s ``prompt_tokens_details`` in a
streamed answer and ``/update_weights_from_disk`` from the served checkpoint on the embedded
DeepSeek-V4 model's ``more_bugs_server``; the flags ``--json-model-override-args`` and
``--reasoning-parser`` as a shell hands them over. Each test names its report.

One report showed a fault here: SGLang serves ``POST|PUT /v1/rerank`` and a generation model
answers it with the 400 of an embedding request (sgl-project/sglang#6058 added the route); this
server had no such route (a 404 ``{"detail": "Not Found"}``), so a client could not tell a
missing route from a model that cannot rerank. The route now answers SGLang's 400 in the OpenAI
error shape, as ``/v1/embeddings`` does. The other reports (sgl-project/sglang#14533,
sgl-project/sglang#16976, sgl-project/sglang#12107, sgl-project/sglang#6869,
sgl-project/sglang#10998, sgl-project/sglang#5711,
sgl-project/sglang#5230, sgl-project/sglang#4739, sgl-project/sglang#30177,
sgl-project/sglang#6572, sgl-project/sglang#1222, sgl-project/sglang#4707,
sgl-project/sglang#11289, sgl-project/sglang#7223, sgl-project/sglang#12818) are kept as
regression tests.

Oracles: the served tokenizer's own encode / decode (HF ``transformers``), the ``openai``
client's types and exceptions, the number of requests the test itself keeps running, the same
request unstreamed or without the field, a greedy answer before the reload, Python's ``json`` and
``shlex``, and the reports' stated expectations.
"""

from __future__ import annotations

import io
import json
import shlex
import threading
import time

import openai
import pytest
import requests
from control_testutil import hold_stream
from fake_prompt_tm import MODEL as FAKE_MODEL
from openai.types import Batch
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from public_bugs_testutil import MODEL, post
from server_fixture import ServerHandle, hf_auto_tokenizer
from sglang_v4.entrypoints.native_api import NOT_AN_EMBEDDING_MODEL_MSG
from sglang_v4.launch_server import OneLineErrorParser
from sglang_v4.server_args import ServerArgs

pytestmark = pytest.mark.timeout(300)

CHAT = "/v1/chat/completions"


def _client(server: ServerHandle) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=60)


def _end_hold(server: ServerHandle, rid: str, t: threading.Thread) -> None:
    assert post(server, "/abort_request", {"rid": rid}).status_code == 200
    t.join(timeout=30)
    assert not t.is_alive()


def _wait_idle(server: ServerHandle, timeout_s: float = 20.0) -> None:
    deadline = time.time() + timeout_s
    while requests.get(server.url + "/get_load", timeout=10).json()[0]["num_reqs"] != 0:
        assert time.time() < deadline, "requests still running"
        time.sleep(0.05)


# --------------------------------------------------------------------------- control routes


def test_sglang_14533_server_info_and_its_deprecated_alias_agree(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#14533: removing the calls of the deprecated ``/get_server_info`` broke
    clients and CI, so SGLang keeps it as an alias of ``/server_info`` ("merges the deprecated
    endpoints": CLI arguments, token limits, memory pool sizes). Expected: both answer 200 with
    the same keys and the same launch arguments, among them the version, the KV pool's
    ``max_total_num_tokens`` and ``internal_states``."""
    new = requests.get(held_fake_server.url + "/server_info", timeout=30)
    old = requests.get(held_fake_server.url + "/get_server_info", timeout=30)
    assert new.status_code == old.status_code == 200
    a, b = new.json(), old.json()
    assert set(a) == set(b)
    for key in ("version", "max_total_num_tokens", "internal_states", "model_path", "served_model_name"):
        assert key in a, key
    assert a["served_model_name"] == b["served_model_name"] == FAKE_MODEL
    assert a["max_total_num_tokens"] == b["max_total_num_tokens"] > 0
    assert isinstance(a["internal_states"], list) and a["internal_states"]


def test_sglang_16976_v1_loads_counts_a_running_request(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#16976 added ``GET /v1/loads`` (a router polls it in place of
    ``/get_load``) with ``dp_rank`` and ``include`` filters and a Prometheus format. Expected:
    while the test keeps one request running, the rank-0 load says one running and none waiting,
    as ``/get_load``'s ``num_reqs`` does; ``include=core`` leaves the sections out; the Prometheus
    text carries the same count; after the abort both say zero."""
    url = held_fake_server.url
    rid, t, _ = hold_stream(held_fake_server)
    try:
        body = requests.get(url + "/v1/loads", params={"dp_rank": 0, "include": "core"}, timeout=10).json()
        assert [x["dp_rank"] for x in body["loads"]] == [0]
        load = body["loads"][0]
        assert load["num_running_reqs"] == 1 and load["num_waiting_reqs"] == 0, load
        assert "queues" not in load and "disaggregation" not in load
        assert requests.get(url + "/get_load", timeout=10).json()[0]["num_reqs"] == 1
        prom = requests.get(url + "/v1/loads", params={"format": "prometheus"}, timeout=10).text
        assert 'sglang_num_running_reqs{dp_rank="0"} 1' in prom.splitlines()
    finally:
        _end_hold(held_fake_server, rid, t)
    _wait_idle(held_fake_server)
    load = requests.get(url + "/v1/loads", timeout=10).json()["loads"][0]
    assert load["num_running_reqs"] == 0


def test_sglang_12107_flush_cache_while_busy_is_refused_and_harmless(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#12107: a ``/flush_cache`` that missed a living request rebuilt the
    radix tree under it and the scheduler crashed when that request was released. Expected: while
    a request runs, ``/flush_cache`` is a 400 and flushes nothing; the running request is not
    disturbed (it keeps running and ends with the abort the test sends); afterwards the flush is a
    200 and ``/generate`` serves."""
    rid, t, lines = hold_stream(held_fake_server)
    try:
        for _ in range(3):
            r = requests.post(held_fake_server.url + "/flush_cache", timeout=30)
            assert r.status_code == 400, r.text
        # the request is still running (the fake model holds it after its first token)
        assert requests.get(held_fake_server.url + "/get_load", timeout=10).json()[0]["num_reqs"] == 1
        assert t.is_alive()
    finally:
        _end_hold(held_fake_server, rid, t)
    assert json.loads(lines[-1][6:])["meta_info"]["finish_reason"]["type"] == "abort"
    _wait_idle(held_fake_server)
    assert requests.post(held_fake_server.url + "/flush_cache", timeout=30).status_code == 200
    r = post(held_fake_server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 3}})
    assert r.status_code == 200 and len(r.json()["output_ids"]) == 3, r.text


def test_sglang_6869_router_reads_the_workers_server_info(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#6869 (the router's ``--dp-aware`` mode) and sgl-project/sglang#10998
    (worker registration): sglang-router registers a worker from its ``/get_server_info`` -- it
    reads ``dp_size`` to expand the worker into one entry per data-parallel rank, and
    ``model_id`` or else ``model_path`` as the worker's model -- after ``/health`` answers.
    Expected: ``/health`` is 200; ``/get_server_info`` has an integer ``dp_size`` equal to the
    launch's (1: no ``--dp-size``), and a ``model_path`` equal to ``/get_model_info``'s; the
    served model name is the launch's ``--served-model-name``."""
    url = held_fake_server.url
    assert requests.get(url + "/health", timeout=10).status_code == 200
    info = requests.get(url + "/get_server_info", timeout=10).json()
    model = requests.get(url + "/get_model_info", timeout=10).json()
    assert isinstance(info["dp_size"], int) and info["dp_size"] == 1
    assert info["model_path"] == model["model_path"]
    assert model["served_model_name"] == info["served_model_name"] == FAKE_MODEL
    assert model["is_generation"] is True


# --------------------------------------------------------------------------- tokenizer routes


def test_sglang_5711_tokenize_and_detokenize_match_the_tokenizer(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#5711 added ``/tokenize`` and ``/detokenize`` (also under ``/v1/``):
    single and batch inputs, ``add_special_tokens``, ``skip_special_tokens``. Expected: the ids
    and counts are the served tokenizer's own, a list of prompts gives a list of id lists, the
    detokenized text is the tokenizer's decode, a round trip gives the text back, and
    ``max_model_len`` is the served context length."""
    hf = hf_auto_tokenizer()
    url = held_fake_server.url
    texts = ["Hello, DeepSeek-V4!", "深度求索 tokens\n  spaced"]
    ctx = requests.get(url + "/get_model_info", timeout=10).json()["context_length"]
    one = post(held_fake_server, "/v1/tokenize", {"model": FAKE_MODEL, "prompt": texts[0]}).json()
    want = hf.encode(texts[0], add_special_tokens=True)
    assert one["tokens"] == want and one["count"] == len(want) and one["max_model_len"] == ctx
    many = post(held_fake_server, "/tokenize", {"prompt": texts, "add_special_tokens": False}).json()
    assert many["tokens"] == [hf.encode(x, add_special_tokens=False) for x in texts]
    assert many["count"] == [len(x) for x in many["tokens"]]
    back = post(held_fake_server, "/v1/detokenize", {"model": FAKE_MODEL, "tokens": many["tokens"][1]}).json()
    assert back["text"] == hf.decode(many["tokens"][1]) == texts[1]
    ids = [hf.bos_token_id, *many["tokens"][0]]
    kept = post(held_fake_server, "/detokenize", {"tokens": ids, "skip_special_tokens": False}).json()
    dropped = post(held_fake_server, "/detokenize", {"tokens": ids, "skip_special_tokens": True}).json()
    assert kept["text"] == hf.decode(ids, skip_special_tokens=False)
    assert dropped["text"] == hf.decode(ids, skip_special_tokens=True) == texts[0]


# --------------------------------------------------------------------------- refusals


def test_sglang_5230_embeddings_on_a_generation_model_is_a_clean_400(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#5230: an empty input to an embedding route crashed SGLang's scheduler
    (vLLM answered a ``BadRequestError`` 400 and kept serving). On a generation model every
    embedding request is refused. Expected: ``/v1/embeddings`` with an empty and a non-empty
    input is a 400 the ``openai`` client raises as ``BadRequestError`` with SGLang's message;
    the server still generates afterwards."""
    client = _client(held_fake_server)
    for text in ("", "hello"):
        with pytest.raises(openai.BadRequestError) as e:
            client.embeddings.create(model=FAKE_MODEL, input=text)
        assert e.value.status_code == 400
        assert NOT_AN_EMBEDDING_MODEL_MSG in str(e.value.body)
    out = client.completions.create(model=FAKE_MODEL, prompt="Hi", max_tokens=2)
    assert out.usage is not None and out.usage.completion_tokens == 2


def test_sglang_6058_rerank_on_a_generation_model_is_sglangs_400(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#6058 added ``POST|PUT /v1/rerank`` (``{"query", "documents"}`` scored
    by a cross-encoder, sent to the model as an embedding request). A generation model refuses it
    with the embedding route's 400. Fault found: this server had no such route (a 404 ``{"detail":
    "Not Found"}``). Expected: both methods answer 400 in the OpenAI error shape with SGLang's
    message, and the server keeps serving."""
    body = {"query": "what is a panda?", "documents": ["a bear", "a car"]}
    for method in ("POST", "PUT"):
        r = requests.request(method, held_fake_server.url + "/v1/rerank", json=body, timeout=30)
        assert r.status_code == 400, (method, r.status_code, r.text)
        err = r.json()["error"]
        assert err["code"] == 400 and err["message"] == NOT_AN_EMBEDDING_MODEL_MSG
    r = post(held_fake_server, "/generate", {"text": "Hi", "sampling_params": {"max_new_tokens": 2}})
    assert r.status_code == 200, r.text


def test_sglang_4739_lora_path_none_means_no_adapter(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#4739: ``lora_path: [None, None]`` in a batch was not handled as "no
    adapter" (a later batch reused the previous adapter; ``[a, None]`` gave an almost empty second
    output). Expected here (no LoRA serving): ``null`` entries are no adapter, so the batch answers
    exactly as without the field; a named adapter anywhere in the list is a 400 naming
    ``lora_path``, and it changes nothing for the next request."""
    base = {"text": ["Hi", "Hello there"], "sampling_params": {"max_new_tokens": 4}}
    plain = post(held_fake_server, "/generate", base)
    nulls = post(held_fake_server, "/generate", {**base, "lora_path": [None, None]})
    assert plain.status_code == nulls.status_code == 200, nulls.text
    assert [x["output_ids"] for x in nulls.json()] == [x["output_ids"] for x in plain.json()]
    mixed = post(held_fake_server, "/generate", {**base, "lora_path": ["my-adapter", None]})
    assert mixed.status_code == 400 and "lora_path" in mixed.json()["error"]["message"], mixed.text
    again = post(held_fake_server, "/generate", base)
    assert [x["output_ids"] for x in again.json()] == [x["output_ids"] for x in plain.json()]


def test_sglang_30177_return_hidden_states_is_refused_clearly(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#30177 made ``return_hidden_states`` accept ``"last"`` as well as a
    boolean. This runtime returns no hidden states. Expected: ``false`` is served as if absent;
    ``true`` and ``"last"`` are a 400 naming ``return_hidden_states`` (not a crash, not a
    silent answer without them), on ``/generate`` and on the chat route."""
    base = {"text": "Hi", "sampling_params": {"max_new_tokens": 3}}
    plain = post(held_fake_server, "/generate", base).json()
    off = post(held_fake_server, "/generate", {**base, "return_hidden_states": False})
    assert off.status_code == 200 and off.json()["output_ids"] == plain["output_ids"]
    for value in (True, "last"):
        r = post(held_fake_server, "/generate", {**base, "return_hidden_states": value})
        assert r.status_code == 400 and "return_hidden_states" in r.json()["error"]["message"], r.text
    client = _client(held_fake_server)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=FAKE_MODEL,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=2,
            extra_body={"return_hidden_states": "last"},
        )
    assert "return_hidden_states" in str(e.value.body)


def test_sglang_6572_custom_logit_processor_is_refused_on_openai_routes(
    held_fake_server: ServerHandle,
) -> None:
    """sgl-project/sglang#6572 passed ``custom_logit_processor`` / ``custom_params`` through the
    OpenAI chat route. This server runs no user code in the sampler (SGLang needs
    ``--enable-custom-logit-processor`` for it). Expected: a serialized processor on
    ``/v1/chat/completions`` and ``/v1/completions`` is a 400 the ``openai`` client raises as
    ``BadRequestError`` naming the field; ``null`` is served."""
    client = _client(held_fake_server)
    proc = json.dumps({"callable": "gASVAAAAAAAAAAA="})
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=FAKE_MODEL,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=2,
            extra_body={"custom_logit_processor": proc, "custom_params": {"bias": 1}},
        )
    assert "custom_logit_processor" in str(e.value.body)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(
            model=FAKE_MODEL, prompt="Hi", max_tokens=2, extra_body={"custom_logit_processor": proc}
        )
    assert "custom_logit_processor" in str(e.value.body)
    ok = client.chat.completions.create(
        model=FAKE_MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=2,
        extra_body={"custom_logit_processor": None},
    )
    assert ok.choices[0].finish_reason == "length"


# --------------------------------------------------------------------------- Batch API


def test_sglang_1222_cancel_an_in_progress_batch(held_fake_server: ServerHandle) -> None:
    """sgl-project/sglang#1222 added ``POST /v1/batches/{id}/cancel`` as OpenAI documents it: an
    in-progress batch goes to ``cancelling`` and then ``cancelled``, with the partial results
    that finished in its output file. Expected (parsed with the ``openai`` client's ``Batch``):
    the cancel answers ``cancelling``; the batch ends ``cancelled`` with ``cancelled_at``; the
    two requests that finished are in the output file, the one still running is in the error
    file as ``batch_cancelled``; the counts say 3 / 2 / 1; nothing keeps running."""
    client = _client(held_fake_server)
    rows = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/completions",
            "body": {"model": FAKE_MODEL, "prompt": "[hold] p" if i == 1 else "p", "max_tokens": 3},
        }
        for i in range(3)
    ]
    data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
    f = client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch")
    b = client.batches.create(input_file_id=f.id, endpoint="/v1/completions", completion_window="24h")
    deadline = time.time() + 30
    while True:
        cur = client.batches.retrieve(b.id)
        if cur.request_counts is not None and cur.request_counts.completed == 2:
            break
        assert time.time() < deadline and cur.status in ("validating", "in_progress"), cur
        time.sleep(0.05)
    assert cur.status == "in_progress"
    assert client.batches.cancel(b.id).status == "cancelling"
    deadline = time.time() + 30
    while (done := client.batches.retrieve(b.id)).status == "cancelling":
        assert time.time() < deadline
        time.sleep(0.05)
    assert isinstance(done, Batch) and done.status == "cancelled" and done.cancelled_at is not None
    assert done.request_counts is not None
    assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (3, 2, 1)
    assert done.output_file_id and done.error_file_id
    out = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines() if x]
    err = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines() if x]
    assert sorted(x["custom_id"] for x in out) == ["r0", "r2"]
    assert all(x["response"]["status_code"] == 200 for x in out)
    assert [(x["custom_id"], x["error"]["code"]) for x in err] == [("r1", "batch_cancelled")]
    _wait_idle(held_fake_server)


# --------------------------------------------------------------------------- embedded model


def test_sglang_4707_streamed_usage_has_prompt_tokens_details(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#4707: with ``--enable-cache-report`` a streamed chat with
    ``stream_options.include_usage`` had no ``prompt_tokens_details`` in its usage chunk.
    Expected (``more_bugs_server`` runs with the flag): the usage chunk, parsed as the ``openai``
    client's ``ChatCompletionChunk``, carries ``prompt_tokens_details.cached_tokens``, and for
    a re-sent prompt it equals the unstreamed answer's count of the same warm prompt (> 0)."""
    prompt = "Count the tokens of this long and repetitive sentence, please. " * 40
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 3,
        "temperature": 0,
    }
    assert post(more_bugs_server, CHAT, body).status_code == 200  # warms the prefix cache
    r = requests.post(
        more_bugs_server.url + CHAT,
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
        stream=True,
        timeout=120,
    )
    assert r.status_code == 200, r.text
    chunks = [
        ChatCompletionChunk.model_validate_json(x[6:]) for x in r.iter_lines() if x.startswith(b"data: {")
    ]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(usage) == 1 and usage[0].prompt_tokens_details is not None
    unstreamed = ChatCompletion.model_validate(post(more_bugs_server, CHAT, body).json())
    assert unstreamed.usage is not None and unstreamed.usage.prompt_tokens_details is not None
    cached = unstreamed.usage.prompt_tokens_details.cached_tokens
    assert cached is not None and cached > 0
    assert usage[0].prompt_tokens_details.cached_tokens == cached
    assert usage[0].prompt_tokens == unstreamed.usage.prompt_tokens


def test_sglang_11289_update_weights_from_the_served_checkpoint(more_bugs_server: ServerHandle) -> None:
    """sgl-project/sglang#11289: ``/update_weights_from_disk`` with the served model's own path
    answered "Internal Server Error" and the server died. Expected: reloading the checkpoint the
    server runs is a 200 ``{"success": true}``; the weight version stays; greedy output is
    identical to the one before the reload, and the server keeps serving."""
    info = requests.get(more_bugs_server.url + "/get_model_info", timeout=30).json()
    gen = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 6, "temperature": 0}}
    before = post(more_bugs_server, "/generate", gen).json()
    r = post(more_bugs_server, "/update_weights_from_disk", {"model_path": info["model_path"]})
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    after = post(more_bugs_server, "/generate", gen).json()
    assert after["output_ids"] == before["output_ids"]
    assert after["meta_info"]["weight_version"] == before["meta_info"]["weight_version"]
    assert requests.get(more_bugs_server.url + "/health", timeout=30).status_code == 200


# --------------------------------------------------------------------------- flags


def _parse(argv: list[str]) -> ServerArgs:
    parser = OneLineErrorParser(prog="launch_server")
    ServerArgs.add_cli_args(parser)
    return ServerArgs.from_cli_args(parser.parse_args(argv))


def test_sglang_7223_json_model_override_args_through_a_shell() -> None:
    """sgl-project/sglang#7223: a valid ``--json-model-override-args`` JSON (Qwen3's YaRN
    ``rope_scaling``) written in a launch command line was reported as invalid JSON. Expected: the
    command line split as a POSIX shell splits it (``shlex``), with the value quoted or after
    ``=``, gives exactly ``json.loads`` of the written JSON; a Python-dict spelling (single
    quotes) is refused with a ``ValueError`` naming the field, not applied half-read."""
    override = {
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    }
    text = json.dumps(override)
    for line in (
        f"--model-path m --json-model-override-args '{text}'",
        f"--model-path m --json-model-override-args='{text}' --tp 1",
    ):
        args = _parse(shlex.split(line))
        assert args.model_override_args() == json.loads(text) == override
    with pytest.raises(ValueError, match="json_model_override_args"):
        _parse(["--model-path", "m", "--json-model-override-args", str(override)]).model_override_args()


def test_sglang_12818_reasoning_parser_flag_spellings() -> None:
    """sgl-project/sglang#12818: ``--reasoning_parser kimi_k2`` was "unrecognized arguments"; the
    maintainers' answer: the flag is spelt ``--reasoning-parser``. Expected: the dashed flag, as
    two words or with ``=``, selects the parser; the underscore spelling is refused by argparse
    (exit 2) as SGLang refuses it, not silently ignored."""
    assert (
        _parse(["--model-path", "m", "--reasoning-parser", "deepseek-v4"]).reasoning_parser == "deepseek-v4"
    )
    assert _parse(["--model-path", "m", "--reasoning-parser=deepseek-r1"]).reasoning_parser == "deepseek-r1"
    with pytest.raises(SystemExit) as e:
        _parse(["--model-path", "m", "--reasoning_parser", "deepseek-r1"])
    assert e.value.code == 2
