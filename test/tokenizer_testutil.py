"""A small tokenizer of the DeepSeek-V4 kind for tests that exercise the files around
``tokenizer.json`` (``tokenizer_config.json``, ``special_tokens_map.json``, chat templates) rather
than the vocabulary: it loads in milliseconds where the 6 MB V4 ``tokenizer.json`` takes about
half a second per load (transformers and the server each load it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: DeepSeek-V4's begin / end of sentence and padding tokens (its ``tokenizer_config.json``'s)
BOS, EOS, PAD = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"


def tiny_tokenizer_json(path: Path) -> None:
    """Write a byte-level BPE ``tokenizer.json`` of the V4 kind (ByteLevel pre-tokenizer and
    decoder, no normalizer; the 256 byte symbols and four merges) with V4's first special tokens
    (BOS, EOS, pad, ten place holders) as added tokens, at ``path``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges = [("H", "e"), ("l", "l"), ("He", "ll"), ("Ġ", "w")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = [BOS, EOS, PAD, *(f"<｜place▁holder▁no▁{i}｜>" for i in range(10))]
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in specials])
    tok.save(str(path))


def transformers_tokenizer(path: str | Path) -> Any:
    """transformers' reading of the tokenizer directory ``path``: the oracle of the tokenizer tests.

    ``transformers.AutoTokenizer.from_pretrained(path)``, except on the releases whose
    ``LlamaTokenizer`` replaces a byte-level ``tokenizer.json``'s pre-tokenizer and decoder with
    SentencePiece's ``Metaspace`` when ``tokenizer_config.json`` names a ``Llama*`` class (as
    DeepSeek-V3's does): spaces and CJK text vanish from the ids (huggingface/transformers#45488;
    5.17 to 5.21 do it, 5.22 on read the file as it is). There the oracle is
    ``PreTrainedTokenizerFast.from_pretrained(path)``, the same files read without the class's
    rebuild: what ``AutoTokenizer`` gives from 5.22 on.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    tok = AutoTokenizer.from_pretrained(str(path))
    file_pre = json.loads((Path(path) / "tokenizer.json").read_text(encoding="utf-8")).get("pre_tokenizer")
    backend = getattr(tok, "backend_tokenizer", None)
    if isinstance(file_pre, dict) and backend is not None and backend.pre_tokenizer is not None:
        if type(backend.pre_tokenizer).__name__ != file_pre.get("type"):  # the file's pipeline replaced
            return PreTrainedTokenizerFast.from_pretrained(str(path))
    return tok
