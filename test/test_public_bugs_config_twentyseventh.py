"""Model ``config.json`` values and SGLang launch commands that public reports found mishandled
elsewhere, replayed against this runtime's config reader (``ModelConfig``) and flag parser
(``ServerArgs`` over SGLang's spellings): a routed top-k larger than the expert count, a
hand-edited ``config.json`` / ``generation_config.json`` that is not JSON, and the DeepSeek-V4
launch commands published in SGLang's issues (GPU and NPU).

Each test ports one public report (cited as ``owner/repo#N``) and checks the right value against
an independent oracle: transformers' ``DeepseekV4Config`` (the config the model is built from),
Python's ``json`` module (where a slip is: its ``lineno`` / ``colno``), argparse's own refusal of a
value outside a flag's choices, or the values the published command states.

No fault was found by these reports; the tests guard the behaviour they ask for.
"""

from __future__ import annotations

import argparse
import copy
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from dsv4_testutil import CONFIGS
from public_bug_configs_testutil import write_model_dir
from sglang_flags_testutil import parse
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.entrypoints.openai.sampling_defaults import model_sampling_defaults
from sglang_v4.server_args import ServerArgs
from transformers import DeepseekV4Config

CFG: dict[str, Any] = CONFIGS["sliding_first"]


# --------------------------------------------------------------------------- routed top-k
def test_colibri_944_routed_top_k_above_the_expert_count_is_refused() -> None:
    """JustVugg/colibri#944: a config whose ``num_experts_per_tok`` exceeded ``n_routed_experts``
    was accepted, and the router then read past its expert table (an out-of-bounds index from an
    untrusted model file). Expected: the config is refused at load with a ``ValueError`` naming
    both fields; a top-k equal to the expert count (every expert routed) is a valid model, as
    transformers' ``DeepseekV4Config`` builds it, and loads."""
    n = CFG["n_routed_experts"]
    over = {**copy.deepcopy(CFG), "num_experts_per_tok": n + 1}
    with pytest.raises(ValueError, match=r"num_experts_per_tok") as e:
        ModelConfig.from_dict(over)
    assert "n_routed_experts" in str(e.value)
    equal = {**copy.deepcopy(CFG), "num_experts_per_tok": n}
    assert DeepseekV4Config(**copy.deepcopy(equal)).num_experts_per_tok == n  # the oracle accepts it
    assert ModelConfig.from_dict(equal).hf.num_experts_per_tok == n


# --------------------------------------------------------------------------- files that are not JSON
@pytest.mark.parametrize(
    "slip",
    [
        pytest.param(lambda text: text.replace('"vocab_size"', '"vocab_size",', 1), id="stray_comma"),
        pytest.param(lambda text: text.rstrip().removesuffix("}") + ",\n}", id="trailing_comma"),
        pytest.param(lambda text: text.replace(",\n", ".\n", 1), id="period_for_comma"),
    ],
)
def test_sygil_919_a_config_json_slip_names_the_file_and_its_place(tmp_path: Path, slip: Any) -> None:
    """Sygil-Dev/sygil-webui#919 ("the config file ... is not a valid JSON file": users hunted the
    stray trailing commas by pasting the file into an editor) and meta-llama/llama#691
    (``"do_sample": true.`` in a published file). Expected: loading refuses the model with a
    ``ValueError`` naming ``config.json`` and the line and column where Python's ``json`` module
    (the oracle) stops, so the slip can be found without another tool."""
    d = write_model_dir(tmp_path / "m", CFG)
    text = slip(json.dumps(CFG, indent=2))
    (d / "config.json").write_text(text)
    with pytest.raises(json.JSONDecodeError) as oracle:
        json.loads(text)
    with pytest.raises(ValueError) as e:
        ModelConfig.from_pretrained(str(d))
    msg = str(e.value)
    assert "config.json" in msg
    assert f"line {oracle.value.lineno} column {oracle.value.colno}" in msg, msg


def test_llama_691_a_generation_config_slip_leaves_the_model_loadable(tmp_path: Path) -> None:
    """meta-llama/llama#691: a published ``generation_config.json`` held ``"do_sample": true.``
    (a period for a comma) and loading the model failed with ``JSONDecodeError``; ml-explore/mlx-lm#708
    restored loading of such a model by ignoring the file. Expected: ``config.json`` still loads
    (the model's shape is unaffected) and the model's sampling defaults are empty (nothing is
    read from a file Python's ``json`` refuses), not an error."""
    d = write_model_dir(tmp_path / "m", CFG)
    bad = '{\n  "bos_token_id": 0,\n  "do_sample": true.\n  "temperature": 0.6,\n  "top_p": 0.9\n}'
    with pytest.raises(json.JSONDecodeError):
        json.loads(bad)
    (d / "generation_config.json").write_text(bad)
    mc = ModelConfig.from_pretrained(str(d))
    assert mc.hf.num_hidden_layers == CFG["num_hidden_layers"]
    assert model_sampling_defaults(str(d), "model") == {}


# --------------------------------------------------------------------------- published launch commands
@pytest.mark.parametrize(
    ("cmd", "want"),
    [
        pytest.param(
            "--trust-remote-code --model-path deepseek-ai/DeepSeek-V4-Flash --tp 4 "
            "--moe-runner-backend flashinfer_mxfp4 --speculative-algo EAGLE --speculative-num-steps 3 "
            "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --chunked-prefill-size 4096 "
            "--disable-flashinfer-autotune --host 0.0.0.0 --port 30000",
            {
                "tp_size": 4,
                "chunked_prefill_size": 4096,
                "speculative_algorithm": "EAGLE",
                "speculative_num_steps": 3,
                "speculative_num_draft_tokens": 4,
                "port": 30000,
            },
            id="sglang_23600",
        ),
        pytest.param(
            "--trust-remote-code --model-path /nas/DeepSeek-V4-Flash --tp 4 --mem-fraction-static 0.8 "
            "--cuda-graph-max-bs 16 --moe-runner-backend marlin --host 0.0.0.0 --port 30000",
            {"tp_size": 4, "mem_fraction_static": 0.8, "cuda_graph_max_bs": 16, "port": 30000},
            id="sglang_23602",
        ),
    ],
)
def test_sglang_23600_and_23602_published_v4_gpu_commands_parse(cmd: str, want: dict[str, Any]) -> None:
    """sgl-project/sglang#23600 (the DeepSeek-V4-Flash EAGLE launch of the V4 pull request) and
    sgl-project/sglang#23602 (the V4 roadmap's H800 launch with ``--moe-runner-backend marlin``):
    a server taking SGLang's flags must start from the commands users copy. Expected: each parses
    (kernel choices accepted for their effect on speed only), and every value the command states
    is the value the server runs with."""
    args = parse(cmd)
    assert {k: getattr(args, k) for k in want} == want


NPU_CMD = (
    "--model-path /models/DeepSeek-V4 --page-size 128 --tp-size 16 --trust-remote-code "
    "--attention-backend ascend --device npu --watchdog-timeout 18000 --host 0.0.0.0 --port 30000 "
    "--max-total-tokens 256000 --mem-fraction-static 0.95 --disable-cuda-graph --disable-radix-cache "
    "--chunked-prefill-size -1 --max-prefill-tokens 131072 --context-length 131072 "
    "--max-running-requests 16 --dtype bfloat16 --dp-size 16 --enable-dp-attention --enable-dp-lm-head "
    "--disable-shared-experts-fusion --skip-server-warmup --moe-a2a-backend deepep --deepep-mode auto "
    "--disable-overlap-schedule"
)


def test_sglang_23598_the_npu_command_is_refused_for_its_device_only(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """sgl-project/sglang#23598 (DeepSeek-V4 day-0 support on Ascend NPUs): its launch command names
    ``--device npu``. This runtime has no NPU backend, so the honest answer is argparse's own
    refusal of a value outside ``--device``'s choices (exit 2, ``invalid choice: 'npu'``), not a
    start that fails later. The rest of the command is SGLang's ordinary flags: without the
    device it parses, and every value it states is the one the server runs with (page size,
    context, token budgets, radix cache and overlap off, the watchdog); ``--dp-size 16`` under
    ``--enable-dp-attention`` is SGLang's attention split inside the ``--tp-size`` group, one
    server on those GPUs, not sixteen replicas."""
    parser = argparse.ArgumentParser(prog="launch_server")
    ServerArgs.add_cli_args(parser)
    with pytest.raises(SystemExit) as e:
        parser.parse_args(shlex.split(NPU_CMD))
    assert e.value.code == 2
    assert "--device" in capsys.readouterr().err

    args = parse(NPU_CMD.replace(" --device npu", ""))
    want = {
        "tp_size": 16,
        "page_size": 128,
        "context_length": 131072,
        "max_total_tokens": 256000,
        "max_prefill_tokens": 131072,
        "chunked_prefill_size": -1,
        "max_running_requests": 16,
        "mem_fraction_static": 0.95,
        "watchdog_timeout": 18000.0,
        "dtype": "bfloat16",
        "disable_radix_cache": True,
        "disable_overlap_schedule": True,
        "disable_cuda_graph": True,
        "skip_warmup": True,
        "dp_size": 1,
    }
    assert {k: getattr(args, k) for k in want} == want
