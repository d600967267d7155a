"""The error a user sees for json_schema / regex / ebnf / structural_tag on a server without
xgrammar, and for a structural_tag that is not one.

Found by hand in a fresh ``pip install -e .`` venv (xgrammar is only in the ``grammar`` / ``test``
extras): the 400 said "constrained decoding (json_schema) is not supported yet by sglang-v4",
although the runtime supports it once xgrammar is installed. The message must say what to do.
"""

from __future__ import annotations

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
