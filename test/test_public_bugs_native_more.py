"""More public bug reports of SGLang's native ``/generate``, offline ``Engine``, control routes and
frontend language, replayed against sglang-v4.

The server and the engine run the real processes over the model-free FakeScheduler
(``server_fixture``): it emits ``FAKE_TEXT``'s tokens, or for a prompt holding ``[script]``
``FAKE_SCRIPT`` then EOS through the real stop checker. The expected texts come from the
tokenizer files through ``transformers`` (independent of the runtime's tokenizer wrapper), the
expected shapes and finish reasons from each report and SGLang's own formats (its
``FINISH_MATCHED_STR`` / ``FINISH_MATCHED_TOKEN`` / ``FINISHED_MATCHED_REGEX`` JSON, its
detokenizer's stop trimming), the frontend's from the ``sglang`` client's own parser.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from server_fixture import (
    FAKE_EOS,
    FAKE_SCRIPT,
    FAKE_TEXT,
    fake_output_text,
    in_background,
    running_reqs,
    sse_events,
    wait_running_reqs,
)

pytestmark = pytest.mark.timeout(240)
HOLD = "[hold]"  # FakeScheduler's FAKE_HOLD_ON_TEXT: such a request runs until it is aborted


@pytest.fixture(scope="module")
def model(shared_fake_model_dir: Path) -> Path:
    """The model directory of conftest's ``held_fake_server`` and ``shared_fake_engine``."""
    return shared_fake_model_dir


@pytest.fixture(scope="module")
def server(held_fake_server: Any) -> Any:
    """conftest's session fake-model server on :func:`model` (``[hold]`` prompts held)."""
    return held_fake_server


@pytest.fixture(scope="module")
def engine(shared_fake_engine: Any) -> Any:
    """conftest's session ``Engine`` on :func:`model` (``[hold]`` prompts held)."""
    return shared_fake_engine


@pytest.fixture(scope="module")
def backend(server: Any) -> Any:
    """The ``sglang`` frontend's ``RuntimeEndpoint`` on :func:`server`, set as the default
    backend (the tests using it skip without the ``sglang`` client)."""
    sgl = pytest.importorskip("sglang")
    be = sgl.RuntimeEndpoint(server.url)
    sgl.set_default_backend(be)
    return be


def gen(server: Any, body: dict[str, Any]) -> Any:
    r = requests.post(server.url + "/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server: Any, body: dict[str, Any]) -> list[Any]:
    with requests.post(server.url + "/generate", json={**body, "stream": True}, stream=True, timeout=60) as r:
        assert r.status_code == 200, r.text
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    return events[:-1]


def _script_ids(tok: Any) -> list[int]:
    """The ids the fake model emits for a ``[script]`` prompt: ``FAKE_SCRIPT``'s, then EOS."""
    return tok.encode(FAKE_SCRIPT, add_special_tokens=False) + [FAKE_EOS]


# ----------------------------------------------------------------------------- logprobs
def test_top_logprobs_num_gives_k_candidates_per_position(server: Any, tok: Any) -> None:
    """sgl-project/sglang#12418 (``/generate`` with ``return_logprob`` and ``top_logprobs_num``
    must return the per-step top-k bundle, not only the chosen token): ``output_top_logprobs``
    has one list of ``k`` ``[logprob, token_id, text]`` per generated token and
    ``input_top_logprobs`` one per returned prompt position; ``output_token_logprobs`` keeps the
    chosen token in its third slot only as its text with ``return_text_in_logprobs``, else
    ``None``. Oracle for every text: the tokenizer's decode of that one id."""
    k, n = 3, 4
    body = {
        "text": "The capital of France is",
        "sampling_params": {"max_new_tokens": n, "temperature": 0},
        "return_logprob": True,
        "logprob_start_len": 0,
        "top_logprobs_num": k,
    }
    m = gen(server, {**body, "return_text_in_logprobs": True})["meta_info"]
    prompt = tok.encode("The capital of France is", add_special_tokens=False)
    out_ids = tok.encode(FAKE_TEXT, add_special_tokens=False)[:n]
    assert [e[1] for e in m["output_token_logprobs"]] == out_ids
    assert [e[2] for e in m["output_token_logprobs"]] == [tok.decode([i]) for i in out_ids]
    assert [e[1] for e in m["input_token_logprobs"]] == prompt
    assert len(m["output_top_logprobs"]) == n and len(m["input_top_logprobs"]) == len(prompt)
    for step in m["output_top_logprobs"] + m["input_top_logprobs"][1:]:
        assert len(step) == k
        for lp, tid, text in step:
            assert isinstance(lp, float) and lp <= 0 and text == tok.decode([tid])
    plain = gen(server, body)["meta_info"]
    assert [e[2] for e in plain["output_token_logprobs"]] == [None] * n
    assert all(c[2] is None for step in plain["output_top_logprobs"] for c in step)
    assert [len(s) for s in plain["output_top_logprobs"]] == [k] * n


def test_engine_generate_takes_return_text_in_logprobs(engine: Any, tok: Any) -> None:
    """sgl-project/sglang#7226 (``sgl.Engine.generate(prompts, sampling_params={"max_new_tokens":
    0}, return_logprob=True, logprob_start_len=0, top_logprobs_num=32, token_ids_logprob=None,
    return_text_in_logprobs=True)`` failed: the keyword was not exposed): accepted, each prompt's
    ``input_token_logprobs`` covers all of its tokens with their texts (the first entry has no
    logprob, SGLang's shape), no token is generated. Oracle: the tokenizer."""
    prompts = ["Hello, my name is", "The sky is"]
    outs = engine.generate(
        prompts,
        sampling_params=dict(max_new_tokens=0),
        return_logprob=True,
        logprob_start_len=0,
        top_logprobs_num=32,
        token_ids_logprob=None,
        return_text_in_logprobs=True,
    )
    assert len(outs) == 2
    for prompt, out in zip(prompts, outs):
        ids = tok.encode(prompt, add_special_tokens=False)
        m = out["meta_info"]
        assert out["text"] == "" and m["completion_tokens"] == 0
        assert [e[1] for e in m["input_token_logprobs"]] == ids
        assert [e[2] for e in m["input_token_logprobs"]] == [tok.decode([i]) for i in ids]
        assert m["input_token_logprobs"][0][0] is None
        assert all(len(s) == 32 for s in m["input_top_logprobs"][1:])


def test_output_logprobs_without_input_logprobs(sched_model_dir: str) -> None:
    """sgl-project/sglang#34627 (generated-token logprobs were dropped when no prompt logprobs
    were asked for, e.g. ``logprobs=true, top_logprobs=0``): with ``logprob_start_len`` ``-1``
    (output only) or at the prompt's end there is no prompt entry, and every generated token
    still has its logprob. Real scheduler in process; oracle: a run of the
    same greedy request with prompt logprobs from position 0 (its output logprobs)."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import drain, make_scheduler, submit

    ids = random_ids(40, seed=11)
    s = make_scheduler(sched_model_dir)
    submit(s, "full", ids, 4, return_logprob=True, logprob_start_len=0, top_logprobs_num=1)
    submit(s, "none", ids, 4, return_logprob=True, logprob_start_len=-1, top_logprobs_num=1)
    submit(s, "end", ids, 4, return_logprob=True, logprob_start_len=len(ids), top_logprobs_num=1)
    res = drain(s)
    assert len(res["full"]["in_lp"]) == len(ids) and len(res["full"]["lp"]) == 4
    for rid in ("none", "end"):
        assert res[rid]["in_lp"] == [], rid
        assert res[rid]["ids"] == res["full"]["ids"], rid
        assert res[rid]["lp"] == pytest.approx(res["full"]["lp"], abs=1e-4), rid


@pytest.mark.parametrize(
    "body",
    [
        {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 2, "n": 2}},
        {"input_ids": [[5, 6, 7]], "sampling_params": {"max_new_tokens": 2, "n": 2}},
        {"input_ids": [5, 6, 7], "sampling_params": [{"max_new_tokens": 2, "n": 2}]},
        {
            "input_ids": [[5, 6, 7], [8]],
            "sampling_params": [{"max_new_tokens": 2, "n": 2}, {"max_new_tokens": 3, "n": 2}],
        },
    ],
)
def test_input_ids_with_n_samples(server: Any, tok: Any, body: dict[str, Any]) -> None:
    """sgl-project/sglang#19435 (``/generate`` with ``input_ids`` and ``n > 1`` failed with
    "input_ids should be a list of lists for batch processing"): one prompt's ids, as a flat list
    or a one-prompt batch, and a batch with one ``sampling_params`` per prompt, each give ``n``
    samples per prompt, grouped by prompt (SGLang's order), each with its own id."""
    outs = gen(server, body)
    prompts = body["input_ids"] if isinstance(body["input_ids"][0], list) else [body["input_ids"]]
    sps = body["sampling_params"] if isinstance(body["sampling_params"], list) else [body["sampling_params"]]
    sps = sps * len(prompts) if len(sps) == 1 else sps
    want = [(len(p), sp["max_new_tokens"]) for p, sp in zip(prompts, sps) for _ in range(2)]
    assert [(o["meta_info"]["prompt_tokens"], o["meta_info"]["completion_tokens"]) for o in outs] == want
    assert [o["text"] for o in outs] == [fake_output_text(tok, n) for _, n in want]
    assert len({o["meta_info"]["id"] for o in outs}) == len(outs)


# ----------------------------------------------------------------------------- stopping
@pytest.mark.parametrize("streamed", [False, True])
def test_stop_regex_stops_at_the_first_match(server: Any, tok: Any, streamed: bool) -> None:
    """sgl-project/sglang#2007 and #10635 (``stop_regex`` in ``sampling_params``: generation
    stops once the text matches a pattern, the finish reason being ``{"type": "stop",
    "matched": PATTERN}``): the output ends with the token that completed the first match; a
    list of patterns works as one. SGLang's detokenizer trims the literal ``matched`` text only,
    so a pattern's match stays in the text, with or without ``no_stop_trim``. Oracle: ``re`` over
    the decoded prefixes of the fake model's token sequence."""
    pattern = r"\d+\."
    ids = _script_ids(tok)
    n = next(i for i in range(1, len(ids) + 1) if re.search(pattern, tok.decode(ids[:i])))
    want = tok.decode(ids[:n])
    for sp in ({"stop_regex": pattern}, {"stop_regex": [r"zzz\d", pattern], "no_stop_trim": True}):
        body = {"text": "[script] q", "sampling_params": {"max_new_tokens": 80, **sp}}
        if streamed:
            final = stream(server, body)[-1]
        else:
            final = gen(server, body)
        assert final["text"] == want and final["output_ids"] == ids[:n]
        assert final["meta_info"]["finish_reason"] == {"type": "stop", "matched": pattern}


@pytest.mark.parametrize("no_stop_trim", [False, True])
@pytest.mark.parametrize("pattern", [r"\d+\.", "Stop"])
def test_stop_regex_trimming_on_the_openai_routes(
    server: Any, tok: Any, pattern: str, no_stop_trim: bool
) -> None:
    """``stop_regex`` on ``/v1/completions`` and ``/v1/chat/completions`` (SGLang's extra field,
    sgl-project/sglang#10635) trims as on ``/generate``, SGLang's rule: the finish reason's
    ``matched`` is the pattern and its detokenizer's ``trim_matched_stop`` cuts the text at the
    first literal occurrence of ``matched`` (``output.find``), before it (through it with
    ``no_stop_trim``). A pattern with regex syntax (``\\d+\\.``) is no text of the output: the
    match stays, with or without ``no_stop_trim``; a pattern that is plain text (``Stop``) is its
    own match and is cut like a stop string. ``matched_stop`` is the pattern. Oracle: ``re`` over
    the decoded prefixes of the fake model's token sequence, then ``str.find``."""
    ids = _script_ids(tok)
    n = next(i for i in range(1, len(ids) + 1) if re.search(pattern, tok.decode(ids[:i])))
    text = tok.decode(ids[:n])
    cut = text.find(pattern)
    want = text if cut < 0 else text[: cut + len(pattern)] if no_stop_trim else text[:cut]
    extra = {"stop_regex": pattern, "no_stop_trim": no_stop_trim, "max_tokens": 80, "temperature": 0}
    r = requests.post(server.url + "/v1/completions", json={"prompt": "[script] q", **extra}, timeout=60)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert (choice["text"], choice["finish_reason"], choice["matched_stop"]) == (want, "stop", pattern)
    body = {"prompt": "[script] q", "stream": True, **extra}
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=60) as s:
        events = [e for e in sse_events(s) if e != "[DONE]"]
    assert "".join(e["choices"][0]["text"] for e in events if e["choices"]) == want
    messages = [{"role": "user", "content": "[script] q"}]
    r = requests.post(server.url + "/v1/chat/completions", json={"messages": messages, **extra}, timeout=60)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"], choice["matched_stop"]) == (
        want,
        "stop",
        pattern,
    )


def test_finish_reason_matched_tells_eos_from_stops(server: Any, tok: Any) -> None:
    """sgl-project/sglang#1684 and #1407 (``finish_reason`` is a dict whose ``matched`` tells
    what ended the output: the EOS id or a ``stop_token_ids`` id as an int, a stop string as that
    string; a length cut has ``length``). Oracle: the fake model's token sequence and the
    tokenizer."""
    ids = _script_ids(tok)
    eos = gen(server, {"text": "[script] a", "sampling_params": {"max_new_tokens": 100}})
    assert eos["meta_info"]["finish_reason"] == {"type": "stop", "matched": FAKE_EOS}
    assert eos["output_ids"] == ids and eos["text"] == FAKE_SCRIPT
    s = gen(server, {"text": "[script] b", "sampling_params": {"max_new_tokens": 100, "stop": ["</b>"]}})
    assert s["meta_info"]["finish_reason"] == {"type": "stop", "matched": "</b>"}
    assert s["text"] == FAKE_SCRIPT[: FAKE_SCRIPT.index("</b>")]
    tid = ids[5]
    t = gen(
        server, {"text": "[script] c", "sampling_params": {"max_new_tokens": 100, "stop_token_ids": [tid]}}
    )
    assert t["meta_info"]["finish_reason"] == {"type": "stop", "matched": tid}
    assert t["output_ids"] == ids[: ids.index(tid) + 1]
    cut = gen(server, {"text": "[script] d", "sampling_params": {"max_new_tokens": 3}})
    assert cut["meta_info"]["finish_reason"] == {"type": "length", "length": 3}


def test_eos_text_kept_only_with_no_stop_trim(server: Any, tok: Any) -> None:
    """sgl-project/sglang#1650 and #1661 (the EOS token's text was left in the output even though
    it ended generation; ``no_stop_trim`` keeps it on request): with ``skip_special_tokens:
    false`` the EOS that stopped the output is trimmed from ``text`` by default and kept with
    ``no_stop_trim``. ``output_ids`` hold it either way (SGLang's ``output_ids`` are the tokens
    generated). Oracle: the tokenizer's text of the EOS id."""
    eos_text = tok.decode([FAKE_EOS], skip_special_tokens=False)
    assert eos_text and eos_text not in FAKE_SCRIPT
    base = {"max_new_tokens": 100, "skip_special_tokens": False}
    trimmed = gen(server, {"text": "[script] q", "sampling_params": base})
    kept = gen(server, {"text": "[script] q", "sampling_params": {**base, "no_stop_trim": True}})
    assert trimmed["text"] == FAKE_SCRIPT
    assert kept["text"] == FAKE_SCRIPT + eos_text
    assert trimmed["output_ids"] == kept["output_ids"] == _script_ids(tok)


def test_min_new_tokens_holds_back_stop_token_ids(sched_model_dir: str) -> None:
    """sgl-project/sglang#6266 and #9039 (``Engine.generate(input_ids=..., sampling_params={...,
    "min_new_tokens": 5, "stop": [...]})`` ended before ``min_new_tokens`` tokens): below
    ``min_new_tokens`` the stop tokens cannot be sampled, so the output has at least that many
    tokens and none of its first ``min_new_tokens`` is a stop token; without it the same request
    stops at once. Real scheduler and sampler in process; oracle: the cold greedy run, whose first
    two tokens are made the stop tokens."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import drain, make_scheduler, submit

    ids = random_ids(24, seed=12)
    s = make_scheduler(sched_model_dir)
    submit(s, "cold", ids, 8)
    cold = drain(s)["cold"]["ids"]
    stops = sorted(set(cold[:2]))
    submit(s, "plain", ids, 8, ignore_eos=False, sampling={"stop_token_ids": stops})
    submit(s, "min", ids, 8, ignore_eos=False, sampling={"stop_token_ids": stops, "min_new_tokens": 5})
    res = drain(s)
    assert res["plain"]["ids"] == cold[:1]
    assert res["plain"]["finish"] == {"type": "stop", "matched": cold[0]}
    got = res["min"]["ids"]
    assert len(got) >= 5 and not set(got[:5]) & set(stops), (got, stops)
    assert len(got) == 8 or got[-1] in stops


def test_regex_with_an_escaped_dash_in_a_class_excludes_parentheses(tok: Any) -> None:
    """sgl-project/sglang#2957 (``{"regex": "[A-Za-z0-9.,!?'\\"\\-_<> ]+"}`` let parentheses
    through): a character class with an escaped ``-`` admits only its characters, even when the
    logits favour ``(`` / ``)`` tokens. Grammar backend and sampler on adversarial random logits;
    oracle: Python's ``re``."""
    xgr = pytest.importorskip("xgrammar")  # noqa: F841 - the grammar backend needs it
    import torch
    from sglang_v4.sampling.grammar import GrammarBackend
    from sglang_v4.sampling.sampler import sample
    from sglang_v4.sampling.sampling_params import SamplingParams

    vocab = 129280
    pattern = r"[A-Za-z0-9.,!?'\"\-_<> ]+"
    backend = GrammarBackend(tok, vocab, [FAKE_EOS])
    favour = [t for t in range(len(tok)) if tok.decode([t]) in {"(", " (", "((", ")", "))", "Sorry ("}]
    assert favour
    for seed in range(3):
        sp = SamplingParams(regex=pattern, temperature=1.0)
        sp.verify(vocab, allow_grammar=True)
        g = backend.create(sp)
        rng = torch.Generator().manual_seed(seed)
        out: list[int] = []
        while not g.is_terminated():
            assert len(out) < 200
            logits = torch.randn(1, vocab, generator=rng) * 4.0
            logits[0, favour] += 60.0
            logits[0, FAKE_EOS] += 20.0 if len(out) >= 8 else -100.0
            gen = torch.Generator().manual_seed(seed * 7919 + len(out))
            t = int(sample(logits, [sp], [out], None, [gen], eos_token_ids={FAKE_EOS}, grammars=[g]).item())
            assert g.accept(t), t
            out.append(t)
        text = tok.decode(out[:-1])
        assert out[-1] == FAKE_EOS and re.fullmatch(r"[A-Za-z0-9.,!?'\"\-_<> ]+", text), text
        assert "(" not in text and ")" not in text


# ----------------------------------------------------------------------------- rids and aborts
def test_rid_is_reusable_after_its_request_was_aborted(server: Any, tok: Any) -> None:
    """sgl-project/sglang#24070 (an aborted request's id stayed registered, so resubmitting that
    ``rid`` failed with "Duplicate request ID detected"): while a request runs, a second one with
    its ``rid`` is refused (400); once it is aborted, the ``rid`` serves a new request."""
    body = {"text": HOLD + " q", "rid": "reuse-me", "sampling_params": {"max_new_tokens": 4}}
    t, box = in_background(gen, server, body)
    wait_running_reqs(server, 1)
    dup = requests.post(server.url + "/generate", json={**body, "text": "x"}, timeout=30)
    assert dup.status_code == 400 and "reuse-me" in dup.json()["error"]["message"]
    assert (
        requests.post(server.url + "/abort_request", json={"rid": "reuse-me"}, timeout=10).status_code == 200
    )
    t.join(30)
    assert box["out"]["meta_info"]["finish_reason"]["type"] == "abort"
    again = gen(server, {"text": "x", "rid": "reuse-me", "sampling_params": {"max_new_tokens": 2}})
    assert again["meta_info"]["id"] == "reuse-me" and again["text"] == fake_output_text(tok, 2)
    wait_running_reqs(server, 0)


def test_abort_by_rid_prefix(server: Any) -> None:
    """sgl-project/sglang#30912 and #32237 (``/abort_request`` with ``{"rid": "name::", "prefix":
    true}`` aborts every request whose ``rid`` starts with it, in one call: RL trainers namespace
    rids per adapter or rollout): the family ends aborted, a request outside it runs on; without
    ``prefix`` the same ``rid`` matches no request and aborts nothing."""
    fam = {
        "text": [HOLD + " a", HOLD + " b"],
        "rid": ["fam::1", "fam::2"],
        "sampling_params": {"max_new_tokens": 4},
    }
    other = {"text": HOLD + " c", "rid": "other::1", "sampling_params": {"max_new_tokens": 4}}
    t1, box1 = in_background(gen, server, fam)
    t2, box2 = in_background(gen, server, other)
    wait_running_reqs(server, 3)
    try:
        r = requests.post(server.url + "/abort_request", json={"rid": "fam::"}, timeout=10)
        assert r.status_code == 200
        time.sleep(0.3)
        assert running_reqs(server) == 3
        r = requests.post(server.url + "/abort_request", json={"rid": "fam::", "prefix": True}, timeout=10)
        assert r.status_code == 200
        t1.join(30)
        assert [o["meta_info"]["finish_reason"]["type"] for o in box1["out"]] == ["abort", "abort"]
        assert t2.is_alive() and running_reqs(server) == 1
    finally:
        requests.post(server.url + "/abort_request", json={"abort_all": True}, timeout=10)
        t1.join(30)
        t2.join(30)
    assert box2["out"]["meta_info"]["finish_reason"]["type"] == "abort"
    bad = requests.post(server.url + "/abort_request", json={"rid": "x", "prefix": "yes"}, timeout=10)
    assert bad.status_code == 400 and "prefix" in bad.json()["error"]["message"]


def test_engine_second_batch_call_completes(engine: Any, tok: Any) -> None:
    """sgl-project/sglang#1612 (``Engine.generate`` on a batch answered, then hung in the middle
    of the second batch call): successive batch calls of different sizes and lengths each return
    every output, in prompt order, and leave no request in flight."""
    for size, n in ((24, 3), (40, 5), (8, 2)):
        prompts = [f"query {i}" for i in range(size)]
        outs = engine.generate(prompts, {"max_new_tokens": n})
        assert [o["meta_info"]["prompt_tokens"] for o in outs] == [
            len(tok.encode(p, add_special_tokens=False)) for p in prompts
        ]
        assert [o["text"] for o in outs] == [fake_output_text(tok, n)] * size
    assert engine.tokenizer_manager.rid_to_state == {}


def test_health_generate_repeated_leaves_nothing_behind(server: Any) -> None:
    """sgl-project/sglang#1473 (the server hung after ``/health_generate`` was requested 190
    times in a row): every probe answers 200 and none leaves a request running or a page
    used."""
    for _ in range(200):
        assert requests.get(server.url + "/health_generate", timeout=30).status_code == 200
    info = requests.get(server.url + "/server_info", timeout=10).json()
    assert info["num_running_reqs"] == 0 and info["kv_pool"]["used_pages"] == 0


# ----------------------------------------------------------------------------- frontend language
def test_frontend_flush_cache_and_server_info(backend: Any, server: Any, model: Path) -> None:
    """sgl-project/sglang#1576 and #2205 (``sgl.flush_cache()`` / ``sgl.get_server_info()`` on
    the default backend; a client checks the server's version through the latter): both work
    through ``RuntimeEndpoint``, the info carrying ``version`` and the launch arguments."""
    import sglang as sgl

    assert sgl.flush_cache() is None  # the client raises on a non-200 answer
    info = sgl.get_server_info()
    assert isinstance(info["version"], str) and info["version"]
    assert info["model_path"] == str(model)
    route = requests.get(server.url + "/get_server_info", timeout=10).json()
    assert set(info) == set(route) and info["version"] == route["version"]


def test_frontend_gen_logprob_options(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#232 and #503 (``sgl.gen(..., return_logprob=True, top_logprobs_num=k,
    return_text_in_logprobs=True)``, read back with ``state.get_meta_info(name)``): the generated
    tokens' logprobs with their texts and ``k`` candidates per token. Oracle: the tokenizer."""
    import sglang as sgl

    @sgl.function
    def qa(s: Any) -> None:
        s += "Q: hi\nA:" + sgl.gen(
            "a", max_tokens=4, return_logprob=True, top_logprobs_num=2, return_text_in_logprobs=True
        )

    state = qa.run()
    ids = tok.encode(FAKE_TEXT, add_special_tokens=False)[:4]
    assert state["a"] == tok.decode(ids)
    meta = state.get_meta_info("a")
    assert [(e[1], e[2]) for e in meta["output_token_logprobs"]] == [(i, tok.decode([i])) for i in ids]
    assert [len(step) for step in meta["output_top_logprobs"]] == [2] * 4
    assert all(c[2] == tok.decode([c[1]]) for step in meta["output_top_logprobs"] for c in step)


def test_frontend_gen_choices_scores_each_choice(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#81 (``sgl.gen(name, choices=[...])`` and its per-choice logprobs in
    ``get_meta_info``): one of the choices is chosen, and the meta info scores every choice over
    the tokens of prefix + choice from the frontend's ``logprob_start_len`` (the prefix length
    less 2). Oracle: the tokenizer on each full text."""
    import sglang as sgl

    prefix = "To answer this question: What is 5 + 5?, I need to use a "
    choices = ["calculator", "search engine"]

    @sgl.function
    def tool_use(s: Any) -> None:
        s += prefix + sgl.gen("tool", choices=choices)

    state = tool_use.run()
    assert state["tool"] in choices
    meta = state.get_meta_info("tool")
    start = max(len(tok.encode(prefix, add_special_tokens=False)) - 2, 0)
    assert len(meta["normalized_prompt_logprobs"]) == len(choices)
    for c, entries in zip(choices, meta["input_token_logprobs"]):
        assert [e[1] for e in entries] == tok.encode(prefix + c, add_special_tokens=False)[start:]
        assert entries[0][0] is None and all(isinstance(e[0], float) for e in entries[1:])


def test_frontend_server_error_reaches_the_state(backend: Any, tok: Any) -> None:
    """sgl-project/sglang#2358 (a non-200 answer made ``RuntimeEndpoint`` fail with a
    ``JSONDecodeError`` and the program hang): the server's error body is JSON the client parses;
    the program ends with the server's message in ``state.error()``, and the next one runs."""
    import sglang as sgl

    @sgl.function
    def ask(s: Any, q: str) -> None:
        s += q + sgl.gen("a", max_tokens=4)

    state = ask.run(q="word " * 600)  # longer than the fake model's 512-token context
    err = state.error()  # the client's RuntimeError, carrying the server's decoded JSON body
    assert isinstance(err, RuntimeError), err
    body = err.args[0]
    assert body["error"]["code"] == 400 and "512" in body["error"]["message"]
    assert ask.run(q="hi")["a"] == fake_output_text(tok, 4)


def test_run_batch_equals_a_generate_list(backend: Any, server: Any) -> None:
    """sgl-project/sglang#1624 (``run_batch`` against a ``/generate`` list of the same prompts):
    the same texts, each state in the order of its arguments."""
    import sglang as sgl

    questions = ["Who?", "What is 2+2?", "Where?", "x" * 40]

    @sgl.function
    def qa(s: Any, q: str) -> None:
        s += "Q: " + q + "\nA:" + sgl.gen("a", max_tokens=3 + len(q) % 4)

    states = qa.run_batch([{"q": q} for q in questions], num_threads=3, progress_bar=False)
    listed = gen(
        server,
        {
            "text": ["Q: " + q + "\nA:" for q in questions],
            "sampling_params": [{"max_new_tokens": 3 + len(q) % 4} for q in questions],
        },
    )
    assert [s["a"] for s in states] == [o["text"] for o in listed]
    assert [s.text() for s in states] == ["Q: " + q + "\nA:" + o["text"] for q, o in zip(questions, listed)]
