"""The published DeepSeek-V4 serving recipes, replayed against ``launch_server``.

Sources: SGLang's DeepSeek-V4 cookbook (docs.sglang.io; sgl-project/sglang
``docs_new/cookbook/autoregressive/DeepSeek/DeepSeek-V4.mdx`` and its command generator's config:
the Deploy cells, the Playground's knobs, the "Configuration Tips" commands) and vLLM's
DeepSeek-V4-Flash recipe (recipes.vllm.ai; vllm-project/recipes
``models/deepseek-ai/DeepSeek-V4-Flash.yaml``).

* Every SGLang flag those pages emit starts the server here: honoured, or ignored with the start-up
  warning naming it (``test_sglang_launch_configs`` covers the Deploy cells; the Playground's
  context-parallel, HiSparse, HiCache and PD knobs and the EPLB tip's ``--enable-deepep-waterfill``
  were argparse "unrecognized arguments" before).
* A ``vllm serve`` flag that is not SGLang's is still refused, but the one line says what to use
  here; every flag it points to is one this launcher takes.
* The recipes' OpenAI-client snippets, replayed on the embedded model (random weights, so only the
  response shapes the snippets read are checked, with the ``openai`` client's own parser).
"""

from __future__ import annotations

import json
import shlex

import pytest
from sglang_flags_testutil import _restore_root_log_handlers, parse  # noqa: F401 - autouse fixture
from sglang_v4.launch_server import main
from sglang_v4.server_args_compat import ignored_sglang_args
from sglang_v4.server_args_vllm_hints import VLLM_FLAG_HINTS

#: SGLang cookbook flag groups that failed to parse before (Playground knobs / tips), with the
#: flags the start-up warning must then name as ignored.
COOKBOOK_FLAG_GROUPS: list[tuple[str, set[str]]] = [
    # "EPLB + DeepEP Waterfill" tip (non-PD and PD forms).
    (
        "--moe-a2a-backend deepep --deepep-mode auto --init-expert-location /tmp/rec.pt --enable-deepep-waterfill",
        {"--enable-waterfill", "--init-expert-location"},
    ),
    (
        "--moe-a2a-backend deepep --deepep-mode low_latency --init-expert-location /tmp/rec.pt "
        "--enable-deepep-waterfill --ep-num-redundant-experts 32 --eplb-algorithm deepseek",
        {"--enable-waterfill", "--eplb-algorithm"},
    ),
    # Playground CP knob: --attn-cp-size N --enable-prefill-cp --cp-strategy S (and SGLang's older
    # DSA / NSA spellings of the last two).
    (
        "--attn-cp-size 2 --enable-prefill-cp --cp-strategy interleave",
        {"--enable-prefill-cp", "--cp-strategy"},
    ),
    (
        "--attn-cp-size 4 --enable-nsa-prefill-context-parallel --nsa-prefill-cp-mode round-robin-split",
        {"--attn-cp-size", "--enable-prefill-cp", "--cp-strategy"},
    ),
    (
        "--enable-dsa-prefill-context-parallel --dsa-prefill-cp-mode round-robin-split",
        {"--enable-prefill-cp"},
    ),
    # Playground HiSparse card (decode role) and HiCache L3 tier.
    (
        """--disable-radix-cache --enable-hisparse --hisparse-config '{"top_k": 2048, "device_buffer_size": 6144, """
        """"host_to_device_ratio": 10}'""",
        {"--enable-hisparse", "--hisparse-config"},
    ),
    (
        "--enable-hierarchical-cache --hicache-storage-backend mooncake --hicache-mem-layout page_first_direct "
        "--hicache-io-backend direct --hicache-storage-prefetch-policy wait_complete "
        "--hicache-write-policy write_through_selective --hicache-storage-backend-extra-config '{}'",
        {"--hicache-storage-backend-extra-config", "--enable-hierarchical-cache"},
    ),
    ("--enable-lmcache", {"--enable-lmcache"}),
    ("--disaggregation-decode-enable-radix-cache", {"--disaggregation-decode-enable-radix-cache"}),
]


@pytest.mark.parametrize(("cmd", "named"), COOKBOOK_FLAG_GROUPS)
def test_cookbook_playground_flags_start_and_are_named(cmd: str, named: set[str]) -> None:
    sa = parse(cmd)
    ignored = {flag for flag, _, _ in ignored_sglang_args(sa)}
    assert named <= ignored, (named - ignored, ignored)


def test_cookbook_flags_reach_main_without_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """The whole launcher (not only the parser): the H200 low-latency cell plus the Playground's CP
    and HiSparse knobs gets past argument parsing (a bad --port makes it stop right after)."""
    cmd = (
        "--trust-remote-code --tp 2 --speculative-algorithm EAGLE --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --attn-cp-size 2 --enable-prefill-cp "
        "--cp-strategy interleave --enable-hisparse --enable-deepep-waterfill --device cpu --port 0"
    )
    with pytest.raises(SystemExit) as e:
        main(shlex.split(cmd))
    err = capsys.readouterr().err
    assert "unrecognized arguments" not in err
    assert "--port" in err and e.value.code == 2  # refused later, by the value check, naming --port


#: vLLM's DeepSeek-V4-Flash recipe: the single-GPU command and the PD / AMD commands' other flags.
VLLM_RECIPE_COMMANDS = [
    "--tensor-parallel-size 1 --pipeline-parallel-size 1 --kv-cache-dtype fp8_e4m3 --trust-remote-code "
    "--block-size 256 --gpu-memory-utilization 0.92 "
    """--compilation-config '{"cudagraph_mode":"FULL_AND_PIECEWISE","custom_ops":["all"]}' """
    "--attention_config.use_fp4_indexer_cache True --tokenizer-mode deepseek_v4 --tool-call-parser deepseek_v4 "
    "--enable-auto-tool-choice --reasoning-parser deepseek_v4 --max-cudagraph-capture-size 128 "
    """--speculative-config '{"method":"mtp","num_speculative_tokens":3}'""",
    "--trust-remote-code --data-parallel-size 4 --enable-expert-parallel --max-model-len 393216 "
    "--max-num-batched-tokens 16384 --max-num-seqs 8 --enforce-eager --no-disable-hybrid-kv-cache-manager "
    """--disable-uvicorn-access-log --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}' """
    "--distributed-executor-backend mp --enable-sleep-mode --no-enable-flashinfer-autotune",
]


@pytest.mark.parametrize("cmd", VLLM_RECIPE_COMMANDS)
def test_vllm_recipe_flags_refused_with_what_to_use(cmd: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([*shlex.split(cmd), "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert "unrecognized arguments" in err
    vllm_only = [
        t.split("=")[0] for t in shlex.split(cmd) if t.split("=")[0].replace("_", "-") in VLLM_FLAG_HINTS
    ]
    assert vllm_only
    for flag in vllm_only:
        key = flag.replace("_", "-")
        assert f"vLLM's {key}: {VLLM_FLAG_HINTS[key]}" in err, (key, err)


#: A value each replacement flag takes (for parsing it on its own).
_SAMPLE_VALUES = {
    "--context-length": "4096",
    "--mem-fraction-static": "0.9",
    "--max-running-requests": "8",
    "--chunked-prefill-size": "4096",
    "--max-prefill-tokens": "4096",
    "--page-size": "256",
    "--ep-size": "1",
    "--speculative-algorithm": "EAGLE",
    "--cuda-graph-max-bs": "8",
    "--tool-call-parser": "deepseekv4",
    "--log-level": "debug",
    "--tp-size": "1",
    "--random-seed": "0",
    "--tokenizer-path": "/models/tokenizer",
    "--reasoning-parser": "deepseek-v4",
    "--sampling-defaults": "openai",
    "--preferred-sampling-params": """'{"temperature":0.5}'""",
    "--json-model-override-args": """'{"num_hidden_layers":2}'""",
}


@pytest.mark.parametrize(("vllm_flag", "hint"), sorted(VLLM_FLAG_HINTS.items()))
def test_every_hinted_flag_is_taken_here(vllm_flag: str, hint: str) -> None:
    """Each ``--flag`` a hint points to parses on this launcher (the hint is never a dead end)."""
    flags = [w.strip("(),;") for w in hint.split() if w.startswith(("--", "(--"))]
    for flag in flags:
        flag = flag.lstrip("(")
        value = _SAMPLE_VALUES.get(flag, "")
        parse(f"{flag} {value}".strip())  # argparse exits on an unknown flag


# ------------------------------------------------------------------- client snippets on a server


@pytest.fixture(scope="module")
def client(more_bugs_server):  # noqa: ANN001, ANN201 - openai is imported lazily
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=more_bugs_server.url + "/v1", api_key="EMPTY")


def test_cookbook_streaming_with_thinking(client) -> None:  # noqa: ANN001
    """SGLang cookbook 3.1: ``extra_body={"chat_template_kwargs": {"thinking": True}}``, streamed;
    the snippet reads ``chunk.choices[0].delta.reasoning_content`` / ``.content``."""
    stream = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "Solve this problem step by step: What is 15% of 240?"}],
        max_tokens=8,
        extra_body={"chat_template_kwargs": {"thinking": True}},
        stream=True,
    )
    reasoning, finish = "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        text = getattr(delta, "reasoning_content", None)
        if text:
            assert isinstance(text, str)
            reasoning += text
        assert delta.content is None or isinstance(delta.content, str)
        finish = chunk.choices[0].finish_reason or finish
    # 8 tokens of a random model never close </think>: all of it is reasoning.
    assert reasoning and finish == "length"


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}]
)
def test_cookbook_tool_call_stream_accumulates(client, tool_choice) -> None:  # noqa: ANN001
    """SGLang cookbook 3.2's accumulator over ``delta.tool_calls[i].index`` / ``.function.name`` /
    ``.function.arguments``: a forced call (thinking off, so the grammar starts at once) gives one
    call named ``get_weather`` (60 tokens cover the DSML ``tool_calls`` / ``invoke`` openings) whose
    argument text, once streamed, starts a JSON object keyed by the schema."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the current weather for a location",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "location": {"type": "string", "description": "The city name"},
                        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    },
                    "required": ["location"],
                },
            },
        }
    ]
    stream = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "What's the weather in Beijing?"}],
        tools=tools,
        tool_choice=tool_choice,
        max_tokens=60,
        stream=True,
    )
    acc: dict[int, dict[str, str | None]] = {}
    for chunk in stream:
        if not chunk.choices:
            continue
        for call in getattr(chunk.choices[0].delta, "tool_calls", None) or []:
            entry = acc.setdefault(call.index, {"name": None, "arguments": ""})
            if call.function and call.function.name:
                entry["name"] = call.function.name
            if call.function and call.function.arguments:
                entry["arguments"] = str(entry["arguments"]) + call.function.arguments
    assert list(acc) == [0] and acc[0]["name"] == "get_weather"
    args = str(acc[0]["arguments"]).replace(" ", "")
    # How far a random model gets into the value in 60 tokens varies (whitespace between the DSML
    # tags is free); what was streamed is the head of a JSON object keyed by a schema property.
    assert args == "" or args.startswith(('{"location":', '{"unit":')), args


@pytest.mark.parametrize("effort", ["high", "max"])
def test_vllm_recipe_think_modes(client, effort: str) -> None:  # noqa: ANN001
    """vLLM recipe: Think High / Think Max through ``chat_template_kwargs``; the answer carries
    ``reasoning_content`` (a string) and usage counts the completion."""
    resp = client.chat.completions.create(
        model="default",
        messages=[{"role": "user", "content": "What is 17*19? Return only the final integer."}],
        max_tokens=6,
        extra_body={"chat_template_kwargs": {"thinking": True, "reasoning_effort": effort}},
    )
    msg = resp.choices[0].message
    assert isinstance(getattr(msg, "reasoning_content", None), str)
    assert resp.usage.completion_tokens == 6
    assert json.loads(resp.model_dump_json())["choices"][0]["finish_reason"] == "length"
