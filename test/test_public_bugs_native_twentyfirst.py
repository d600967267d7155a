"""The twenty-first set of public bug reports of SGLang's native ``/generate`` API (logprob
options, streaming, ``meta_info`` counts, aborts), replayed against sglang-v4.

Fixtures: conftest's session ``held_fake_server`` (``server_fixture.FakeScheduler``: the fake model
writes ``FAKE_TEXT``'s tokens over and over; a ``[hold]`` prompt emits one token, then runs until it
is aborted) and one in-process ``Scheduler`` on conftest's ``sched_model_dir`` (the real tiny
DeepSeek-V4 model on the CPU, 256-token pages, greedy). Oracles: ``FAKE_TEXT`` through the
DeepSeek-V4 tokenizer (``transformers``, independent of the runtime's tokenizer wrapper), the
model's ``config.json`` vocabulary size, the cumulative stream chunks themselves (for the
incremental slices), and a cold run of the same greedy request with prompt logprobs from position
0 (for ``logprob_start_len`` and cached prefixes). Every report here passed as-is and is kept as a
regression test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
from server_fixture import (
    fake_output_ids,
    fake_output_text,
    in_background,
    sse_events,
    wait_running_reqs,
)

pytestmark = pytest.mark.timeout(240)
HOLD = "[hold]"  # FakeScheduler's FAKE_HOLD_ON_TEXT: such a request runs until it is aborted
PAGE = 256  # the scheduler's KV page (prefix-cache block) size, in tokens


@pytest.fixture(scope="module")
def server(held_fake_server: Any) -> Any:
    """conftest's session fake-model server (``[hold]`` prompts held until aborted)."""
    return held_fake_server


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """An in-process ``Scheduler`` on the real tiny model (CPU, float32, greedy requests)."""
    from scheduler_testutil import make_scheduler

    return make_scheduler(sched_model_dir)


@pytest.fixture(scope="module")
def chunked_sched(sched_model_dir: str) -> Any:
    """Another in-process ``Scheduler`` on the same model, prefilling in 256-token chunks."""
    from scheduler_testutil import make_scheduler

    return make_scheduler(sched_model_dir, chunked_prefill_size=PAGE)


@pytest.fixture(scope="module")
def chunk_case(sched: Any) -> tuple[list[int], dict[str, Any], dict[str, Any]]:
    """A 600-token prompt, the logprob options of the chunked-prefill tests, and the result of
    that request on :func:`sched` (which prefills it whole): the oracle."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import submit

    ids = random_ids(600, seed=3157)
    kw = dict(return_logprob=True, logprob_start_len=100, top_logprobs_num=3, token_ids_logprob=[1, 2])
    submit(sched, "whole", ids, 3, **kw)
    want = drain_logprobs(sched)["whole"]
    assert sched.flush_cache()
    return ids, kw, want


def post(server: Any, path: str, body: dict[str, Any]) -> requests.Response:
    """``POST path`` with a JSON ``body``."""
    return requests.post(server.url + path, json=body, timeout=60)


def gen(server: Any, body: dict[str, Any]) -> Any:
    """The JSON answer of ``/generate``; asserts HTTP 200."""
    r = post(server, "/generate", body)
    assert r.status_code == 200, r.text
    return r.json()


def stream(server: Any, body: dict[str, Any]) -> list[Any]:
    """The JSON chunks of ``body`` streamed on ``/generate``; asserts the stream ends with ``[DONE]``."""
    with requests.post(server.url + "/generate", json={**body, "stream": True}, stream=True, timeout=60) as r:
        assert r.status_code == 200, r.text
        events = sse_events(r)
    assert events[-1] == "[DONE]", events[-3:]
    return events[:-1]


def drain_logprobs(s: Any) -> dict[str, dict[str, Any]]:
    """Step ``s`` until idle; per rid its output ``ids``, output logprobs ``lp``, prompt logprobs
    ``in_lp`` with their token ids ``in_ids``, the top-k and ``token_ids_logprob`` lists under
    their ``BatchTokenIDOut`` names (``output_top_logprobs_val``...), and the last message's
    ``cached`` / ``completion`` counts and ``finish`` reason."""
    res: dict[str, dict[str, Any]] = {}
    for _ in range(20_000):
        if not s.has_work():
            return res
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            r = res.setdefault(rid, {"ids": [], "lp": [], "in_lp": [], "in_ids": []})
            r["ids"] += out.output_ids[i]
            r["lp"] += out.output_token_logprobs_val[i]
            r["in_lp"] += out.input_token_logprobs_val[i]
            r["in_ids"] += out.input_token_logprobs_idx[i]
            for key in (
                "output_top_logprobs_val",
                "output_top_logprobs_idx",
                "input_top_logprobs_val",
                "input_top_logprobs_idx",
            ):
                r.setdefault(key, [])
                r[key] += getattr(out, key)[i] if getattr(out, key) else []
            for key in ("output_token_ids_logprobs_val", "input_token_ids_logprobs_val"):
                r.setdefault(key, [])
                r[key] += (getattr(out, key)[i] or []) if getattr(out, key) else []
            r["cached"] = out.cached_tokens[i]
            r["completion"] = out.completion_tokens[i]
            r["finish"] = out.finished_reasons[i]
    raise AssertionError("scheduler did not finish")


def full_run(sched: Any, rid: str, ids: list[int], n: int) -> dict[str, Any]:
    """The cold-run oracle: ``ids`` with prompt logprobs from position 0 (SGLang matches no cached
    prefix for such a request, so every position is computed in this run)."""
    from scheduler_testutil import submit

    submit(sched, rid, ids, n, return_logprob=True, logprob_start_len=0)
    out = drain_logprobs(sched)[rid]
    assert out["cached"] == 0 and len(out["in_lp"]) == len(ids), out["cached"]
    return out


# ----------------------------------------------------------------------------- prompt logprobs
def test_sglang_193_logprob_start_len_entries_are_those_of_a_full_run(sched: Any) -> None:
    """sgl-project/sglang#193 (with ``logprob_start_len > 0`` the prompt logprobs were those of
    the wrong positions: only ``input_ids[start + 1:]`` were scored and the list was shifted): with
    ``logprob_start_len = k`` the entries are for ``input_ids[k:]`` in order, the first (no logits
    were computed before it in this request's slice) is ``None`` as in SGLang, and every other one
    equals the full run's logprob of the same position; the generated tokens and their logprobs
    do not change."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import submit

    ids = random_ids(48, seed=193)
    full = full_run(sched, "lsl-full", ids, 3)
    for k in (1, 17, 47):
        submit(sched, f"lsl-{k}", ids, 3, return_logprob=True, logprob_start_len=k)
    res = drain_logprobs(sched)
    for k in (1, 17, 47):
        got = res[f"lsl-{k}"]
        assert got["in_ids"] == ids[k:], k
        assert got["in_lp"][0] is None, k
        assert got["in_lp"][1:] == pytest.approx(full["in_lp"][k + 1 :], abs=1e-4), k
        assert got["ids"] == full["ids"], k
        assert got["lp"] == pytest.approx(full["lp"], abs=1e-4), k


def test_strands_sglang_34_logprob_start_len_past_a_cached_prefix_reuses_it(sched: Any) -> None:
    """strands-rl/strands-sglang#34 (an agent loop asks for prompt logprobs from the end of the
    previous turn, ``logprob_start_len = N``, so that the radix cache still serves the earlier
    turns; the entry at ``N`` is ``None``, the rest must be right): after a first turn of 300
    tokens, a second turn that extends it with ``logprob_start_len = 300`` reuses the cached
    256-token page (``cached_tokens == 256``), its entries are for ``input_ids[300:]`` with the
    first ``None``, and each later one equals a cold full run of the whole second turn."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import submit

    turn1 = random_ids(300, seed=34)
    turn2 = turn1 + random_ids(40, seed=35)
    submit(sched, "agent-turn1", turn1, 2)
    assert drain_logprobs(sched)["agent-turn1"]["cached"] == 0
    submit(sched, "agent-turn2", turn2, 3, return_logprob=True, logprob_start_len=len(turn1))
    got = drain_logprobs(sched)["agent-turn2"]
    assert got["cached"] == PAGE
    assert got["in_ids"] == turn2[len(turn1) :]
    assert got["in_lp"][0] is None and None not in got["in_lp"][1:]
    full = full_run(sched, "agent-turn2-cold", turn2, 3)
    assert got["in_lp"][1:] == pytest.approx(full["in_lp"][len(turn1) + 1 :], abs=1e-4)
    assert got["ids"] == full["ids"]
    assert got["lp"] == pytest.approx(full["lp"], abs=1e-4)
    assert sched.flush_cache()


@pytest.mark.parametrize("streamed", [False, True])
def test_sglang_3157_2403_prompt_logprobs_survive_chunked_prefill(
    chunked_sched: Any, chunk_case: Any, streamed: bool
) -> None:
    """sgl-project/sglang#3157 (input logprobs with chunked prefill: a prompt prefilled in several
    chunks must return the same prompt logprobs as one prefill) and sgl-project/sglang#2403
    (logprob streaming + chunked prefill sent wrong pieces): a 600-token prompt prefilled in
    256-token chunks, with prompt logprobs from position 100, top-3 candidates and
    ``token_ids_logprob``, streamed or not, returns one entry per position ``100..599`` (each
    list once, in order, across the messages) equal to the same request on a scheduler that
    prefills it whole; the generated tokens and their logprobs are the same."""
    from scheduler_testutil import submit

    ids, kw, want = chunk_case
    submit(chunked_sched, "chunked", ids, 3, stream=streamed, **kw)
    got = drain_logprobs(chunked_sched)["chunked"]
    assert chunked_sched.flush_cache()
    assert got["in_ids"] == want["in_ids"] == ids[100:]
    assert got["in_lp"][0] is None and want["in_lp"][0] is None
    assert got["in_lp"][1:] == pytest.approx(want["in_lp"][1:], abs=1e-4)
    for key in ("input_top_logprobs_val", "input_token_ids_logprobs_val"):
        assert len(got[key]) == len(want[key]) == 500, key
        assert got[key][0] is None and want[key][0] is None, key
        flat_got = [v for pos in got[key][1:] for v in pos]
        flat_want = [v for pos in want[key][1:] for v in pos]
        assert [len(pos) for pos in got[key][1:]] == [len(pos) for pos in want[key][1:]], key
        assert flat_got == pytest.approx(flat_want, abs=1e-4), key
    assert got["input_top_logprobs_idx"][1:] == want["input_top_logprobs_idx"][1:]
    assert got["ids"] == want["ids"]
    assert got["lp"] == pytest.approx(want["lp"], abs=1e-4)


def test_maxtext_2103_prompt_logprob_of_a_token_is_its_next_token_logprob_given_the_prefix(
    sched: Any,
) -> None:
    """AI-Hypercomputer/maxtext#2103 (prompt logprobs were scored with the same position's logits,
    ``log P(t_i | t_0..t_i)``, instead of the previous position's; the first token's must be null):
    the prompt logprob of position ``i`` equals what a separate request on the prefix ``ids[:i]``
    reports for the id ``ids[i]`` at its first generated position (``token_ids_logprob``, scored
    by the decode path), for positions at the start, middle and end of the prompt; position 0 is
    ``None``."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import submit

    ids = random_ids(40, seed=2103)
    full = full_run(sched, "shift-full", ids, 1)
    assert full["in_lp"][0] is None
    positions = (1, 2, 20, 39)
    for i in positions:
        submit(sched, f"shift-{i}", ids[:i], 1, return_logprob=True, token_ids_logprob=[ids[i]])
    res = drain_logprobs(sched)
    for i in positions:
        scored = res[f"shift-{i}"]["output_token_ids_logprobs_val"]
        assert len(scored) == 1 and len(scored[0]) == 1, i
        assert full["in_lp"][i] == pytest.approx(scored[0][0], abs=1e-4), i


def test_llama_cpp_python_453_token_logprobs_agree_with_top_logprobs(sched: Any) -> None:
    """abetlen/llama-cpp-python#453 (token logprobs were read at the wrong index after sorting,
    so they disagreed with the same position's top logprobs): greedy output tokens are each
    position's top-1 candidate with the same logprob and equal their ``token_ids_logprob`` value;
    and with the whole vocabulary as top-k (``top_logprobs_num = 1000``), every prompt token's
    logprob is its own entry in that position's candidates, which are sorted, in descending
    order, and sum to probability 1."""
    import math

    from dsv4_testutil import random_ids
    from scheduler_testutil import submit

    vocab = 1000  # dsv4_testutil.random_ids draws ids below this: the tiny model's vocabulary
    ids = random_ids(24, seed=453)
    submit(sched, "top-out", ids, 4, return_logprob=True, top_logprobs_num=3)
    out = drain_logprobs(sched)["top-out"]
    submit(sched, "tid-out", ids, 4, return_logprob=True, token_ids_logprob=out["ids"])
    tid = drain_logprobs(sched)["tid-out"]
    assert tid["ids"] == out["ids"]
    for j, (tok_id, lp) in enumerate(zip(out["ids"], out["lp"], strict=True)):
        assert out["output_top_logprobs_idx"][j][0] == tok_id, j
        assert out["output_top_logprobs_val"][j][0] == pytest.approx(lp, abs=1e-5), j
        assert tid["output_token_ids_logprobs_val"][j][j] == pytest.approx(lp, abs=1e-4), j

    submit(sched, "top-in", ids, 1, return_logprob=True, logprob_start_len=0, top_logprobs_num=vocab)
    got = drain_logprobs(sched)["top-in"]
    tops = got["input_top_logprobs_val"]
    assert len(tops) == len(ids)
    for pos in range(1, len(ids)):
        vals = tops[pos]
        assert len(vals) == vocab and vals == sorted(vals, reverse=True), pos
        assert math.fsum(math.exp(v) for v in vals) == pytest.approx(1.0, abs=1e-3), pos
        rank = got["input_top_logprobs_idx"][pos].index(ids[pos])
        assert vals[rank] == pytest.approx(got["in_lp"][pos], abs=1e-5), pos


# ----------------------------------------------------------------------------- meta_info counts
@pytest.mark.parametrize("max_new_tokens", [1, 5])
def test_lmstudio_2335_completion_tokens_count_every_token_at_the_length_limit(
    sched: Any, server: Any, tok: Any, max_new_tokens: int
) -> None:
    """lmstudio-ai/lmstudio-bug-tracker#2335 (a generation stopped by the token limit reported
    one completion token fewer than it generated, ``max_tokens: 1`` giving 0): a request stopped
    by ``max_new_tokens`` reports ``completion_tokens == max_new_tokens == len(output_ids)`` with
    SGLang's ``{"type": "length", "length": max_new_tokens}``, on the real scheduler and through
    ``/generate`` (where the output is ``FAKE_TEXT``'s first tokens, re-encoded by HF)."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import submit

    submit(sched, "len-limit", random_ids(9, seed=2335), max_new_tokens)
    got = drain_logprobs(sched)["len-limit"]
    assert len(got["ids"]) == got["completion"] == max_new_tokens
    assert got["finish"] == {"type": "length", "length": max_new_tokens}

    out = gen(server, {"text": "Count", "sampling_params": {"max_new_tokens": max_new_tokens}})
    assert out["output_ids"] == fake_output_ids(tok, max_new_tokens)
    assert out["meta_info"]["completion_tokens"] == max_new_tokens
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": max_new_tokens}


# ----------------------------------------------------------------------------- streaming
def test_sglang_130_streamed_logprobs_grow_like_the_text(server: Any, tok: Any) -> None:
    """sgl-project/sglang#130 (a stream's token logprobs must behave as its text: cumulative and
    monotonic, each chunk extending the one before): in the default (cumulative) stream each
    chunk's ``output_token_logprobs`` / ``output_top_logprobs`` lists are prefixes of the next
    chunk's, one entry per ``output_ids`` entry with the same token ids, and the last chunk equals
    the unstreamed answer's lists."""
    body = {
        "text": "Say",
        "sampling_params": {"max_new_tokens": 6},
        "return_logprob": True,
        "top_logprobs_num": 2,
        "return_text_in_logprobs": True,
    }
    chunks = stream(server, body)
    assert len(chunks) >= 2
    prev: dict[str, list[Any]] = {"output_token_logprobs": [], "output_top_logprobs": []}
    for c in chunks:
        meta = c["meta_info"]
        assert [e[1] for e in meta["output_token_logprobs"]] == c["output_ids"]
        assert len(meta["output_top_logprobs"]) == len(c["output_ids"])
        for key, seen in prev.items():
            assert meta[key][: len(seen)] == seen, key
            prev[key] = meta[key]
    want = gen(server, body)["meta_info"]
    assert prev["output_token_logprobs"] == want["output_token_logprobs"]
    assert prev["output_top_logprobs"] == want["output_top_logprobs"]
    assert [e[2] for e in want["output_token_logprobs"]] == [tok.decode([i]) for i in fake_output_ids(tok, 6)]


def test_sglang_21583_incremental_slices_keep_logprobs_aligned_with_ids(server: Any) -> None:
    """sgl-project/sglang#21583 (with ``--incremental-streaming-output`` ``output_ids`` were sliced
    per chunk but the output logprob lists stayed cumulative): the slicer the Engine and the HTTP
    stream use turns a cumulative stream (output ids, token / top / ``token_ids_logprob`` lists)
    into chunks whose output-side lists have one entry per new id, for those ids; their
    concatenation is the last cumulative chunk's, and the prompt-side lists are kept whole."""
    from sglang_v4.entrypoints.incremental_stream import OUTPUT_SIDE_META_KEYS, IncrementalStreamSlicer

    body = {
        "text": "Go on",
        "sampling_params": {"max_new_tokens": 5},
        "return_logprob": True,
        "top_logprobs_num": 1,
        "token_ids_logprob": [7, 9],
        "logprob_start_len": 0,
    }
    cumulative = stream(server, body)
    slicer = IncrementalStreamSlicer()
    joined: dict[str, list[Any]] = {key: [] for key in (*OUTPUT_SIDE_META_KEYS, "output_ids")}
    for c in cumulative:
        part = slicer.slice(c)
        meta = part["meta_info"]
        for key in OUTPUT_SIDE_META_KEYS:
            assert len(meta[key]) == len(part["output_ids"]), key
            joined[key] += meta[key]
        assert [e[1] for e in meta["output_token_logprobs"]] == part["output_ids"]
        assert meta["input_token_logprobs"] == c["meta_info"]["input_token_logprobs"]
        joined["output_ids"] += part["output_ids"]
    last = cumulative[-1]
    assert joined["output_ids"] == last["output_ids"]
    for key in OUTPUT_SIDE_META_KEYS:
        assert joined[key] == last["meta_info"][key], key


# ----------------------------------------------------------------------------- aborts
def test_sglang_34488_aborted_stream_ends_with_every_generated_token(server: Any, tok: Any) -> None:
    """sgl-project/sglang#34488 (the chunk that ends an aborted stream carried only the last
    token in ``output_ids``, so a client taking the final chunk lost what had been generated):
    a held stream aborted by ``rid`` ends with SGLang's abort ``finish_reason`` and a last chunk
    whose ``output_ids`` are every token generated (``completion_tokens`` of them, the fake
    model's first tokens), text the HF decoding of those ids, then ``[DONE]``."""
    rid = "r21-abort-stream"
    t, box = in_background(stream, server, {"text": f"{HOLD} go", "rid": rid, "sampling_params": {}})
    wait_running_reqs(server, 1)
    assert post(server, "/abort_request", {"rid": rid}).status_code == 200
    t.join(30)
    assert not t.is_alive()
    last = box["out"][-1]
    meta = last["meta_info"]
    assert meta["id"] == rid and meta["finish_reason"]["type"] == "abort"
    n = meta["completion_tokens"]
    assert n >= 1
    assert last["output_ids"] == fake_output_ids(tok, n)
    assert last["text"] == fake_output_text(tok, n)


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("extra", "entry"),
    [
        ({"return_logprob": True, "token_ids_logprob": [5, -1]}, None),
        ({"return_logprob": True, "token_ids_logprob": [10**9]}, None),
        ({"return_logprob": False, "token_ids_logprob": ["vocab"]}, None),
        ({"return_logprob": True, "token_ids_logprob": [[3], ["vocab"]]}, "text[1]"),
    ],
)
def test_sglang_28088_out_of_vocabulary_token_ids_logprob_is_a_400(
    server: Any, shared_fake_model_dir: Path, tok: Any, extra: dict[str, Any], entry: str | None
) -> None:
    """sgl-project/sglang#28088 (an id ``>= vocab_size`` in ``token_ids_logprob`` crashed the
    engine on the GPU gather, a negative one scored the wrong token; validated even with
    ``return_logprob`` off): such an id, the model's vocabulary size itself included (the
    ``"vocab"`` placeholder, read from the model's ``config.json``), is a 400 in SGLang's error
    shape naming the field (and the batch entry), and the server serves the next request."""
    vocab = json.loads((shared_fake_model_dir / "config.json").read_text())["vocab_size"]

    def fill(v: Any) -> Any:
        return [fill(x) for x in v] if isinstance(v, list) else (vocab if v == "vocab" else v)

    prompt: Any = ["a", "b"] if entry else "a"
    body = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": 1},
        **{k: fill(v) for k, v in extra.items()},
    }
    r = post(server, "/generate", body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and err["type"] == "BadRequestError"
    assert "token_ids_logprob" in err["message"]
    if entry:
        assert entry in err["message"]
    ok = gen(server, {"text": "a", "sampling_params": {"max_new_tokens": 2}})
    assert ok["text"] == fake_output_text(tok, 2)


def test_sglang_28088_last_vocabulary_id_is_scored(server: Any, shared_fake_model_dir: Path) -> None:
    """sgl-project/sglang#28088, the edge: ``vocab_size - 1`` (read from the model's
    ``config.json``) is a valid id; a request scoring it answers one entry per output token for
    exactly that id."""
    vocab = json.loads((shared_fake_model_dir / "config.json").read_text())["vocab_size"]
    out = gen(
        server,
        {
            "text": "a",
            "sampling_params": {"max_new_tokens": 2},
            "return_logprob": True,
            "token_ids_logprob": [vocab - 1],
        },
    )
    per_token = out["meta_info"]["output_token_ids_logprobs"]
    assert len(per_token) == 2
    assert [[e[1] for e in pos] for pos in per_token] == [[vocab - 1], [vocab - 1]]
