"""Byte-order marks in model files, non-finite config numbers, ``generation_config.json`` values
that equal transformers' defaults, named chat templates, ``eos_token_id`` lists and SGLang's
published DeepSeek-V4 launch commands, as public reports found them broken elsewhere.

Each test ports one public report (cited as ``owner/repo#N``) and checks the right value against
an independent oracle: the file's own bytes with the UTF-8 byte-order mark removed (RFC 8259
section 8.1 lets a JSON parser ignore it; Unicode treats a leading U+FEFF as a signature, not
text), transformers (``AutoTokenizer``, ``GenerationConfig``, ``DeepseekV4Config``), a float64
RMSNorm written here from its formula, Python's ``json`` module, or the value the report states.

Faults found and fixed: a ``--chat-template`` file or a tokenizer ``.jinja`` file saved with a
byte-order mark started every prompt with U+FEFF (pallets/jinja#167); a ``generation_config.json``
with one was silently ignored, dropping the model's sampling defaults and stop ids, and a
``config.json`` / ``tokenizer_config.json`` with one was refused
(alvinunreal/oh-my-opencode-slim#1028, volcengine/OpenViking#500, node-config/node-config#215);
a negative or non-finite ``rms_norm_eps`` / ``hc_eps``, a non-finite ``routed_scaling_factor`` and
a NaN ``swiglu_limit`` (Python's ``json`` reads ``NaN`` / ``Infinity``) were accepted and would
have served NaN logits (ml-explore/mlx#4312, ai-dynamo/dynamo#3043). The others are regression
guards.
"""

from __future__ import annotations

import codecs
import copy
import json
import math
from pathlib import Path
from typing import Any

import jinja2.sandbox
import pytest
import torch
from dsv4_testutil import CONFIGS
from public_bug_configs_testutil import write_model_dir
from sglang_flags_testutil import parse
from sglang_v4.configs.model_config import ModelConfig, generation_eos_token_ids
from sglang_v4.entrypoints.chat_template import resolve_chat_template
from sglang_v4.entrypoints.openai.sampling_defaults import model_sampling_defaults
from sglang_v4.hf_transformers_utils import load_tokenizer_config
from sglang_v4.model_loader.checkpoint_config import weight_block_size
from transformers import AutoTokenizer, DeepseekV4Config, GenerationConfig

CFG: dict[str, Any] = CONFIGS["sliding_first"]
BOM = codecs.BOM_UTF8
TEMPLATE = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


def _render(text: str) -> str:
    """``text`` rendered over :data:`MESSAGES` by a plain sandboxed Jinja environment."""
    return jinja2.sandbox.ImmutableSandboxedEnvironment().from_string(text).render(messages=MESSAGES)


def _with_bom(path: Path) -> None:
    """Prefix the file at ``path`` with the UTF-8 byte-order mark (what Windows editors write)."""
    path.write_bytes(BOM + path.read_bytes())


# --------------------------------------------------------------------------- byte-order marks


@pytest.mark.parametrize("where", ["flag_file", "tokenizer_default", "tokenizer_named"])
def test_jinja_167_a_byte_order_mark_is_not_template_text(tmp_path: Path, where: str) -> None:
    """pallets/jinja#167 (also mitmproxy/pdoc#364, ericf/express-handlebars#77): a template file
    saved as "UTF-8 with BOM" rendered the invisible U+FEFF as its first character. Here that is
    the first character of every chat prompt. Expected: the template read from a ``--chat-template``
    file, from the tokenizer's ``chat_template.jinja`` or from
    ``additional_chat_templates/<name>.jinja`` is the file's text after the mark, and the prompt
    it renders is ``<user>hi<assistant>yo`` (hand-computed), with no U+FEFF."""
    want_prompt = "<user>hi<assistant>yo"
    assert _render(TEMPLATE) == want_prompt
    if where == "flag_file":
        f = tmp_path / "t.jinja"
        f.write_bytes(BOM + TEMPLATE.encode())
        got = resolve_chat_template(str(f), None)
    else:
        m = write_model_dir(tmp_path / "m", CFG)
        if where == "tokenizer_default":
            f = m / "chat_template.jinja"
            name = "default"
        else:
            (m / "chat_template.jinja").write_text("DEFAULT")
            (m / "additional_chat_templates").mkdir()
            f = m / "additional_chat_templates" / "tool_use.jinja"
            name = "tool_use"
        f.write_bytes(BOM + TEMPLATE.encode())
        got = resolve_chat_template(name, str(m))
    assert got == TEMPLATE
    assert _render(got) == want_prompt and "\ufeff" not in _render(got)


def test_openviking_500_config_json_with_a_byte_order_mark_loads_as_without(tmp_path: Path) -> None:
    """volcengine/OpenViking#500 (#499): a ``config.json`` saved by a Windows editor starts with a
    byte-order mark, and ``json.load`` of ``encoding="utf-8"`` text failed on it ("Unexpected UTF-8
    BOM"). Expected (RFC 8259 section 8.1: a parser may ignore the mark): the model directory loads
    as the same bytes without the mark do, for the model config and the loader's
    ``quantization_config`` alike."""
    cfg = {
        **copy.deepcopy(CFG),
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 128]},
    }
    plain = write_model_dir(tmp_path / "plain", cfg)
    marked = write_model_dir(tmp_path / "marked", cfg)
    _with_bom(marked / "config.json")
    assert (marked / "config.json").read_bytes()[:3] == BOM
    with pytest.raises(json.JSONDecodeError, match="BOM"):  # the report's failure, as Python shows it
        json.loads((marked / "config.json").read_bytes().decode("utf-8"))
    want = ModelConfig.from_pretrained(str(plain)).to_dict()
    assert ModelConfig.from_pretrained(str(marked)).to_dict() == want
    assert weight_block_size(str(marked)) == (64, 128)


def test_oh_my_opencode_slim_1028_generation_config_with_a_mark_is_not_dropped(tmp_path: Path) -> None:
    """alvinunreal/oh-my-opencode-slim#1028: a config file with a UTF-8 byte-order mark was
    silently discarded (one warning at load) and the defaults it held were never applied. Here the
    same happened to ``generation_config.json``: its sampling defaults and stop ids were dropped.
    Expected: the values the file holds, exactly as written, as transformers'
    ``GenerationConfig`` reads them from the same file without the mark."""
    gen = {"temperature": 0.6, "top_p": 0.95, "eos_token_id": [1, 7]}
    plain = write_model_dir(tmp_path / "plain", CFG, gen)
    marked = write_model_dir(tmp_path / "marked", CFG, gen)
    _with_bom(marked / "generation_config.json")
    hf = GenerationConfig.from_pretrained(str(plain))
    assert (hf.temperature, hf.top_p, hf.eos_token_id) == (0.6, 0.95, [1, 7])
    assert model_sampling_defaults(str(marked), "model") == {"temperature": 0.6, "top_p": 0.95}
    assert generation_eos_token_ids(str(marked)) == [1, 7]
    assert ModelConfig.from_pretrained(str(marked)).generation_eos_token_ids == [1, 7]


def test_node_config_215_tokenizer_config_with_a_mark_reads_as_without(tmp_path: Path) -> None:
    """node-config/node-config#215: a JSON config written with a byte-order mark failed to parse
    ("Unexpected token"); the fix strips a leading U+FEFF. Expected: a ``tokenizer_config.json``
    (and ``special_tokens_map.json``) with the mark reads as the same files without it, chat
    template and special tokens included."""
    plain = write_model_dir(tmp_path / "plain", CFG)
    tc = json.loads((plain / "tokenizer_config.json").read_text())
    tc["chat_template"] = TEMPLATE
    (plain / "tokenizer_config.json").write_text(json.dumps(tc))
    marked = write_model_dir(tmp_path / "marked", CFG)
    (marked / "tokenizer_config.json").write_bytes(BOM + json.dumps(tc).encode())
    want = load_tokenizer_config(str(plain))
    assert want["chat_template"] == TEMPLATE and want["eos_token"] == tc["eos_token"]
    assert load_tokenizer_config(str(marked)) == want


# --------------------------------------------------------------------------- non-finite numbers


def _rmsnorm64(x: torch.Tensor, eps: float) -> torch.Tensor:
    """float64 ``x / sqrt(mean(x^2) + eps)`` (the RMSNorm of DeepSeek's reference, weight 1)."""
    x = x.double()
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@pytest.mark.parametrize("field", ["rms_norm_eps", "hc_eps"])
@pytest.mark.parametrize("value", [-1e-6, -1.0, math.nan, math.inf])
def test_mlx_4312_a_negative_or_non_finite_norm_eps_is_refused(field: str, value: float) -> None:
    """ml-explore/mlx#4312: a negative ``eps`` under the RMSNorm's square root returned NaN for
    the rows whose mean square fell below ``-eps``, part finite and part NaN, with no error.
    Expected: a ``config.json`` ``rms_norm_eps`` / ``hc_eps`` that is negative, NaN or infinite
    is refused with a ``ValueError`` naming the field (the float64 RMSNorm shows each gives NaN
    or all-zero rows); 0 and the published 1e-6 load."""
    x = torch.tensor([[1e-4, -2e-4, 3e-4, 0.0], [1.0, 2.0, 3.0, 4.0]])
    y = _rmsnorm64(x, value)
    assert bool(torch.isnan(y).any()) or bool((y == 0).all())  # the value breaks the norm
    assert torch.isfinite(_rmsnorm64(x, 1e-6)).all()
    with pytest.raises(ValueError, match=field):
        ModelConfig.from_dict({**copy.deepcopy(CFG), field: value})
    for ok in (0.0, 1e-6):
        assert getattr(ModelConfig.from_dict({**copy.deepcopy(CFG), field: ok}).hf, field) == ok


def test_dynamo_3043_infinity_literals_parse_but_a_read_field_must_be_finite(tmp_path: Path) -> None:
    """ai-dynamo/dynamo#3043 (also ome-projects/ome#470, huggingface/transformers#42959): published
    configs carry ``Infinity`` (``"time_step_limit": [0.0, Infinity]``), which strict JSON parsers
    refused. Expected: such a literal in a field the model never reads loads, as Python's ``json``
    and transformers' ``DeepseekV4Config`` take it; but a ``NaN`` / ``Infinity`` in a field the
    math reads (``routed_scaling_factor``, ``swiglu_limit`` NaN) is refused naming the field, not
    served as NaN logits. ``swiglu_limit`` ``Infinity`` is "no clamp" and loads."""
    base = json.dumps(CFG)[:-1]
    m = write_model_dir(tmp_path / "unread", CFG)
    (m / "config.json").write_text(base + ', "time_step_limit": [0.0, Infinity]}')
    raw = json.loads((m / "config.json").read_text())
    assert raw["time_step_limit"] == [0.0, math.inf]
    assert DeepseekV4Config(**{k: v for k, v in raw.items() if k != "model_type"}).time_step_limit == [
        0.0,
        math.inf,
    ]
    mc = ModelConfig.from_pretrained(str(m))
    assert mc.hf.routed_scaling_factor == CFG.get(
        "routed_scaling_factor", DeepseekV4Config().routed_scaling_factor
    )
    for field, literal in (
        ("routed_scaling_factor", "NaN"),
        ("routed_scaling_factor", "Infinity"),
        ("routed_scaling_factor", "-Infinity"),
        ("routed_scaling_factor", "0.0"),
        ("swiglu_limit", "NaN"),
    ):
        (m / "config.json").write_text(base + f', "{field}": {literal}}}')
        with pytest.raises(ValueError, match=field):
            ModelConfig.from_pretrained(str(m))
    (m / "config.json").write_text(base + ', "swiglu_limit": Infinity}')
    assert ModelConfig.from_pretrained(str(m)).hf.swiglu_limit == math.inf


# --------------------------------------------------------------------------- generation_config.json


def test_vllm_17787_a_top_k_equal_to_transformers_default_is_still_applied(tmp_path: Path) -> None:
    """vllm-project/vllm#17787: reading ``generation_config.json`` through transformers'
    ``to_diff_dict`` lost ``"top_k": 50`` because 50 is ``GenerationConfig``'s own default, so the
    model's recommended top-k was never applied. Expected: a value the file sets is a chat default
    whatever transformers' default was (``top_k`` 50 and ``top_p`` 1.0 here: transformers 4.51's
    defaults, as the report quotes them), and ``GenerationConfig`` reads the same values from the
    file."""
    m = write_model_dir(tmp_path / "m", CFG, {"top_k": 50, "top_p": 1.0})
    hf = GenerationConfig.from_pretrained(str(m))
    assert (hf.top_k, hf.top_p) == (50, 1.0)
    assert model_sampling_defaults(str(m), "model") == {"top_k": 50, "top_p": 1.0}


def test_transformers_33427_zero_temperature_with_do_sample_false_is_a_greedy_default(tmp_path: Path) -> None:
    """huggingface/transformers#33427 (and #36896): ``do_sample: false`` with ``temperature: 0.0``
    is the natural way to write "greedy" in ``generation_config.json``; transformers warns and
    ``TemperatureLogitsWarper`` refuses 0.0. Expected here: the file's ``temperature`` 0.0 is the
    chat default as written (0 means greedy in SGLang's sampling parameters), not refused and
    not replaced by 1.0; ``GenerationConfig`` reads the same 0.0 and ``do_sample`` false."""
    m = write_model_dir(tmp_path / "m", CFG, {"do_sample": False, "temperature": 0.0})
    hf = GenerationConfig.from_pretrained(str(m))
    assert (hf.do_sample, hf.temperature) == (False, 0.0)
    got = model_sampling_defaults(str(m), "model")
    assert got == {"temperature": 0.0} and isinstance(got["temperature"], float)


# --------------------------------------------------------------------------- named chat templates


def test_llama_cpp_6484_named_template_list_resolves_by_name(tmp_path: Path) -> None:
    """ggml-org/llama.cpp#6484 (ollama/ollama#6522, llmmanorg/llmman#461): since transformers 4.39
    ``tokenizer_config.json``'s ``chat_template`` may be a list of ``{"name", "template"}``, and
    the one named ``default`` is the default wherever it sits (llmman#461: not first). Expected:
    ``--chat-template default`` / ``tool_use`` resolve to the entries of those names, as
    transformers' ``AutoTokenizer`` maps the list, and an unknown name is refused listing both."""
    m = write_model_dir(tmp_path / "m", CFG)
    tc = json.loads((m / "tokenizer_config.json").read_text())
    tc["chat_template"] = [
        {"name": "tool_use", "template": "TOOL{{ messages|length }}"},
        {"name": "default", "template": "DEF{{ messages|length }}"},
    ]
    (m / "tokenizer_config.json").write_text(json.dumps(tc))
    hf = AutoTokenizer.from_pretrained(str(m)).chat_template
    assert hf == {"tool_use": "TOOL{{ messages|length }}", "default": "DEF{{ messages|length }}"}
    for name in ("default", "tool_use"):
        assert resolve_chat_template(name, str(m)) == hf[name]
    assert _render(resolve_chat_template("default", str(m))) == "DEF2"
    with pytest.raises(ValueError, match=r"chat_template: 'rag'.*\['default', 'tool_use'\]"):
        resolve_chat_template("rag", str(m))


def test_transformers_js_1662_template_only_in_chat_template_jinja(tmp_path: Path) -> None:
    """huggingface/transformers.js#1662: a ``tokenizer_config.json`` without (or with a null)
    ``chat_template`` beside a ``chat_template.jinja`` left the tokenizer with no template.
    Expected: the ``.jinja`` file is the default template, as transformers' ``AutoTokenizer``
    reads it, and renders the expected prompt."""
    m = write_model_dir(tmp_path / "m", CFG)
    tc = json.loads((m / "tokenizer_config.json").read_text())
    tc["chat_template"] = None
    (m / "tokenizer_config.json").write_text(json.dumps(tc))
    (m / "chat_template.jinja").write_text(TEMPLATE)
    assert AutoTokenizer.from_pretrained(str(m)).chat_template == TEMPLATE
    assert load_tokenizer_config(str(m))["chat_template"] == TEMPLATE
    assert _render(resolve_chat_template("default", str(m))) == "<user>hi<assistant>yo"


# --------------------------------------------------------------------------- eos_token_id lists


def test_exllamav2_566_a_config_eos_token_id_list_keeps_every_id(tmp_path: Path) -> None:
    """turboderp-org/exllamav2#566 (mlc-ai/mlc-llm#1924): Llama 3.1's ``config.json`` made
    ``eos_token_id`` a list of three ids, and loaders that expected one int failed ("Value for
    eos_token_id is not of expected type int"). Expected: every id of the list ends a generation,
    in the file's order, as ``DeepseekV4Config`` keeps the list; a ``generation_config.json`` id
    not in it is added after them."""
    ids = [5, 3, 9]
    m = write_model_dir(
        tmp_path / "m", {**copy.deepcopy(CFG), "eos_token_id": ids}, {"eos_token_id": [3, 11]}
    )
    raw = json.loads((m / "config.json").read_text())
    assert DeepseekV4Config(**{k: v for k, v in raw.items() if k != "model_type"}).eos_token_id == ids
    mc = ModelConfig.from_pretrained(str(m))
    assert mc.eos_token_ids == [5, 3, 9, 11]


# --------------------------------------------------------------------------- SGLang launch commands


@pytest.mark.parametrize(
    "cmd, want",
    [
        (  # sgl-project/sglang#33207, the DeepSeek-V4-Flash-0731 launch
            "--trust-remote-code --model-path deepseek-ai/DeepSeek-V4-Flash-0731 --tp 2 "
            "--moe-runner-backend flashinfer_mxfp4 --reasoning-parser deepseek-v4 --tool-call-parser deepseekv4 "
            "--mem-fraction-static 0.92 --cuda-graph-max-bs-decode 32 --host 0.0.0.0 --port 30000",
            {"tp_size": 2, "mem_fraction_static": 0.92, "cuda_graph_max_bs": 32, "port": 30000},
        ),
        (  # sgl-project/sglang#23686, the DeepSeek-V4-Pro AIME launch (``--speculative-algo`` abbreviated)
            "--trust-remote-code --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --cuda-graph-max-bs 256 "
            "--max-running-requests 256 --enable-metrics --host 0.0.0.0 --port 30300 --mem-fraction-static 0.8 "
            "--tool-call-parser deepseekv4 --reasoning-parser deepseek-v4 --moe-runner-backend marlin "
            "--speculative-algo EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 4",
            {
                "tp_size": 8,
                "mem_fraction_static": 0.8,
                "cuda_graph_max_bs": 256,
                "max_running_requests": 256,
                "speculative_algorithm": "EAGLE",
            },
        ),
    ],
    ids=["sglang_33207", "sglang_23686"],
)
def test_sglang_33207_and_23686_published_v4_launch_commands_parse(cmd: str, want: dict[str, Any]) -> None:
    """sgl-project/sglang#33207 and #23686 quote the DeepSeek-V4 launch commands users copy
    (``--cuda-graph-max-bs-decode``, ``--speculative-algo`` as argparse abbreviates
    ``--speculative-algorithm``, ``--moe-runner-backend``, the ``deepseekv4`` / ``deepseek-v4``
    parser names). Expected: each parses and validates unchanged, and the flags this runtime
    honours hold the values the command gives (read off the command line itself)."""
    args = parse(cmd)
    assert args.model_path == cmd.split("--model-path ")[1].split()[0]
    assert (args.tool_call_parser, args.reasoning_parser) == ("deepseekv4", "deepseek-v4")
    for k, v in want.items():
        assert getattr(args, k) == v, k
