"""Public bug reports (round seventeen) of the offline Engine API, the scheduler, the radix prefix
cache and the sampling parameters, replayed against sglang-v4.

The Engine tests run the real processes on the model-free ``FakeScheduler`` (``server_fixture``):
the expected texts come from ``transformers.AutoTokenizer`` on the same tokenizer files
(``fake_output_text``), independent of the runtime's own tokenizer wrapper.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import pytest
from server_fixture import fake_output_text, hf_auto_tokenizer, hold_until_tag, start_fake_engine

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def hf_tok() -> Any:
    """``AutoTokenizer`` on the test tokenizer files (``server_fixture.hf_auto_tokenizer``)."""
    return hf_auto_tokenizer()


@pytest.fixture(scope="module")
def expected(hf_tok: Any) -> Any:
    """``n`` -> the text of the fake model's first ``n`` tokens, decoded by ``hf_tok``."""
    return lambda n: fake_output_text(hf_tok, n)


def _outcome(fn: Any) -> tuple[list[dict[str, Any]], str]:
    """``fn()``'s chunks (it appends to the list it is given) and how it ended: ``"ended"`` or
    ``"TypeName: message"``."""
    chunks: list[dict[str, Any]] = []
    try:
        fn(chunks)
        return chunks, "ended"
    except BaseException as e:  # noqa: BLE001 - the test inspects it
        return chunks, f"{type(e).__name__}: {e}"


def _engine_threads_since(before: set[threading.Thread]) -> list[str]:
    """Names of the engine threads (``sglang_v4-engine-*``) alive now that were not in ``before``:
    those of the engine under test, not of an engine another test module keeps open."""
    return [
        t.name for t in threading.enumerate() if t not in before and t.name.startswith("sglang_v4-engine")
    ]


def _shut_down_with_open_streams(model: Path, tmp: Path) -> dict[str, Any]:
    """A private Engine shut down while four streams are open (see :func:`shutdown_round`)."""
    before = set(threading.enumerate())  # other engines' threads (conftest's session Engine)
    eng = start_fake_engine(model)
    sp = {"max_new_tokens": 3}
    held = eng.generate(
        prompt=f"Hi {hold_until_tag(tmp / 'never')}", sampling_params={"max_new_tokens": 8}, stream=True
    )
    held_chunks = [next(held)]  # running, held after its first token, never released
    unread_release = tmp / "unread"
    unread = eng.generate(
        prompt=f"Hey {hold_until_tag(unread_release)}", sampling_params=sp, stream=True, rid="unread-rid"
    )
    unread_chunks = [next(unread)]
    unread_release.touch()
    deadline = time.time() + 30
    while eng.tokenizer_manager.rid_to_state.get("unread-rid") is not None and not (
        eng.tokenizer_manager.rid_to_state["unread-rid"].finished
    ):
        assert time.time() < deadline, "the released request never finished"
        time.sleep(0.01)
    sync_stream = eng.generate(prompt="one", sampling_params=sp, stream=True)

    async def read_async(chunks: list[dict[str, Any]]) -> None:
        stream = await eng.async_generate(prompt="two", sampling_params=sp, stream=True)
        async for c in stream:
            chunks.append(c)
            if c["meta_info"]["finish_reason"] is not None:
                # the other open streams are read after this shutdown
                eng.shutdown()

    def read_sync(chunks: list[dict[str, Any]]) -> None:
        for c in sync_stream:
            chunks.append(c)

    sync_first = next(sync_stream)
    # the sync stream to its final chunk, without asking past it
    sync_chunks = [sync_first]
    while sync_chunks[-1]["meta_info"]["finish_reason"] is None:
        sync_chunks.append(next(sync_stream))
    out: dict[str, Any] = {"async_done": _outcome(lambda ch: asyncio.run(read_async(ch)))}
    more, how = _outcome(read_sync)
    out["sync_done"] = (sync_chunks + more, how)
    more, how = _outcome(lambda ch: ch.extend(unread))
    out["unread"] = (unread_chunks + more, how)
    more, how = _outcome(lambda ch: ch.extend(held))
    out["held"] = (held_chunks + more, how)
    out["threads"] = _engine_threads_since(before)
    out["engine_ref"] = weakref.ref(eng)
    return out


@pytest.fixture(scope="module")
def shutdown_round(shared_fake_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One private Engine, shut down while four streams are open, then dropped; as plain data:

    ``async_done`` / ``sync_done``: an ``async_generate(stream=True)`` / ``generate(stream=True)``
    stream read to its final chunk, ``shutdown()`` called in the loop body; ``unread``: a stream
    whose request finished but whose last chunk was not read yet; ``held``: a stream whose
    request is still running at shutdown. Each: ``(chunks, outcome)`` (:func:`_outcome`).
    ``threads``: the engine's threads alive after ``shutdown()`` returned; ``resource_warnings``:
    the ``ResourceWarning`` messages of the round and of collecting the engine."""
    tmp = tmp_path_factory.mktemp("shutdown_round")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        out = _shut_down_with_open_streams(shared_fake_model_dir, tmp)
        engine_ref = out.pop("engine_ref")
        deadline = time.time() + 10  # a thread still running holds the engine until it ends
        gc.collect()
        while engine_ref() is not None and time.time() < deadline:
            time.sleep(0.05)
            gc.collect()
    out["engine_collected"] = engine_ref() is None
    out["resource_warnings"] = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    return out


def test_stream_finished_before_shutdown_ends_normally(shutdown_round, expected) -> None:
    """A stream whose request had finished before ``Engine.shutdown()`` ends normally after it,
    sync and async (the next step used to raise the shut-down ``RuntimeError``), and one whose last
    chunk was not read yet still hands it out; a request still running fails as before. Oracle:
    the final text is ``AutoTokenizer``'s decode of the fake model's tokens."""
    for name in ("async_done", "sync_done", "unread"):
        chunks, how = shutdown_round[name]
        assert how == "ended", (name, how)
        assert chunks[-1]["text"] == expected(3), name
        assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 3}, name
        assert [c for c in chunks if c["meta_info"]["finish_reason"] is not None] == chunks[-1:], name
    chunks, how = shutdown_round["held"]
    assert how.startswith("RuntimeError: ") and "shut down" in how, how


def test_shutdown_closes_event_loop_and_ends_threads(shutdown_round) -> None:
    """``Engine.shutdown()`` closes its private event loop and ends its threads: the loop was
    stopped but never closed (``ResourceWarning: unclosed event loop`` when collected, its
    selector and self-pipe sockets left open) and the watchdog thread outlived the call. The
    Python docs (asyncio, "Running and stopping the loop"): a loop must be closed with
    ``loop.close()`` once stopped."""
    assert shutdown_round["threads"] == []
    assert shutdown_round["engine_collected"]
    assert [m for m in shutdown_round["resource_warnings"] if "event loop" in m] == []


def test_engine_context_manager_in_a_running_loop_releases_everything(
    shared_fake_model_dir: Path, expected
) -> None:
    """sgl-project/sglang#4480 (``Engine`` made a context manager so that leaving the block
    releases what it holds): an Engine opened with ``with`` inside a running event loop serves
    blocking and awaited calls there, and leaving the block ends its child processes and its
    threads and closes its event loop (no ``ResourceWarning`` when it is collected)."""
    import psutil

    before = set(threading.enumerate())  # other engines' threads (conftest's session Engine)

    async def main() -> tuple[list[str], list[int], Any]:
        with start_fake_engine(shared_fake_model_dir) as eng:
            texts = [eng.generate(prompt="a", sampling_params={"max_new_tokens": 2})["text"]]
            texts.append(
                (await eng.async_generate(prompt="b", sampling_params={"max_new_tokens": 3}))["text"]
            )
            pids = eng.get_all_child_pids()
        return texts, pids, weakref.ref(eng)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        texts, pids, engine_ref = asyncio.run(main())
        assert texts == [expected(2), expected(3)]
        alive = [
            p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
        assert alive == []
        assert _engine_threads_since(before) == []
        deadline = time.time() + 10
        gc.collect()
        while engine_ref() is not None and time.time() < deadline:
            time.sleep(0.05)
            gc.collect()
    assert engine_ref() is None
    assert [str(w.message) for w in caught if "event loop" in str(w.message)] == []


@pytest.fixture(scope="module")
def engine(shared_fake_engine: Any) -> Any:
    """conftest's session ``Engine`` on ``FakeScheduler`` (``[hold]`` prompts run until aborted);
    every test here leaves no request running and the engine unpaused."""
    return shared_fake_engine


def test_engine_pause_and_continue_generation(engine, expected) -> None:
    """sgl-project/sglang#7419 (pause / continue generation for RL weight updates; SGLang's
    engine wrappers call ``engine.pause_generation()`` / ``engine.continue_generation()``): the
    Engine had neither method (``AttributeError``). ``pause_generation()`` (mode ``abort``)
    aborts the running request and returns once it has ended; a request made while paused waits
    and runs after ``continue_generation()``; a bad mode is a ``ValueError`` naming it, and
    changes nothing."""
    from server_fixture import in_background

    sp = {"max_new_tokens": 3}
    held_thread, held = in_background(
        lambda: engine.generate(prompt="[hold] running", sampling_params={"max_new_tokens": 50})
    )
    deadline = time.time() + 30
    while engine.tokenizer_manager.num_in_flight() == 0:
        assert time.time() < deadline, "the held request never started"
        time.sleep(0.01)
    engine.pause_generation()
    held_thread.join(30)
    assert held["out"]["meta_info"]["finish_reason"]["type"] == "abort"
    waiting_thread, waiting = in_background(lambda: engine.generate(prompt="later", sampling_params=sp))
    waiting_thread.join(0.5)
    assert waiting_thread.is_alive(), "a request made while paused ran"
    engine.continue_generation()
    waiting_thread.join(30)
    assert waiting["out"]["text"] == expected(3)
    with pytest.raises(ValueError, match="mode"):
        engine.pause_generation(mode="pause-please")
    assert engine.generate(prompt="after", sampling_params=sp)["text"] == expected(3)


def test_per_prompt_sampling_params_list_of_another_length_is_refused(engine, expected) -> None:
    """ml-explore/mlx-lm#1689 (a per-prompt option list shorter than the prompt list was zipped,
    silently dropping the trailing prompts; ``max_tokens=0`` crashed): a ``sampling_params`` list
    shorter or longer than the batch is a ``ValueError`` naming ``sampling_params`` (nothing
    generated), and ``max_new_tokens=0`` ends at once with an empty text and a ``length``
    finish of 0, streamed or not (SGLang's finish-reason shape)."""
    prompts = ["one", "two", "three"]
    for params in ([{"max_new_tokens": 2}] * 2, [{"max_new_tokens": 2}] * 4):
        with pytest.raises(ValueError, match="sampling_params"):
            engine.generate(prompt=prompts, sampling_params=params)
    outs = engine.generate(prompt=prompts, sampling_params=[{"max_new_tokens": n} for n in (1, 2, 3)])
    assert [o["text"] for o in outs] == [expected(1), expected(2), expected(3)]
    zero = {"max_new_tokens": 0}
    for out in (
        engine.generate(prompt="x", sampling_params=zero),
        [*engine.generate(prompt="x", sampling_params=zero, stream=True)][-1],
    ):
        assert out["text"] == "" and out["output_ids"] == []
        assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
        assert out["meta_info"]["completion_tokens"] == 0


def test_batch_with_one_overlong_prompt_is_refused_whole(engine, expected) -> None:
    """vllm-project/vllm#1655 (a batch holding one prompt longer than the model's limit returned
    more outputs than prompts, the long one doubled): the whole batch is a ``ValueError`` that
    gives the prompt's length and the context length (SGLang refuses the request as a whole), and
    the next batch gets exactly one output per prompt."""
    long_prompt = "word " * 600  # > the fake model's 512-token context
    with pytest.raises(ValueError, match="context length") as err:
        engine.generate(prompt=["short", long_prompt, "also short"], sampling_params={"max_new_tokens": 2})
    assert "512" in str(err.value)
    outs = engine.generate(prompt=["short", "also short"], sampling_params={"max_new_tokens": 2})
    assert [o["text"] for o in outs] == [expected(2)] * 2
    assert engine.tokenizer_manager.num_in_flight() == 0


def test_async_engine_serves_after_a_finished_stream(engine, expected) -> None:
    """vllm-project/vllm#11873 (after a first ``async for`` over the async engine's stream ended,
    the next call raised "Engine is gracefully shutting down"): streams read to their ends on
    two event loops one after the other, then a plain call, all answer the fake model's text."""

    async def stream_once() -> str:
        stream = await engine.async_generate(
            prompt="again", sampling_params={"max_new_tokens": 3}, stream=True
        )
        return [c async for c in stream][-1]["text"]

    assert asyncio.run(stream_once()) == expected(3)
    assert asyncio.run(stream_once()) == expected(3)
    assert asyncio.run(engine.async_generate(prompt="x", sampling_params={"max_new_tokens": 2}))[
        "text"
    ] == expected(2)


# ----------------------------------------------------------------------------- scheduler (in-process)


@pytest.fixture(scope="module")
def sched(sched_model_dir: str) -> Any:
    """One in-process CPU scheduler (``scheduler_testutil.make_scheduler``) for the batching
    tests below; each flushes its cache before a run (:func:`_run_together`)."""
    from scheduler_testutil import make_scheduler

    return make_scheduler(sched_model_dir)


def _run_together(
    s: Any, reqs: list[tuple[str, list[int], dict[str, Any]]], n: int = 8
) -> dict[str, list[int]]:
    """Greedy runs of ``reqs`` (``(rid, prompt ids, extra sampling params)``) submitted in this
    order before the first step (one batch), on a flushed cache; each rid's output ids."""
    from scheduler_testutil import drain, submit

    assert s.flush_cache()
    for rid, ids, sampling in reqs:
        submit(s, rid, ids, n, sampling=sampling)
    return {rid: r["ids"] for rid, r in drain(s).items()}


def test_seeded_sampling_survives_retraction(sched_model_dir: str, sched: Any) -> None:
    """vllm-project/vllm#19940 (a preempted sequence's seeded generator was re-created when it
    was prefilled again, so its sampled tokens after the preemption differed from an
    uninterrupted run): requests sampled at temperature 1 with ``sampling_seed``, retracted
    under KV pressure and resumed, give the tokens of the same requests run alone on a roomy
    pool (the cold oracle)."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import assert_idle, drain, make_scheduler, submit

    prompts = [random_ids(500, seed=70 + i) for i in range(3)]
    sampling = {"temperature": 1.0, "top_p": 0.95, "top_k": 50}
    roomy = sched
    assert roomy.flush_cache()
    alone: dict[str, Any] = {}
    for i, p in enumerate(prompts):
        submit(roomy, f"r{i}", p, 20, sampling={**sampling, "sampling_seed": 1000 + i})
        alone.update(drain(roomy))
    # five 256-token pages for three requests that each grow to three pages: some are retracted
    tight = make_scheduler(sched_model_dir, max_total_tokens=5 * 256)
    for i, p in enumerate(prompts):
        submit(tight, f"r{i}", p, 20, sampling={**sampling, "sampling_seed": 1000 + i})
    got = drain(tight)
    assert tight.num_retractions > 0
    assert {rid: got[rid]["ids"] for rid in alone} == {rid: r["ids"] for rid, r in alone.items()}
    assert_idle(tight)


def test_repetition_penalty_does_not_depend_on_batch_order(sched: Any) -> None:
    """vllm-project/vllm#5607 (fixed by vllm-project/vllm#5639: with one request carrying
    ``repetition_penalty=2`` and one carrying none in the same batch, the penalty tensors had
    the wrong shape when the plain request came first, so the penalised request's output
    depended on the order the two arrived in): both orders give each request its output run
    alone (the cold oracle), and the penalty does change the output of the same prompt."""
    from dsv4_testutil import random_ids

    base = random_ids(40, seed=17)
    # the prompt repeats the tokens greedy decoding continues it with: the penalty bites on them
    prompt = base + _run_together(sched, [("probe", base, {})])["probe"] * 3
    pen = {"repetition_penalty": 2.0}
    alone = {
        "pen": _run_together(sched, [("pen", prompt, pen)])["pen"],
        "plain": _run_together(sched, [("plain", prompt, {})])["plain"],
    }
    assert alone["pen"] != alone["plain"]
    assert _run_together(sched, [("pen", prompt, pen), ("plain", prompt, {})]) == alone
    assert _run_together(sched, [("plain", prompt, {}), ("pen", prompt, pen)]) == alone


def test_frequency_penalty_in_a_batch_of_unequal_prompts(sched: Any) -> None:
    """huggingface/text-generation-inference#1765 (in a batch of prompts of different lengths,
    the padding tokens were counted by the frequency and repetition penalties, so a penalised
    request's output changed when it was batched): a request with ``frequency_penalty`` and
    ``presence_penalty`` batched with a longer and a shorter plain prompt gives its output run
    alone, and so do they."""
    from dsv4_testutil import random_ids

    reqs = [
        ("pen", random_ids(40, seed=23), {"frequency_penalty": 1.05, "presence_penalty": 0.5}),
        ("long", random_ids(120, seed=22), {}),
        ("short", random_ids(5, seed=23), {}),
    ]
    alone = {rid: _run_together(sched, [(rid, ids, sp)])[rid] for rid, ids, sp in reqs}
    plain = _run_together(sched, [("pen", reqs[0][1], {})])["pen"]
    assert alone["pen"] != plain  # the penalties act on this prompt
    assert _run_together(sched, reqs) == alone
    assert _run_together(sched, reqs[::-1]) == alone


def test_shared_prefix_pages_are_counted_once_when_idle(sched: Any) -> None:
    """sgl-project/sglang#35270 (the radix cache's ``evictable_size()`` counted pages shared by
    several requests more than once, so at idle ``evictable > total`` and the scheduler's leak
    check killed the server): after requests sharing a two-page prefix (one of them with
    ``n``-style siblings of the same prompt) have finished, every page the pool has in use is
    one the tree owns, all of them are evictable, and evicting them all returns the pool to
    empty (counted by the page allocators, an independent record)."""
    from dsv4_testutil import random_ids
    from scheduler_testutil import drain, submit

    s = sched
    assert s.flush_cache()
    prefix = random_ids(2 * 256 + 10, seed=31)
    prompts = [prefix + random_ids(20, seed=32 + i) for i in range(3)]
    prompts.append(prompts[0])  # a sibling of the first prompt
    for i, ids in enumerate(prompts):
        submit(s, f"shared-{i}", ids, 4)
    out = drain(s)
    assert {rid: r["finish"]["type"] for rid, r in out.items()} == {f"shared-{i}": "length" for i in range(4)}
    tree = s.tree_cache
    blocks, windows = tree.total_pages()
    assert blocks >= 2  # the shared prefix's two full pages are cached, once
    assert tree.evictable_sizes() == (blocks, windows)
    assert s.pool.block_alloc.used == blocks and s.pool.window_alloc.used == windows
    assert tree.evict(blocks, windows) == (blocks, windows)
    assert s.pool.block_alloc.used == 0 and s.pool.window_alloc.used == 0
    assert tree.total_pages() == (0, 0)


# ----------------------------------------------------------------------------- stop strings


@pytest.mark.parametrize(
    ("text", "stop"),
    [
        ("Hello 🦜🦜 world and more", "🦜🦜"),  # emojis: several byte-level tokens each
        ("ab 𝔘𝔫𝔦 cd", "𝔫𝔦"),  # 4-byte characters split across tokens
        ("x 你好世界 y", "好世"),  # a stop inside one token's text
        ("foo any bar", " any"),  # a leading space the token's own text carries
    ],
)
def test_stop_string_across_token_boundaries(hf_tok: Any, text: str, stop: str) -> None:
    """openvinotoolkit/openvino.genai#817 (review: stop strings matched token by token miss a
    character such as an emoji that is spread over several tokens, and a stop string with a
    leading space): the runtime's finish check ends the request at the first generated token
    whose text (``AutoTokenizer``'s decode of the ids so far, the oracle) contains the stop
    string, not earlier and not later, and the final text is cut right before it."""
    from server_fixture import tokenizer_source_dir
    from sglang_v4.sampling.sampling_params import SamplingParams
    from sglang_v4.sampling.stop_checker import check_stop, trim_matched_stop
    from sglang_v4.utils import get_tokenizer

    hf = hf_tok
    ids = hf.encode(text, add_special_tokens=False)
    want = next(i for i in range(1, len(ids) + 1) if stop in hf.decode(ids[:i]))
    runtime_tok = get_tokenizer(tokenizer_source_dir())
    sp = SamplingParams.from_dict({"stop": [stop], "max_new_tokens": 100})
    sp.normalize(runtime_tok)
    got = next(
        (i for i in range(1, len(ids) + 1) if check_stop(ids[:i], sp, {1}, runtime_tok, False) is not None),
        None,
    )
    assert got == want
    reason = check_stop(ids[:got], sp, {1}, runtime_tok, False)
    assert reason == {"type": "stop", "matched": stop}
    full = hf.decode(ids[:got])
    assert trim_matched_stop(full, reason, no_stop_trim=False) == full[: full.index(stop)]
