"""The thirty-second set of public bug reports on stateful conversations and prefix-cache
namespaces: SGLang's session API (``open_session`` / ``session_params``) is not served here, so a
multi-turn conversation continues by resending its history, which the radix prefix cache reuses.
These replay the session reports on that path: a turn continuing the last one (its output
included) hits the blocks the last turn cached, a turn branching from an earlier point (a
rewind) hits only the shared blocks and keeps both branches, a prefill-only turn warms the cache
for the next, a turn aborted while decoding or while still queued leaves the conversation
servable and nothing leaked; and the tenant namespaces (``extra_key`` / ``cache_salt``): the
in-batch prefix sharing index is scoped by namespace as the tree is, and the Anthropic Messages
route carries ``cache_salt`` / ``extra_key`` to the namespace as the chat route does.

Fixture: an in-process scheduler over conftest's ``sched_model_dir`` checkpoint (CPU, float32,
256-token pages, greedy), sixteen block pages, 1024-token prefill chunks, no overlap.

Oracles: a cold run of the same prompt alone on a flushed cache (every cached run's tokens equal
it), hits derived by hand (``floor((len - 1) / 256) * 256`` over the blocks really cached), the
allocators' own counts after a flush, vLLM's documented ``cache_salt`` rule (a salt reaches the
request's namespace; an empty salt is a 400 naming it) and the chat route's namespace for the
same fields.
"""

from __future__ import annotations

from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import (
    PAGE,
    assert_idle,
    cold_output_ids,
    collect_outputs,
    drain,
    make_scheduler,
    run_one,
    submit,
)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """Sixteen block pages (4096 tokens), 1024-token prefill chunks, no overlap."""
    return make_scheduler(
        sched_model_dir,
        max_total_tokens=16 * PAGE,
        chunked_prefill_size=4 * PAGE,
        disable_overlap_schedule=True,
    )


def _hit(n: int) -> int:
    """The hit of an ``n``-token prompt whose blocks are all cached: whole blocks, at least one
    token computed."""
    return (n - 1) // PAGE * PAGE


def _computed_blocks(prompt_len: int, n_out: int) -> int:
    """The tokens in whole blocks whose KV a finished request computed: its prompt and every
    output token but the last (sampled, never run through the model)."""
    return (prompt_len + n_out - 1) // PAGE * PAGE


def test_sglang_22684_next_turn_hits_the_blocks_holding_the_last_output(sched: Any) -> None:
    """sgl-project/sglang#22684 (a session's next turn recovered the wrong length of the previous
    turn's KV: the frontier token was dropped and reuse misaligned). Turn 1: a 250-token prompt
    and 8 outputs (257 tokens computed), whose first block ends with 6 of its outputs; turn 2
    (turn 1 + outputs + 250 new tokens, 508) hits that block (256); turn 3 (turn 2 + its 8
    outputs + 20, 536) hits the two blocks turn 2 computed (512) and returns its cold tokens."""
    p1 = random_ids(250, seed=22684)
    assert sched.flush_cache()
    o1 = run_one(sched, "t1", p1, 8)["ids"]
    p2 = p1 + o1 + random_ids(250, seed=22685)
    r2 = run_one(sched, "t2", p2, 8)
    p3 = p2 + r2["ids"] + random_ids(20, seed=22686)
    r3 = run_one(sched, "t3", p3, 3)
    assert r2["cached"] == min(_hit(len(p2)), _computed_blocks(len(p1), 8)) == PAGE
    assert r3["cached"] == min(_hit(len(p3)), _computed_blocks(len(p2), 8)) == 2 * PAGE
    assert r3["ids"] == cold_output_ids(sched, "c3", p3, 3)
    assert_idle(sched)


def test_sglang_22393_a_rewound_turn_hits_the_shared_blocks_and_keeps_both_branches(sched: Any) -> None:
    """sgl-project/sglang#22393 (rewinding a conversation to an earlier turn, as a chatbot's
    "regenerate" does, must reuse only the KV before the branch point). Turn 1 (260 tokens) and
    turn 2 (turn 1 + 260) are cached; a regenerated turn 2 with another 20-token message hits
    only turn 1's whole block (256) and returns its cold tokens; afterwards the original turn 2
    still hits its two blocks (512): the branch evicted nothing."""
    p1 = random_ids(PAGE + 4, seed=22393)
    p2 = p1 + random_ids(PAGE + 4, seed=22394)
    alt = p1 + random_ids(20, seed=22395)
    cold_alt = cold_output_ids(sched, "calt", alt, 3)
    run_one(sched, "t1", p1, 1)
    run_one(sched, "t2", p2, 1)
    got = run_one(sched, "alt", alt, 3)
    assert got["cached"] == PAGE and got["ids"] == cold_alt
    assert run_one(sched, "t2b", p2, 1)["cached"] == 2 * PAGE == _hit(len(p2))
    assert_idle(sched)


def test_sglang_7817_a_prefill_only_turn_warms_the_cache_for_the_next(sched: Any) -> None:
    """sgl-project/sglang#7817 (a prefill with ``max_tokens=0`` followed by generation on the same
    prefix computed the prompt again instead of reusing its KV). A 520-token prompt run with 0
    new tokens caches its two whole blocks; the prompt plus 10 tokens then hits 512 and returns
    its cold run's tokens."""
    p = random_ids(2 * PAGE + 8, seed=7817)
    follow = p + random_ids(10, seed=7818)
    cold = cold_output_ids(sched, "cold", follow, 3)
    warm = run_one(sched, "warm", p, 0)
    assert warm["ids"] == [] and warm["finish"]["type"] == "length"
    got = run_one(sched, "next", follow, 3)
    assert got["cached"] == 2 * PAGE == _hit(len(follow))
    assert got["ids"] == cold
    assert_idle(sched)


def test_sglang_36475_a_turn_aborted_mid_decode_leaves_the_next_turn_whole(sched: Any) -> None:
    """sgl-project/sglang#36475 (a client disconnecting during a session turn dropped the
    session's context: the next turn saw 1 prompt token, and the pools leaked). Turn 1 (260
    tokens) is cached; turn 2 (turn 1 + 20) is aborted after its first output token; turn 3
    (turn 2 + 10) is then served with its whole prompt (``prompt_tokens`` 290), hits turn 1's
    block (256) and returns its cold run's tokens, and a flush frees every page."""
    p1 = random_ids(PAGE + 4, seed=36475)
    p2 = p1 + random_ids(20, seed=36476)
    p3 = p2 + random_ids(10, seed=36477)
    cold3 = cold_output_ids(sched, "c3", p3, 3)
    run_one(sched, "t1", p1, 1)
    submit(sched, "t2", p2, 50)
    res: dict[str, dict] = {}
    while not res.get("t2", {}).get("ids"):
        collect_outputs(sched.step(), res)
    sched.abort_request("t2")
    drain(sched, res)
    assert res["t2"]["finish"]["type"] == "abort"
    submit(sched, "t3", p3, 3)
    prompt_tokens = -1
    while sched.has_work():
        out = sched.step()
        collect_outputs(out, res)
        for i, r in enumerate(out.rids if out else []):
            if r == "t3":
                prompt_tokens = out.prompt_tokens[i]
    assert prompt_tokens == len(p3) == 290
    assert res["t3"]["cached"] == PAGE and res["t3"]["ids"] == cold3
    assert_idle(sched)


def test_sglang_31765_a_turn_aborted_while_queued_does_not_block_later_turns(sched: Any) -> None:
    """sgl-project/sglang#31765 (a session turn aborted while still queued left the session
    marked in flight, so every later turn was refused). Turn 1 (300 tokens) is cached; turn 2
    is aborted while still in the waiting queue (no output, SGLang's finish ``abort``); turn 2 sent
    again is served with turn 1's block hit (256) and its cold run's tokens, and nothing leaks."""
    p1 = random_ids(300, seed=31765)
    p2 = p1 + random_ids(100, seed=31766)
    cold2 = cold_output_ids(sched, "c2", p2, 4)
    run_one(sched, "t1", p1, 1)
    submit(sched, "t2", p2, 4)
    assert any(r.rid == "t2" for r in sched.waiting)  # queued, not run yet
    res: dict[str, dict] = {}
    sched.abort_request("t2")
    drain(sched, res)
    assert res["t2"]["finish"]["type"] == "abort" and res["t2"]["ids"] == []
    again = run_one(sched, "t2b", p2, 4)
    assert again["cached"] == PAGE and again["ids"] == cold2
    assert_idle(sched)


def test_sglang_37058_26747_in_batch_sharing_is_scoped_by_namespace(sched: Any) -> None:
    """sgl-project/sglang#37058 and sgl-project/sglang#26747 (a prefix index outside the radix
    tree was keyed by token ids only, so a salted tenant still shared another tenant's pages).
    The in-batch prefix sharing index is such an index: a 520-token prompt of tenant ``a`` and
    the same prompt of tenant ``b`` submitted together are both admitted in the first step
    (``b`` is not held for ``a``'s blocks) and both hit 0; the same prompt twice in one tenant
    holds the second, which then hits ``a``'s two blocks (512). Every run returns the cold
    tokens."""
    p = random_ids(2 * PAGE + 8, seed=37058)
    cold = cold_output_ids(sched, "cold", p, 3)
    submit(sched, "a", p, 3, extra_key="tenant-a")
    submit(sched, "b", p, 3, extra_key="tenant-b")
    res: dict[str, dict] = {}
    collect_outputs(sched.step(), res)
    assert not any(r.rid in ("a", "b") for r in sched.waiting)  # neither waits for the other
    drain(sched, res)
    assert (res["a"]["cached"], res["b"]["cached"]) == (0, 0)
    assert res["a"]["ids"] == res["b"]["ids"] == cold
    assert sched.flush_cache()
    submit(sched, "a1", p, 3, extra_key="tenant-a")
    submit(sched, "a2", p, 3, extra_key="tenant-a")
    res = {}
    collect_outputs(sched.step(), res)
    assert any(r.rid == "a2" for r in sched.waiting)  # held for a1's blocks
    drain(sched, res)
    assert (res["a1"]["cached"], res["a2"]["cached"]) == (0, _hit(len(p))) == (0, 2 * PAGE)
    assert res["a1"]["ids"] == res["a2"]["ids"] == cold
    assert_idle(sched)


def test_sglang_37160_block_hashes_of_two_namespaces_share_no_entry() -> None:
    """sgl-project/sglang#37160 (external storage keys were token-only, so two tenants with the
    same prompt produced identical keys). The chained block hashes of one prompt under two
    namespaces share no entry, under one namespace they are equal, and ``None`` / ``""`` (no
    namespace) are one shared namespace."""
    from sglang_v4.managers.prefix_sharing import prompt_block_hashes

    ids = random_ids(3 * PAGE + 5, seed=37160)
    a, b = prompt_block_hashes(ids, PAGE, "tenant-a"), prompt_block_hashes(ids, PAGE, "tenant-b")
    assert len(a) == len(b) == 3
    assert not set(a) & set(b)
    assert a == prompt_block_hashes(ids, PAGE, "tenant-a")
    shared = prompt_block_hashes(ids, PAGE)
    assert shared == prompt_block_hashes(ids, PAGE, "") and not set(shared) & set(a)


def _messages(**extra: Any) -> Any:
    """A ``/v1/messages`` request (one user message) with ``extra`` fields."""
    from sglang_v4.entrypoints.anthropic.protocol import MessagesRequest

    return MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}], **extra}
    )


def _messages_namespace(**extra: Any) -> str | None:
    """The prefix-cache namespace a ``/v1/messages`` request runs under (through its chat request)."""
    from sglang_v4.entrypoints.anthropic.messages_input import chat_request_data
    from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang_v4.entrypoints.openai.vllm_fields import cache_namespace

    return cache_namespace(ChatCompletionRequest.model_validate(chat_request_data(_messages(**extra))))


def _chat_namespace(**extra: Any) -> str | None:
    """The prefix-cache namespace of the same conversation sent to ``/v1/chat/completions``."""
    from sglang_v4.entrypoints.openai.protocol import ChatCompletionRequest
    from sglang_v4.entrypoints.openai.vllm_fields import cache_namespace

    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}], **extra}
    return cache_namespace(ChatCompletionRequest.model_validate(body))


def test_vllm_49498_messages_route_carries_cache_salt_to_the_namespace() -> None:
    """vllm-project/vllm#49498 (the Anthropic Messages API had no ``cache_salt``, so clients on
    that schema got no prefix-cache isolation). ``cache_salt`` and ``extra_key`` on
    ``/v1/messages`` give the namespace the chat route gives the same fields (two salts two
    namespaces; none the shared one), and an empty ``cache_salt`` is a 400 naming it, as vLLM
    answers on every route."""
    from sglang_v4.entrypoints.anthropic.messages_input import chat_request_data
    from sglang_v4.entrypoints.openai.request_errors import RequestError

    a, b = _messages_namespace(cache_salt="tenant-a"), _messages_namespace(cache_salt="tenant-b")
    assert a == _chat_namespace(cache_salt="tenant-a") is not None
    assert b == _chat_namespace(cache_salt="tenant-b") and a != b
    pair = _messages_namespace(cache_salt="s", extra_key="k")
    assert pair == _chat_namespace(cache_salt="s", extra_key="k") not in (a, b, None)
    assert _messages_namespace(extra_key="k") == _chat_namespace(extra_key="k") == "k"
    assert _messages_namespace() is None is _chat_namespace()
    with pytest.raises(RequestError) as err:
        chat_request_data(_messages(cache_salt=""))
    assert err.value.param == "cache_salt"
