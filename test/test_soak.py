"""Soak: the real server on the embedded model under a bounded load with aborts and a small KV pool.

Traffic (:func:`make_jobs`; seeded, so every run sends the same requests): three phases of 80
requests (the fast tier) or 160 (``slow``) at concurrency 16 (16 clients, each sending its next
request when the last one ends):

* shared-prefix prompts (one of three ~130-token system texts + a question, ``/generate`` text),
* multi-turn conversations over ``/generate`` ``input_ids`` (each turn appends the previous
  output and a new user message to the prompt, so it hits the blocks of the turns before it) and
  over ``/v1/chat/completions`` (the messages grow the same way),
* prompts that end a few tokens before a page end, so that their decode needs one more page; each
  phase starts with a burst of 16 of them, all needing that page at about the same step,
* streams cut by the client after their first event, and requests aborted through
  ``/abort_request`` (rid) while queued or running,

against ``--page-size 128 --max-total-tokens 3072`` (24 block pages), so that the radix cache
evicts and running requests are retracted, and ``--chunked-prefill-size 256``, so that prompts
are also prefilled in chunks. Prompts are short past their shared block and outputs
1-4 tokens: the embedded model's prefill costs ~2 ms a token on this CPU.

Checked, against oracles outside the server under test:

* every request that was not aborted finishes with exactly ``max_new_tokens`` tokens (greedy,
  ``ignore_eos``); aborted ones end with an ``abort`` finish reason or a cut stream;
* a sample of the outputs (cache hits, retracted requests and chat turns among them) equals the
  same requests on a second server started with ``--disable-radix-cache`` (cold prefill): token
  for token (``output_ids``), chat turns by their message text;
* after every phase, once idle, the KV pools hold exactly the pages the radix tree holds
  (``kv_pool`` vs ``radix_cache`` of ``/get_server_info``), no request slot and no lock; zero
  pages after ``/flush_cache``;
* the resident memory (RSS, psutil) of the server's processes does not grow from the second
  phase to the last beyond :data:`RSS_GROWTH_BOUND`;
* eviction and retraction really happened (the counters of ``/get_server_info``), and the server
  exits with code 0 and no traceback in its log.

Run with ``-s`` to see the numbers (requests, aborts, retractions, evictions, hit rate, RSS).
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import requests
from server_fixture import ServerHandle, real_env, start_server

psutil = pytest.importorskip("psutil")

#: 24 block pages of 128 tokens: 16 clients whose prompts need 1-2 pages of their own next to 7
#: shared 128-token blocks overflow them, so the tree evicts and a burst of page ends retracts.
#: At most 256 prompt tokens a step: the last prompt admitted in a step is often prefilled in chunks.
SOAK_ARGS = ["--page-size", "128", "--max-total-tokens", "3072", "--chunked-prefill-size", "256"]
CONCURRENCY = 16
#: Phases and requests per phase (conversations count one per turn) of the ``slow`` soak; 3 x 160
#: = 480 by default (the RSS bound is checked from the second phase on, so at least 3 phases).
#: A longer soak: ``SGLANG_V4_SOAK_PHASES=20 python -m pytest -q -s -m slow test/test_soak.py``
#: (50 to 90 s a phase on a shared 2-core machine), or ``benchmark/soak.sh``.
PHASES = int(os.environ.get("SGLANG_V4_SOAK_PHASES", "3"))
REQUESTS_PER_PHASE = int(os.environ.get("SGLANG_V4_SOAK_REQUESTS_PER_PHASE", "160"))
#: Requests per phase of the fast tier's soak (3 phases): each phase still opens with the burst of
#: page-end prompts (retraction) and every kind of request, aborts and cut streams among them.
FAST_REQUESTS_PER_PHASE = 80

pytestmark = [pytest.mark.timeout(300 + 150 * PHASES)]  # the fast tier: ~30-60 s on two cores
#: Outputs compared with the ``--disable-radix-cache`` server.
SAMPLE_SIZE = 48
#: Allowed RSS growth of the server's processes (all of them together) from phase 2 to the end.
RSS_GROWTH_BOUND = 64 * 2**20

WORDS = (
    "cache page block radix prefix token decode extend batch request window sparse index score "
    "layer head expert route sample stream abort retract evict flush lock node tree slot pool"
).split()
TOKEN_LO, TOKEN_HI = 1000, 100_000  # plain-text ids of the DeepSeek-V4 vocabulary


# ---------------------------------------------------------------------------------------------
# workload


@dataclass
class Done:
    """One request that ran to its end (not aborted): what to replay on the cold server."""

    kind: str
    route: str  # "/generate" or "/v1/chat/completions"
    body: dict[str, Any]
    output: Any  # output_ids (native) or the message content (chat)
    cached_tokens: int
    retractions: int


@dataclass
class Tally:
    """What one phase sent and saw."""

    requests: int = 0
    aborted: int = 0  # finished with an abort reason (by /abort_request)
    aborted_late: int = 0  # /abort_request came after the request had finished
    disconnected: int = 0
    done: list[Done] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _sp(rng: random.Random, max_new: int | None = None) -> dict[str, Any]:
    return {"max_new_tokens": max_new or rng.randint(1, 4), "temperature": 0, "ignore_eos": True}


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(TOKEN_LO, TOKEN_HI) for _ in range(n)]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


SYSTEM_TEXTS = [_words(random.Random(100 + k), 120) for k in range(3)]
SYSTEM_IDS = [_ids(random.Random(200 + k), 128) for k in range(4)]


def make_jobs(phase: int, n_requests: int = REQUESTS_PER_PHASE) -> list[tuple[str, Any]]:
    """The jobs of one phase (``n_requests`` requests, a conversation counting one per turn):
    ``(kind, spec)`` with the kinds of the module docstring.

    Prompts are short past their shared 128-token block (a prefill costs ~2 ms a token on this
    CPU), outputs 1-4 tokens (8 for the page-boundary prompts); the streams and aborted requests
    ask for 40 tokens so that they are still running when the client goes away.
    """
    rng = random.Random(phase)
    jobs: list[tuple[str, Any]] = []
    n = 0
    # a burst first: every client sends a prompt that ends just before a page end, so that they
    # all need a page at about the same decode step (retraction)
    for _ in range(CONCURRENCY):
        ids = rng.choice(SYSTEM_IDS) + _ids(rng, 128 - rng.randint(1, 6))
        jobs.append(("boundary", {"input_ids": ids, "sampling_params": _sp(rng, 8)}))
        n += 1
    while n < n_requests:
        r = rng.random()
        if r < 0.32:
            text = rng.choice(SYSTEM_TEXTS) + "\nQ: " + _words(rng, rng.randint(2, 10)) + "\nA:"
            jobs.append(("shared", {"text": text, "sampling_params": _sp(rng)}))
            n += 1
        elif r < 0.58:
            turns = rng.randint(2, 4)
            users = [_ids(rng, rng.randint(4, 16)) for _ in range(turns)]
            sps = [_sp(rng) for _ in range(turns)]
            jobs.append(("conv", (rng.choice(SYSTEM_IDS), users, sps)))
            n += turns
        elif r < 0.66:
            turns = rng.randint(2, 3)
            sys_text = rng.choice(SYSTEM_TEXTS)
            users = [_words(rng, rng.randint(2, 8)) for _ in range(turns)]
            jobs.append(("chat", (sys_text, users, [rng.randint(1, 4) for _ in range(turns)])))
            n += turns
        elif r < 0.69:
            # ends 1..6 tokens before a page end; decoding 8 tokens needs one more page
            ids = rng.choice(SYSTEM_IDS) + _ids(rng, 128 - rng.randint(1, 6))
            jobs.append(("boundary", {"input_ids": ids, "sampling_params": _sp(rng, 8)}))
            n += 1
        elif r < 0.86:
            ids = rng.choice(SYSTEM_IDS) + _ids(rng, rng.randint(4, 24))
            body = {"input_ids": ids, "sampling_params": _sp(rng, 40), "stream": True}
            jobs.append(("disconnect", body))
            n += 1
        else:
            ids = rng.choice(SYSTEM_IDS) + _ids(rng, rng.randint(4, 24))
            rid = f"soak-{phase}-{n}"
            body = {"input_ids": ids, "sampling_params": _sp(rng, 40), "rid": rid}
            jobs.append(("abort", (body, rng.uniform(0.0, 0.8))))
            n += 1
    return jobs


class Client:
    """Runs jobs against one server with ``CONCURRENCY`` workers (aiohttp)."""

    def __init__(self, url: str, session: aiohttp.ClientSession) -> None:
        self.url = url
        self.s = session

    async def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        async with self.s.post(self.url + "/generate", json=body) as r:
            data = await r.json()
            if r.status != 200:
                raise AssertionError(f"/generate {r.status}: {data}")
            return data

    async def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        async with self.s.post(self.url + "/v1/chat/completions", json=body) as r:
            data = await r.json()
            if r.status != 200:
                raise AssertionError(f"chat {r.status}: {data}")
            return data

    async def run_job(self, kind: str, spec: Any, t: Tally) -> None:
        if kind in ("shared", "boundary"):
            out = await self.generate(spec)
            self._check_len(out, spec, t)
            t.requests += 1
            t.done.append(_done(kind, "/generate", spec, out))
        elif kind == "conv":
            system, users, sps = spec
            ids = list(system)
            for user, sp in zip(users, sps):
                ids = ids + user
                body = {"input_ids": ids, "sampling_params": sp}
                out = await self.generate(body)
                self._check_len(out, body, t)
                t.requests += 1
                t.done.append(_done(kind, "/generate", body, out))
                ids = ids + out["output_ids"]
        elif kind == "chat":
            sys_text, users, lens = spec
            messages: list[dict[str, str]] = [{"role": "system", "content": sys_text}]
            for user, n in zip(users, lens):
                messages = [*messages, {"role": "user", "content": user}]
                body = {
                    "model": "default",
                    "messages": messages,
                    "max_tokens": n,
                    "temperature": 0,
                    "ignore_eos": True,
                }
                out = await self.chat(body)
                t.requests += 1
                usage = out["usage"]
                if usage["completion_tokens"] != n:
                    t.errors.append(f"chat: {usage['completion_tokens']} tokens, asked {n}")
                content = out["choices"][0]["message"]["content"] or ""
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
                t.done.append(Done(kind, "/v1/chat/completions", body, content, cached, 0))
                messages = [*messages, {"role": "assistant", "content": content}]
        elif kind == "disconnect":
            async with self.s.post(self.url + "/generate", json=spec) as r:
                assert r.status == 200, await r.text()
                async for line in r.content:
                    if line.startswith(b"data: "):
                        break
                r.close()  # drop the connection mid-stream
            t.requests += 1
            t.disconnected += 1
        elif kind == "abort":
            body, delay = spec

            async def abort_later() -> None:
                await asyncio.sleep(delay)
                async with self.s.post(self.url + "/abort_request", json={"rid": body["rid"]}) as r:
                    assert r.status == 200, await r.text()

            task = asyncio.ensure_future(abort_later())
            out = await self.generate(body)
            await task
            t.requests += 1
            reason = out["meta_info"]["finish_reason"]
            if reason["type"] == "abort":
                t.aborted += 1
            else:
                self._check_len(out, body, t)
                t.aborted_late += 1
        else:  # pragma: no cover
            raise ValueError(kind)

    @staticmethod
    def _check_len(out: dict[str, Any], body: dict[str, Any], t: Tally) -> None:
        want = body["sampling_params"]["max_new_tokens"]
        meta = out["meta_info"]
        if len(out["output_ids"]) != want or meta["finish_reason"]["type"] != "length":
            t.errors.append(f"{len(out['output_ids'])} tokens ({meta['finish_reason']}), asked {want}")

    async def run(self, jobs: list[tuple[str, Any]]) -> Tally:
        t = Tally()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        for j in jobs:
            queue.put_nowait(j)

        async def worker() -> None:
            while not queue.empty():
                kind, spec = queue.get_nowait()
                try:
                    await self.run_job(kind, spec, t)
                except (AssertionError, aiohttp.ClientError, asyncio.TimeoutError) as e:
                    t.errors.append(f"{kind}: {type(e).__name__}: {e}")

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return t


def _done(kind: str, route: str, body: dict[str, Any], out: dict[str, Any]) -> Done:
    meta = out["meta_info"]
    return Done(kind, route, body, out["output_ids"], meta["cached_tokens"], meta.get("num_retractions", 0))


async def _run_jobs(url: str, jobs: list[tuple[str, Any]]) -> Tally:
    timeout = aiohttp.ClientTimeout(total=300)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        return await Client(url, s).run(jobs)


async def _replay(url: str, sample: list[Done]) -> list[Any]:
    """The outputs of ``sample`` on another server, 4 at a time."""
    sem = asyncio.Semaphore(4)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as s:
        c = Client(url, s)

        async def one(d: Done) -> Any:
            async with sem:
                if d.route == "/generate":
                    return (await c.generate(d.body))["output_ids"]
                return (await c.chat(d.body))["choices"][0]["message"]["content"] or ""

        return await asyncio.gather(*(one(d) for d in sample))


# ---------------------------------------------------------------------------------------------
# server state


def server_rss(h: ServerHandle) -> list[int]:
    """Bytes resident in the server process and in each of its children (scheduler, detokenizer)."""
    p = psutil.Process(h.proc.pid)
    return [q.memory_info().rss for q in [p, *p.children(recursive=True)]]


def server_cpu_s(h: ServerHandle) -> float:
    """CPU seconds (user + system) used so far by the server process and its children."""
    p = psutil.Process(h.proc.pid)
    return sum(sum(q.cpu_times()[:2]) for q in [p, *p.children(recursive=True)])


def server_info(h: ServerHandle) -> dict[str, Any]:
    r = requests.get(h.url + "/get_server_info", timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def wait_idle(h: ServerHandle, timeout_s: float = 60.0) -> dict[str, Any]:
    """``/get_server_info`` once no request is queued or running (aborts land asynchronously)."""
    deadline = time.time() + timeout_s
    while True:
        info = server_info(h)
        if info["num_running_reqs"] == 0 and info["num_queue_reqs"] == 0:
            return info
        assert time.time() < deadline, f"server not idle: {info['num_running_reqs']} running"
        time.sleep(0.2)


def assert_pools_hold_only_tree_pages(info: dict[str, Any]) -> None:
    """Idle server: every used page is a radix-tree page, no slot or lock is held."""
    pool, tree = info["kv_pool"], info["radix_cache"]
    assert pool["block_pages"]["used"] == tree["cached_blocks"], (pool, tree)
    assert pool["window_pages"]["used"] == tree["resume_states"], (pool, tree)
    assert pool["req_slots"]["used"] == 0, pool
    assert tree["locked_nodes"] == 0 and tree["locked_blocks"] == 0, tree
    assert tree["locked_resume_states"] == 0, tree


# ---------------------------------------------------------------------------------------------
# the test


def _env() -> dict[str, str]:
    """The servers' environment: the real scheduler, and glibc's mmap threshold fixed at 4 MiB so
    that freed large tensors are unmapped at once; by default the threshold adapts upwards and
    freed tensors stay cached in the heap, so RSS follows the allocator's cache (tens of MiB up or
    down from one phase to the next) rather than live memory."""
    env = real_env()
    env["MALLOC_MMAP_THRESHOLD_"] = str(4 * 2**20)
    return env


@pytest.fixture
def servers(tmp_path_factory: pytest.TempPathFactory):
    """``(radix, cold)``: the server under test and a ``--disable-radix-cache`` one, started together
    (for each test: the test stops the server under test to check its exit)."""
    from sglang_v4.tools.default_model import ensure_default_model

    ensure_default_model()
    d = tmp_path_factory.mktemp("soak")
    handles: dict[str, Any] = {}

    def start(name: str, extra: list[str]) -> None:
        try:
            handles[name] = start_server([*SOAK_ARGS, *extra], _env(), d / f"{name}.log", timeout_s=400)
        except Exception as e:  # noqa: BLE001 - reported below
            handles[name] = e

    th = threading.Thread(target=start, args=("cold", ["--disable-radix-cache"]))
    th.start()
    start("radix", [])
    th.join()
    try:
        for v in handles.values():
            if isinstance(v, Exception):
                raise v
        yield handles["radix"], handles["cold"]
    finally:
        for v in handles.values():
            if isinstance(v, ServerHandle):
                v.stop()


def test_soak_shared_prefix_multi_turn_aborts_small_pool(servers):
    _soak(*servers, phases=3, per_phase=FAST_REQUESTS_PER_PHASE)


@pytest.mark.slow
def test_soak_shared_prefix_multi_turn_aborts_small_pool_full(servers):
    """The soak at its full size (:data:`PHASES` x :data:`REQUESTS_PER_PHASE`; ``benchmark/soak.sh``)."""
    _soak(*servers, phases=PHASES, per_phase=REQUESTS_PER_PHASE)


def _soak(radix: ServerHandle, cold: ServerHandle, phases: int, per_phase: int) -> None:
    """The soak of the module docstring: ``phases`` phases of ``per_phase`` requests."""
    t0, cpu0 = time.time(), server_cpu_s(radix)
    rss: list[list[int]] = []
    tallies: list[Tally] = []
    sent: list[str] = []
    for phase in range(phases):
        jobs = make_jobs(phase, per_phase)
        sent += [kind for kind, _ in jobs]
        tally = asyncio.run(_run_jobs(radix.url, jobs))
        assert not tally.errors, tally.errors[:10]
        tallies.append(tally)
        info = wait_idle(radix)
        assert_pools_hold_only_tree_pages(info)
        rss.append(server_rss(radix))
        print(
            f"phase {phase}: {tally.requests} requests, t={time.time() - t0:.0f}s, "
            f"RSS (MiB) {[round(x / 2**20, 1) for x in rss[-1]]}",
            flush=True,
        )
    traffic_s, cpu_s = time.time() - t0, server_cpu_s(radix) - cpu0

    total = sum(t.requests for t in tallies)
    done = [d for t in tallies for d in t.done]
    assert total >= phases * per_phase
    # a quarter of the /abort_request jobs at least land while their request runs (3 x 160: 39
    # jobs, 10 or more aborted); every cut stream is counted
    assert sum(t.aborted for t in tallies) >= max(4, sent.count("abort") // 4)
    assert sum(t.disconnected for t in tallies) == sent.count("disconnect") >= 20
    before_flush = server_info(radix)
    tree = before_flush["radix_cache"]
    assert before_flush["num_retractions"] > 0, "the pool never forced a retraction"
    assert tree["evicted_blocks"] > 0, "the pool never forced an eviction"
    assert sum(d.cached_tokens > 0 for d in done) > len(done) // 3

    # A sample (hits and retracted requests first) against a cold, cache-less server.
    rng = random.Random(7)
    retracted = [d for d in done if d.retractions > 0]
    hits = [d for d in done if d.cached_tokens > 0 and d.retractions == 0]
    chats = [d for d in done if d.route != "/generate"]
    picked = rng.sample(retracted, min(8, len(retracted))) + rng.sample(chats, min(8, len(chats)))
    rest = [d for d in hits if d not in picked]
    sample = picked + rng.sample(rest, min(len(rest), SAMPLE_SIZE - len(picked)))
    cold_out = asyncio.run(_replay(cold.url, sample))
    bad = [(d.kind, d.cached_tokens, d.retractions) for d, c in zip(sample, cold_out) if d.output != c]
    assert not bad, f"{len(bad)}/{len(sample)} outputs differ from the cold server: {bad[:8]}"

    # Pools back to the tree's pages, then to zero after a flush.
    assert_pools_hold_only_tree_pages(wait_idle(radix))
    r = requests.post(radix.url + "/flush_cache", timeout=60)
    assert r.status_code == 200, r.text
    info = server_info(radix)
    pool = info["kv_pool"]
    assert pool["block_pages"]["used"] == 0 and pool["window_pages"]["used"] == 0, pool
    assert pool["req_slots"]["used"] == 0 and info["radix_cache"]["cached_blocks"] == 0, info

    # Memory: no growth after the warm-up phase beyond a small bound.
    totals = [sum(x) for x in rss]
    growth = max(totals[1:]) - totals[1]
    print(
        f"\nsoak: {total} requests in {traffic_s:.0f}s ({total / traffic_s:.1f} req/s, {cpu_s:.0f} CPU s), "
        f"{sum(t.aborted for t in tallies)} aborted by rid ({sum(t.aborted_late for t in tallies)} late), "
        f"{sum(t.disconnected for t in tallies)} disconnected, {before_flush['num_retractions']} retractions, "
        f"{tree['evicted_blocks']} blocks evicted, hit rate {tree['hit_rate']:.2f}, "
        f"{len(sample)} outputs equal to the cold server's, RSS per phase (MiB) "
        f"{[[round(y / 2**20) for y in x] for x in rss]}"
    )
    assert growth <= RSS_GROWTH_BOUND, [x / 2**20 for x in totals]
    assert radix.stop() == 0
    assert "Traceback" not in radix.log(), radix.log()[-4000:]
