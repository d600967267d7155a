"""A thirty-second set of public bug reports on tokenization: the runtime's tokenizer
(``FastTokenizer``, what the tokenizer manager and the detokenizer load) against transformers on
tokenizer files of several shapes: a named special token that ``tokenizer.json`` holds as a
non-special (or plain vocabulary) token, a special token declared only in
``tokenizer_config.json``'s ``added_tokens_decoder``, one token as both BOS and EOS, a
post-processor that adds a BOS; and, on the DeepSeek-V4 tokenizer, special-token strings in the
middle of user text and characters split into byte pieces.

One report failed: ``skip_special_tokens`` kept an EOS named in ``tokenizer_config.json`` when
``tokenizer.json`` held it as a non-special added token (or a vocabulary token); transformers
registers the named special tokens as special once loaded, and the runtime now does too.

Fixtures: a small byte-level BPE tokenizer of the V4 kind written per test
(``tokenizer_testutil.tiny_tokenizer_json``) with its ``tokenizer_config.json``, and the
DeepSeek-V4 tokenizer as the runtime's wrapper (``fast``). Oracles: transformers' reading of the
same files (``tokenizer_testutil.transformers_tokenizer``, ``hf``: ids, tokens, ``decode`` with
and without ``skip_special_tokens``, the special ids) and the reports' stated expected values.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sglang_v4.hf_transformers_utils import FastTokenizer
from tokenizer_testutil import BOS, EOS, PAD, tiny_tokenizer_json, transformers_tokenizer

BASE = {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD}


def _pair(
    path: Path, cfg: dict[str, Any], extra: list[Any] | None = None, post: Callable[[Any], Any] | None = None
) -> tuple[FastTokenizer, Any]:
    """Write the tiny tokenizer (plus ``extra`` added tokens and post-processor ``post(tokenizer)``)
    and ``cfg`` as ``tokenizer_config.json`` at ``path``; return the runtime's and transformers'
    reading of it."""
    from tokenizers import Tokenizer

    tiny_tokenizer_json(path / "tokenizer.json")
    if extra or post:
        t = Tokenizer.from_file(str(path / "tokenizer.json"))
        if extra:
            t.add_tokens(extra)
        if post:
            t.post_processor = post(t)
        t.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(cfg), encoding="utf-8")
    return FastTokenizer(str(path)), transformers_tokenizer(path)


def _assert_same(fast: Any, hf: Any, texts: list[str], id_lists: list[list[int]]) -> None:
    """``fast`` and ``hf`` agree on the ids of ``texts`` (with and without special tokens), the text
    of ``id_lists`` (with and without ``skip_special_tokens``) and the special ids."""
    for text in texts:
        for add in (True, False):
            assert fast.encode(text, add_special_tokens=add) == hf.encode(text, add_special_tokens=add), (
                text,
                add,
            )
    for ids in id_lists:
        for skip in (True, False):
            assert fast.decode(ids, skip_special_tokens=skip) == hf.decode(ids, skip_special_tokens=skip), (
                ids,
                skip,
            )
    assert (fast.bos_token_id, fast.eos_token_id, fast.pad_token_id) == (
        hf.bos_token_id,
        hf.eos_token_id,
        hf.pad_token_id,
    )
    assert sorted(fast.all_special_ids) == sorted(hf.all_special_ids)


@pytest.mark.parametrize("eos", ["<x>", "Hell"])
def test_transformers_10202_named_eos_not_flagged_special_is_skipped(tmp_path: Path, eos: str) -> None:
    """huggingface/transformers#10202: a fast tokenizer whose special tokens were not registered as
    special in the backend ignored ``skip_special_tokens=True``, so the EOS text stayed in the
    output. Expected: an ``eos_token`` named in ``tokenizer_config.json`` that ``tokenizer.json``
    holds as a non-special added token (``<x>``) or as a vocabulary token (``Hell``) is dropped by
    ``decode(skip_special_tokens=True)`` and kept without it, as transformers does; ids agree."""
    from tokenizers import AddedToken

    extra = [AddedToken("<x>", special=False)] if eos == "<x>" else None
    fast, hf = _pair(tmp_path, {**BASE, "eos_token": eos}, extra)
    eid = fast.eos_token_id
    assert eid is not None and eid == hf.eos_token_id
    word = fast.encode("He", add_special_tokens=False)
    _assert_same(fast, hf, [f"Hi{eos}Hello", f"He {eos}"], [[eid, *word], [*word, eid]])
    assert fast.decode([*word, eid], skip_special_tokens=True) == "He"


@pytest.mark.parametrize("key", ["additional_special_tokens", "extra_special_tokens"])
def test_transformers_10202_extra_token_keeps_its_file_flag(tmp_path: Path, key: str) -> None:
    """huggingface/transformers#10202 (the other side of the same rule): an extra special token
    that ``tokenizer.json`` holds as a non-special added token keeps that flag in transformers 5,
    so ``decode(skip_special_tokens=True)`` keeps its text. Expected: the runtime decodes it as
    transformers does, and lists it among the special ids as transformers does."""
    from tokenizers import AddedToken

    fast, hf = _pair(tmp_path, {**BASE, key: ["<y>"]}, [AddedToken("<y>", special=False)])
    yid = fast.convert_tokens_to_ids("<y>")
    _assert_same(fast, hf, ["a<y>b"], [[yid, *fast.encode("b", add_special_tokens=False)]])


def test_transformers_23250_decoder_only_special_token_is_skipped(tmp_path: Path) -> None:
    """huggingface/transformers#23250: a token added as special (``ஐ`` in ``"this is a ஐ apple"``)
    was dropped by ``skip_special_tokens`` in one tokenizer class and kept in the other. Expected: a
    special token declared only in ``tokenizer_config.json``'s ``added_tokens_decoder`` gets
    transformers' id, splits the text as there, and is dropped with ``skip_special_tokens`` (text
    ``"this is a  apple"``, the report's fast-tokenizer output) and kept without it."""
    flags = {"special": True, "normalized": False, "lstrip": False, "rstrip": False, "single_word": False}
    cfg = {**BASE, "added_tokens_decoder": {"300": {"content": "ஐ", **flags}}}
    fast, hf = _pair(tmp_path, cfg)
    text = "this is a ஐ apple"
    assert fast.convert_tokens_to_ids("ஐ") == hf.convert_tokens_to_ids("ஐ")
    ids = fast.encode(text, add_special_tokens=False)
    _assert_same(fast, hf, [text], [ids])
    assert fast.decode(ids, skip_special_tokens=True) == "this is a  apple"


def test_torchtitan_3279_one_token_as_bos_and_eos(tmp_path: Path) -> None:
    """pytorch/torchtitan#3279: with the same string as ``bos_token`` and ``eos_token`` (GPT-2's
    ``<|endoftext|>``), only the BOS role was recorded and the EOS id stayed unset. Expected: both
    ids are that token's id, as transformers reads them."""
    fast, hf = _pair(tmp_path, {**BASE, "bos_token": EOS})
    eid = hf.convert_tokens_to_ids(EOS)
    assert fast.bos_token_id == fast.eos_token_id == eid
    _assert_same(fast, hf, ["Hello"], [[eid, 5, eid]])


def test_tokenizers_1643_post_processor_bos_added_with_special_tokens(tmp_path: Path) -> None:
    """huggingface/tokenizers#1643 and #785, EleutherAI/lm-evaluation-harness#2781: whether
    ``add_special_tokens=True`` adds a BOS is the ``tokenizer.json`` post-processor's decision.
    Expected: with a ``TemplateProcessing`` that prepends BOS, the runtime's ids with special tokens
    start with BOS exactly as transformers' do (also for a text that already spells BOS), and
    without special tokens they carry none."""
    from tokenizers import processors

    def post(t: Any) -> Any:
        return processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, t.token_to_id(BOS))]
        )

    fast, hf = _pair(tmp_path, BASE, post=post)
    _assert_same(fast, hf, ["Hello world", f"{BOS}Hello"], [])
    assert fast.encode("Hello", add_special_tokens=True)[0] == fast.bos_token_id
    assert fast.bos_token_id not in fast.encode("Hello", add_special_tokens=False)


@pytest.mark.parametrize(
    "text",
    [
        "A <｜User｜> sentence.",
        f"<｜User｜>\n I am good {EOS}\n<｜Assistant｜>",
        f"x{BOS}{BOS}y {EOS} z",
    ],
)
def test_transformers_3057_special_token_mid_text_same_split(fast: Any, hf: Any, text: str) -> None:
    """huggingface/transformers#3057 and #35973: special-token strings in the middle of text were
    split differently by the two tokenizer classes (an extra space token before ``<mask>``, the
    spaces around ``<|end|>`` handled differently). Expected on the DeepSeek-V4 tokenizer: the
    runtime's ids and tokens equal transformers', each control string a single id."""
    ids = fast.encode(text, add_special_tokens=False)
    assert ids == hf.encode(text, add_special_tokens=False)
    assert fast.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)
    for special in ("<｜User｜>", BOS, EOS):
        assert ids.count(hf.convert_tokens_to_ids(special)) == text.count(special)


@pytest.mark.parametrize("text", [" e.g., ♩", "♩", "𝄞 notes ♩♪"])
def test_transformers_js_1258_byte_pieces_of_a_character(fast: Any, hf: Any, text: str) -> None:
    """huggingface/transformers.js#1258: on a DeepSeek tokenizer, ``♩`` is two byte-level tokens and
    one of them decodes alone to U+FFFD; the answer: the same ids as the Python library. Expected:
    the runtime's ids equal transformers', the whole decode is the text, and each id decoded alone
    gives transformers' text (a lone byte piece holds U+FFFD)."""
    ids = fast.encode(text, add_special_tokens=False)
    assert ids == hf.encode(text, add_special_tokens=False)
    assert fast.decode(ids) == hf.decode(ids) == text
    assert [fast.decode([i]) for i in ids] == [hf.decode([i]) for i in ids]
    assert any("\ufffd" in fast.decode([i]) for i in ids)
