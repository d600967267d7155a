"""Tokenizer files of DeepSeek-V4 derivatives as users have them, read as transformers reads them.

The server's tokenizer (``FastTokenizer``: ``tokenizers`` only) must give the ids, special tokens
and chat templates of ``transformers.AutoTokenizer`` on the same directory (the oracle), for the
layouts published checkpoints and fine-tunes carry beside the V4 ``tokenizer.json``:

* special tokens as ``AddedToken`` dicts (``"__type": "AddedToken"``, the shape of
  deepseek-ai/DeepSeek-V3's tokenizer_config.json) or plain strings; ``pad_token`` missing;
  ``tokenizer_class`` ``LlamaTokenizerFast`` with ``add_bos_token: true`` (DeepSeek-V3's; the
  transformers releases whose ``LlamaTokenizer`` rebuilds the byte-level pre-tokenizer,
  huggingface/transformers#45488, are read through ``transformers_tokenizer``, which drops the
  rebuild as later releases do);
* the legacy ``special_tokens_map.json`` (read only when the config has no
  ``added_tokens_decoder``, and then over the config's entries);
* ``added_tokens_decoder`` / ``extra_special_tokens`` / ``additional_special_tokens`` naming
  tokens ``tokenizer.json`` lacks (fine-tunes adding chat markers), with gaps in the declared ids,
  and an ``eos_token`` that is not in the vocabulary (added, as transformers adds it);
* ``chat_template`` as a list of named templates (the shape of CohereForAI/c4ai-command-r-v01's
  tokenizer_config.json: ``default`` / ``tool_use`` / ``rag``), ``chat_template.jinja`` and
  ``additional_chat_templates/`` beside it;
* ``model_max_length`` 1e30 (transformers' "no limit") or below the model's context (the
  context stays the model's ``max_position_embeddings``, SGLang's rule).

Before, ``FastTokenizer`` read only ``tokenizer_config.json``'s bos / eos / pad: a token declared
only in ``added_tokens_decoder`` was split into text pieces (other prompt ids than transformers'),
``special_tokens_map.json`` was ignored (no EOS id). The tokenizer's EOS also ends generations
now, as in SGLang (``Req.check_finished`` stops on ``tokenizer.eos_token_id``): a fine-tune whose
tokenizer names another end token than its ``config.json`` stopped only at the context's end.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from server_fixture import tokenizer_source_dir
from sglang_v4.entrypoints.launcher import check_model_dir
from sglang_v4.hf_transformers_utils import FastTokenizer, get_tokenizer
from tokenizer_testutil import BOS, EOS, PAD, tiny_tokenizer_json, transformers_tokenizer
from transformers import AutoTokenizer

SRC = Path(tokenizer_source_dir())
BASE: dict[str, Any] = json.loads((SRC / "tokenizer_config.json").read_text())
NAMED = ("bos_token", "eos_token", "pad_token")
NO_NAMED = {k: v for k, v in BASE.items() if k not in NAMED}
TOOL = {"content": "<|tool_x|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}
TEXTS = (
    "Hello world 你好",
    "a<|tool_x|>b<|A|>c<|B|>",
    "x<|im_end|>y<|new_x|><|new_y|>",
    f"{EOS}z<｜place▁holder▁no▁9｜>{BOS}",
)

#: name -> (tokenizer_config.json or None, {other file: text})
VARIANTS: dict[str, tuple[dict[str, Any] | None, dict[str, str]]] = {
    "special-tokens-map-only": (
        NO_NAMED,
        {
            "special_tokens_map.json": json.dumps(
                {
                    "bos_token": {"content": BOS, "lstrip": False, "normalized": True},
                    "eos_token": EOS,
                    "pad_token": PAD,
                }
            )
        },
    ),
    "special-tokens-map-wins": (
        BASE,
        {
            "special_tokens_map.json": json.dumps(
                {
                    "eos_token": "<｜place▁holder▁no▁5｜>",
                    "bos_token": None,
                    "additional_special_tokens": ["<｜place▁holder▁no▁9｜>"],
                }
            )
        },
    ),
    "special-tokens-map-ignored": (
        {**BASE, "added_tokens_decoder": {"1": {"content": EOS, "special": True}}},
        {"special_tokens_map.json": json.dumps({"eos_token": "<｜place▁holder▁no▁5｜>"})},
    ),
    "added-token-not-in-tokenizer-json": (
        {**BASE, "added_tokens_decoder": {"129280": {**TOOL, "special": True}}},
        {},
    ),
    "added-tokens-with-gap": (
        {
            **BASE,
            "added_tokens_decoder": {
                "129300": {"content": "<|A|>", "special": True},
                "129290": {"content": "<|B|>", "special": False},
            },
        },
        {},
    ),
    "added-token-other-flags": (
        {**BASE, "added_tokens_decoder": {"1": {**TOOL, "content": EOS, "special": True}}},
        {},
    ),
    "eos-not-in-vocab": ({**BASE, "eos_token": "<|im_end|>"}, {}),
    "eos-added-token-dict-not-in-vocab": (
        {**BASE, "eos_token": {"__type": "AddedToken", **TOOL, "content": "<|im_end|>", "normalized": False}},
        {},
    ),
    "extra-special-tokens": ({**BASE, "extra_special_tokens": ["<｜place▁holder▁no▁8｜>", "<|new_x|>"]}, {}),
    "additional-special-tokens": (
        {**BASE, "additional_special_tokens": ["<｜place▁holder▁no▁7｜>", "<|new_y|>"]},
        {},
    ),
    "strings-no-pad": ({**NO_NAMED, "bos_token": BOS, "eos_token": EOS}, {}),
    "unk-token": ({**BASE, "unk_token": "<｜place▁holder▁no▁3｜>"}, {}),
    "v3-llama-class": ({**BASE, "tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True}, {}),
    "max-length-1e30": ({**BASE, "model_max_length": 1e30}, {}),
    "max-length-small": ({**BASE, "model_max_length": 4096}, {}),
    "named-templates": (
        {
            **BASE,
            "chat_template": [{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}],
        },
        {},
    ),
    "template-files-win": (
        {**BASE, "chat_template": [{"name": "default", "template": "D"}]},
        {"chat_template.jinja": "J", "additional_chat_templates/rag.jinja": "R"},
    ),
    "template-dir-only": ({**BASE, "chat_template": "C"}, {"additional_chat_templates/rag.jinja": "R"}),
    "no-tokenizer-config": (None, {}),
}


def tok_dir(root: Path, cfg: dict[str, Any] | None, files: dict[str, str] | None = None) -> Path:
    """:func:`tiny_tokenizer_json` with ``cfg`` as ``tokenizer_config.json`` (none when ``None``)
    and ``files`` beside it."""
    root.mkdir(parents=True, exist_ok=True)
    tiny_tokenizer_json(root / "tokenizer.json")
    if cfg is not None:
        (root / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False))
    for name, text in (files or {}).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("name", list(VARIANTS))
def test_tokenizer_files_read_as_transformers_reads_them(tmp_path: Path, name: str) -> None:
    cfg, files = VARIANTS[name]
    d = tok_dir(tmp_path / "tok", cfg, files)
    ref, ours = transformers_tokenizer(d), get_tokenizer(str(d))
    assert isinstance(ours, FastTokenizer)
    for attr in ("bos_token", "eos_token", "pad_token", "bos_token_id", "eos_token_id", "pad_token_id"):
        assert getattr(ours, attr) == getattr(ref, attr), attr
    assert ours.unk_token_id == ref.unk_token_id
    assert ours.chat_template == ref.chat_template
    assert len(ours) == len(ref) and ours.all_special_ids == sorted(set(ref.all_special_ids))
    assert ours.model_max_length == ref.model_max_length
    for text in TEXTS:
        ids = ref.encode(text)
        assert ours.encode(text) == ids, text
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == ref.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "tokenizer_config.json is not valid JSON"),
        ("[1, 2]", "tokenizer_config.json is not a JSON object"),
    ],
)
def test_broken_tokenizer_config_is_named_at_start_up(tmp_path: Path, content: str, match: str) -> None:
    """A truncated or non-object ``tokenizer_config.json``: one line naming ``tokenizer_path`` and
    the file (it fell back to transformers and reported transformers' own failure before);
    ``--skip-tokenizer-init`` does not read it. ``transformers`` refuses the file too."""
    d = tok_dir(tmp_path / "m", BASE)
    shutil.copy(
        Path(__file__).parent / "fixtures" / "configs" / "tiny-DeepseekV4ForCausalLM.config.json",
        d / "config.json",
    )
    (d / "tokenizer_config.json").write_text(content)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the oracle: transformers fails on it too
        AutoTokenizer.from_pretrained(str(d))
    with pytest.raises(ValueError, match=f"tokenizer_path: .*{match}") as e:
        check_model_dir(str(d), load_format="dummy")
    assert "\n" not in str(e.value)
    check_model_dir(str(d), load_format="dummy", skip_tokenizer_init=True)


def test_model_max_length_other_numbers_do_not_break_loading(tmp_path: Path) -> None:
    """``Infinity`` / a string (Python's json reads both; transformers keeps them as given) no
    longer throws the fast tokenizer over to transformers: ids stay those of the plain files."""
    plain = get_tokenizer(str(tok_dir(tmp_path / "plain", BASE)))
    for value in ("Infinity", '"none"', "true"):
        d = tok_dir(tmp_path / value.strip('"'), BASE)
        (d / "tokenizer_config.json").write_text(json.dumps(BASE)[:-1] + f', "model_max_length": {value}}}')
        ours = get_tokenizer(str(d))
        assert isinstance(ours, FastTokenizer)
        assert ours.encode(TEXTS[0]) == plain.encode(TEXTS[0])


# --------------------------------------------------------------------- the tokenizer's EOS stops
@pytest.fixture(scope="module")
def greedy(sched_model_dir: str) -> tuple[list[int], list[int]]:
    """A prompt and HF transformers' greedy continuation of it on the scheduler test model."""
    from transformers import DeepseekV4ForCausalLM

    hf = DeepseekV4ForCausalLM.from_pretrained(sched_model_dir, dtype=torch.float32).eval()
    prompt = [5, 17, 301, 42, 7, 99, 3, 250]
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(5):
            seq.append(int(hf(torch.tensor([seq])).logits[0, -1].argmax()))
    return prompt, seq[len(prompt) :]


@pytest.mark.parametrize("where", ["config-list", "tokenizer-config", "special-tokens-map"])
def test_every_named_end_token_stops_generation(
    sched_model_dir: str, tmp_path: Path, greedy: tuple[list[int], list[int]], tok: Any, where: str
) -> None:
    """A token the greedy continuation emits (oracle: HF transformers) is named as an end token in
    one place only: ``config.json``'s ``eos_token_id`` list, ``tokenizer_config.json``'s
    ``eos_token`` or the legacy ``special_tokens_map.json``'s (``generation_config.json``'s list:
    ``test_loader_checkpoint_faults.py``). The generation ends on it with ``finish_reason`` stop
    (SGLang stops on the union of the model's, the generation config's and the tokenizer's EOS;
    the last two cases failed before: the tokenizer's EOS never stopped)."""
    from scheduler_testutil import make_scheduler, run_one

    prompt, cont = greedy
    d = tmp_path / "model"
    shutil.copytree(sched_model_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg_eos = cfg.get("eos_token_id")
    k = next(i for i in range(1, 5) if cont[i] not in cont[:i] and cont[i] != cfg_eos)
    word = tok.convert_ids_to_tokens(cont[k])
    tcfg = json.loads((d / "tokenizer_config.json").read_text())
    if where == "config-list":
        cfg["eos_token_id"] = [e for e in (cfg_eos, cont[k]) if e is not None]
        (d / "config.json").write_text(json.dumps(cfg))
    elif where == "tokenizer-config":
        tcfg["eos_token"] = word
        (d / "tokenizer_config.json").write_text(json.dumps(tcfg, ensure_ascii=False))
    else:
        tcfg.pop("eos_token")
        (d / "tokenizer_config.json").write_text(json.dumps(tcfg, ensure_ascii=False))
        stm = {"eos_token": {"content": word, "lstrip": False, "rstrip": False, "normalized": False}}
        (d / "special_tokens_map.json").write_text(json.dumps(stm, ensure_ascii=False))
    if where in ("tokenizer-config", "special-tokens-map"):  # the oracle's reading of the files
        assert AutoTokenizer.from_pretrained(str(d)).eos_token_id == cont[k]
    out = run_one(make_scheduler(str(d)), "r", prompt, n=8, ignore_eos=False)
    assert out["ids"] == cont[: k + 1], (out["ids"], cont)
    assert out["finish"] == {"type": "stop", "matched": cont[k]}


def test_tokenizer_path_that_is_a_file_or_missing(tmp_path: Path) -> None:
    """``--tokenizer-path`` pointing at ``tokenizer.json`` itself, or at nothing: one line naming
    ``tokenizer_path`` and what to pass (it said the path had no tokenizer.json)."""
    d = tok_dir(tmp_path / "m", BASE)
    shutil.copy(
        Path(__file__).parent / "fixtures" / "configs" / "tiny-DeepseekV4ForCausalLM.config.json",
        d / "config.json",
    )
    with pytest.raises(ValueError, match="tokenizer_path: .* is a file; pass the directory"):
        check_model_dir(str(d), tokenizer_path=str(d / "tokenizer.json"), load_format="dummy")
    with pytest.raises(ValueError, match="tokenizer_path: .* does not exist"):
        check_model_dir(str(d), tokenizer_path=str(tmp_path / "nope"), load_format="dummy")
    check_model_dir(str(d), tokenizer_path=str(tok_dir(tmp_path / "elsewhere", BASE)), load_format="dummy")


@pytest.mark.parametrize("cfg_eos", [[1, 7, 9], 7, None])
@pytest.mark.parametrize("gen_eos", [[2, 7], 3, None])
def test_stop_set_is_the_union_transformers_reads(tmp_path: Path, cfg_eos: Any, gen_eos: Any) -> None:
    """Every id of ``config.json``'s and ``generation_config.json``'s ``eos_token_id`` (an id or a
    list) and the tokenizer's ``eos_token`` is a stop id, each read by transformers' own reader of
    its file (``AutoConfig``, ``GenerationConfig``, ``AutoTokenizer``); nothing else is."""
    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.managers.stop_tokens import stop_token_ids
    from transformers import AutoConfig, GenerationConfig

    d = tok_dir(tmp_path / "m", {**BASE, "eos_token": "<｜place▁holder▁no▁5｜>"})
    cfg = json.loads(
        (
            Path(__file__).parent / "fixtures" / "configs" / "tiny-DeepseekV4ForCausalLM.config.json"
        ).read_text()
    )
    cfg["eos_token_id"] = cfg_eos
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": gen_eos, "do_sample": True}))
    want: set[int] = set()
    for ids in (
        AutoConfig.from_pretrained(str(d)).eos_token_id,
        GenerationConfig.from_pretrained(str(d)).eos_token_id,
    ):
        want |= set(ids) if isinstance(ids, list) else {ids} if ids is not None else set()
    want.add(AutoTokenizer.from_pretrained(str(d)).eos_token_id)
    assert stop_token_ids(ModelConfig.from_pretrained(str(d)), get_tokenizer(str(d))) == want
    assert stop_token_ids(ModelConfig.from_pretrained(str(d)), None) == want - {
        get_tokenizer(str(d)).eos_token_id
    }


def test_tokenizer_eos_outside_the_model_vocabulary_is_no_stop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A tokenizer whose ``eos_token`` is not in its vocabulary gets it appended (transformers
    adds it, at the first free id): an id the model's embedding does not have. It is left out of
    the stop set with a warning naming it; the config's ids still stop."""
    import logging

    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.managers.stop_tokens import stop_token_ids

    d = tok_dir(tmp_path / "m", {**BASE, "eos_token": "<|im_end|>"})
    cfg = json.loads(
        (
            Path(__file__).parent / "fixtures" / "configs" / "tiny-DeepseekV4ForCausalLM.config.json"
        ).read_text()
    )
    cfg["vocab_size"] = len(get_tokenizer(str(d))) - 1  # the appended token is the one past it
    cfg["eos_token_id"] = 1
    (d / "config.json").write_text(json.dumps(cfg))
    assert AutoTokenizer.from_pretrained(str(d)).eos_token_id == cfg["vocab_size"]
    with caplog.at_level(logging.WARNING):
        assert stop_token_ids(ModelConfig.from_pretrained(str(d)), get_tokenizer(str(d))) == {1}
    assert any("'<|im_end|>'" in m and "outside the model's vocabulary" in m for m in caplog.messages)


@pytest.mark.parametrize(
    "cls",
    [
        "LlamaTokenizerFast",
        "LlamaTokenizer",
        "GPT2TokenizerFast",
        "CodeLlamaTokenizerFast",
        "DeepseekV4Tokenizer",
    ],
)
def test_legacy_tokenizer_class_names_change_nothing(tmp_path: Path, cls: str) -> None:
    """``tokenizer_class`` of older exports (DeepSeek-V3's ``LlamaTokenizerFast``, GPT-2's, a
    class transformers does not have): the ids are ``tokenizer.json``'s own (the oracle: the
    ``tokenizers`` library on the file). transformers 5 itself splits differently for some
    (``CodeLlamaTokenizerFast`` rebuilds a SentencePiece-style pipeline over the byte-level file)."""
    from tokenizers import Tokenizer

    d = tok_dir(tmp_path / "m", {**BASE, "tokenizer_class": cls, "add_bos_token": True})
    raw = Tokenizer.from_file(str(d / "tokenizer.json"))
    ours = get_tokenizer(str(d))
    assert isinstance(ours, FastTokenizer)
    for text in TEXTS:
        assert ours.encode(text) == raw.encode(text).ids, text


def test_tokenizer_tokens_past_the_model_vocabulary_are_named_at_start_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``special_tokens_map.json``'s ``additional_special_tokens`` add tokens after the vocabulary
    (transformers appends them at the next free ids): past a model whose embeddings were not
    resized. A prompt holding one is refused with a 400, and nothing at start-up said why; the
    scheduler's start-up warning names each such token and id, those transformers gives it."""
    import logging

    from sglang_v4.configs.model_config import ModelConfig
    from sglang_v4.managers.stop_tokens import warn_tokens_beyond_vocab

    added = ["<my_special>", "<my_other>"]
    d = tok_dir(tmp_path / "m", None)
    (d / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS, "additional_special_tokens": added})
    )
    hf = AutoTokenizer.from_pretrained(str(d))
    want = [(hf.convert_tokens_to_ids(t), t) for t in added]
    cfg = json.loads(
        (
            Path(__file__).parent / "fixtures" / "configs" / "tiny-DeepseekV4ForCausalLM.config.json"
        ).read_text()
    )
    cfg["vocab_size"] = min(i for i, _ in want)  # the model ends where the added tokens begin
    (d / "config.json").write_text(json.dumps(cfg))
    mc = ModelConfig.from_pretrained(str(d))
    with caplog.at_level(logging.WARNING):
        assert warn_tokens_beyond_vocab(mc, get_tokenizer(str(d))) == want
    assert any(all(f"{t!r} (id {i})" in m for i, t in want) for m in caplog.messages), caplog.messages
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # the scheduler's call: a limited list, the same warning
        assert warn_tokens_beyond_vocab(mc, get_tokenizer(str(d)), limit=1) == want[:1]
    assert any(
        "has 2 token(s)" in m and all(f"{t!r} (id {i})" in m for i, t in want) for m in caplog.messages
    ), caplog.messages
    cfg["vocab_size"] = len(hf)  # a model that has them: no warning
    (d / "config.json").write_text(json.dumps(cfg))
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert warn_tokens_beyond_vocab(ModelConfig.from_pretrained(str(d)), get_tokenizer(str(d))) == []
    assert not caplog.messages


@pytest.mark.parametrize("loader", ["server-transformers-fallback", "bench"])
@pytest.mark.parametrize("cls", ["LlamaTokenizerFast", "LlamaTokenizer"])
def test_transformers_paths_keep_a_byte_level_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loader: str, cls: str
) -> None:
    """The places that read a model directory through transformers (the server's fallback when
    ``FastTokenizer`` fails, the benchmark's tokenizer) give ``tokenizer.json``'s own ids for a
    byte-level file under a ``Llama*`` class, also on the transformers releases whose
    ``AutoTokenizer`` swaps in a ``Metaspace`` pre-tokenizer there (huggingface/transformers#45488:
    spaces and CJK text were lost). Oracle: the ``tokenizers`` library on the file."""
    import sglang_v4.hf_transformers_utils as hfu
    from sglang_v4.bench.datasets import get_tokenizer as bench_get_tokenizer
    from tokenizers import Tokenizer

    d = tok_dir(tmp_path / "m", {**BASE, "tokenizer_class": cls, "add_bos_token": True})
    raw = Tokenizer.from_file(str(d / "tokenizer.json"))
    if loader == "bench":
        encode = bench_get_tokenizer(str(d)).encode
    else:

        def fail(path: str) -> None:
            raise RuntimeError("unsupported tokenizer file")

        monkeypatch.setattr(hfu, "FastTokenizer", fail)
        ours = get_tokenizer(str(d))
        assert not isinstance(ours, FastTokenizer)
        encode = ours.encode
    for text in TEXTS:
        assert encode(text) == raw.encode(text).ids, text
