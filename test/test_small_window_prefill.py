"""Unchunked prefill (``--chunked-prefill-size -1``) of a long prompt with a tiny sliding window.

A prefill chunk holds one window page per ``sliding_window`` positions until its forward ends, so
with ``sliding_window`` 1 or 32 an unchunked prompt of a few thousand tokens needed more window
pages than the pools reserve and was refused with a 400 "KV cache pool is too small", although the
block pages had room for its KV (SGLang and vLLM serve any prompt that fits the KV pool). The
runner now caps a chunk to what the window-page reserve holds. Oracles: HF transformers' argmax over
the whole sequence (one uncached forward), and a cold run of the same prompt in small chunks.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from dsv4_testutil import CONFIGS, make_twin, random_ids
from scheduler_testutil import assert_idle, make_scheduler, run_one
from sglang_v4.tools.make_checkpoint import write_checkpoint

PAGE = 256
DECODE = 4
SEED = 11


def _config(window: int) -> dict[str, Any]:
    cfg = copy.deepcopy(CONFIGS["sliding_first"])
    cfg["sliding_window"] = window
    return cfg


@torch.no_grad()
def _hf_greedy(cfg: dict[str, Any], seq: list[int], n_prompt: int) -> list[int]:
    """HF's argmax at each position from the prompt's last one on, teacher-forced on ``seq``."""
    twin = make_twin(f"window{cfg['sliding_window']}", seed=SEED, cfg=cfg)
    logits = twin.hf(torch.tensor([seq])).logits[0].float()
    return logits[n_prompt - 1 : -1].argmax(-1).tolist()


def _serve_unchunked_and_cold(
    tmp_path: Any, window: int, n_prompt: int, slots: int, cold_chunk: int
) -> tuple[dict[str, Any], list[int], list[int]]:
    """The prompt served unchunked (pools checked idle afterwards) and its cold run in chunks of
    ``cold_chunk`` tokens; ``(config, prompt, unchunked ids)``, the two runs' ids checked equal."""
    cfg = _config(window)
    path = write_checkpoint(
        str(tmp_path), fmt="hf", weights="fp32", seed=SEED, config_dict=copy.deepcopy(cfg)
    )
    prompt = random_ids(n_prompt, seed=window + 5, vocab=cfg["vocab_size"])
    # few request slots: the pools plan 4 window pages per slot + the chunk reserve, fewer than
    # the n_prompt / window spans of one unchunked forward (the old code's refusal)
    kw: dict[str, Any] = dict(
        max_total_tokens=16 * PAGE, max_running_requests=slots, skip_tokenizer_init=True
    )
    s = make_scheduler(path, chunked_prefill_size=-1, **kw)
    assert s.pool.window_alloc.num_pages < n_prompt // window  # the case this test is about
    got = run_one(s, "unchunked", prompt, n=DECODE)
    assert got["finish"]["type"] == "length", got["finish"]
    assert len(got["ids"]) == DECODE
    assert_idle(s)
    cold = run_one(make_scheduler(path, chunked_prefill_size=cold_chunk, **kw), "chunked", prompt, n=DECODE)
    assert got["ids"] == cold["ids"]
    return cfg, prompt, got["ids"]


def test_unchunked_prompt_served_with_window_1(tmp_path: Any) -> None:
    _serve_unchunked_and_cold(tmp_path, window=1, n_prompt=300, slots=1, cold_chunk=40)


@pytest.mark.slow
@pytest.mark.parametrize(("window", "n_prompt", "cold_chunk"), [(1, 2500, 50), (32, 3000, 300)])
def test_unchunked_long_prompt_served_matches_hf(
    tmp_path: Any, window: int, n_prompt: int, cold_chunk: int
) -> None:
    cfg, prompt, ids = _serve_unchunked_and_cold(tmp_path, window, n_prompt, slots=2, cold_chunk=cold_chunk)
    assert ids == _hf_greedy(cfg, prompt + ids, n_prompt)
