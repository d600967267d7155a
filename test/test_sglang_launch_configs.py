"""SGLang's DeepSeek-V4 launch commands and published configs, as users copy them.

* Cookbook / bug-report commands parse; each flag is honoured, ignored with the start-up warning,
  or refused with one line naming it (no usage dump, no traceback).
* ``config.json`` files in the published DeepSeek-V4-Flash / -Pro layout (official dialect:
  ``compress_ratios``, ``num_hash_layers``, flat YaRN ``rope_scaling``, FP8 ``quantization_config``;
  ``test/fixtures/configs``) parse, and ``--json-model-override-args`` cuts them to a reduced depth.
  The oracle for every config value is ``transformers.DeepseekV4Config`` / the JSON text itself.
  The two fixtures are reconstructions, not copies of the hub files: the architecture fields follow
  the published model shapes (``configs/presets.py``), while bookkeeping fields (token ids,
  ``transformers_version``, ``initializer_range``) are placeholders; diff them against the hub's
  ``config.json`` before treating them as published text.
"""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest
from sglang_flags_testutil import parse
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.entrypoints.engine import check_model_dir
from sglang_v4.launch_server import OneLineErrorParser, main
from sglang_v4.server_args import ServerArgs
from sglang_v4.server_args_compat import ignored_sglang_args, warn_ignored_sglang_args
from transformers import DeepseekV4Config

CONFIGS = Path(__file__).parent / "fixtures" / "configs"

#: Flags after ``sglang serve`` / ``launch_server`` in SGLang's DeepSeek-V4 cookbook cells and in
#: public bug reports (host / port / model path as the cookbook fills them).
COOKBOOK_COMMANDS = [
    "--trust-remote-code --model-path deepseek-ai/DeepSeek-V4-Flash-0731 --tp 8 --moe-runner-backend "
    "flashinfer_mxfp4 --speculative-algorithm DSPARK --disable-flashinfer-autotune --swa-full-tokens-ratio 0.1 "
    "--mem-fraction-static 0.90 --host 0.0.0.0 --port 30000",
    "--trust-remote-code --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --dp 8 --enable-dp-attention "
    "--moe-a2a-backend megamoe --mem-fraction-static 0.835 --cuda-graph-max-bs-decode 544 "
    "--swa-full-tokens-ratio 0.075 --chunked-prefill-size 65536 --tokenizer-worker-num 8 --enable-prefill-delayer",
    "--trust-remote-code --model-path sgl-project/DeepSeek-V4-Flash-FP8 --tp 4 --dp 4 --enable-dp-attention "
    "--moe-a2a-backend deepep --speculative-algorithm EAGLE --speculative-num-steps 1 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 2 --cuda-graph-max-bs-decode 128 --max-running-requests 128 "
    """--deepep-config '{"normal_dispatch":{"num_sms":96},"normal_combine":{"num_sms":96}}'""",
    "--trust-remote-code --model-path deepseek-ai/DeepSeek-V4-Pro-0813 --tp 8 --attention-backend dsv4 "
    "--page-size 256 --swa-full-tokens-ratio 0.15 --enforce-shared-experts-fusion --kv-cache-dtype fp8_e4m3 "
    "--enable-two-batch-overlap --chunked-prefill-size 16384",
    "--model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 --moe-runner-backend flashinfer_mxfp4 "
    "--flashinfer-mxfp4-moe-precision fp8 --speculative-algo EAGLE --speculative-num-steps 3 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --enable-deepseek-v4-fp4-indexer "
    "--moe-a2a-backend deepep --deepep-mode auto --init-expert-location /tmp/rec.pt --enable-waterfill "
    "--hicache-storage-backend file --hicache-mem-layout page_first_direct --hicache-io-backend direct",
    "--model /deepseek/DeepSeek-V3.2 --host 127.0.0.1 --served-model-name mozz --port 9122 "
    "--tensor-parallel-size 8 --mem-fraction-static 0.88 --dtype auto --max-running-requests 12 "
    "--trust-remote-code --context-length 15000 --enable-metrics --enable-cache-report --log-level warning "
    "--watchdog-timeout 1000 --random-seed 42 --api-key sk-1 --schedule-policy lpm --disable-radix-cache "
    "--tool-call-parser deepseekv4 --reasoning-parser deepseek-v4 --nccl-init-addr 10.0.0.1:5000",
]


@pytest.mark.parametrize("cmd", COOKBOOK_COMMANDS)
def test_cookbook_commands_parse(cmd: str) -> None:
    sa = parse(cmd)
    assert sa.model_path is not None and sa.dp_size == 1  # --dp with DP attention: one server


def test_cookbook_values_are_honoured_or_listed_as_ignored() -> None:
    sa = parse(COOKBOOK_COMMANDS[4])
    assert sa.enable_fp4_indexer is True  # SGLang's spelling of the same switch
    flags = {flag for flag, _, _ in ignored_sglang_args(sa)}
    assert {"--speculative-algorithm", "--flashinfer-mxfp4-moe-precision", "--enable-waterfill"} <= flags
    assert {"--hicache-storage-backend", "--init-expert-location"} <= flags
    sa = parse(COOKBOOK_COMMANDS[5])
    assert (sa.tp_size, sa.context_length, sa.max_running_requests, sa.served_model_name) == (
        8,
        15000,
        12,
        "mozz",
    )
    assert (sa.random_seed, sa.watchdog_timeout, sa.log_level, sa.api_key) == (42, 1000.0, "warning", "sk-1")
    assert (sa.enable_metrics, sa.enable_cache_report, sa.disable_radix_cache) == (True, True, True)
    assert (sa.schedule_policy, sa.dist_init_addr) == ("lpm", "10.0.0.1:5000")  # --nccl-init-addr: old name
    assert warn_ignored_sglang_args(sa) is None  # nothing in it is ignored
    text = warn_ignored_sglang_args(parse(COOKBOOK_COMMANDS[0])) or ""
    assert "--swa-full-tokens-ratio 0.1:" in text and "--disable-flashinfer-autotune:" in text


def test_incremental_streaming_flags() -> None:
    """SGLang's ``--incremental-streaming-output`` and its older name ``--stream-output`` (both were
    refused) set the same field; the default streams everything so far."""
    assert parse("").incremental_streaming_output is False
    assert parse("--incremental-streaming-output").incremental_streaming_output is True
    assert parse("--stream-output").incremental_streaming_output is True


def test_priority_order_flag() -> None:
    assert parse("--enable-priority-scheduling").schedule_low_priority_values_first is False
    assert parse("--schedule-low-priority-values-first").schedule_low_priority_values_first is True


@pytest.mark.parametrize(
    ("cmd", "flag"),
    [
        ("--pp-size 2", "--pp-size"),
        ("--pipeline-parallel-size 2", "--pp-size"),
        ("""--preferred-sampling-params '{"n": 2}'""", "--preferred-sampling-params"),
        ("--enable-fp32-lm-head", "--enable-fp32-lm-head"),
        ("--max-loaded-loras 2", "--max-loaded-loras"),
        ("--is-embedding", "--is-embedding"),
        ("--schedule-policy routing-key", "--schedule-policy"),
        ("--quantization modelopt_fp4", "--quantization"),
        ("--page-size 64", "--page-size"),
        ("--tool-call-parser deepseekv31", "--tool-call-parser"),
        ("--json-model-override-args [1]", "--json-model-override-args"),
        ("--json-model-override-args {bad", "--json-model-override-args"),
        ("--bucket-time-to-first-token 1 0.5", "--bucket-time-to-first-token"),
    ],
)
def test_refusals_are_one_line_naming_the_flag(
    cmd: str, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main([*shlex.split(cmd), "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "usage:" not in err and "Traceback" not in err, err
    assert f"argument {flag}:" in err, err


def test_unknown_flag_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--kt-methd", "AMXINT4", "--device", "cpu"])  # a typo of SGLang's --kt-method
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unrecognized arguments: --kt-methd AMXINT4" in err


def test_help_lists_the_sglang_flags(capsys: pytest.CaptureFixture[str]) -> None:
    parser = OneLineErrorParser(prog="x")
    ServerArgs.add_cli_args(parser)
    text = parser.format_help()
    for flag in (
        "--model-path", "--tp-size", "--dp-size", "--enable-dp-attention", "--moe-a2a-backend",
        "--speculative-algorithm", "--attention-backend", "--kv-cache-dtype", "--mem-fraction-static",
        "--chunked-prefill-size", "--max-running-requests", "--cuda-graph-max-bs", "--context-length",
        "--served-model-name", "--api-key", "--enable-metrics", "--log-level", "--disable-radix-cache",
        "--page-size", "--schedule-policy", "--enable-cache-report", "--watchdog-timeout", "--random-seed",
        "--host", "--port", "--tool-call-parser", "--reasoning-parser", "--trust-remote-code",
        "--json-model-override-args", "--swa-full-tokens-ratio", "--bucket-time-to-first-token",
    ):  # fmt: skip
        assert flag in text, flag


# ----------------------------------------------------------------------------- published configs
@pytest.mark.parametrize("name", ["DeepSeek-V4-Flash", "DeepSeek-V4-Pro"])
def test_published_configs_parse(name: str, tmp_path: Path) -> None:
    raw = json.loads((CONFIGS / f"{name}.config.json").read_text())
    shutil.copy(CONFIGS / f"{name}.config.json", tmp_path / "config.json")
    mc = ModelConfig.from_pretrained(str(tmp_path))
    n = raw["num_hidden_layers"]
    # compress_ratios has one entry per layer plus one per MTP layer; 0 = sliding window only.
    assert mc.compress_ratios == raw["compress_ratios"][:n]
    assert len(raw["compress_ratios"]) == n + raw["num_nextn_predict_layers"]
    assert mc.hf.mlp_layer_types == ["hash_moe"] * raw["num_hash_layers"] + ["moe"] * (
        n - raw["num_hash_layers"]
    )
    for key in ("hidden_size", "num_attention_heads", "q_lora_rank", "o_lora_rank", "o_groups", "index_topk"):
        assert getattr(mc.hf, key) == raw[key], key
    for key in (
        "index_n_heads",
        "index_head_dim",
        "hc_mult",
        "hc_sinkhorn_iters",
        "swiglu_limit",
        "vocab_size",
    ):
        assert getattr(mc.hf, key) == raw[key], key
    assert (mc.hf.n_routed_experts, mc.hf.moe_intermediate_size) == (
        raw["n_routed_experts"],
        raw["moe_intermediate_size"],
    )
    assert mc.context_length == raw["max_position_embeddings"] and mc.sliding_window == raw["sliding_window"]
    compress = mc.hf.rope_parameters["compress"]
    assert compress["rope_type"] == "yarn" and compress["factor"] == raw["rope_scaling"]["factor"]
    assert compress["rope_theta"] == raw["compress_rope_theta"]
    assert mc.rope_dim == raw["qk_rope_head_dim"]
    # transformers itself reads the file the same way (the oracle).
    ref = DeepseekV4Config.from_pretrained(str(tmp_path))
    assert ref.layer_types == mc.hf.layer_types and ref.mlp_layer_types == mc.hf.mlp_layer_types


@pytest.mark.parametrize("name", ["DeepSeek-V4-Flash", "DeepSeek-V4-Pro"])
def test_override_to_reduced_depth(name: str, tmp_path: Path) -> None:
    raw = json.loads((CONFIGS / f"{name}.config.json").read_text())
    shutil.copy(CONFIGS / f"{name}.config.json", tmp_path / "config.json")
    sa = ServerArgs(device="cpu", json_model_override_args='{"num_hidden_layers": 4, "n_routed_experts": 8}')
    mc = ModelConfig.from_pretrained(str(tmp_path), sa.model_override_args())
    assert mc.num_layers == 4 and mc.hf.n_routed_experts == 8
    assert mc.compress_ratios == raw["compress_ratios"][:4]  # the published schedule, cut
    assert mc.hf.mlp_layer_types == ["hash_moe"] * 3 + ["moe"]
    assert mc.hidden_size == raw["hidden_size"]  # everything else as published
    with pytest.raises(ValueError, match="num_hidden_layers"):
        ModelConfig.from_pretrained(str(tmp_path), {"num_hidden_layers": 0})


def test_config_only_directory(tmp_path: Path) -> None:
    """A directory with only a published config.json: refused with one line naming what is missing
    (weights unless --load-format dummy, then the tokenizer), accepted once both are provided."""
    shutil.copy(CONFIGS / "DeepSeek-V4-Flash.config.json", tmp_path / "config.json")
    with pytest.raises(ValueError, match=r"no \*\.safetensors weights \(use --load-format dummy"):
        check_model_dir(str(tmp_path))
    with pytest.raises(ValueError, match="tokenizer_path"):
        check_model_dir(str(tmp_path), load_format="dummy")
    check_model_dir(str(tmp_path), load_format="dummy", skip_tokenizer_init=True)
    check_model_dir(
        str(tmp_path), load_format="dummy", skip_tokenizer_init=True, model_overrides={"num_hidden_layers": 2}
    )
    with pytest.raises(ValueError, match="model_path: .*does not parse"):
        check_model_dir(
            str(tmp_path), load_format="dummy", skip_tokenizer_init=True, model_overrides={"hidden_act": 3}
        )
