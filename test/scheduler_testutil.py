"""Shared helpers for tests that drive the in-process ``Scheduler`` directly.

``make_scheduler`` builds one on CPU / float32 over a random checkpoint (the ``sched_model_dir``
fixture in ``conftest.py``, or :func:`write_sched_model` for another seed); ``submit`` queues a
greedy request; ``drain`` steps until idle and collects every request's outputs; ``assert_idle``
checks that after a flush no page or request slot is left in use; ``cold_output_ids`` is the
cold-run oracle of one request and ``collect_outputs`` folds one step's message by hand;
``radix_tree`` is a bare ``RadixCache`` on small blocks for the tree-level tests.

Schedulers built by ``make_scheduler`` on the same unchanged model directory share one loaded
tokenizer (the scheduler only reads it; loading the DeepSeek vocabulary costs about a second).
"""

from __future__ import annotations

import copy
import os
from typing import Any

import sglang_v4.utils
from dsv4_testutil import CONFIGS
from sglang_v4.managers.io_struct import TokenizedGenerateReqInput
from sglang_v4.managers.req import Req
from sglang_v4.managers.scheduler import Scheduler
from sglang_v4.managers.scheduler_output_processor import SchedulerOutputProcessorMixin
from sglang_v4.mem_cache.allocator import PageAllocator
from sglang_v4.mem_cache.radix_cache import RadixCache
from sglang_v4.sampling.sampling_params import SamplingParams
from sglang_v4.server_args import ServerArgs
from sglang_v4.tools.make_checkpoint import write_checkpoint

PAGE = 256


def write_sched_model(tmp_path_factory: Any, seed: int = 4, name: str = "sched_model") -> str:
    """A random fp32 checkpoint of the ``sliding_first`` test config (HF names)."""
    d = tmp_path_factory.mktemp(name)
    return write_checkpoint(
        str(d), fmt="hf", weights="fp32", seed=seed, config_dict=copy.deepcopy(CONFIGS["sliding_first"])
    )


#: tokenizers loaded by :func:`make_scheduler`, by (directory, its files' names, sizes and mtimes)
_TOKENIZERS: dict[tuple[Any, ...], Any] = {}
#: how many of them are kept (the least recently used go first)
_TOKENIZERS_KEPT = 4


def _tokenizer_key(path: str) -> tuple[Any, ...] | None:
    """The cache key of the tokenizer in directory ``path``: the path and the name, size and
    modification time of every file in it (a rewritten tokenizer file is a new key); None for a
    path that is no directory (not cached)."""
    if not os.path.isdir(path):
        return None
    files = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.is_file():
            st = entry.stat()
            files.append((entry.name, st.st_size, st.st_mtime_ns))
    return (os.path.abspath(path), tuple(files))


def make_scheduler(model_dir: str, max_total_tokens: int = 32 * PAGE, **kw: Any) -> Scheduler:
    """A CPU float32 ``Scheduler`` without warm-up; ``kw`` are further ``ServerArgs`` fields.

    The scheduler's tokenizer is the one an earlier call loaded from the same unchanged directory
    (else ``sglang_v4.utils.get_tokenizer``'s, as installed at the call, which it then keeps)."""
    args: dict[str, Any] = dict(
        model_path=model_dir,
        device="cpu",
        dtype="float32",
        max_total_tokens=max_total_tokens,
        skip_warmup=True,
    )
    args.update(kw)
    load = sglang_v4.utils.get_tokenizer

    def shared_tokenizer(path: str) -> Any:
        key = _tokenizer_key(path)
        if key is None:
            return load(path)
        tok = _TOKENIZERS.pop(key) if key in _TOKENIZERS else load(path)
        _TOKENIZERS[key] = tok  # most recently used last
        while len(_TOKENIZERS) > _TOKENIZERS_KEPT:  # bounded: per-test directories would pile up
            del _TOKENIZERS[next(iter(_TOKENIZERS))]
        return tok

    sglang_v4.utils.get_tokenizer = shared_tokenizer
    try:
        return Scheduler(ServerArgs(**args))
    finally:
        sglang_v4.utils.get_tokenizer = load


def submit(
    s: Scheduler,
    rid: str,
    ids: list[int],
    n: int = 6,
    *,
    ignore_eos: bool = True,
    sampling: dict[str, Any] | None = None,
    **req_kw: Any,
) -> None:
    """Queue a greedy request for ``n`` new tokens; ``sampling`` adds sampling params and
    ``req_kw`` sets fields of ``TokenizedGenerateReqInput`` (``return_logprob``, ``stream``...)."""
    params: dict[str, Any] = {"max_new_tokens": n, "temperature": 0}
    if ignore_eos:
        params["ignore_eos"] = True
    params.update(sampling or {})
    sp = SamplingParams.from_dict(params)
    sp.normalize(None)
    s.add_request(
        TokenizedGenerateReqInput(rid=rid, input_text=None, input_ids=ids, sampling_params=sp, **req_kw)
    )


def drain(s: Scheduler, results: dict | None = None, max_steps: int = 20_000) -> dict[str, dict]:
    """Step until the scheduler is idle; per rid: ``ids`` (output ids), ``lp`` (output logprobs),
    ``in_lp`` (prompt logprobs), ``chunks`` (output ids per message), ``cached``, ``completion``
    and ``finish`` (from the last message)."""
    res: dict[str, dict] = {} if results is None else results
    for _ in range(max_steps):
        if not s.has_work():
            return res
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            r = res.setdefault(rid, {})
            for key in ("ids", "lp", "in_lp", "chunks"):
                r.setdefault(key, [])
            r["ids"] += out.output_ids[i]
            r["lp"] += out.output_token_logprobs_val[i]
            r["in_lp"] += out.input_token_logprobs_val[i]
            r["chunks"].append(list(out.output_ids[i]))
            r["cached"] = out.cached_tokens[i]
            r["completion"] = out.completion_tokens[i]
            r["finish"] = out.finished_reasons[i]
    raise AssertionError("scheduler did not finish")


def step_outputs(s: Scheduler, n: int) -> dict[str, dict]:
    """Run ``n`` scheduler steps (idle or not); the outputs seen, per rid: ``ids`` (output ids,
    in order) and ``finish`` (the last message's finish reason)."""
    res: dict[str, dict] = {}
    for _ in range(n):
        out = s.step()
        for i, rid in enumerate(out.rids if out else []):
            r = res.setdefault(rid, {"ids": []})
            r["ids"] += out.output_ids[i]
            r["finish"] = out.finished_reasons[i]
    return res


def run_one(s: Scheduler, rid: str, ids: list[int], n: int = 6, **kw: Any) -> dict:
    """Submit one request and drain; its result (see :func:`drain`)."""
    submit(s, rid, ids, n, **kw)
    return drain(s)[rid]


def cold_output_ids(s: Scheduler, rid: str, ids: list[int], n: int) -> list[int]:
    """The output ids of ``ids`` run alone on a flushed cache (``n`` new tokens, greedy): the cold
    run the cache tests compare against. Flushes before and after, asserting each flush succeeds
    (``s`` must be idle)."""
    assert s.flush_cache()
    out = run_one(s, rid, ids, n)["ids"]
    assert s.flush_cache()
    return out


def collect_outputs(out: Any, res: dict[str, dict]) -> None:
    """Add one step's output message ``out`` (``BatchTokenIDOut`` or ``None``) to ``res``: per rid
    a dict of ``ids`` (output ids so far), ``cached`` (cached prompt tokens) and ``finish`` (the
    finish reason, ``None`` while running)."""
    for i, rid in enumerate(out.rids if out else []):
        r = res.setdefault(rid, {"ids": [], "cached": 0, "finish": None})
        r["ids"] += out.output_ids[i]
        r["cached"] = out.cached_tokens[i]
        r["finish"] = out.finished_reasons[i]


def radix_tree(page_size: int, n: int = 64) -> tuple[RadixCache, PageAllocator, PageAllocator]:
    """A bare ``RadixCache`` of ``page_size``-token blocks over two fresh allocators of ``n`` pages
    each; returns ``(cache, block allocator, window allocator)``."""
    ba, wa = PageAllocator(n, "block"), PageAllocator(n, "window")
    return RadixCache(ba, wa, page_size=page_size), ba, wa


def insert_finished(
    c: RadixCache, ba: PageAllocator, wa: PageAllocator, tokens: list[int], page_size: int
) -> None:
    """Insert ``tokens`` into the bare tree ``c`` (of :func:`radix_tree`) as a finished request
    would: fresh block pages for its whole ``page_size``-token blocks (a partial tail is left out)
    and a resume state at every block end, the pages the tree already held freed again, as the
    ownership contract of ``RadixCache.insert`` says."""
    nb = len(tokens) // page_size
    blocks, wins = ba.alloc_or_raise(nb), wa.alloc_or_raise(nb)
    tb, tw = c.insert(tokens[: nb * page_size], blocks, list(wins))
    ba.free([b for b, t in zip(blocks, tb) if t != b])
    wa.free([w for w, t in zip(wins, tw) if t is not None and t != w])


def assert_idle(s: Scheduler) -> None:
    """After a flush the pools and request slots are all free (nothing leaked)."""
    assert s.flush_cache()
    p = s.pool
    assert p.block_alloc.used == 0 and p.window_alloc.used == 0
    assert p.req_slots.available == p.req_slots.size


class OutputProcessorStub(SchedulerOutputProcessorMixin):
    """The scheduler state ``SchedulerOutputProcessorMixin._append_token`` reads, without a model:
    the tokenizer, ``FAKE_EOS`` as the only EOS id, every token streamed, finishes recorded on the
    request (``req.finished_reason``), no output due."""

    def __init__(self, tokenizer: Any) -> None:
        from server_fixture import FAKE_EOS

        self.tokenizer = tokenizer
        self.eos_ids = {FAKE_EOS}
        self.stream_interval = 1
        self._pending_ids: set[int] = set()
        self.pending_outputs: list[Req] = []

    def _finish(self, req: Req, reason: Any) -> None:
        req.finished_reason = reason

    def _due_output(self, req: Req) -> bool:
        return False
