"""Launch flags that only change scheduling or memory do not change greedy outputs.

Oracle: the workload of :mod:`flag_matrix_testutil` on a cold ``Engine`` with default flags on the
embedded default model. Each cell runs the same workload on a cold ``Engine`` (or a
``launch_server`` started from an SGLang command line, model path replaced) with other flags and
must return the oracle's token ids, top-logprob ids and logprobs (within ``LOGPROB_TOL``); where
a flag has an observable effect (no cache hits, retractions, the limits ``get_server_info``
reports) the cell checks it too, so a flag dropped on the way to the scheduler fails.

Flags that change numerics (``--kv-cache-dtype fp8_e4m3``, ``--enable-fp4-indexer``) are compared
with their own cold run under the scheduling flags, and with the bf16 KV cache by scoring the bf16
run's greedy tokens (``QUANT_LOGPROB_TOL``).

The fast tier runs one representative combination; the whole matrix is ``slow``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flag_matrix_testutil import (
    SAMPLING,
    Outcome,
    assert_same_outputs,
    real_scheduler,
    run_engine,
    run_server,
    waves,
)

pytest.importorskip("sglang_v4.managers.scheduler")

pytestmark = pytest.mark.timeout(900)

#: Largest |logprob difference| (nats) of a bf16-KV greedy token scored (teacher-forced) with an
#: FP8 KV cache or the FP4 indexer keys on the embedded random-weight model. Observed: 0.92 to 1.18
#: over the workload (first tokens: below 0.1; the gap grows along a sequence whose later tokens
#: the quantized run would not have chosen). A bound on drift, not an accuracy claim.
QUANT_LOGPROB_TOL = 1.5


@pytest.fixture(scope="module")
def oracle_small() -> list[Outcome]:
    return run_engine(small=True)[0]


@pytest.fixture(scope="module")
def oracle() -> list[Outcome]:
    return run_engine()[0]


#: Fast cells: SGLang's scheduling knobs together, with retraction forced by a KV pool of 768
#: tokens (prompts up to 300 tokens, 7 at once); the cache off with overlap off is ``slow``.
FAST_CELLS: list[Any] = [
    {
        "schedule_policy": "lpm",
        "chunked_prefill_size": 129,
        "max_prefill_tokens": 255,
        "max_total_tokens": 768,
        "enable_mixed_chunk": True,
        "stream_interval": 3,
    },
    # in the slow tier: each flag alone is a SLOW_CELLS cell, and the scheduler tests check them
    # in process (test_scheduler_policy, test_scheduler_overlap, test_scheduler_limits)
    pytest.param(
        {"disable_radix_cache": True, "disable_overlap_schedule": True, "max_running_requests": 1},
        marks=pytest.mark.slow,
    ),
]


def _check_honoured(kw: dict[str, Any], outs: list[Outcome], info: dict[str, Any]) -> None:
    """The flags' observable effects (not just equal outputs)."""
    for name in ("max_running_requests", "chunked_prefill_size", "max_prefill_tokens", "page_size"):
        if name in kw and kw[name] != -1:
            assert info[name] == kw[name], name
    if kw.get("chunked_prefill_size") == -1:  # no chunking: a whole prompt is one chunk
        assert info["chunked_prefill_size"] >= max(len(p) for wave in waves() for p in wave)
    if "schedule_policy" in kw:
        assert info["schedule_policy"] == kw["schedule_policy"]
    if "max_total_tokens" in kw:
        assert info["max_total_num_tokens"] == kw["max_total_tokens"]
    if kw.get("disable_radix_cache"):
        assert all(o.cached_tokens == 0 for o in outs)
    elif "page_size" in kw:
        assert {o.cached_tokens % kw["page_size"] for o in outs} == {0}
    if kw.get("disable_overlap_schedule"):
        assert info["enable_overlap_schedule"] is False
    if "kv_cache_dtype" in kw:
        assert info["kv_cache_dtype"] == kw["kv_cache_dtype"]


@pytest.mark.parametrize("kw", FAST_CELLS, ids=["lpm-chunk129-retract", "nocache-nooverlap-1running"])
def test_scheduling_flags_keep_greedy_outputs(kw: dict[str, Any], oracle_small: list[Outcome]) -> None:
    outs, info = run_engine(small=True, **kw)
    assert_same_outputs(outs, oracle_small)
    _check_honoured(kw, outs, info)
    if "max_total_tokens" in kw:
        assert sum(o.num_retractions for o in outs) > 0  # the small pool did force retraction


#: The slow matrix: every scheduling / memory / cosmetic flag alone, then realistic combinations.
SLOW_CELLS: list[dict[str, Any]] = [
    *({"schedule_policy": p} for p in ("lpm", "fcfs", "dfs-weight", "lof", "random")),
    {"disable_radix_cache": True},
    {"disable_overlap_schedule": True},
    {"enable_mixed_chunk": True},
    *({"chunked_prefill_size": n} for n in (17, 64, 129, 255, 257, -1)),
    {"max_prefill_tokens": 64},
    {"max_running_requests": 1},
    {"max_total_tokens": 768},
    {"stream_interval": 4},
    {"page_size": 512},
    {"context_length": 1024},
    {"skip_server_warmup": True},
    {"disable_cuda_graph": True},
    {"random_seed": 1234},
    {"served_model_name": "deepseek-ai/DeepSeek-V4-Flash"},
    {"api_key": "sk-123"},
    {"trust_remote_code": True},
    {"mem_fraction_static": 0.5},
    {"log_level": "debug"},
    {"enable_metrics": True},
    {"tp_size": 2},
    {"tp_size": 2, "ep_size": 2, "chunked_prefill_size": 17, "max_total_tokens": 768},
    {"page_size": 512, "chunked_prefill_size": 255, "schedule_policy": "dfs-weight"},
    {
        "schedule_policy": "lpm",
        "disable_radix_cache": True,
        "max_running_requests": 12,
        "context_length": 15000,
        "random_seed": 42,
        "enable_metrics": True,
        "enable_cache_report": True,
    },
    {
        "chunked_prefill_size": -1,
        "max_prefill_tokens": 16384,
        "disable_radix_cache": True,
        "context_length": 8188,
    },
    {
        "max_running_requests": 2,
        "max_total_tokens": 1024,
        "disable_overlap_schedule": True,
        "chunked_prefill_size": 64,
    },
]


@pytest.mark.slow
@pytest.mark.parametrize("kw", SLOW_CELLS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_flag_matrix(kw: dict[str, Any], oracle: list[Outcome]) -> None:
    outs, info = run_engine(**kw)
    assert_same_outputs(outs, oracle)
    _check_honoured(kw, outs, info)


#: SGLang command lines (docs, recipes, bug reports) with the model path replaced, as
#: ``launch_server`` arguments; ``--tp 8`` of the originals is 2 here (the embedded model's
#: ``o_groups`` is 2: :func:`test_unsplittable_tp_size_is_refused_before_any_rank_starts`).
SERVER_LINES = [
    # a bug report's V3.2 line (served name, API key, lpm without the radix cache, metrics)
    "--served-model-name mozz --tensor-parallel-size 2 --mem-fraction-static 0.88 --dtype auto "
    "--max-running-requests 12 --trust-remote-code --context-length 15000 --enable-metrics "
    "--enable-cache-report --log-level warning --watchdog-timeout 1000 --random-seed 42 --api-key sk-1 "
    "--schedule-policy lpm --disable-radix-cache --tool-call-parser deepseekv4 --reasoning-parser deepseek-v4",
    # the Ascend DeepSeek-V3 example's scheduling flags
    "--trust-remote-code --disable-radix-cache --chunked-prefill-size -1 --max-prefill-tokens 16384 "
    "--max-running-requests 128 --context-length 8188 --watchdog-timeout 9000 --cuda-graph-bs 8 16 24 28 32",
    # data parallel replicas behind sglang-router, with a key and metrics
    "--dp-size 2 --api-key sk-9 --served-model-name dsv4 --enable-metrics --schedule-policy lpm",
    "--stream-interval 4 --chunked-prefill-size 257 --enable-mixed-chunk --skip-server-warmup",
]


@pytest.mark.slow
@pytest.mark.parametrize("line", SERVER_LINES)
def test_sglang_command_lines_keep_greedy_outputs(line: str, oracle: list[Outcome], tmp_path: Path) -> None:
    import shlex

    from server_fixture import real_env, start_server

    args = shlex.split(line)
    key = args[args.index("--api-key") + 1] if "--api-key" in args else None
    handle = start_server(args, real_env(), tmp_path / "server.log", timeout_s=300)
    try:
        outs = run_server(handle.url, {"Authorization": f"Bearer {key}"} if key else {})
    finally:
        assert handle.stop() == 0, handle.log()[-3000:]
    assert_same_outputs(outs, oracle)


@pytest.mark.slow
def test_tokenizer_path_gives_the_same_text(default_model_dir: str, tmp_path: Path) -> None:
    """``--tokenizer-path`` to a directory holding only the model's tokenizer files: text prompts
    give the default run's token ids and text."""
    import shutil

    from sglang_v4 import Engine

    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(default_model_dir) / name, tmp_path / name)
    prompts = ["The capital of France is", "DeepSeek-V4 caches compressed KV. " * 40]
    got = []
    for kw in ({}, {"tokenizer_path": str(tmp_path)}):
        with real_scheduler():
            engine = Engine(model_path=default_model_dir, skip_server_warmup=True, **kw)
        with engine:
            res = engine.generate(prompt=prompts, sampling_params=SAMPLING)
        got.append([(r["text"], r["output_ids"], r["meta_info"]["prompt_tokens"]) for r in res])
    assert got[0] == got[1]


# --------------------------------------------------------------------------- numerics flags


def _score(
    engine_kwargs: dict[str, Any], prompts: list[list[int]], tokens: list[list[int]]
) -> list[list[float]]:
    """Logprobs of ``tokens[i]`` after ``prompts[i]`` under ``Engine(**engine_kwargs)`` (teacher
    forcing: the prompt extended by the tokens, its prompt logprobs from the prompt's last token on).

    SGLang's prompt-logprob shape: the entry at ``logprob_start_len`` is None for every start, so the
    scores are read from one token before the first forced one and that None entry is dropped."""
    from sglang_v4 import Engine

    with real_scheduler():
        engine = Engine(**engine_kwargs)
    with engine:
        res = engine.generate(
            input_ids=[p + t for p, t in zip(prompts, tokens)],
            sampling_params={**SAMPLING, "max_new_tokens": 1},
            return_logprob=True,
            logprob_start_len=[len(p) - 1 for p in prompts],
        )
    scored = [[e[0] for e in r["meta_info"]["input_token_logprobs"]] for r in res]
    assert all(s[0] is None for s in scored)  # the entry at logprob_start_len (the prompt's last token)
    return [s[1:] for s in scored]


@pytest.mark.slow
@pytest.mark.parametrize(
    "quant", [{"kv_cache_dtype": "fp8_e4m3"}, {"enable_fp4_indexer": True}], ids=["fp8-kv", "fp4-indexer"]
)
def test_numerics_flags_are_stable_and_close_to_bf16(quant: dict[str, Any]) -> None:
    """A numerics flag: the scheduling flags keep its own cold run's outputs exactly; its logprobs
    of the bf16 KV cache's greedy tokens are within ``QUANT_LOGPROB_TOL``."""
    cold, _ = run_engine(**quant)
    for kw in ({"chunked_prefill_size": 129, "max_total_tokens": 768}, {"disable_radix_cache": True}):
        outs, info = run_engine(**quant, **kw)
        assert_same_outputs(outs, cold)
        _check_honoured({**quant, **kw}, outs, info)
    bf16, _ = run_engine(kv_cache_dtype="bf16")
    prompts = [p for wave in waves() for p in wave]
    scored = _score(
        {**quant, "kv_cache_dtype": quant.get("kv_cache_dtype", "bf16")},
        prompts,
        [o.output_ids for o in bf16],
    )
    assert [len(s) for s in scored] == [len(o.output_ids) for o in bf16]
    worst = max(abs(a - b) for o, s in zip(bf16, scored) for a, b in zip(o.output_logprobs, s))
    assert worst <= QUANT_LOGPROB_TOL, worst
    # and the quantized run differs from bf16 at all (the flag reached the model)
    assert any(o.output_logprobs != c.output_logprobs for o, c in zip(bf16, cold))


# --------------------------------------------------------------------------- parallel layouts


def _model_builds(mc: Any, quant: Any, tp: int, ep: int) -> bool:
    """Whether every rank of the layout builds the model (on the meta device) and the ranks'
    attention layers share the query heads out whole: each holds at least one, together all."""
    import torch
    from sglang_v4.distributed.parallel_state import ParallelConfig, TPGroup
    from sglang_v4.models.deepseek_v4 import DeepseekV4ForCausalLM

    heads = []
    try:
        for rank in range(tp):
            with torch.device("meta"):
                m = DeepseekV4ForCausalLM(
                    mc, torch.float32, "meta", quant, TPGroup(ParallelConfig(tp, rank, ep))
                )
            heads.append(m.model.layers[0].self_attn.n_heads)
    except ValueError:
        return False
    return min(heads) >= 1 and sum(heads) == mc.hf.num_attention_heads


@pytest.mark.parametrize("quantization", [None, "fp8"])
def test_layout_check_agrees_with_the_model(default_model_dir: str, quantization: str | None) -> None:
    """``check_parallel_layout`` accepts exactly the TP / EP layouts every rank of the model
    builds with (the oracle: the model's own constructors on the meta device), with the weights
    as the CPU keeps them (``--quantization`` unset: dequantized; ``fp8``: FP8 linears and FP4
    experts, whose per-rank slices must hold whole scale groups)."""
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.distributed.parallel_state import check_parallel_layout
    from sglang_v4.layers.quantization import resolve_quantization

    refused = 0
    for overrides in (
        {},
        {"o_groups": 4, "num_attention_heads": 8},
        {"moe_intermediate_size": 96},
        # fewer heads than output groups, as trl-internal-testing/tiny-DeepseekV4ForCausalLM's 4 over 8
        {"o_groups": 8, "num_attention_heads": 4, "o_lora_rank": 16},
    ):
        mc = ModelConfig.from_pretrained(default_model_dir, overrides)
        quant = resolve_quantization(quantization, mc.hf, "cpu")
        fp4 = quant is not None and quant.experts == "fp4"
        for tp in (1, 2, 3, 4, 8):
            for ep in (e for e in (1, 2, 4, 8) if tp % e == 0):
                try:
                    check_parallel_layout(mc.hf, tp, ep, fp4_experts=fp4)
                    ok = True
                except ValueError as e:
                    assert str(e).startswith(("tp_size: ", "ep_size: ")), e
                    ok, refused = False, refused + 1
                assert ok == _model_builds(mc, quant, tp, ep), (overrides, tp, ep)
    assert refused  # some layout of these models does not split


def test_unsplittable_tp_size_is_refused_before_any_rank_starts(default_model_dir: str) -> None:
    """SGLang's V3.2 recipe ``--tp 8 --dp 8 --enable-dp-attention`` on a model whose ``o_groups``
    is 2: one ValueError naming ``tp_size``, the dimension and the sizes that fit, from the
    ``Engine`` constructor (before: every TP rank started, then failed with its own traceback)."""
    from sglang_v4 import Engine

    with real_scheduler(), pytest.raises(ValueError) as e:
        Engine(model_path=default_model_dir, tp_size=8, dp_size=8, enable_dp_attention=True)
    msg = str(e.value)
    assert msg.startswith("tp_size: ") and "o_groups (2) is not divisible by 8" in msg, msg
    assert "[1, 2]" in msg
