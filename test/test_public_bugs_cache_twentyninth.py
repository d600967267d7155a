"""The twenty-ninth set of public bug reports on the radix prefix cache: prefix-cache namespaces
built from vLLM's ``cache_salt`` and SGLang's ``extra_key`` (no two different pairs may alias one
namespace), hits at block boundaries only, and ``cached_tokens`` against the blocks a request
really reused.

Two levels:

* The request parsers of ``/generate`` (:func:`~sglang_v4.entrypoints.native_api.parse_generate_body`)
  and of the OpenAI routes (:func:`~sglang_v4.entrypoints.openai.vllm_fields.cache_namespace` on
  the parsed ``CompletionRequest``), whose namespace is then run through the in-process scheduler
  on conftest's ``sched_model_dir`` checkpoint (CPU, float32, 256-token pages, greedy).
* :class:`~sglang_v4.mem_cache.radix_cache.RadixCache` alone on small blocks.

Oracles: the isolation rule the reports state (a namespace hits only blocks its own requests
cached; the same namespace hits them), hits derived by hand (``floor((len - 1) / 256) * 256``),
and a cold run of the same prompt (every run's tokens equal it).

Fault found here and fixed: the namespace of a request carrying both ``cache_salt`` and
``extra_key`` was the two strings concatenated, so ``("ab", "c")``, ``("a", "bc")`` and an
``extra_key`` of ``"abc"`` alone were one namespace and hit each other's cached prompts (one
tenant reading another's KV). Both routes now join the pair as a tagged tuple
(:func:`~sglang_v4.managers.prefix_sharing.join_cache_namespace`).
"""

from __future__ import annotations

from typing import Any

import pytest
from dsv4_testutil import random_ids
from scheduler_testutil import PAGE, assert_idle, drain, make_scheduler, radix_tree, submit
from sglang_v4.entrypoints.native_api import parse_generate_body
from sglang_v4.entrypoints.openai.protocol_completions import CompletionRequest
from sglang_v4.entrypoints.openai.vllm_fields import cache_namespace
from sglang_v4.mem_cache.radix_cache import RadixKey

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """Eight block pages (2048 tokens), no overlap."""
    return make_scheduler(sched_model_dir, max_total_tokens=8 * PAGE, disable_overlap_schedule=True)


def _native_key(body: dict[str, Any]) -> Any:
    return parse_generate_body({"input_ids": [1, 2, 3], **body}).extra_key


def _openai_key(body: dict[str, Any]) -> Any:
    return cache_namespace(CompletionRequest(model="m", prompt="x", **body))


PAIRS = [
    {"cache_salt": "ab", "extra_key": "c"},
    {"cache_salt": "a", "extra_key": "bc"},
    {"extra_key": "abc"},
    {"cache_salt": "abc"},
]


@pytest.mark.parametrize("route_key", [_native_key, _openai_key], ids=["generate", "openai"])
def test_sglang_24638_salt_and_extra_key_pairs_do_not_alias(route_key: Any) -> None:
    """sgl-project/sglang#24638 and its fix sgl-project/sglang#25351 (namespaces composed by
    raw string concatenation let a crafted ``extra_key`` alias another namespace; the pair
    ``cache_salt`` / ``extra_key`` must be joined so that boundaries matter), and
    vllm-project/vllm#44701 (two namespace sources in one untagged key collide). On both the
    native and the OpenAI routes ``("ab", "c")``, ``("a", "bc")`` and ``"abc"`` are three
    namespaces; a single key is one namespace whichever field carries it (SGLang keeps that),
    and the same pair is always the same namespace."""
    keys = [route_key(b) for b in PAIRS]
    assert len({keys[0], keys[1], keys[2]}) == 3, keys
    assert keys[2] == keys[3]
    assert route_key(PAIRS[0]) == keys[0] and route_key({}) is None
    # a single key that looks like a composed one names no pair
    assert route_key({"extra_key": keys[0]}) != keys[0]


def test_sglang_25214_aliased_pair_gets_no_hit_through_the_scheduler(sched: Any) -> None:
    """sgl-project/sglang#25214 (the reported effect: a request whose concatenated namespace
    equals another tenant's got a prefix-cache hit on that tenant's blocks). A 300-token prompt
    under ``cache_salt="ab", extra_key="c"`` (the ``/generate`` parser's namespace) is cold;
    ``("a", "bc")`` and ``extra_key="abc"`` then get 0 cached tokens; the first pair again gets
    ``floor(299 / 256) * 256 = 256``; every run's tokens equal the cold one's."""
    prompt = random_ids(300, seed=24638)
    assert sched.flush_cache()
    got = {}
    for i, body in enumerate([PAIRS[0], PAIRS[1], PAIRS[2], PAIRS[0]]):
        submit(sched, f"r{i}", prompt, 2, extra_key=_native_key(body))
        got[i] = drain(sched)[f"r{i}"]
    assert [got[i]["cached"] for i in range(4)] == [0, 0, 0, PAGE]
    assert got[0]["ids"] == got[1]["ids"] == got[2]["ids"] == got[3]["ids"]
    assert_idle(sched)


def test_ktransformers_2184_salt_reaches_the_radix_tree(sched: Any) -> None:
    """kvcache-ai/ktransformers#2184 (``cache_salt`` / ``extra_key`` computed on the way in but
    never delivered to the request, so tenant isolation was a no-op): five requests with the
    same prompt under five distinct namespaces (salt only, key only, two pairs, none) each get
    0 cached tokens; repeating the first gets 256."""
    prompt = random_ids(300, seed=2184)
    bodies = [
        {"cache_salt": "t1"},
        {"extra_key": "t2"},
        {"cache_salt": "t1", "extra_key": "t2"},
        {"cache_salt": "t2", "extra_key": "t1"},
        {},
        {"cache_salt": "t1"},
    ]
    assert sched.flush_cache()
    cached = []
    for i, body in enumerate(bodies):
        submit(sched, f"k{i}", prompt, 1, extra_key=_openai_key(body))
        cached.append(drain(sched)[f"k{i}"]["cached"])
    assert cached == [0, 0, 0, 0, 0, PAGE]
    assert_idle(sched)


def test_sglang_10317_extra_key_matches_only_its_own_tree_entries() -> None:
    """sgl-project/sglang#10317 (only tokens cached under the same ``extra_key`` may share a
    prefix). Tree level, 4-token blocks: a 2-block sequence cached under key ``"a"`` is hit in
    full (8 tokens) by key ``"a"``, not at all by key ``"b"`` or no key, and a partial block
    (a 6-token prompt) under ``"a"`` hits only the whole first block (4)."""
    c, ba, wa = radix_tree(4)
    ids = list(range(10, 18))
    blocks, wins = ba.alloc_or_raise(2), wa.alloc_or_raise(2)
    tb, tw = c.insert(RadixKey(ids, "a"), blocks, list(wins))
    assert list(tb) == list(blocks)
    assert c.match_prefix(RadixKey(ids + [0], "a")).num_tokens == 8
    assert c.match_prefix(RadixKey(ids + [0], "b")).num_tokens == 0
    assert c.match_prefix(ids + [0]).num_tokens == 0
    assert c.match_prefix(RadixKey(ids[:6], "a")).num_tokens == 4
