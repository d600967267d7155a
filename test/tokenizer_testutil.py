"""A small tokenizer of the DeepSeek-V4 kind for tests that exercise the files around
``tokenizer.json`` (``tokenizer_config.json``, ``special_tokens_map.json``, chat templates) rather
than the vocabulary: it loads in milliseconds where the 6 MB V4 ``tokenizer.json`` takes about
half a second per load (transformers and the server each load it)."""

from __future__ import annotations

from pathlib import Path

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
